"""Which requests `msnb shadow` mirrors, and the model each one asks: TorchServe's inference API (/predictions,
/explanations), KServe's v1 and v2 paths (served when TorchServe runs with its envelope), OpenAI's /v1 and MCP's /mcp
(at each side's API address); every other path (ping, management, metrics) goes to the primary only."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from msnb.templates.msnb_runtime.api.embeddings import ROUTE as EMBEDDINGS
from msnb.templates.msnb_runtime.api.openai import ROUTES as COMPLETIONS

TORCHSERVE = re.compile(r"^/(?P<path>predictions|explanations)/(?P<model>[^/]+)(?:/(?P<version>[^/]+))?/?$")
KSERVE_V1 = re.compile(r"^/v1/models/(?P<model>[^/:]+):(?P<path>predict|explain)$")
KSERVE_V2 = re.compile(r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?/(?P<path>infer|explain)$")
API_PATHS = {*COMPLETIONS, EMBEDDINGS, "/v1/models", "/mcp"}
MODELS_LIST = "(models list)"  # the model a GET /v1/models counts under
NO_MODEL = "(no model)"  # a /v1 or /mcp body that names none


@dataclass(frozen=True)
class Route:
    """A mirrored request: the model it asks (and version, when its path names one), which of TorchServe's paths it
    is compared as (``predictions`` or ``explanations``), and whether it goes to each side's API address."""

    model: str
    version: str | None = None
    path: str = "predictions"
    api: bool = False
    volatile: bool = False  # its answers carry fields each server makes its own (pairs.VOLATILE)


def route(method: str, path: str, body: bytes) -> Route | None:
    """The route of a request to mirror; None for a request the primary alone answers."""
    for pattern in (TORCHSERVE, KSERVE_V1, KSERVE_V2):
        found = pattern.match(path)
        if found:
            kind = "explanations" if found["path"] in ("explanations", "explain") else "predictions"
            return Route(found["model"], found.groupdict().get("version"), kind, volatile=pattern is KSERVE_V2)
    if path not in API_PATHS or (path == "/v1/models") != (method == "GET"):
        return None
    if path == "/v1/models":
        return Route(MODELS_LIST, api=True, volatile=True)
    return Route(named_model(path, body), api=True, volatile=True)


def named_model(path: str, body: bytes) -> str:
    """The model a /v1 body names (``model``), or the tool an MCP ``tools/call`` calls."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return NO_MODEL
    if not isinstance(parsed, dict):
        return NO_MODEL
    if path == "/mcp":
        params = parsed.get("params")
        name = params.get("name") if parsed.get("method") == "tools/call" and isinstance(params, dict) else "mcp"
        return name if isinstance(name, str) else NO_MODEL
    model = parsed.get("model")
    return model if isinstance(model, str) and model else NO_MODEL
