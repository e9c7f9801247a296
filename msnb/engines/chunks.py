"""Streamed answers as a client reads them: a chunked body cut into chunks (text pieces, or one JSON value per
line) ending at the handler's error line, and TorchServe's intermediate responses read back in a test process."""

from __future__ import annotations

import codecs
import json
from typing import Any

from msnb.templates.msnb_runtime.handler.content_type import JSONL_TYPE
from msnb.templates.msnb_runtime.ts.wire import predict_responses  # TorchServe's predict response, parsed once

ERROR_KEYS = frozenset(
    {"error", "hint", "stage", "type"}
)  # the shared handler's error answer (msnb_runtime.handler.handler)


def is_stream(content_type: str | None) -> bool:
    """Whether an answer with this Content-Type is a stream of JSON lines (text streams look like text answers)."""
    return (content_type or "").split(";")[0].strip().lower() == JSONL_TYPE


class ChunkReader:
    """Cuts a streamed body into chunks as its bytes arrive; the handler's final JSON error line becomes ``error``.

    Text (``text/plain``): each piece as it arrives (their concatenation is the answer). JSON lines
    (``application/jsonl``): one decoded value per line, however the bytes were cut on the way.
    """

    def __init__(self, content_type: str | None):
        self.jsonl = is_stream(content_type)
        self.error: dict | None = None
        self._text = codecs.getincrementaldecoder("utf-8")("replace")
        self._rest = b""

    def feed(self, data: bytes) -> list:
        """The chunks ``data`` completes (nothing after an error line)."""
        if self.error is not None:
            return []
        if not self.jsonl:
            return self._text_piece(self._text.decode(bytes(data)))
        *lines, self._rest = (self._rest + bytes(data)).split(b"\n")
        return self._lines(lines)

    def close(self) -> list:
        """The chunks still held when the body ends."""
        if self.error is not None:
            return []
        if not self.jsonl:
            return self._text_piece(self._text.decode(b"", final=True))
        rest, self._rest = self._rest, b""
        return self._lines([rest])

    def _lines(self, lines: list[bytes]) -> list:
        chunks = []
        for line in lines:
            if not line.strip() or self.error is not None:
                continue
            value = json.loads(line)
            if _is_error(value):
                self.error = value
            else:
                chunks.append(value)
        return chunks

    def _text_piece(self, text: str) -> list:
        """A text piece; an error line the handler appended ("\\n" + JSON + "\\n") is taken off its end."""
        if text.endswith("}\n"):
            start = text.rfind("\n{", 0, len(text) - 1)
            try:
                value = json.loads(text[start + 1 :]) if start >= 0 else None
            except ValueError:
                value = None
            if _is_error(value):
                self.error, text = value, text[:start]
        return [text] if text else []


def _is_error(value: Any) -> bool:
    return isinstance(value, dict) and ERROR_KEYS <= set(value)


class RecordedSocket:
    """Stands in for a TorchServe worker's socket to the frontend: keeps each intermediate response sent on it."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.messages.append(bytes(data))

    def pieces(self) -> dict[str, list[tuple[str, bytes]]]:
        """Request id -> [(content type, body)] in the order they were sent."""
        out: dict[str, list[tuple[str, bytes]]] = {}
        for message in self.messages:
            for request_id, ctype, body in predict_responses(message):
                out.setdefault(request_id, []).append((ctype, body))
        return out


def read_stream(pieces: list[tuple[str, bytes]], last: Any) -> tuple[list, dict | None]:
    """The chunks a client reads from recorded intermediate responses and the handler's last piece for the
    request, and the error line that ended the stream (None when it ended well)."""
    reader = ChunkReader(pieces[0][0] if pieces else None)
    chunks = [chunk for _, body in pieces for chunk in reader.feed(body)]
    if isinstance(last, str):
        last = last.encode()
    if isinstance(last, (bytes, bytearray)):
        chunks += reader.feed(last)
    chunks += reader.close()
    return chunks, reader.error


def print_chunks(chunks: Any, out: Any = None) -> list:
    """Print a streamed answer's chunks as they arrive (text appended in place, other values one JSON line each)
    and return them as a list; an error that ends the stream propagates after the chunks before it."""
    import sys

    out = out or sys.stdout
    got: list = []
    try:
        for chunk in chunks:
            got.append(chunk)
            text = chunk if isinstance(chunk, str) else json.dumps(chunk) + "\n"
            out.write(text)
            out.flush()
    finally:
        if got and isinstance(got[-1], str) and not got[-1].endswith("\n"):
            out.write("\n")  # the text stream's line ends here, before any error is shown
    return got
