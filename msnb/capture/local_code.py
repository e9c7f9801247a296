"""Local code a handler imports: resolved on the notebook's path without running it, bundled with its packages."""

from __future__ import annotations

import functools
import importlib.machinery
import os
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from msnb.capture import requirement_rules, secret_rules, secret_scan
from msnb.capture import requirements as reqs
from msnb.capture.imports import CONDITIONAL, Imported, imports_of
from msnb.errors import CaptureError
from msnb.spec import BundledFile, HandlerSpec

STDLIB, LOCAL, THIRD_PARTY, MISSING = "stdlib", "local", "third-party", "missing"
DATA_LIMIT = 64 * 2**20  # package data bundled per capture; more is refused (use --extra-files / --checkpoint)
DATA_FILES_LIMIT = 500
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}
_EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
_LOADERS = (
    (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES),
    (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES),
    (importlib.machinery.SourcelessFileLoader, importlib.machinery.BYTECODE_SUFFIXES),
)


@dataclass
class Bundle:
    """What one capture found: files to bundle, third-party and unresolvable imports, warnings."""

    files: dict[str, BundledFile] = field(default_factory=dict)  # arcname -> file
    third_party: dict[str, str] = field(default_factory=dict)  # top-level name -> where it is first imported
    missing: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    data_bytes: int = 0
    include: frozenset[str] = frozenset()  # absolute paths the user named: they travel even if they look secret
    left_out: dict[str, str] = field(default_factory=dict)  # arcname -> why it does not travel


def search_path(base_dir: str | Path) -> list[str]:
    """Where the notebook's imports resolve: its folder first, then the interpreter's path (minus the cwd)."""
    cwd = os.path.realpath(os.getcwd())
    rest = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    return [str(Path(base_dir).resolve()), *rest]


def environment_dirs() -> tuple[str, ...]:
    """The interpreter's own folders (standard library, site-packages): what a worker's path also holds."""
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {os.path.join(sys.base_prefix, "lib"), os.path.dirname(os.__file__)}
    return tuple(sorted(os.path.realpath(d) for d in dirs))


def make_hermetic(spec: HandlerSpec, path: Sequence[str], include: Sequence[str] = ()) -> HandlerSpec:
    """``spec`` with the local modules its code imports bundled and its third-party imports pinned; ``include``
    names package data files that travel although they look like secrets."""
    given = requirement_rules.check(spec.requirements, spec.max_requirements)
    found = collect(spec.source + (spec.objects.imports if spec.objects else ""), path, include, spec.where)
    requirements, warnings = reqs.pin(found.third_party, found.missing, given)
    warnings += secret_rules.left_out_lines(found.left_out)
    tops = dict.fromkeys(f.top for f in found.files.values() if f.module)
    for top in tops:
        dists = reqs.named_for(top)  # the shadowed distribution is named like the module (or an ALIASES entry)
        if dists and not reqs.path_installed(top):
            warnings.append(
                f"the local {top} shadows the installed distribution {dists[0].name!r}: the local file is bundled "
                "(and is what the server imports)"
            )
    return spec.replace(
        bundle=tuple(found.files.values()),
        requirements=requirements,
        warnings=spec.warnings + tuple(found.warnings) + tuple(warnings),
    )


def collect(
    source: str, path: Sequence[str], include: Sequence[str] = (), locate: Callable[[int], str] | None = None
) -> Bundle:
    """Follow the imports of ``source`` through local modules (transitively) and sort every import; ``locate``
    names a line of ``source`` as a person finds it (``HandlerSpec.where``: ``line 9 of cell In[5]``)."""
    out, seen = Bundle(include=frozenset(os.path.abspath(p) for p in include)), set()
    here = locate or (lambda line: f"the handler, line {line}")
    queue: list[tuple[Imported, str]] = [(imp, here(imp.line)) for imp in imports_of(source)]
    while queue:
        imp, where = queue.pop(0)
        if imp.dynamic:
            out.warnings.append(
                f"{where}: a module imported by a computed name ({imp.module}) cannot be found "
                "statically, so it is not bundled; import it by name (or ship it with --extra-files)."
            )
            continue
        kind = classify(imp.top, tuple(path))
        if kind in (THIRD_PARTY, MISSING):
            (out.third_party if kind == THIRD_PARTY else out.missing).setdefault(
                imp.top, where + (CONDITIONAL if imp.conditional else "")
            )
        elif kind == LOCAL and imp.module not in seen:
            seen.add(imp.module)
            queue += _bundle_module(imp.module, tuple(path), out)
    return out


@functools.lru_cache(maxsize=4096)
def classify(top: str, path: tuple[str, ...]) -> str:
    """stdlib, local (bundled), third-party (a requirement) or missing, for a top-level module name."""
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return STDLIB
    spec = find_top(top, path)
    if spec is None:
        return MISSING
    where = os.path.realpath(spec.origin if spec.has_location else list(spec.submodule_search_locations)[0])
    env = environment_dirs()
    if any(where.startswith(d + os.sep) for d in env if "site-packages" in d):
        return LOCAL if reqs.path_installed(top) else THIRD_PARTY
    if any(where.startswith(d + os.sep) for d in env):
        return STDLIB
    return LOCAL


def find_top(top: str, path: Sequence[str]):
    """A top-level module's spec found on ``path``, or by an editable install's finder; nothing is imported."""
    spec = find_in(top, path)
    if spec is not None:
        return spec
    for finder in sys.meta_path:  # editable installs (setuptools) register a finder instead of a path entry
        if finder in (importlib.machinery.PathFinder, importlib.machinery.BuiltinImporter):
            continue
        cls = finder if isinstance(finder, type) else type(finder)
        if cls.__module__.startswith("__editable__") or "editable" in cls.__name__.lower():
            found = finder.find_spec(top, None)
            if found is not None:
                return found
    return None


