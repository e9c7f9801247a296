"""Deploy: the model folder a build stages (``model_folder.staged``: the one ``%ms_test`` ran and ``%ms_build``
packs) laid out in an engine's model store as private copies and served there, on either engine.

Only two things of the folder change on the way (``model_folder.relabel``): the version, when the engine already
serves the spec's (a free ``VERSION-rN``), and the requirements, of which only those the engine's environment lacks
are installed (nothing, when it is the kernel's own: no model venv, no second copy of a package; an export keeps
every pin, its server is unknown).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from msnb.engines.models import ModelStatus
from msnb.engines.protocol import Engine
from msnb.engines.store import safe_name
from msnb.errors import BuildError
from msnb.files import remove
from msnb.package import archive, formats, model_folder, server_packages
from msnb.package.model_folder import ModelFolder
from msnb.spec import HandlerSpec


def deploy(
    server: Engine, spec: HandlerSpec, prepare: Callable[[Path], Any] | None = None, **params: Any
) -> ModelStatus:
    """Lay the staged folder of ``spec`` out in ``server``'s model store and make it the served version.

    The first deploy registers ``spec.version``; a later one registers a free ``VERSION-rN`` beside it, makes that
    the default and unregisters the old version(s), with no restart. ``prepare(path)`` runs on the laid-out folder
    before the engine takes it (e.g. the dev entry of msnb.session.reload).
    """
    version = server.free_version(spec.name, spec.version)
    lacking = server_packages.missing(server.python, spec.requirements)
    path = lay_out(model_folder.staged_or(spec, BuildError), server.store.root, version, lacking)
    try:
        if prepare is not None:
            prepare(path)
        return server.redeploy(path, **{"workers": spec.workers, **params})
    except BaseException:
        remove(path)
        raise


def lay_out(folder: ModelFolder, store: Path, version: str, requirements: tuple[str, ...]) -> Path:
    """``folder`` as ``store``/NAME-VERSION (private copies), relabelled as ``version`` installing ``requirements``."""
    return archive.pack(
        folder,
        store,
        fmt=formats.SERVE_FORMAT,
        archive_name=safe_name(folder.name, version),
        rewrite=lambda copy: model_folder.relabel(copy, version, requirements),
    )
