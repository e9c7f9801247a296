"""The calls of the differential run (test_ts_differential.py), as data: every endpoint of TorchServe's management,
inference and metrics APIs with the parameters TorchServe 0.12 reads (valid, missing, empty, non-numeric, negative,
out of range, conflicting), in the order a team's scripts send them — start, reads, refusals, register with each
parameter, scale, versions, re-register, pagination, a handler that fails, a model still loading — each sent to a
plain TorchServe and to `msnb serve --engine ray --ts-config` over the same model store, in this order.

A row is a ``Call``; differential_known.py lists the differences not closed yet (each an expected failure, with why),
``deliberate`` one msnb keeps on purpose (docs/ray-management.md has its row): msnb's status ``ours`` is checked
instead, with its Hint when it refuses (TorchServe's answer is unsafe).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Call:
    """One request. ``query`` is sent as written (already URL-encoded); ``api`` the address it goes to (TorchServe's
    inference, management or metrics API); ``key`` which key it carries (``own``: its API's); ``read`` what is
    compared (differential_runner.READERS); ``before`` a state both servers are brought to first (``ready:NAME``: its workers all READY)."""

    id: str
    method: str
    path: str
    query: str = ""
    api: str = "management"
    body: object = None
    content_type: str = "application/json"
    key: str = "own"
    read: str = "answer"
    before: str = ""
    differs: str = ""
    deliberate: str = ""
    ours: int = 400


def inference(id: str, method: str, path: str, body: object = None, **more) -> Call:
    return Call(id, method, path, api="inference", body=body, **more)


# A difference msnb keeps: a cluster has no management address, so the router answers its reads on the inference one.
ROUTER_READS = "msnb's router answers the management reads on the inference address too (TorchServe: 404)"
NAMED = {"x": [1.0, 2.0, 3.0]}  # named.mar's request: a Linear(3, 2) answers two numbers
KLASS = {"x": [1.0, 2.0]}  # klass.mar's (and klass_v2.mar's): each value times its version's factor

AT_START = [
    Call("start-list", "GET", "/models"),
    Call("start-describe", "GET", "/models/named"),
    Call("start-describe-version", "GET", "/models/named/1.0"),
    Call("start-describe-all", "GET", "/models/named/all"),
    Call("start-describe-customized", "GET", "/models/named", "customized=true"),
    Call("start-describe-customized-upper", "GET", "/models/named", "customized=TRUE"),
    Call("start-describe-customized-yes", "GET", "/models/named", "customized=yes"),
    Call("start-describe-all-customized", "GET", "/models/named/all", "customized=true"),
    Call("describe-missing-version", "GET", "/models/named/9.9"),
    Call("describe-missing-model", "GET", "/models/nope"),
    Call("describe-set-default-path-by-get", "GET", "/models/named/1.0/set-default"),
    Call("describe-too-deep", "GET", "/models/named/1.0/x/y"),
    Call("openapi-of-a-model", "OPTIONS", "/models/named", read="keys"),
    Call("kserve-v1-ready", "GET", "/v1/models/named"),
    Call("kserve-v1-ready-missing", "GET", "/v1/models/nope"),
    Call("management-api-description", "GET", "/api-description", read="keys"),
    Call("management-options-root", "OPTIONS", "/", read="keys"),
    Call("management-root", "GET", "/", read="status"),
    Call("management-unknown-path", "GET", "/nowhere"),
    Call("management-ping", "GET", "/ping"),
    Call("patch-a-model", "PATCH", "/models/named"),
    Call("post-a-model-path", "POST", "/models/named"),
    Call("delete-the-list", "DELETE", "/models"),
    Call("put-the-list", "PUT", "/models"),
    Call("workflows-list", "GET", "/workflows"),
]

INFERENCE = [
    inference("ping", "GET", "/ping"),
    inference("ping-by-post", "POST", "/ping"),
    inference("predict", "POST", "/predictions/named", NAMED),
    inference("predict-version", "POST", "/predictions/named/1.0", NAMED),
    inference("predict-missing-version", "POST", "/predictions/named/9.9", NAMED),
    inference("predict-missing-model", "POST", "/predictions/nope", NAMED),
    inference("predict-by-get", "GET", "/predictions/named"),
    inference("predict-by-put", "PUT", "/predictions/named", NAMED),
    inference("predict-no-name", "POST", "/predictions", NAMED),
    inference("predict-too-deep", "POST", "/predictions/named/1.0/extra", NAMED),
    inference("predict-bad-json", "POST", "/predictions/named", "{bad", read="status"),
    inference("predict-empty-body", "POST", "/predictions/named", "", read="status"),
    inference("predict-text-body", "POST", "/predictions/named", "x", content_type="text/plain", read="status"),
    inference("explain", "POST", "/explanations/named", NAMED),
    inference("explain-missing-model", "POST", "/explanations/nope", NAMED),
    inference("inference-list", "GET", "/models", deliberate=ROUTER_READS, ours=200),
    inference("inference-describe", "GET", "/models/named", deliberate=ROUTER_READS, ours=200),
    inference("inference-api-description", "GET", "/api-description", read="keys"),
    inference("inference-options-root", "OPTIONS", "/", read="keys"),
    inference("inference-unknown-path", "GET", "/nowhere"),
    inference("inference-metrics-path", "GET", "/metrics", read="status"),
    inference("kserve-v1-predict", "POST", "/v1/models/named:predict", {"instances": [NAMED]}, read="status"),
    inference("kserve-v1-predict-missing", "POST", "/v1/models/nope:predict", {"instances": [NAMED]}),
    inference("kserve-v1-explain", "POST", "/v1/models/named:explain", {"instances": [NAMED]}, read="status"),
    inference("kserve-v2-infer", "POST", "/v2/models/named/infer", {"inputs": []}, read="status"),
    inference("kserve-v2-infer-missing", "POST", "/v2/models/nope/infer", {"inputs": []}),
]

METRICS = [
    Call("metrics", "GET", "/metrics", api="metrics", read="families", before="counted:named"),
    Call("metrics-by-name", "GET", "/metrics", "name[]=ts_inference_requests_total", api="metrics", read="families"),
    Call("metrics-unknown-name", "GET", "/metrics", "name[]=nope", api="metrics", read="families"),
    Call("metrics-without-key", "GET", "/metrics", api="metrics", key="none", read="families"),
    Call("metrics-unknown-path", "GET", "/nowhere", api="metrics", read="status"),
    Call("metrics-by-post", "POST", "/metrics", api="metrics", read="status"),
]

KEYS = [
    Call("key-missing", "GET", "/models", key="none"),
    Call("key-wrong", "GET", "/models", key="wrong"),
    Call("key-of-inference-on-management", "GET", "/models", key="inference"),
    Call("key-bearer-empty", "GET", "/models", key="empty"),
    Call("key-without-bearer", "GET", "/models", key="raw"),
    inference("predict-key-missing", "POST", "/predictions/named", NAMED, key="none"),
    inference("predict-key-of-management", "POST", "/predictions/named", NAMED, key="management"),
    inference("ping-key-missing", "GET", "/ping", key="none"),
    inference("inference-describe-key-missing", "GET", "/models/named", key="none"),
]

REFUSED_REGISTERS = [
    Call("register-no-url", "POST", "/models"),
    Call("register-empty-url", "POST", "/models", "url="),
    Call("register-missing-archive", "POST", "/models", "url=missing.mar"),
    Call("register-corrupt-archive", "POST", "/models", "url=corrupt.mar", read="type"),
    Call("register-unfetchable-https", "POST", "/models", "url=https://127.0.0.1:9/x.mar"),
    Call("register-unfetchable-http", "POST", "/models", "url=http://localhost:1/x.mar"),
    Call("register-relative-url", "POST", "/models", "url=../klass.mar"),
    Call("register-encoded-relative-url", "POST", "/models", "url=%2e%2e/klass.mar"),
    Call("register-absolute-missing", "POST", "/models", "url=/nonexistent/missing.mar"),
    Call("register-absolute-elsewhere", "POST", "/models", "url=/nonexistent/klass.mar&initial_workers=0"),
    Call("register-absolute-elsewhere-unregister", "DELETE", "/models/klass"),
    Call("register-runtime-python4", "POST", "/models", "url=klass.mar&runtime=python4"),
    Call("register-runtime-empty", "POST", "/models", "url=klass.mar&runtime="),
    Call("register-runtime-refused-unregister", "DELETE", "/models/klass"),
    Call("register-started-model-again", "POST", "/models", "url=named.mar"),
    Call("register-started-model-again-by-name", "POST", "/models", "url=named.mar&model_name=named"),
]


def registered(id: str, name: str, query: str, **marks: str) -> list[Call]:
    """Register klass.mar as ``name`` with ``query`` (no worker unless it says), describe it once its workers run,
    unregister it."""
    workers = "" if "initial_workers" in query else "&initial_workers=0"
    return [
        Call(f"{id}-register", "POST", "/models", f"url=klass.mar&model_name={name}{workers}&{query}", **marks),
        Call(f"{id}-describe", "GET", f"/models/{name}", before=f"ready:{name}", **marks),
        Call(f"{id}-unregister", "DELETE", f"/models/{name}", **marks),
    ]


PARAMETERS = [
    *registered("no-workers", "k0", "synchronous=true"),
    *registered("batch-size-text", "kbs1", "batch_size=dd"),
    *registered("batch-size-negative", "kbs2", "batch_size=-3"),
    *registered("batch-size-zero", "kbs3", "batch_size=0"),
    *registered("batch-size-empty", "kbs4", "batch_size="),
    *registered("batch-size-decimal", "kbs5", "batch_size=2.5"),
    *registered("batch-size-overflow", "kbs6", "batch_size=99999999999"),
    *registered("batch-size-valid", "kbs7", "batch_size=8"),
    *registered("max-batch-delay-text", "kmd1", "max_batch_delay=j"),
    *registered("max-batch-delay-negative", "kmd2", "max_batch_delay=-5"),
    *registered("max-batch-delay-valid", "kmd3", "max_batch_delay=250"),
    *registered("response-timeout-text", "krt1", "response_timeout=x"),
    *registered("response-timeout-negative", "krt2", "response_timeout=-1"),
    *registered("response-timeout-zero", "krt3", "response_timeout=0"),
    *registered("response-timeout-valid", "krt4", "response_timeout=77"),
    *registered("initial-workers-negative", "kiw1", "initial_workers=-1"),
    *registered("initial-workers-empty", "kiw2", "initial_workers="),
    *registered("runtime-python", "kpy", "runtime=python"),
    *registered("s3-sse-kms", "ks3", "s3_sse_kms=true"),
    *registered("unknown-parameter", "kfoo", "foo=bar"),
    *registered("name-with-dot", "k.v1", "synchronous=true"),
    *registered("initial-workers-text", "kiw3", "initial_workers=x&synchronous=true"),
    *registered("register-not-synchronous", "kas", "initial_workers=1&synchronous=maybe"),
    Call(
        "register-json-body", "POST", "/models", body={"url": "klass.mar", "model_name": "kjson", "initial_workers": 0}
    ),
    Call("register-json-body-describe", "GET", "/models/kjson"),
    Call("register-json-body-unregister", "DELETE", "/models/kjson"),
    Call("register-name-empty", "POST", "/models", "url=klass.mar&model_name=&initial_workers=0"),
    Call("register-name-empty-describe", "GET", "/models/klass"),
    Call("register-name-empty-unregister", "DELETE", "/models/klass"),
]
