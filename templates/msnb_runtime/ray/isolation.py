"""A model's own namespace in a process that holds several model folders: its modules, import path, cwd and
environment, swapped in around its load and each of its calls, as a TorchServe worker process of its own has them.

TorchServe gives each model a worker process: two archives that each ship a ``model.py``, a ``handler.py`` or a
package of one name never meet. In one process ``sys.modules``, ``sys.path``, the cwd and ``os.environ`` are shared,
so a model's calls run one at a time under one lock (``enter``), with that model resident: its own modules (those
whose file lies under its folder or its other roots) in ``sys.modules`` under their plain names, its folder first on
``sys.path``, its folder as cwd, its variables set. A module a handler imports at top level, in a function at request
time (``import model`` inside ``handle``), by ``importlib`` or through a pickle therefore resolves to its own copy.
The model that ran last stays resident until another one needs the lock, so one model's calls swap nothing.
A module outside its roots (torch, TorchServe, what the node installed) is shared by every model, as a node's
site-packages are shared by TorchServe's workers. Limit: a thread a handler starts and leaves running sees the
resident model's namespace, not necessarily its own.

Depends on the standard library only, never on msnb or Ray.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

LOCK = threading.RLock()  # one model's code runs at a time in a process that holds several
_RESIDENT: list[Namespace | None] = [None]  # the namespace whose modules are in sys.modules now


class Namespace:
    """One model folder's modules, import path, cwd and variables (``roots``: more folders whose modules are its own,
    e.g. where its requirements were installed)."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None, roots: tuple[Path, ...] = ()):
        self.folder = Path(folder).resolve()
        self.roots = tuple(str(p) for p in (self.folder, *(Path(r).resolve() for r in roots)))
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.modules: dict[str, ModuleType] = {}  # its own modules while it is not resident
        self._displaced: dict[str, ModuleType] = {}  # what its modules hid in sys.modules while resident
        self._saved_env: dict[str, str | None] = {}
        self._names: set[str] = set()  # the names of its own modules
        self._cwd = ""
        self._mark: tuple[int, str | None] = (0, None)

    @contextmanager
    def entered(self) -> Iterator[Namespace]:
        """This model resident, its calls alone in the process, for the ``with`` block."""
        with LOCK:
            current = _RESIDENT[0]
            if current is not self:
                if current is not None:
                    current._leave()
                self._enter()
            yield self

    def wrap(self, call: Callable) -> Callable:
        """``call`` run inside this namespace (the handler's entry point: every ``handle`` goes through it)."""

        @functools.wraps(call)
        def within(*args: Any, **kwargs: Any) -> Any:
            with self.entered():
                return call(*args, **kwargs)

        return within

    def close(self) -> None:
        """Forget this namespace (its model unloaded): its modules leave ``sys.modules`` if it is resident."""
        with LOCK:
            if _RESIDENT[0] is self:
                self._leave()
            self.modules.clear()

    def owns(self, module: Any) -> bool:
        """Whether ``module`` is this model's own: its file (or a namespace package's folder) under its roots."""
        where = getattr(module, "__file__", None)
        places = [where] if where else list(getattr(module, "__path__", None) or ())
        return any(isinstance(p, str) and under(p, self.roots) for p in places)

    def _enter(self) -> None:
        for name, module in self.modules.items():
            if name in sys.modules:
                self._displaced[name] = sys.modules[name]
            sys.modules[name] = module
        self.modules = {}
        for root in reversed(self.roots):
            if root in sys.path:
                sys.path.remove(root)
            sys.path.insert(0, root)
        self._cwd = os.getcwd()
        os.chdir(self.folder)
        self._saved_env = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        self._mark = mark()
        _RESIDENT[0] = self

    def _leave(self) -> None:
        self.modules = self._own_modules()
        for name in self.modules:
            del sys.modules[name]
        sys.modules.update(self._displaced)
        self._displaced = {}
        for root in self.roots:
            if root in sys.path:
                sys.path.remove(root)
        os.chdir(self._cwd)
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _RESIDENT[0] = None

    def _own_modules(self) -> dict[str, ModuleType]:
        """Its modules in sys.modules now: those it brought in, and any it imported since (an import appends to
        sys.modules, so an unchanged length and last name mean none: no scan of every module on each swap)."""
        if mark() != self._mark:
            self._names = {n for n, m in list(sys.modules.items()) if self.owns(m)}
        return {n: sys.modules[n] for n in self._names if n in sys.modules}


def mark() -> tuple[int, str | None]:
    """sys.modules' length and last name: unchanged, no module was imported in between."""
    return len(sys.modules), next(reversed(sys.modules), None)


def under(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` lies in one of the folders ``roots`` (resolved)."""
    return any(path == root or path.startswith(root + os.sep) for root in roots)


def resident() -> Namespace | None:
    """The namespace whose modules are in sys.modules now (None: no model's)."""
    return _RESIDENT[0]
