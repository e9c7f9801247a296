"""A request as TorchServe's clients send it: a file's raw bytes (``curl -T`` / ``--data-binary``), a Content-Type
and headers (``ts_request_sequence_id``), never re-encoded as JSON."""

from __future__ import annotations

from pathlib import Path

from msnb.engines.models import RAW_TYPE, RawRequest
from msnb.errors import OptionError

__all__ = ["RawRequest", "from_options", "request_options"]


def from_options(binary: str | None, content_type: str | None, headers: list[str] | None, base: Path) -> RawRequest:
    """``--data-binary @file`` (or text), ``--content-type`` and ``--header K:V`` as one request; a file that does
    not exist or a header without a colon is refused before anything is sent."""
    body = b""
    if binary is not None:
        if binary.startswith("@"):
            path = Path(binary[1:]).expanduser()
            path = path if path.is_absolute() else base / path
            if not path.is_file():
                raise OptionError(
                    f"--data-binary: file {str(path)!r} does not exist; nothing was sent.",
                    "give @path/to/file (its bytes are sent as they are, like curl -T or --data-binary @file).",
                )
            body = path.read_bytes()
        else:
            body = binary.encode()
    return RawRequest(body, content_type or RAW_TYPE, _headers(headers or []))


def request_options(
    data: str | None, binary: str | None, content_type: str | None, headers: list[str] | None, base: Path
) -> RawRequest | None:
    """The request ``--data-binary``, ``--content-type`` and ``--header`` describe (``--data`` text is then sent as
    it is, as JSON), or None when none of them is given (``--data`` alone is sent as msnb sends data)."""
    if binary is None and not headers and not content_type:
        return None
    if binary is None:  # --data with headers stays JSON
        return from_options(data, content_type or "application/json", headers, base)
    return from_options(binary, content_type, headers, base)


def _headers(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise OptionError(
                f"--header {item!r} is not NAME:VALUE.", "e.g. --header ts_request_sequence_id:seq-1 (curl's -H)."
            )
        out[key.strip()] = value.strip()
    return out
