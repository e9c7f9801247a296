"""Find secrets in a file's content with detect-secrets' detectors: private keys of every armor, cloud, chat and
forge tokens, secret-sounding assignments, in UTF-8 or UTF-16 text; binary files are searched for key armor only.

detect-secrets' own file scan runs every detector on every line (about 40 ms for a 60-line module); here each
detector's pattern first runs over the whole text (C speed) and only the lines it hits go through the detectors
and detect-secrets' false-positive filters. Nothing is sent anywhere: detectors' online verification is never
called. The secret itself is never shown: only its kind and line.
"""

from __future__ import annotations

import codecs
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

SCANNED = 64 * 2**20  # bytes read at most (a larger file is refused by the bundler's size guard anyway)
TEXT_SCANNED = 8 * 2**20  # text beyond this is searched for key armor only
# Armor detect-secrets' PrivateKeyDetector does not list (PuTTY v3, PKCS#8 ENCRYPTED), besides the ones it does.
ARMOR = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-[0-9]+:")
ARMOR_BYTES = re.compile(ARMOR.pattern.encode())
LONG_LINE = 2000  # characters: a longer line is searched in windows (``_windows``)
GATED = 20_000  # places the gate passes, at most, per text
# What every detector's match holds (``_gate``), lower-cased: the keyword detector's words and detectors' prefixes.
GATE_WORDS = (
    *("key", "token", "secret", "pass", "pwd", "pw", "auth", "credential", "contrase", "api", "://", "bearer"),
    *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "eyj", "-us", "sk-", "k_live_", "begin", "putty", "pypi-", "sg.", "xox"),
    *("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-", "sq0csp-"),
)
GATE_PATTERN = re.compile(
    r"A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA|AKC|AP[\dA-F]|AC[a-z0-9]{32}|SK[a-z0-9]{32}|GR1348941|[MNO][a-zA-Z\d_-]{23,25}\."
)
WINDOW, WINDOWS = 400, 200  # a window's reach either side of a match, and the most windows searched per line
# High-entropy strings count as secrets on lines that name one (an assignment to a key, token, password...).
SECRET_WORDS = re.compile(r"(?i)key|token|secret|passw|pwd|credential|auth")
_SKIPPED = {"IPPublicDetector"}  # an address is no secret
_GENERIC = {"KeywordDetector", "Base64HighEntropyString", "HexHighEntropyString"}  # tried after the specific ones


class Finding(NamedTuple):
    """One secret found: what kind (detect-secrets' name), on which line, and the secret (never shown: ``masked``)."""

    kind: str
    line: int
    secret: str = ""

    def __str__(self) -> str:
        return f"{self.kind}, line {self.line}"

    @property
    def masked(self) -> str:
        """The secret as a message may show it: its first characters (they tell the kind) and its length."""
        if len(self.secret) < 12:  # a detector's group (GitHub's "ghp"), not the key: name no part of it
            return "the value hidden"
        return f"{self.secret[:4]}..., {len(self.secret)} characters"


def scan(path: Path) -> Finding | None:
    """The first secret in the file's content, or None (the file is read once, at most ``SCANNED`` bytes)."""
    with open(path, "rb") as f:
        return scan_bytes(f.read(SCANNED), path.name)


def scan_bytes(data: bytes, filename: str = "file.txt") -> Finding | None:
    """The first secret in ``data``: its text in UTF-8 or UTF-16/32 (``decode``), key armor alone in binary data."""
    text = decode(data)
    if text is None or len(text) > TEXT_SCANNED:
        found = ARMOR_BYTES.search(data) or _utf16_armor(data)
        return Finding("Private Key", data.count(b"\n", 0, found.start()) + 1) if found else None
    return scan_text(text, filename)


def scan_text(text: str, filename: str = "file.txt") -> Finding | None:
    """The first secret in ``text`` (``filename`` picks detect-secrets' rules for its file type)."""
    return next(findings(text, filename), None)


def findings(text: str, filename: str = "file.txt") -> Iterator[Finding]:
    """Every line of ``text`` that holds a secret (its first one), in order."""
    hits = _candidate_lines(text)
    if not hits:
        return
    lines = text.splitlines()
    for number in sorted(hits):
        found = _line_secret(lines[number - 1], filename) if number <= len(lines) else None
        if found:
            yield Finding(found[0], number, found[1])


def decode(data: bytes) -> str | None:
    """Text in UTF-8 or UTF-16/32 (by BOM, or by its zero bytes), None for binary data."""
    for bom, codec in (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF8, "utf-8-sig"),
    ):
        if data.startswith(bom):
            return data.decode(codec, errors="replace")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16", errors="replace")
    head = data[:4096]
    if len(head) >= 2 and head.count(0) * 3 > len(head):  # ASCII text as UTF-16 without a BOM
        odd, even = head[1::2].count(0), head[0::2].count(0)
        return data.decode("utf-16-le" if odd > even else "utf-16-be", errors="replace")
    if b"\0" in head:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        return data.decode("utf-8", errors="replace") if err.start > len(data) - 4 else None