def find_module(name: str, path: tuple[str, ...]):
    """The spec of a dotted local module, walking package by package (parents are never imported)."""
    parts = name.split(".")
    spec = find_top(parts[0], path)
    for i in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None
        spec = find_in(".".join(parts[: i + 1]), spec.submodule_search_locations)
    return spec


def find_in(fullname: str, folders: Sequence[str]):
    """Python's file finder over ``folders`` (regular module or package first, else the namespace portions),
    without the import system's namespace bookkeeping, which needs the parent package imported."""
    portions: list[str] = []
    for folder in folders:
        if not os.path.isdir(folder):
            continue
        spec = importlib.machinery.FileFinder(folder, *_LOADERS).find_spec(fullname)
        if spec is not None and spec.loader is not None:
            return spec
        if spec is not None:
            portions += list(spec.submodule_search_locations or ())
    if not portions:
        return None
    spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
    spec.submodule_search_locations = portions
    return spec


def _bundle_module(name: str, path: tuple[str, ...], out: Bundle) -> list[tuple[Imported, str]]:
    """Add a local module (and its parent packages' __init__ files); return the imports it makes."""
    parts = name.split(".")
    follow: list[tuple[Imported, str]] = []
    for i in range(1, len(parts) + 1):
        spec = find_module(".".join(parts[:i]), path)
        if spec is None:  # `from pkg import name`: name is an attribute, not a submodule
            return follow
        follow += _add_file(spec, parts[:i], out)
    return follow


def _add_file(spec, parts: list[str], out: Bundle) -> list[tuple[Imported, str]]:
    if not spec.has_location:  # a namespace package: only its modules travel
        return []
    is_package = spec.submodule_search_locations is not None
    arcname = "/".join(parts[:-1] + ([parts[-1]] if is_package else []) + [Path(spec.origin).name])
    if arcname in out.files:
        return []
    out.files[arcname] = BundledFile(arcname, os.path.realpath(spec.origin), ".".join(parts))
    if spec.origin.endswith(_EXTENSIONS):
        out.warnings.append(
            f"{arcname} is a compiled extension: it is bundled but only loads on the same platform and Python "
            f"({sys.platform}, Python {sys.version_info.major}.{sys.version_info.minor}); "
            "build it on the server or install it from a wheel with --requirements."
        )
        return []
    if is_package:
        _add_data(Path(spec.origin).parent, "/".join(parts), out)
    package = ".".join(parts if is_package else parts[:-1])
    text = Path(spec.origin).read_text(encoding="utf-8", errors="replace")
    _refuse_secret(text, spec.origin, arcname, out)
    try:
        return [(imp, f"{arcname}, line {imp.line}") for imp in imports_of(text, package)]
    except SyntaxError as err:
        raise CaptureError(f"Local module {arcname} does not parse: {err}.", f"fix {spec.origin}.") from None


def _refuse_secret(text: str, origin: str, arcname: str, out: Bundle) -> None:
    """A module holding a secret is refused, not left out: the code that imports it would break on the server."""
    if os.path.abspath(origin) in out.include or not origin.endswith(".py"):
        return
    found = secret_scan.scan_text(text, origin)
    if found:
        raise CaptureError(
            f"The local module {arcname} holds a secret ({found}); msnb does not ship secrets, and leaving the "
            "module out would break the code that imports it.",
            f"move the secret out of {origin}: read it on the server from an environment variable or a file "
            "provided there. To ship the module as it is anyway, name it with --include-file.",
        )


def _add_data(folder: Path, prefix: str, out: Bundle) -> None:
    """Non-Python files inside a bundled package travel too (its package data), within a size guard; secret-looking
    files and links leaving the package stay behind unless the user named them."""
    for root, dirs, files in os.walk(folder):
        skipped = [d for d in dirs if _skip_dir(Path(root) / d)]
        dirs[:] = [d for d in dirs if d not in skipped and not (Path(root) / d / "__init__.py").exists()]
        for name in sorted(files):
            src = Path(root) / name
            if name.endswith((".py", ".pyc")) or name.endswith(_EXTENSIONS):
                continue
            arcname = f"{prefix}/{src.relative_to(folder).as_posix()}"
            why = secret_rules.unsafe_name(arcname)
            if not why and os.path.abspath(src) not in out.include:
                why = secret_rules.why_left_out(src, folder)
            if why:
                out.left_out[arcname] = why
            elif not name.startswith(".") and src.is_file():
                _add_data_file(src, arcname, prefix, out)


def _add_data_file(src: Path, arcname: str, prefix: str, out: Bundle) -> None:
    out.data_bytes += src.stat().st_size
    if out.data_bytes > DATA_LIMIT or len(out.files) >= DATA_FILES_LIMIT:
        raise CaptureError(
            f"The local package {prefix} holds more data than msnb bundles "
            f"(over {DATA_LIMIT // 2**20} MB or {DATA_FILES_LIMIT} files; reached at {arcname}).",
            "move large files out of the package folder and ship them with --extra-files or --checkpoint.",
        )
    out.files[arcname] = BundledFile(arcname, str(src.resolve()), "")


def _skip_dir(path: Path) -> bool:
    """Hidden folders (.git), virtual environments and caches are never package data."""
    return path.name.startswith(".") or path.name in _SKIP_DIRS or (path / "pyvenv.cfg").exists()
