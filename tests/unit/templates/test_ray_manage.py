"""The Ray router's answers to TorchServe's management calls (templates/msnb_runtime/ray/management.py): the list paged as
TorchServe pages it, the describe entry in TorchServe's fields with the application's replicas as its workers, a
version or model that does not exist, and every write call refused with TorchServe's 405 and a Hint. (The same
calls compared with a plain TorchServe: tests/ray/test_ray_management.py.)"""

from __future__ import annotations

import asyncio
import json

import pytest

from msnb.templates.msnb_runtime.ray import app as ray_app
from msnb.templates.msnb_runtime.ray import management

MODELS = [("klass", "klass.mar"), ("desc", "desc.mar"), ("named", "named.mar")]


def test_the_list_is_sorted_and_paged_as_torchserve_pages_it():
    assert management.page(MODELS, {}) == (
        200,
        {
            "models": [
                {"modelName": "desc", "modelUrl": "desc.mar"},
                {"modelName": "klass", "modelUrl": "klass.mar"},
                {"modelName": "named", "modelUrl": "named.mar"},
            ]
        },
    )
    status, first = management.page(MODELS, {"limit": "2"})
    assert first["nextPageToken"] == "2" and [m["modelName"] for m in first["models"]] == ["desc", "klass"]
    _, last = management.page(MODELS, {"limit": "2", "next_page_token": first["nextPageToken"]})
    assert last == {"models": [{"modelName": "named", "modelUrl": "named.mar"}]}  # no token past the last model
    assert management.page(MODELS, {"limit": "1", "next_page_token": "2"})[1]["nextPageToken"] == "3"
    # TorchServe's reading of odd values: not a number is its default, out of range is 100 (limit) or 0 (token)
    everything = management.page(MODELS, {})
    odd = ["x", "1.5", "", "-1", "101", "99999999999"]
    for query in [{"limit": v} for v in odd] + [{"next_page_token": v} for v in ("-1", "x")]:
        assert management.page(MODELS, query) == everything, query
    assert management.page(MODELS, {"limit": "0"}) == (200, {"nextPageToken": "0", "models": []})
    assert management.page(MODELS, {"next_page_token": "10"}) == (200, {"models": []})


class Replica:
    """A model application's handle: ``describe.remote`` answers as LoadedModel.describe does."""

    def __init__(self, entry: dict):
        self.entry = entry
        self.describe = self

    async def remote(self, customized: bool, headers: dict):
        entry = {**self.entry, **({"customizedMetadata": {"k": 1}} if customized else {})}
        return 200, {"content-type": "application/json"}, json.dumps([entry]).encode()


@pytest.fixture
def router(monkeypatch):
    """The router's class as an exported application runs it, its Serve calls answered here: application klass
    with two replicas running and one starting, desc with one running."""
    monkeypatch.setattr(
        ray_app, "replica_states", lambda: {"klass": {"RUNNING": 2, "STARTING": 1}, "desc": {"RUNNING": 1}}
    )
    config = {"minWorkers": 2, "maxWorkers": 3, "batchSize": 4, "maxBatchDelay": 50}
    entry = management.describe_entry("klass", "1.0", "klass.mar", config, [], True)
    cls = ray_app.MsnbRouter.func_or_class
    router = cls.__new__(cls)
    router.handles = {"klass": Replica(entry), "desc": Replica({**entry, "modelName": "desc"})}
    return router


def ask(router, method: str, path: str, query: dict | None = None) -> tuple[int, object]:
    parts = [p for p in path.split("/") if p]
    status, head, body = asyncio.run(router.manage(method, parts, query or {}, {}))
    assert head["content-type"] == "application/json"
    return status, json.loads(body)


def test_the_router_lists_its_model_applications_paged(router):
    assert ask(router, "GET", "/models") == (
        200,
        {"models": [{"modelName": "desc", "modelUrl": "desc.mar"}, {"modelName": "klass", "modelUrl": "klass.mar"}]},
    )
    assert ask(router, "GET", "/models", {"limit": "1"})[1]["nextPageToken"] == "1"
    assert ask(router, "GET", "/models", {"limit": "x"}) == ask(router, "GET", "/models")  # TorchServe's default


