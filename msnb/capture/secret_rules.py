"""Which package data files never travel unless named: secret-looking names or contents, and links leaving the package."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

# Base names (compared lower-case) of files that hold keys, passwords or tokens.
SECRET_NAMES = (
    "id_*",
    "*.pem",
    "*.key",
    ".env*",
    "credentials*",
    "secret*",
    "token*",
    ".netrc",
    "*.p12",
    "*.pfx",
    "*.ppk",
    "*.jks",
    "*.keystore",
    ".pgpass",
)
PRIVATE_KEY = re.compile(rb"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----")
SCANNED = 64 * 2**20  # larger files are refused by the bundler's size guard anyway
_CHUNK = 2**20
_OVERLAP = 64  # a header split across two chunks is still found


def why_left_out(path: Path, package: Path) -> str | None:
    """Why a file inside ``package`` is not bundled as data (None: it is): a secret-looking name or content, or a
    symlink that resolves outside the package folder."""
    if path.is_symlink() and not path.resolve().is_relative_to(package.resolve()):
        return "a symlink leaving the package"
    name = path.name.lower()
    for pattern in SECRET_NAMES:
        if fnmatch.fnmatchcase(name, pattern):
            return f"a secret-looking name ({pattern})"
    if path.is_file() and path.stat().st_size <= SCANNED and holds_private_key(path):
        return "holds a private key"
    return None


def holds_private_key(path: Path) -> bool:
    """Whether the file's bytes contain a PEM private-key header (read in chunks: any size)."""
    tail = b""
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            if PRIVATE_KEY.search(tail + chunk):
                return True
            tail = chunk[-_OVERLAP:]
    return False


def left_out_lines(left_out: dict[str, str], shown: int = 10) -> list[str]:
    """One visible line per file left out (the first ``shown``; the rest counted), saying how to ship one."""
    lines = [f"left out of the archive: {arcname} ({why})" for arcname, why in list(left_out.items())[:shown]]
    if len(left_out) > shown:
        lines.append(f"left out of the archive: {len(left_out) - shown} more files that look like secrets or links")
    if left_out:
        lines.append("a file left out travels only when named: --include-file PATH (one per file)")
    return lines
