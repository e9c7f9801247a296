"""Third-party imports become requirements pinned to the kernel's installed versions (torch and TorchServe never)."""

from __future__ import annotations

import functools
import json
import os
import site
import sysconfig
from dataclasses import dataclass
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from msnb.capture.imports import CONDITIONAL

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


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return canonicalize_name(name)


def requirement_name(line: str) -> str | None:
    """The distribution a PEP 508 requirement names (``pandas>=2`` -> ``pandas``); None for anything else."""
    try:
        return canonical(Requirement(line).name)
    except InvalidRequirement:
        return None


@dataclass(frozen=True)
class Dist:
    """An installed distribution: its name and version as its metadata gives them."""

    name: str
    version: str

    def requires(self) -> list[Requirement]:
        """What it requires here: extras left out, environment markers evaluated for this interpreter."""
        return _requires(self.name)

    def read_text(self, filename: str) -> str | None:
        return metadata.distribution(self.name).read_text(filename)


def _requires(name: str) -> list[Requirement]:
    out = []
    for line in metadata.requires(name) or ():
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(req)
    return out


def _site_dirs() -> list[str]:
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    return sorted(d for d in dirs if os.path.isdir(d))


@functools.lru_cache(maxsize=2)
def _index(stamp: tuple) -> dict[str, tuple[str, ...]]:
    """Import name -> distribution names, from the installed metadata (``stamp``: site-packages' mtimes)."""
    return {top: tuple(dict.fromkeys(names)) for top, names in metadata.packages_distributions().items()}


def _by_top() -> dict[str, tuple[str, ...]]:
    """Re-read when site-packages changes (a pip install in the kernel adds a .dist-info folder)."""
    return _index(_stamp())


def _stamp() -> tuple:
    """site-packages' folders and their mtimes: a pip install in the kernel changes it."""
    return tuple((d, os.stat(d).st_mtime_ns) for d in _site_dirs())


def _dist(name: str) -> Dist | None:
    try:
        found = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    fields = found.metadata  # parsed once (each .version would parse it again)
    return Dist(fields["Name"] or name, fields["Version"])


def distributions_of(top: str) -> list[Dist]:
    """The installed distributions providing import name ``top``: the distribution of the same name (or its
    ALIASES entry) when it provides it, else from the full index of installed metadata."""
    return named_for(top) or [d for d in map(_dist, _by_top().get(top, ())) if d is not None]


def named_for(top: str) -> list[Dist]:
    """The installed distribution named like import name ``top`` (or its ALIASES entry) that provides it; one
    metadata lookup, no index of every distribution (which the first capture in a kernel would pay)."""
    return list(_named_for(top, _stamp()))


@functools.lru_cache(maxsize=1024)
def _named_for(top: str, stamp: tuple) -> tuple[Dist, ...]:
    name = ALIASES.get(top, top)
    try:
        found = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return ()
    listed = (found.read_text("top_level.txt") or "").split()
    if not listed:
        listed = [f.parts[0].removesuffix(".py") for f in found.files or () if f.parts]
    if top not in listed:
        return ()
    fields = found.metadata
    return (Dist(fields["Name"] or name, fields["Version"]),)


@functools.lru_cache(maxsize=1)
def serving_distributions() -> frozenset[str]:
    """torch, TorchServe, the archiver and everything they require here (never written as requirements)."""
    todo, seen = list(SERVING), set()
    while todo:
        name = canonical(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [req.name for req in _requires(name)]
        except metadata.PackageNotFoundError:
            continue
    return frozenset(seen)


def path_installed(top: str) -> bool:
    """True when ``top`` comes from a distribution installed from a local folder (editable or not): no
    registry has it, so it is bundled as local code."""
    for dist in distributions_of(top):
        try:
            info = json.loads(dist.read_text("direct_url.json") or "{}")
        except ValueError:
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
        fails = "the archive would fail to load" if not where.endswith(CONDITIONAL) else "it would fail where it runs"
        warnings.append(
            f"`import {top}` ({where}) is not installed in this kernel, so msnb cannot pin it and {fails}: "
            "install it here (msnb then pins its version) or add it to --requirements."
        )
    return tuple(lines), warnings


def provided(top: str, names: set[str | None]) -> bool:
    """Whether a requirement (by distribution name) or the serving image provides import name ``top``."""
    candidates = {canonical(d.name) for d in distributions_of(top)} | {canonical(ALIASES.get(top, top))}
    return bool(candidates & (names | serving_distributions()))