def test_the_router_describes_a_model_in_torchserves_fields_with_its_replicas_as_workers(router):
    status, (entry,) = ask(router, "GET", "/models/klass")
    assert status == 200 and list(entry)[:10] == [
        "modelName",
        "modelVersion",
        "modelUrl",
        "runtime",
        "minWorkers",
        "maxWorkers",
        "batchSize",
        "maxBatchDelay",
        "responseTimeout",
        "startupTimeout",
    ]
    assert [w["status"] for w in entry["workers"]] == ["READY", "READY", "STARTING"]
    assert (entry["minWorkers"], entry["maxWorkers"], entry["batchSize"], entry["maxBatchDelay"]) == (2, 3, 4, 50)
    assert entry["responseTimeout"] == 120 and "customizedMetadata" not in entry  # TorchServe's default
    assert ask(router, "GET", "/models/klass/1.0", {"customized": "true"})[1][0]["customizedMetadata"] == {"k": 1}


def test_a_model_or_version_that_does_not_exist_gets_torchserves_404(router):
    assert ask(router, "GET", "/models/nope") == (
        404,
        {"code": 404, "type": "ModelNotFoundException", "message": "Model not found: nope"},
    )
    assert ask(router, "GET", "/models/klass/9.9") == (
        404,
        {
            "code": 404,
            "type": "ModelVersionNotFoundException",
            "message": "Model version: 9.9 does not exist for model: klass",
        },
    )


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/models"),
        ("PUT", "/models/klass"),
        ("PUT", "/models/klass/1.0"),
        ("PUT", "/models/klass/1.0/set-default"),
        ("DELETE", "/models/klass"),
        ("DELETE", "/models/klass/1.0"),
    ],
)
def test_every_write_call_is_refused_with_torchserves_405_and_a_hint_naming_the_rayservice(router, method, path):
    status, body = ask(router, method, path, {"min_worker": "3"})
    assert status == 405 and body["code"] == 405 and body["type"] == "MethodNotAllowedException"
    assert body["message"].startswith(management.NOT_ALLOWED) and f"{method} {path}" in body["message"]
    assert "\nHint: " in body["message"] and "serve_config.yaml" in body["message"]


def test_the_management_reads_ask_for_the_routers_inference_key(router, tmp_path):
    from starlette.requests import Request

    from msnb.templates.msnb_runtime.ray.ingress import IngressConfig

    (tmp_path / "key").write_text("s3cret")
    router.ingress_config = IngressConfig({"key_file": str(tmp_path / "key")})

    def get(path: str, key: str) -> tuple[int, dict]:
        headers = [(b"authorization", f"Bearer {key}".encode())]
        scope = {"type": "http", "method": "GET", "path": path, "headers": headers, "query_string": b""}
        resp = asyncio.run(router(Request(scope)))
        return resp.status_code, json.loads(resp.body)

    assert get("/models", "wrong")[1]["type"] == "InvalidKeyException"  # TorchServe 0.12's 400
    assert get("/models/klass", "wrong")[0] == 400
    assert get("/models", "s3cret")[1]["models"][0]["modelName"] == "desc"


def knock(router, host: str, origin: str | None = None) -> tuple[int, bytes]:
    """``GET /ping`` sent to an exported router's HTTP entry with these ``Host`` and ``Origin`` headers."""
    from starlette.requests import Request

    headers = [(b"host", host.encode())] + ([(b"origin", origin.encode())] if origin else [])
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/ping",
        "raw_path": b"/ping",
        "query_string": b"",
        "headers": headers,
    }
    answer = asyncio.run(router(Request(scope)))
    return answer.status_code, answer.body


@pytest.mark.parametrize("bound", ["127.0.0.1", "0.0.0.0"])
def test_an_exported_router_refuses_a_foreign_host_or_origin_and_answers_loopback_and_its_allowed_hosts(router, bound):
    from msnb.templates.msnb_runtime.ray.ingress import IngressConfig

    router.ingress_config = IngressConfig({"auth": False, "host": bound, "allowed_hosts": ["models.example.com"]})
    for host, origin in (("evil.example.com", None), ("127.0.0.1:8000", "http://evil.example.com")):
        status, body = knock(router, host, origin)
        assert status == 403 and b"Hint:" in body and json.loads(body)["type"] == "ForbiddenException", body
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "models.example.com:8000"):
        assert knock(router, host, "http://localhost:3000")[0] == 200, host
