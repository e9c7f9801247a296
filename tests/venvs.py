"""Packages installed into the tests' fresh virtual environments: by uv where the test run hands it over, else by pip.

``scripts/dev.sh`` gives a test run ``MSNB_TEST_UV`` (the venv's uv, pinned in constraints.txt) and, in uv's own
variables, pip's indexes, find-links, constraints and certificate, so that uv installs what pip would from the same
places, byte-compiled as pip does, and links it from uv's cache instead of unpacking every wheel again (torch: about
700 MB). A run without them (pytest started by hand), or a uv that fails, installs with pip. Only an environment a
test prepares goes through here: where how a user installs is the subject (``pip install msnb.whl``), pip runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

UV_VAR = "MSNB_TEST_UV"


def install(python: Path, *args: str, timeout: float) -> None:
    """``pip install -q ARGS`` into the environment of ``python``, done by uv when the run has it."""
    uv = os.environ.get(UV_VAR)
    if uv and Path(uv).is_file():
        done = subprocess.run(
            [uv, "pip", "install", "-q", "--python", str(python), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode == 0:
            return
        print(f"uv did not install {' '.join(args)} (pip does):\n{done.stderr[-2000:]}")
    pip_install(python, *args, timeout=timeout)


def pip_install(python: Path, *args: str, timeout: float) -> None:
    """``pip install -q ARGS`` into the environment of ``python``, by pip itself (as a user installs)."""
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
