"""Import as a TorchServe worker does inside a process that is not one: the kernel's own local modules, path
and cwd hidden around each call, and restored after (kept for in-process benchmarks; tests use a test process)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

from msnb.capture.local_code import environment_dirs


class WorkerImports:
    """Import and run as a TorchServe worker does, each time it is entered: the model dir first on ``sys.path``
    and as the working directory, no notebook folder, cwd or other local path on it, and the local modules the
    kernel imported hidden (a worker is a fresh process). On exit the kernel's modules come back and the
    handler's own (imported from the model dir) are kept aside for the next entry. msnb itself stays."""

    def __init__(self, model_dir: Path):
        self.root = str(Path(model_dir).resolve())
        self.own: dict[str, Any] = {}

    def __enter__(self) -> "WorkerImports":
        env = environment_dirs()
        self.saved_path, self.saved_cwd = sys.path[:], os.getcwd()
        self.hidden = {m: sys.modules.pop(m) for m in [m for m, mod in sys.modules.items() if _is_local(mod, env)]}
        sys.modules.update(self.own)
        sys.path[:] = [self.root] + [p for p in self.saved_path if p and _inside(os.path.realpath(p), env)]
        os.chdir(self.root)
        return self

    def __exit__(self, *exc: Any) -> None:
        os.chdir(self.saved_cwd)
        sys.path[:] = self.saved_path
        mine = [m for m, mod in sys.modules.items() if _is_local(mod, ()) and _inside(_file(mod), (self.root,))]
        self.own = {m: sys.modules.pop(m) for m in mine}
        sys.modules.update(self.hidden)


class NoImports(contextlib.nullcontext):
    """``WorkerImports`` for a process that is already a worker's: nothing to hide or restore."""


def _file(module: Any) -> str:
    return os.path.realpath(getattr(module, "__file__", None) or "")


def _is_local(module: Any, env: tuple[str, ...]) -> bool:
    """A module loaded from a file outside the interpreter's folders (msnb and the shared handler excepted)."""
    name = getattr(module, "__name__", None) or ""
    if not isinstance(name, str) or not getattr(module, "__file__", None) or name == "__main__":
        return False
    if name.split(".")[0] == "msnb" or name.startswith("msnb_"):
        return False
    return not _inside(_file(module), env)


def _inside(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f + os.sep) for f in folders)
