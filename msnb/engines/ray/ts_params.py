"""The management API's parameters read as TorchServe 0.12's frontend reads them: a whole number as Java's
``Integer.parseInt`` takes it (anything else, an empty value or one past 32 bits is the parameter's default, as
``NettyUtils.getIntParameter``), a flag as ``Boolean.parseBoolean``, and the register call's from its query or its
JSON body (``RegisterModelRequest``), with TorchServe's "not given" values."""

from __future__ import annotations

import json
from dataclasses import dataclass

from msnb.templates.msnb_runtime.ray.management import java_int

# TorchServe's "not given" register values (RegisterModelRequest: -1 * DEFAULT_BATCH_SIZE, -1 * DEFAULT_MAX_BATCH_DELAY)
NO_BATCH_SIZE, NO_BATCH_DELAY, NO_TIMEOUT = -1, -100, -1
# A JSON body's max_batch_delay when it gives none: Gson builds RegisterModelRequest by its no-argument constructor,
# whose -100 * DEFAULT_MAX_BATCH_DELAY is not the "not given" value, so the model is described (and runs) with it
JSON_BATCH_DELAY = -10000
RUNTIMES = ("python", "python3")  # Manifest.RuntimeType's values a Python worker serves (LSP: not on Ray)


def java_flag(value: object, default: bool = False) -> bool:
    """``value`` as ``Boolean.parseBoolean`` reads it: ``true`` in any case, else False (``default`` when absent)."""
    if value is None:
        return default
    return value is True or str(value).lower() == "true"


@dataclass(frozen=True)
class RegisterRequest:
    """``POST /models``' parameters with TorchServe's defaults (``initial_workers``: config.properties'
    default_workers_per_model)."""

    url: str | None
    model_name: str | None
    runtime: str | None
    batch_size: int
    max_batch_delay: int
    initial_workers: int
    response_timeout: int
    synchronous: bool


def register_request(query: dict[str, str], body: bytes, content_type: str, workers: int) -> RegisterRequest:
    """The register call's parameters: its JSON body's when it is sent as ``application/json`` (then the query is
    not read, as TorchServe's ``parseRequest``; a delay not given is ``JSON_BATCH_DELAY``), else its query's."""
    given: dict = query
    delay = NO_BATCH_DELAY
    if content_type.split(";")[0].strip().lower() == "application/json":
        try:
            given = json.loads(body or b"{}")
        except ValueError:
            given = {}
        given, delay = (given if isinstance(given, dict) else {}), JSON_BATCH_DELAY
    return RegisterRequest(
        url=_text(given.get("url")),
        model_name=_text(given.get("model_name")),
        runtime=_text(given.get("runtime")),
        batch_size=java_int(given.get("batch_size"), NO_BATCH_SIZE),
        max_batch_delay=java_int(given.get("max_batch_delay"), delay),
        initial_workers=java_int(given.get("initial_workers"), workers),
        response_timeout=java_int(given.get("response_timeout"), NO_TIMEOUT),
        synchronous=java_flag(given.get("synchronous"), True),
    )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def scale_request(query: dict[str, str]) -> tuple[int, int, bool]:
    """``PUT /models/NAME``' (min_worker, max_worker, synchronous): 1, min_worker and false when not given."""
    low = java_int(query.get("min_worker"), 1)
    return low, java_int(query.get("max_worker"), low), java_flag(query.get("synchronous"))


__all__ = ["RUNTIMES", "RegisterRequest", "java_flag", "register_request", "scale_request"]
