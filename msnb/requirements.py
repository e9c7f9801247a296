"""Third-party imports become requirements pinned to the kernel's installed versions (torch and TorchServe never)."""

from __future__ import annotations

import functools
import json
import os
import re
import site
import sysconfig
from dataclasses import dataclass
from pathlib import Path

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


@dataclass(frozen=True)
class Dist:
    """An installed distribution, read from its ``.dist-info`` folder's name (no metadata parsing: it is slow)."""

    name: str
    version: str
    path: Path

    def requires(self) -> list[str]:
        """Its Requires-Dist lines, extras excluded."""
        text = (self.path / "METADATA").read_text(encoding="utf-8", errors="replace").split("\n\n")[0]
        lines = [
            line[len("Requires-Dist:") :].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")
        ]
        return [line for line in lines if "extra ==" not in line]


def _site_dirs() -> list[str]:
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    return sorted(d for d in dirs if os.path.isdir(d))


@functools.lru_cache(maxsize=2)
def _index(stamp: tuple) -> tuple[dict[str, list[Dist]], dict[str, Dist]]:
    by_top: dict[str, list[Dist]] = {}
    by_name: dict[str, Dist] = {}
    for folder, _ in stamp:
        for entry in sorted(os.listdir(folder)):
            if entry.endswith(".dist-info"):
                name, _, version = entry.removesuffix(".dist-info").partition("-")
                dist = Dist(name, version, Path(folder) / entry)
                by_name.setdefault(canonical(name), dist)
                for top in _tops(dist.path):
                    by_top.setdefault(top, []).append(dist)
    return by_top, by_name


def _tops(info: Path) -> set[str]:
    """The import names a distribution installs: top_level.txt, else the first folder of each RECORD entry."""
    if (info / "top_level.txt").is_file():
        return set((info / "top_level.txt").read_text().split())
    if not (info / "RECORD").is_file():
        return set()
    tops = set()
    for line in (info / "RECORD").read_text(errors="replace").splitlines():
        first = line.split(",")[0].split("/")[0]
        if first and not first.endswith((".dist-info", ".data", ".pth")) and first not in ("..", "__pycache__"):
            tops.add(first.removesuffix(".py"))
    return tops


def _installed() -> tuple[dict[str, list[Dist]], dict[str, Dist]]:
    """Re-read when site-packages changes (a pip install in the kernel adds a .dist-info folder)."""
    return _index(tuple((d, os.stat(d).st_mtime_ns) for d in _site_dirs()))


def distributions_of(top: str) -> list[Dist]:
    """The installed distributions providing import name ``top``."""
    return _installed()[0].get(top, [])


@functools.lru_cache(maxsize=1)
def serving_distributions() -> frozenset[str]:
    """torch, TorchServe, the archiver and everything they require (never written as requirements)."""
    by_name = _installed()[1]
    todo, seen = list(SERVING), set()
    while todo:
        name = canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        if name in by_name:
            todo += [r for r in map(requirement_name, by_name[name].requires()) if r]
    return frozenset(seen)


def path_installed(top: str) -> bool:
    """True when ``top`` comes from a distribution installed from a local folder (editable or not): no
    registry has it, so it is bundled as local code."""
    for dist in distributions_of(top):
        try:
            info = json.loads((dist.path / "direct_url.json").read_text())
        except (OSError, ValueError):
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
        name = canonical(dists[0].name)
        if name in serving_distributions() or name in names:
            continue
        names.add(name)
        lines.append(f"{dists[0].name}=={dists[0].version}")
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
    candidates = {canonical(d.name) for d in distributions_of(top)} | {canonical(ALIASES.get(top, top))}
    return bool(candidates & (names | serving_distributions()))
