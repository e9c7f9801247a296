"""Which requirement entries an archive may carry: PEP 508 requirements only, never pip options, paths or URLs."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.requirements import InvalidRequirement, Requirement

from msnb.capture.requirements import SERVING, canonical, serving_distributions
from msnb.errors import SpecError
from msnb.options import DEFAULTS, OPTION

SHOWN = 3  # refused entries quoted in a message; the rest are counted
SHOWN_CHARS = 60  # characters quoted of one entry
LISTED = 8  # requirements listed in a summary table
LOCAL_HINT = "ship local code by importing it from the handler (local modules are bundled with it)"
INDEX_HINT = "use the server's own pip configuration (pip.conf, PIP_INDEX_URL) for another package index"
REASONS = {
    "option": ("pip options", f"give requirements only (name and version, e.g. numpy==1.26.4); {INDEX_HINT}"),
    "url": ("URLs", f"give a name and version from the package index; {LOCAL_HINT}, or {INDEX_HINT}"),
    "path": ("local paths", f"{LOCAL_HINT}, or ship data with --extra-files"),
    "env": (
        "environment-variable references",
        "write the value itself: pip expands ${VAR} on the server from the server's environment (its secrets included)",
    ),
    "invalid": ("not PEP 508 requirements", "write one requirement per entry, e.g. numpy==1.26.4 or pandas>=2,<3"),
    "serving": (
        "torch, TorchServe or one of their dependencies",
        "drop them: the serving image provides torch, TorchServe and their dependencies, and a pin would make "
        "the server install another build (a multi-GB CUDA torch) at registration",
    ),
}


def check(entries: Iterable[str], most: int | None = None) -> tuple[str, ...]:
    """The entries (at most ``most``), each a PEP 508 requirement the serving image does not provide; else a
    SpecError that summarises them."""
    entries = tuple(e.strip() for e in entries if e.strip())
    most = most or DEFAULTS["max_requirements"]
    if len(entries) > most:
        raise SpecError(
            f"--requirements holds {len(entries):,} entries, more than the {most} an archive may carry "
            f"({summarise(entries)}): the server's pip would install every one at registration.",
            "list only what the handler needs (msnb pins the third-party modules it imports itself), or raise "
            f"the cap with {OPTION['max_requirements'].flag} N.",
        )
    refused: dict[str, list[str]] = {}
    for entry in entries:
        kind = classify(entry)
        if kind:
            refused.setdefault(kind, []).append(entry)
    if refused:
        kind = next(iter(refused))
        lines = [f"{REASONS[k][0]}: {summarise(v)}" for k, v in refused.items()]
        raise SpecError(
            f"--requirements holds entries an archive may not carry ({'; '.join(lines)}).",
            REASONS[kind][1] + ".",
        )
    return entries


def classify(entry: str) -> str | None:
    """Why ``entry`` is refused (a key of REASONS), or None for a requirement an archive may carry."""
    if entry.startswith("-"):
        return "option"
    if "${" in entry:  # pip expands ${VAR} in requirement files
        return "env"
    try:
        req = Requirement(entry)
    except InvalidRequirement:
        if "://" in entry:
            return "url"
        if entry.startswith((".", "/", "~")) or "/" in entry or "\\" in entry:
            return "path"
        return "invalid"
    if req.url:
        return "url"
    name = canonical(req.name)
    if name in map(canonical, SERVING) or (name in serving_distributions() and req.specifier):
        return "serving"
    return None


def summarise(entries: list[str] | tuple[str, ...], shown: int = SHOWN, *, quote: bool = True) -> str:
    """A few entries (each cut short, quoted), the rest counted: a long list is never echoed whole."""
    cut = [e if len(e) <= SHOWN_CHARS else e[: SHOWN_CHARS - 3] + "..." for e in entries[:shown]]
    quoted = [repr(e) if quote else e for e in cut]
    rest = len(entries) - shown
    return ", ".join(quoted) + (f" and {rest} more" if rest > 0 else "")
