"""OpenAI's embeddings (``POST /v1/embeddings``) over the models that declare them (``%%ms_handler NAME --embeddings``):
each input is one prediction (the sample ``preprocess`` receives is the input string itself, as ``%ms_predict NAME
--data '"text"'`` sends it), its answer (a list of numbers) one embedding, ``float`` or ``base64`` (little-endian
float32, as OpenAI sends it). Depends only on the standard library and api.openai, never on msnb.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

from .openai import ApiError, model_of

ROUTE = "/v1/embeddings"
ENCODINGS = ("float", "base64")
MAX_INPUTS = 2048  # OpenAI's own limit on the inputs of one request


@dataclass(frozen=True)
class Embedding:
    """An embeddings request: the model, its inputs (each one prediction), the encoding of the answers."""

    model: str
    inputs: tuple[str, ...]
    encoding: str = "float"


def parse(body: Any) -> Embedding:
    """The request from its decoded JSON body; ApiError (400) naming a bad field."""
    model = model_of(body)
    given = body.get("input")
    inputs = [given] if isinstance(given, str) else given
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) and i for i in inputs):
        raise ApiError(
            400,
            "`input` must be a non-empty string or a list of them. Hint: token arrays are not taken: "
            "the handler's preprocess reads the text.",
            param="input",
        )
    if len(inputs) > MAX_INPUTS:
        raise ApiError(
            400,
            f"`input` holds {len(inputs)} items, over {MAX_INPUTS}. Hint: send them in several requests.",
            param="input",
        )
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise ApiError(400, f"`encoding_format` must be one of {', '.join(ENCODINGS)}.", param="encoding_format")
    if body.get("dimensions") is not None:
        raise ApiError(
            400,
            "`dimensions` is not supported here: the embedding is what the model answers. Hint: "
            "leave `dimensions` out.",
            param="dimensions",
        )
    return Embedding(model, tuple(inputs), encoding)


def not_embedding(model: str) -> ApiError:
    """A model that does not declare embeddings, asked for them."""
    return ApiError(
        400,
        f"The model `{model}` does not serve embeddings. Hint: add --embeddings to its %%ms_handler "
        "line (its answer to one input is then a list of numbers), build and serve it again.",
        param="model",
    )


def vector(answer: Any) -> list[float]:
    """One answer as an embedding; ApiError (500) when it is not a list of numbers."""
    if (
        isinstance(answer, list)
        and answer
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in answer)
    ):
        return [float(x) for x in answer]
    shown = repr(answer)[:80]
    raise ApiError(
        500,
        f"The model's answer is not an embedding (a list of numbers): {shown}. Hint: make postprocess "
        "return one list of floats per input, e.g. `return output.tolist()`.",
        "server_error",
    )


def reply(request: Embedding, answers: list[Any]) -> dict:
    """The embeddings list: one per input, in order, encoded as asked; usage counts no tokens (the tokenizer is the
    handler's)."""
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector(a), request.encoding)}
        for i, a in enumerate(answers)
    ]
    return {"object": "list", "data": data, "model": request.model, "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def _encoded(values: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return values
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
