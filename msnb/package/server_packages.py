"""Which of an archive's requirements a serving environment lacks: what a server's per-model install must add."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement

# Run by the server's interpreter, which may have no `packaging`: it only reports the installed versions.
_VERSIONS = """
import json, sys
from importlib import metadata
out = {}
for name in json.loads(sys.argv[1]):
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""
TIMEOUT_S = 60


def missing(python: str | None, lines: tuple[str, ...]) -> tuple[str, ...]:
    """The requirement ``lines`` that ``python``'s environment does not satisfy (all of them when it cannot be
    asked); ``python`` None or this interpreter is answered from this process's metadata."""
    reqs = {line: _parse(line) for line in lines}
    names = sorted({r.name for r in reqs.values() if r is not None})
    if not names:
        return tuple(lines)
    versions = _versions_here(names) if python in (None, sys.executable) else _versions_of(python, names)
    return tuple(line for line, req in reqs.items() if not _satisfied(req, versions))


def _parse(line: str) -> Requirement | None:
    try:
        return Requirement(line)
    except InvalidRequirement:
        return None


def _satisfied(req: Requirement | None, versions: dict[str, str | None]) -> bool:
    if req is None or req.url:
        return False
    if req.marker is not None and not req.marker.evaluate():
        return True  # meant for another platform or Python: nothing to add here
    found = versions.get(req.name)
    return found is not None and req.specifier.contains(found, prereleases=True)


def _versions_here(names: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _versions_of(python: str, names: list[str]) -> dict[str, str | None]:
    """Asked of the server's interpreter; nothing counts as installed when it cannot answer (all is installed)."""
    try:
        done = subprocess.run(
            [python, "-c", _VERSIONS, json.dumps(names)], capture_output=True, text=True, timeout=TIMEOUT_S
        )
        return json.loads(done.stdout) if done.returncode == 0 else {}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
