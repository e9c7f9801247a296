"""The Ray engine's inference address read as TorchServe's InferenceRequestHandler reads a path, its OpenAPI
description, its 503 for a model scaled to 0 workers, and a scale's replicas (tests/ray/ts_differential sends the
same calls to a plain TorchServe)."""

from __future__ import annotations

import json

import pytest

from msnb.templates.msnb_runtime.ray import ingress
from msnb.templates.msnb_runtime.ray.deployment import deployment_options, workers
from msnb.templates.msnb_runtime.ray.ingress import InferenceCall, inference_call
from msnb.templates.msnb_runtime.ray.management import NOT_FOUND, no_worker

CALLS = [
    ("/predictions/named", InferenceCall("named")),
    ("/predictions/named/", InferenceCall("named")),  # Java's split drops a trailing empty segment
    ("/predictions/named/1.0", InferenceCall("named", "1.0")),
    ("/predictions/named/1.0/extra/more", InferenceCall("named", "1.0", url_path="extra/more")),
    ("/explanations/named/2.0", InferenceCall("named", "2.0", explain=True)),
    ("/v1/models/named:predict", InferenceCall("named")),
    ("/v1/models/named:explain", InferenceCall("named", explain=True)),
    ("/v2/models/named/infer", InferenceCall("named")),
    ("/v2/models/named/explain", InferenceCall("named", explain=True)),
    ("/predictions", None),
    ("/v1/models/named", None),  # OpenAI's /v1 (and KServe's readiness is the management address's)
    ("/v1/chat/completions", None),
    ("/v2/models/named/ready", None),
    ("/nowhere", None),
]


@pytest.mark.parametrize("path,expected", CALLS, ids=[c[0] for c in CALLS])
def test_a_path_is_read_as_torchserve_reads_it(path, expected):
    assert inference_call(path) == expected


def test_the_segments_after_the_version_reach_the_handler_as_torchserves_url_path_header():
    assert inference_call("/predictions/named/1.0/a/b").headers({"x": "1"}) == {"x": "1", "url_path": "a/b"}
    assert inference_call("/predictions/named").headers({}) == {"url_path": ""}


def test_the_openapi_description_answers_options_on_the_root_and_api_description_by_any_method():
    for method, path in (("OPTIONS", "/"), ("GET", "/api-description"), ("POST", "/api-description")):
        answer = ingress.description(method, path)
        body = json.loads(answer.body)
        assert answer.status_code == 200 and sorted(body) == ["info", "openapi", "paths"]
        assert "/predictions/{model_name}" in body["paths"] and body["info"]["title"] == "TorchServe APIs"
    assert ingress.description("GET", "/").status_code == 405  # TorchServe's MethodNotAllowedException
    assert ingress.description("GET", "/nowhere") is None


def test_an_unknown_path_is_torchserves_404_naming_no_path():
    answer = ingress.not_found()
    assert answer.status_code == 404
    assert json.loads(answer.body) == {"code": 404, "type": "ResourceNotFoundException", "message": NOT_FOUND}


def test_a_model_without_workers_is_torchserves_503_in_its_words():
    status, kind, message = no_worker("klass")
    assert (status, kind) == (503, "ServiceUnavailableException")
    assert message.startswith('Model "klass" has no worker to serve inference request. Please use scale workers')
    assert no_worker("klass", "2.0")[2].startswith('Model "klass" Version 2.0" has no worker')  # its odd quote
    described = no_worker("klass", describe=True)[2]
    assert (
        described
        == 'Model "klass" has no worker to serve describe request. ' + "Please use scale workers API to add workers."
    )


def test_a_model_scaled_to_zero_workers_has_no_replica_and_a_range_keeps_the_running_ones():
    from msnb.templates.msnb_runtime.handler.serving import ServingConfig

    assert workers(ServingConfig.from_model_config({"minWorkers": 0, "maxWorkers": 0})) == (0, 0)
    assert workers(ServingConfig.from_model_config({})) == (1, 1)
    assert workers(ServingConfig.from_model_config({"minWorkers": 0, "maxWorkers": 3})) == (1, 3)
    zero = deployment_options({"minWorkers": 0, "maxWorkers": 0}, [])
    assert "num_replicas" not in zero and zero["autoscaling_config"]["initial_replicas"] == 0
    ranged = {"minWorkers": 1, "maxWorkers": 3}
    assert deployment_options(ranged, [], running=2)["autoscaling_config"]["initial_replicas"] == 2
    assert deployment_options(ranged, [], running=5)["autoscaling_config"]["initial_replicas"] == 3
    assert deployment_options(ranged, [], running=0)["autoscaling_config"]["initial_replicas"] == 1
    assert "initial_replicas" not in deployment_options(ranged, [])["autoscaling_config"]  # a first deploy: min


def test_a_json_register_call_without_a_delay_gets_torchserves_gson_default_and_waits_for_no_batch():
    from msnb.engines.ray.ts_params import JSON_BATCH_DELAY, NO_BATCH_DELAY, register_request
    from msnb.templates.msnb_runtime.ray.deployment import batch_settings

    body = json.dumps({"url": "klass.mar", "initial_workers": 0}).encode()
    assert register_request({}, body, "application/json", 1).max_batch_delay == JSON_BATCH_DELAY == -10000
    assert register_request({"url": "klass.mar"}, b"", "", 1).max_batch_delay == NO_BATCH_DELAY
    assert register_request({}, b'{"max_batch_delay": 5}', "application/json", 1).max_batch_delay == 5
    assert batch_settings({"batchSize": 4, "maxBatchDelay": JSON_BATCH_DELAY}) == (4, 0.0)
