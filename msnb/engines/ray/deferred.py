"""Import Ray in msnb's own process without paying, at import, for what it imports and may never call.

Importing Ray imports jsonschema, whose format checkers import rfc3987_syntax when it is installed (Jupyter's
jsonschema[format-nongpl] installs it), and rfc3987_syntax builds a Lark grammar at import: about 1.0 s of the 1.7 s
``import ray`` takes on this 2-core machine (`python -X importtime`), in every kernel, `msnb serve --engine ray` and
`msnb ray` process. Ray's own processes leave the module out (msnb.engines.ray.nodes.SKIPPED_IMPORTS); msnb's
process, where a user's code runs too, keeps every check jsonschema makes: the module is stood in for by one whose
functions import it on their first call (``defer``), so an "iri" format is still checked, with the grammar built
then. Once imported, the module is the real one in ``sys.modules``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

# module -> the functions its importers take from it (``from MODULE import NAME``), deferred until called
DEFERRED = {"rfc3987_syntax": ("is_valid_syntax",)}
_lock = threading.Lock()


class Deferred(ModuleType):
    """A module not imported yet: its deferred functions import it when called; any other name imports it now."""

    def __init__(self, spec: ModuleSpec, functions: tuple[str, ...]):
        super().__init__(spec.name, f"{spec.name}, imported on first use (msnb.engines.ray.deferred)")
        self.__spec__ = spec  # what importlib.util.find_spec answers for it meanwhile
        self._functions = functions
        self._real: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # (a dunder a module lacks: as on any module)
            raise AttributeError(name)
        if name in self._functions:
            return self._deferred(name)
        return getattr(self.real(), name)

    def _deferred(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(self.real(), name)(*args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def real(self) -> ModuleType:
        """The module itself, imported now (once) and put in ``sys.modules`` in this stand-in's place."""
        with _lock:
            if self._real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]
                try:
                    self._real = importlib.import_module(self.__name__)
                except BaseException:
                    sys.modules.setdefault(self.__name__, self)
                    raise
            return self._real


def defer() -> None:
    """Stand in for each of ``DEFERRED`` that is installed and not imported yet."""
    for name, functions in DEFERRED.items():
        spec = None if name in sys.modules else importlib.util.find_spec(name)
        if spec is not None:
            sys.modules[name] = Deferred(spec, functions)
