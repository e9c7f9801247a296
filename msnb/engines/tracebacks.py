"""A Python traceback read as a person reads it: the frames of the user's own code kept, the library's folded.

Engine-neutral: a TorchServe worker's log, a Ray replica's and the in-process trial's tracebacks fold alike.
"""

from __future__ import annotations

import re
import sysconfig
from pathlib import Path

from msnb.templates import DEV_ENTRY, RUNTIME

_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')


def is_library_frame(path: str) -> bool:
    """A frame of Python, an installed package or the shared handler, not of the user's own code."""
    stdlib = sysconfig.get_paths()["stdlib"]
    return (
        "site-packages" in path
        or "dist-packages" in path
        or path.startswith((stdlib, "<frozen"))
        or RUNTIME in Path(path).parts
        or Path(path).name == DEV_ENTRY
    )


def user_frames(lines: list[str]) -> list[str]:
    """A traceback's lines with only the user's frames (their code lines too); says how many were hidden."""
    out: list[str] = []
    hidden, skipping = 0, False
    for line in lines:
        frame = _FRAME.match(line)
        if frame:
            skipping = is_library_frame(frame.group(1))
            hidden += skipping
        elif not line.startswith("    ") or line.startswith("Traceback"):
            skipping = False
            if hidden and not line.startswith("  File"):
                out.append(f"  ({hidden} frame{'s' * (hidden > 1)} of torch, TorchServe and msnb hidden)")
                hidden = 0
        if not skipping:
            out.append(line)
    return out
