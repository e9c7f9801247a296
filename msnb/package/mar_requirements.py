"""An archive's requirements.txt on Ray Serve: only what this environment lacks is installed (Ray's per-replica
``runtime_env`` pip), never a second torch, and nothing when no package index answers: then it is refused, naming
what is missing. Requirements are PEP 508 lines only (TorchServe's own install honours pip options; msnb does not).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from msnb.errors import ServerError
from msnb.package.server_packages import missing

# Installed with the server, never per model: a second copy in a replica's environment shadows the server's own.
SERVER_OWNED = {"torch", "torchvision", "torchaudio", "torchtext", "torchserve", "torch-model-archiver", "ray"}
INDEX_TIMEOUT_S = 180  # one pip install of what an archive's requirements.txt lacks


def read_lines(path: Path, root: Path, name: str) -> list[str]:
    """The requirement lines of ``root``/``name``; a pip option or a line that is not PEP 508 is refused."""
    text = (root / Path(name).name).read_text() if (root / Path(name).name).is_file() else (root / name).read_text()
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    for line in lines:
        try:
            Requirement(line)
        except InvalidRequirement:
            raise ServerError(
                f"{path}: its requirements file has {line!r}, which is not a PEP 508 requirement.",
                "requirements name packages only (e.g. `lru-dict>=1.3`): no pip options, paths or URLs; "
                "install anything else into the serving environment yourself.",
            ) from None
    return lines


def to_install(path: Path, root: Path, name: str | None) -> tuple[str, ...]:
    """The requirements of the archive at ``path`` (unpacked at ``root``) that this environment lacks, once a
    package index has answered for them; a ServerError naming them when torch is one or no index answers."""
    if not name:
        return ()
    lacking = missing(None, tuple(read_lines(path, root, name)))
    if not lacking:
        return ()
    owned = [line for line in lacking if Requirement(line).name.lower() in SERVER_OWNED]
    if owned:
        raise ServerError(
            f"{path} asks for {', '.join(owned)}, which this environment does not satisfy.",
            "msnb never installs a second torch (or TorchServe, Ray) beside the server's: serve it from an "
            "environment with that version, or drop the pin from the archive's requirements.",
        )
    _refuse_unreachable(path, lacking)
    return lacking


def _refuse_unreachable(path: Path, lacking: tuple[str, ...]) -> None:
    """Ask the configured package index for ``lacking`` (pip's own resolution, nothing installed)."""
    with tempfile.TemporaryDirectory(prefix="msnb-req-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "--retries",
            "0",
            "--timeout",
            "10",
            "-d",
            tmp,
            *lacking,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=INDEX_TIMEOUT_S)
            failed, why = done.returncode != 0, (done.stderr or done.stdout).strip().splitlines()[-1:]
        except (OSError, subprocess.TimeoutExpired) as err:
            failed, why = True, [str(err)]
    if failed:
        raise ServerError(
            f"{path} needs {', '.join(lacking)}, which this environment lacks, and no package index provided "
            f"them ({' '.join(why) or 'pip failed'}).",
            f"install them into this environment first (pip install {' '.join(lacking)}), or give pip an index "
            "it can reach (PIP_INDEX_URL).",
        )
