"""Third-party imports become requirements pinned to the kernel's installed versions (torch and TorchServe never)."""

from __future__ import annotations

import functools
import json
import os
import re
import site
import sysconfig
from importlib import metadata

# The serving image provides these and their own dependencies; a pinned torch would pull a multi-GB build.
SERVING = ("torch", "torchserve", "torch-model-archiver")
# Import names whose distribution differs, for packages that are not installed here (installed ones are looked up).
ALIASES = {
    "cv2": "opencv-python",
    "yaml": "PyYAML",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "bs4": "beautifulsoup4",
}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str | None:
    """The distribution a requirement line names (``pandas>=2`` -> ``pandas``); None for options and URLs."""
    match = _NAME.match(line)
    return canonical(match.group(1)) if match and not line.lstrip().startswith("-") else None


def _site_stamp() -> tuple:
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    return tuple((d, os.stat(d).st_mtime_ns) for d in sorted(dirs) if os.path.isdir(d))


@functools.lru_cache(maxsize=2)
def _distributions(stamp: tuple) -> dict[str, list[str]]:
    return metadata.packages_distributions()


def distributions_of(top: str) -> list[str]:
    """The installed distributions providing import name ``top`` (re-read when site-packages changes)."""
    return _distributions(_site_stamp()).get(top, [])


@functools.lru_cache(maxsize=1)
def serving_distributions() -> frozenset[str]:
    """torch, TorchServe, the archiver and everything they require (never written as requirements)."""
    todo, seen = list(SERVING), set()
    while todo:
        name = canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [r for r in (requirement_name(x) for x in requires if "extra ==" not in x) if r]
    return frozenset(seen)


def path_installed(top: str) -> bool:
    """True when ``top`` comes from a distribution installed from a local folder (editable or not): no
    registry has it, so it is bundled as local code."""
    for dist in distributions_of(top):
        try:
            info = json.loads(metadata.distribution(dist).read_text("direct_url.json") or "{}")
        except (metadata.PackageNotFoundError, ValueError):
            continue
        if "dir_info" in info or str(info.get("url", "")).startswith("file:"):
            return True
    return False


def pin(third_party: dict[str, str], missing: dict[str, str], given: tuple[str, ...]) -> tuple[tuple[str, ...], list]:
    """``given`` (which wins) plus ``name==version`` for each third-party import; warnings for the unresolved."""
    lines, warnings = list(given), []
    names = {requirement_name(line) for line in given}
    for top, where in sorted(third_party.items()):
        dists = distributions_of(top)
        if not dists:
            missing = {**missing, top: where}
            continue
        dist = metadata.distribution(dists[0])
        name = canonical(dist.metadata["Name"])
        if name in serving_distributions() or name in names:
            continue
        names.add(name)
        lines.append(f"{dist.metadata['Name']}=={dist.version}")
    for top, where in sorted(missing.items()):
        if provided(top, names):
            continue
        warnings.append(
            f"`import {top}` ({where}) is not installed in this kernel, so msnb cannot pin it and the archive "
            f"would fail to load: install it here (msnb then pins its version) or add it to --requirements."
        )
    return tuple(lines), warnings


def provided(top: str, names: set[str | None]) -> bool:
    """Whether a requirement (by distribution name) or the serving image provides import name ``top``."""
    candidates = {canonical(d) for d in distributions_of(top)} | {canonical(ALIASES.get(top, top))}
    return bool(candidates & (names | serving_distributions()))
