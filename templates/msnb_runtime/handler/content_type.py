"""The Content-Type of each answer a handler returns: JSON, text, or bytes sniffed by their leading bytes.

TorchServe sends no Content-Type when the handler sets none (measured on 0.12: a JSON answer came back
without one). The shared handler and a user's own handler both label every answer here, so a client can
tell a JSON answer from text or an image. Depends on the standard library only.
"""

from __future__ import annotations

from typing import Any

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
BYTES_TYPE = "application/octet-stream"
JSONL_TYPE = "application/jsonl"  # a streamed answer whose chunks are not str: one JSON document per line
# Leading bytes of the binary answers a postprocess returns most often; any other bytes are octet-stream.
SNIFF = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"ID3", "audio/mpeg"),
    (b"%PDF", "application/pdf"),
)


def content_type(answer: Any) -> str:
    """The Content-Type of one answer: text for a str, sniffed for bytes, JSON for anything else."""
    if isinstance(answer, str):
        return TEXT_TYPE
    if not isinstance(answer, (bytes, bytearray)):
        return JSON_TYPE  # TorchServe encodes it with json.dumps
    head = bytes(answer[:12])
    if head.startswith(b"RIFF"):
        return {b"WAVE": "audio/wav", b"WEBP": "image/webp"}.get(head[8:12], BYTES_TYPE)
    return next((ctype for magic, ctype in SNIFF if head.startswith(magic)), BYTES_TYPE)


def label(context: Any, answers: Any) -> None:
    """Give each request's answer its Content-Type, unless the handler set one itself (one answer per request)."""
    processors = getattr(context, "request_processor", None) or []
    if not isinstance(answers, list) or len(processors) != len(answers):
        return
    for idx, answer in enumerate(answers):
        if not context.get_response_content_type(idx):
            context.set_response_content_type(idx, content_type(answer))
