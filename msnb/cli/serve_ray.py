"""`msnb serve PATH... --engine ray`: TorchServe archives served unchanged on a local Ray Serve until Ctrl-C.

The same archives as `msnb serve` takes, each opened as its model folder (``ModelFolder.open``) and loaded by
TorchServe's own worker code inside a Ray Serve replica; one Ray start for all of them, their replicas started
side by side; the same state file, so `msnb predict` finds it.
"""

from __future__ import annotations

import os
from pathlib import Path

from msnb.cli import serve_state
from msnb.errors import MsnbError, ServerError


def serve_on_ray(archives: list[Path], state: Path | None, wait, *, envelope=None, env=None, limit=None) -> int:
    """Start a local Ray Serve (the router's body ``limit``), serve every archive that loads (``envelope``, ``env``:
    see ``deploy_archives``), wait (``wait(engine)``) and stop; 0, or a ServerError when none loads."""
    from msnb.engines.ray.engine import LocalRay
    from msnb.engines.ray.shared import attached

    engine = attached(limit) or LocalRay(max_request_size=limit)  # the shared Ray (`msnb ray up`) when it is up
    print(f"starting {engine.label} (loopback, Ray token auth on) ...", flush=True)
    engine.start()
    written = None
    try:
        names = deploy_archives(engine, archives, envelope, env)
        written = serve_state.write(record(engine, names), state)
        print(f"inference {engine.inference_url}  (TorchServe's inference URLs; Ray Serve has no management API)")
        print(f"openai {engine.openai_base_url}  mcp {engine.mcp_url}  (the same key)")
        print(f"token: Authorization: Bearer <inference key in {engine.key_file}>")
        print(f"try:   msnb predict NAME --data '<json>'   (state file {written})\nCtrl-C stops Ray Serve.", flush=True)
        if not wait(engine):
            raise ServerError("Ray stopped by itself.", "read the Ray logs; run `msnb serve --engine ray` again.")
    finally:
        if written is not None:
            written.unlink(missing_ok=True)
        engine.stop()
        print("Ray Serve stopped", flush=True)
    return 0


def deploy_archives(engine, archives: list[Path], envelope: str | None = None, env: dict | None = None) -> list[str]:
    """Open each archive into ``engine``'s store and serve those that open, all at once (each wrapped in TorchServe's
    ``envelope``, its replicas given the variables ``env``: any archive takes them on Ray, msnb's runtime or not);
    each failure is reported on stderr (its message, Hint and the replica's log lines) and the others serve.
    Returns the names served."""
    from msnb.package.model_folder import ModelFolder

    opened, taken = [], {m.name for m in engine.models()}
    for path in archives:
        try:
            item = ModelFolder.open(path, engine.store.root, taken)
        except MsnbError as err:
            serve_state.report(path, err)
            continue
        taken.add(item.name)
        opened.append(item)
        engine.model_env(item.name, env or {})
    extra = {"envelope": envelope} if envelope else {}
    sources = {item.name: item.source for item in opened}
    served = []
    models = [(item.path, {"requirements": list(item.requirements), **extra}) for item in opened]
    for name, outcome in engine.deploy_many(models):
        if isinstance(outcome, MsnbError):
            serve_state.report(sources[name], outcome)
            continue
        served.append(name)
        print(f"serving {name} {outcome.version}: POST {engine.inference_url}/predictions/{name}", flush=True)
    return serve_state.served_or_fail(
        served,
        len(archives),
        " on Ray",
        "fix what each error names (its handler's log lines are under it) and rerun `msnb serve --engine ray`.",
    )


def record(engine, names: list[str]) -> serve_state.ServerRecord:
    return serve_state.ServerRecord(
        os.getpid(), str(Path.cwd().resolve()), engine.inference_url, "", str(engine.key_file), names, "ray"
    )
