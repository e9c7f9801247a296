"""TorchServe's wire format, as every engine that is not TorchServe speaks it: a request body as its worker hands it
to ``handle``, an answer as its worker sends it, its frontend's error shape, and the predict responses a worker writes
(read back to stream a handler's intermediate responses to its client).

Depends on the standard library only, never on msnb.
"""

from __future__ import annotations

import json
import struct
from typing import Any

JSON_TYPE = "application/json"
Reply = tuple[int, dict, bytes]  # status, headers, body


def error_reply(status: int, kind: str, message: str) -> Reply:
    """An error in TorchServe's frontend shape: {"code", "type", "message"}."""
    body = {"code": status, "type": kind, "message": message}
    return status, {"content-type": JSON_TYPE}, json.dumps(body).encode()


def decode_body(body: bytes, content_type: str) -> Any:
    """A request body as a TorchServe worker hands it to ``handle``: JSON decoded, text as str, else bytes."""
    if content_type.startswith(JSON_TYPE):
        try:
            return json.loads(body.decode("utf-8"))
        except Exception:  # RecursionError (a deeply nested body) included, as TorchServe's worker catches
            return body  # TorchServe forwards a body it cannot decode as it is
    if content_type.startswith("text"):
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            return body
    return body


def encode_answer(answer: Any, status: int, headers: dict) -> Reply:
    """One answer with the status and headers its request processor holds; JSON unless str/bytes, in the bytes
    TorchServe's worker writes (``json.dumps(answer, indent=2)``, ts/protocol/otf_message_handler.py), strict."""
    headers = {k.lower(): str(v) for k, v in headers.items()}
    if isinstance(answer, (bytes, bytearray)):
        headers.setdefault("content-type", "application/octet-stream")
        return status, headers, bytes(answer)
    if isinstance(answer, str):
        headers.setdefault("content-type", "text/plain; charset=utf-8")
        return status, headers, answer.encode()
    try:
        body = json.dumps(answer, indent=2, allow_nan=False).encode()
    except (TypeError, ValueError) as err:
        return error_reply(503, "InternalServerException", f"the answer is not strict JSON: {err}")
    headers.setdefault("content-type", JSON_TYPE)
    return status, headers, body


def prediction_error(err: BaseException) -> Reply | None:
    """TorchServe's answer to ``PredictionException(message, code)`` raised by ``handle``: that status and message,
    type InternalServerException, for every request of the batch (None for any other exception). By name, so that
    no engine needs ``ts`` for it."""
    code = getattr(err, "error_code", None)
    if type(err).__name__ != "PredictionException" or not isinstance(code, int):
        return None
    return error_reply(code, "InternalServerException", str(getattr(err, "message", err)))


def predict_responses(message: bytes) -> list[tuple[str, str, bytes]]:
    """(request id, content type, body) of each request in one TorchServe predict response (the worker's side of
    ts/protocol/otf_message_handler.py)."""
    pos, out = 4, []  # after the batch's status code

    def field() -> bytes | None:
        nonlocal pos
        (size,) = struct.unpack_from("!i", message, pos)
        pos += 4
        value = message[pos : pos + max(size, 0)]
        pos += max(size, 0)
        return value if size >= 0 else None

    field()  # the batch's message
    while (request_id := field()) is not None:
        ctype = (field() or b"").decode()
        pos += 4  # the request's HTTP status
        field()  # its reason phrase
        (headers,) = struct.unpack_from("!i", message, pos)
        pos += 4
        for _ in range(2 * headers):
            field()
        out.append((request_id.decode(), ctype, field() or b""))
    return out
