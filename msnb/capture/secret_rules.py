"""Which package data files never travel unless named: secret-looking names or contents (``secret_scan``), and links
leaving the package or pointing at a file that would not travel."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from msnb.capture import secret_scan

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
    "*password*",
    "*passwd*",
    "*api_key*",
    "*apikey*",
)
# A name an archive must not hold: a backslash (a separator on Windows, a traversal when unpacked there) or a
# control character (it would act on the terminal that lists the archive).
UNSAFE_NAME = re.compile(r"[\\\x00-\x1f\x7f-\x9f]")


def unsafe_name(name: str) -> str | None:
    """Why ``name`` may not be stored in an archive, or None."""
    return "a name with a backslash or a control character" if UNSAFE_NAME.search(name) else None


def why_left_out(path: Path, package: Path) -> str | None:
    """Why a file inside ``package`` is not bundled as data (None: it is): a secret-looking name or content, or a
    symlink whose target leaves the package or would not travel itself (hidden, secret-looking, or a secret)."""
    if path.is_symlink():
        target, root = path.resolve(), package.resolve()
        if not target.is_relative_to(root):
            return "a symlink leaving the package"
        if any(part.startswith(".") for part in target.relative_to(root).parts):
            return "a symlink to a hidden file"
        why = why_left_out(target, package)
        if why:
            return f"a symlink to a file left out: {why}"
    return why_secret(path)


def why_secret(path: Path) -> str | None:
    """Why a file looks like a secret by its name or holds one by its content (``secret_scan``), or None."""
    name = path.name.lower()
    for pattern in SECRET_NAMES:
        if fnmatch.fnmatchcase(name, pattern):
            return f"a secret-looking name ({pattern})"
    found = secret_scan.scan(path) if path.is_file() else None
    return f"holds a secret ({found})" if found else None


def left_out_lines(left_out: dict[str, str], shown: int = 10) -> list[str]:
    """One visible line per file left out (the first ``shown``; the rest counted), saying how to ship one."""
    lines = [f"left out of the archive: {arcname} ({why})" for arcname, why in list(left_out.items())[:shown]]
    if len(left_out) > shown:
        lines.append(f"left out of the archive: {len(left_out) - shown} more files that look like secrets or links")
    if left_out:
        lines.append("a file left out travels only when named: --include-file PATH (one per file)")
    return lines
