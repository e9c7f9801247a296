"""`msnb serve --engine ray` and `msnb compare`'s way of serving archives on Ray: each archive opened as its model
folder (the caller's ``open``: ``ModelFolder.open``) into the engine's store, loaded by TorchServe's own worker code
inside a replica, their replicas started side by side (``LocalRay.deploy_many``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from msnb.engines.models import ModelStatus
from msnb.engines.protocol import Engine, OpenArchive, OpenedArchive, Report
from msnb.errors import MsnbError


def deploy_archives(
    engine: Engine,
    archives: list[Path],
    open_archive: OpenArchive,
    report: Report,
    envelope: str | None = None,
    env: dict | None = None,
) -> Iterator[tuple[str, ModelStatus]]:
    """Open each archive into ``engine``'s store and serve those that open, all at once (each wrapped in TorchServe's
    ``envelope``, its replicas given the variables ``env``: any archive takes them on Ray, msnb's runtime or not).
    Yields (name, status) of each that serves; each failure is ``report``ed (with the archive it came from) and the
    others serve."""
    opened = _opened(engine, archives, open_archive, report, env or {})
    extra = {"envelope": envelope} if envelope else {}
    sources = {item.name: item.source for item in opened}
    models = [(item.path, {"requirements": list(item.requirements), **extra}) for item in opened]
    for name, outcome in engine.deploy_many(models):
        if isinstance(outcome, MsnbError):
            report(sources[name] or name, outcome)
            continue
        yield name, outcome


def _opened(
    engine: Engine, archives: list[Path], open_archive: OpenArchive, report: Report, env: dict
) -> list[OpenedArchive]:
    opened, taken = [], {m.name for m in engine.models()}
    for path in archives:
        try:
            item = open_archive(path, engine.store.root, taken)
        except MsnbError as err:
            report(path, err)
            continue
        taken.add(item.name)
        opened.append(item)
        engine.model_env(item.name, env)
    return opened