def _utf16_armor(data: bytes) -> re.Match | None:
    """Key armor in a large or binary file's UTF-16 text (its line count is then approximate)."""
    for codec in ("utf-16-le", "utf-16-be"):
        found = ARMOR.search(data[: TEXT_SCANNED * 2].decode(codec, "ignore"))
        if found:
            return found
    return None


def _candidate_lines(text: str) -> set[int]:
    """Line numbers that pass the gate and where some detector's pattern (or key armor) matches: the only lines worth
    a closer look (a long line: always, it is searched in windows)."""
    gated = sorted({text.count("\n", 0, s) + 1 for s in _gate(text)})
    if not gated:
        return set()
    lines = text.splitlines()
    return {n for n in gated if n <= len(lines) and (len(lines[n - 1]) > LONG_LINE or _matches(lines[n - 1]))}


def _gate(text: str, most: int = GATED) -> list[int]:
    """Where a secret may start: every detector's match holds one of ``GATE_WORDS`` (lower-cased) or matches
    ``GATE_PATTERN`` or is a Telegram token (digits before a colon). str.find runs at C speed, where detect-secrets'
    own patterns take about two seconds per MB of text."""
    low, starts = text.lower(), []
    for word in GATE_WORDS:
        at = low.find(word)
        while at != -1 and len(starts) < most:
            starts.append(at)
            at = low.find(word, at + 1)
    starts += [m.start() for _, m in zip(range(most), GATE_PATTERN.finditer(text))]
    at = text.find(":")
    while at != -1 and len(starts) < 2 * most:
        if text[max(0, at - 8) : at].isdigit():
            starts.append(at)
        at = text.find(":", at + 1)
    return starts


def _matches(line: str) -> bool:
    return bool(ARMOR.search(line)) or any(p.search(line) for p in _patterns())


def _line_secret(line: str, filename: str) -> tuple[str, str] | None:
    """The kind and text of the first secret a detector finds on ``line`` that detect-secrets' filters keep.

    A long line (a big literal) is searched in windows around the detectors' own matches: their regexes and filters
    are slow on long text (a 50 KB line took a second, 5 MB minutes), and a key is short."""
    if len(line) > LONG_LINE:
        return next(filter(None, (_line_secret(w, filename) for w in _windows(line))), None)
    armor = ARMOR.search(line)
    if armor:
        return "Private Key", ""
    for detector in _detectors():
        for secret in _analyze(detector, line, filename):
            if _kept(secret, line, detector):
                return detector.secret_type, secret
    return None


def _windows(line: str) -> Iterator[str]:
    """Pieces of a long line around each place the gate passes (a key with what names it), at most ``WINDOWS``."""
    for start in sorted(_gate(line, WINDOWS)):
        yield line[max(0, start - WINDOW) : start + 2 * WINDOW]


def _analyze(detector: Any, line: str, filename: str) -> list[str]:
    from detect_secrets.plugins import keyword
    from detect_secrets.util.filetype import determine_file_type

    if isinstance(detector, keyword.KeywordDetector):
        rules = keyword.REGEX_BY_FILETYPE.get(
            determine_file_type(filename), keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP
        )
        return list(detector.analyze_string(line, denylist_regex_to_group=rules))
    if hasattr(detector, "entropy_limit"):  # its limit is applied by its analyze_line, which we do not call
        if not SECRET_WORDS.search(line):
            return []
        found = detector.analyze_string(line)
        return [s for s in found if detector.calculate_shannon_entropy(s) > detector.entropy_limit]
    return list(detector.analyze_string(line))


def _kept(secret: str, line: str, detector: Any) -> bool:
    """detect-secrets' heuristic filters: templated, sequential, UUID, id-like or indirect values are no secret."""
    from detect_secrets.filters import heuristic as h

    return not (
        h.is_templated_secret(secret)
        or h.is_prefixed_with_dollar_sign(secret)
        or h.is_sequential_string(secret)
        or h.is_potential_uuid(secret)
        or h.is_not_alphanumeric_string(secret)
        or h.is_likely_id_string(secret, line, detector)
        or (type(detector).__name__ == "KeywordDetector" and h.is_indirect_reference(line))
    )


@functools.cache
def _detectors() -> tuple[Any, ...]:
    """One instance of every detect-secrets detector (its defaults), but those in ``_SKIPPED``."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    classes = get_mapping_from_secret_type_to_class().values()
    ordered = sorted(classes, key=lambda c: (c.__name__ in _GENERIC, c.__name__))  # a key's own detector names it
    return tuple(cls() for cls in ordered if cls.__name__ not in _SKIPPED)


@functools.cache
def _patterns() -> tuple[re.Pattern, ...]:
    """Each detector's own patterns, to find candidate lines in a whole text at once."""
    from detect_secrets.plugins import keyword

    found: list[re.Pattern] = [re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)]
    for detector in _detectors():
        found += list(getattr(detector, "denylist", ()))
        if hasattr(detector, "regex") and hasattr(detector, "charset"):  # high entropy: long quoted strings
            found.append(re.compile(r"(['\"])[" + re.escape(detector.charset) + r"]{20,}\1"))
    return tuple(found)
