"""The static import check: every import of an archive's code resolves on a plain TorchServe (no user code runs)."""

from __future__ import annotations

import sys
from pathlib import Path

from msnb.capture import requirements as reqs
from msnb.capture.imports import imports_of
from msnb.errors import BuildError
from msnb.spec import HandlerSpec


def check_imports(spec: HandlerSpec) -> None:
    """Refuse an archive with an import that is not the standard library, a bundled file, torch/TorchServe (the
    serving image) or a requirement: on the server it would be ``ModuleNotFoundError`` and a crash-looping worker."""
    bundled = {f.top for f in spec.bundle if f.module}
    names = {reqs.requirement_name(line) for line in spec.requirements}
    problems = []
    for where, text, package in _sources(spec):
        for imp in imports_of(text, package):
            top = imp.top
            if imp.dynamic or top in bundled or top in sys.builtin_module_names or top in sys.stdlib_module_names:
                continue
            if not reqs.provided(top, names):
                place = spec.where(imp.line) if where is None else f"{where}, line {imp.line}"
                problems.append(f"`{imp.module.split('.')[0]}` ({place})")
    if problems:
        listed = ", ".join(dict.fromkeys(problems))
        raise BuildError(
            f"Handler {spec.name!r} imports what the archive would not have on the server: {listed}.",
            "install it where you export (msnb then pins its version in requirements.txt) or add it to "
            "--requirements; a local module is bundled when it is importable by name from the notebook's folder.",
        )


def _sources(spec: HandlerSpec):
    yield None, spec.source, None  # the user's code: its lines named by their cells (HandlerSpec.where)
    for item in spec.bundle:
        if item.module and item.arcname.endswith(".py"):
            package = item.module if item.arcname.endswith("/__init__.py") else item.module.rpartition(".")[0]
            yield item.arcname, Path(item.source).read_text(encoding="utf-8", errors="replace"), package or None
