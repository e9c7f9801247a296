"""The shared handler behind TorchServe's own KServe envelopes (v1 `kserve`, v2 `kservev2`), driven in-process.

TorchServe answers 200 only when the envelope returns one item for its one request; KServe's wrapper turns
anything else into a 500 with a Python repr. So every request here must come back as a 200 whose body says
what went wrong.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from test_shared_handler import TEMPLATES, loaded
from ts.context import RequestProcessor
from ts.torch_handler.request_envelope.kserve import KServeEnvelope
from ts.torch_handler.request_envelope.kservev2 import KServev2Envelope, _to_datatype

sys.path.insert(0, str(TEMPLATES))  # as in a model dir: the runtime package sits beside handler_model.py

from msnb_runtime.handler import envelope as msnb_envelope


def quickstart_preprocess(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)


def post_floats(output):
    return [float(v) for v in output]


def post_label(output):
    return int(output.argmax())


def post_dict(output):
    return {"label": int(output.argmax())}


def through(envelope_class, handle, context, body) -> tuple[dict, int]:
    """One HTTP request through the envelope as ts/service.py runs it: (the response body, its status)."""
    context.request_processor = [RequestProcessor({})]
    context.request_ids = {0: "req-0"}
    context.metrics.request_ids = context.request_ids
    answers = envelope_class(handle).handle([{"body": body}], context)
    assert isinstance(answers, list) and len(answers) == 1, answers  # else 503 "number of batch response mismatched"
    json.dumps(answers[0], default=list)
    return answers[0], context.get_response_status(0)[0]


@pytest.fixture
def v1(monkeypatch, tmp_path):
    monkeypatch.setenv("TS_SERVICE_ENVELOPE", "kserve")
    handle, ctx, model = loaded(tmp_path, preprocess_function=quickstart_preprocess, postprocess_function=post_dict)
    return lambda body: through(KServeEnvelope, handle, ctx, body)


def v2_handler(monkeypatch, tmp_path, **roles):
    monkeypatch.setenv("TS_SERVICE_ENVELOPE", "kservev2")
    handle, ctx, model = loaded(tmp_path, **roles)
    return lambda body: through(KServev2Envelope, handle, ctx, body)


def tensor(name, data, datatype="FP32", shape=None):
    return {"name": name, "shape": shape or [len(data)], "datatype": datatype, "data": data}


# ---------------------------------------------------------------- v1
def test_v1_a_single_bad_instance_is_an_error_object_in_a_200(v1):
    body, status = v1({"instances": [{"y": 1}]})
    assert status == 200
    (error,) = body["predictions"]
    assert error["error"].startswith("preprocess failed: KeyError") and error["stage"] == "preprocess"
    assert error["hint"]


def test_v1_a_bad_instance_beside_good_ones_keeps_theirs(v1):
    body, status = v1({"instances": [{"x": [1, 2, 3, 4]}, {"x": "nope"}]})
    assert status == 200
    good, bad = body["predictions"]
    assert set(good) == {"label"} and bad["stage"] == "preprocess"


@pytest.mark.parametrize(
    "request_body, says",
    [
        ({"instances": []}, '"instances" is empty'),
        ({"inputs": [1]}, 'no "instances"'),
        ({"instances": None}, 'no "instances"'),
        ({"instances": {"x": [1, 2, 3, 4]}}, '"instances" must be a list of samples, got a dict'),
        ({"instances": "abc"}, "got a str"),
    ],
)
def test_v1_empty_or_malformed_requests_get_a_200_that_says_what_is_wrong(v1, request_body, says):
    body, status = v1(request_body)
    assert status == 200
    (error,) = body["predictions"]
    assert says in error["error"] and error["stage"] == "request"
    assert '{"instances": [sample, ...]}' in error["hint"]


def test_without_an_envelope_a_single_bad_request_keeps_its_own_400(monkeypatch, tmp_path):
    monkeypatch.delenv("TS_SERVICE_ENVELOPE", raising=False)
    handle, ctx, _ = loaded(tmp_path, preprocess_function=quickstart_preprocess)
    ctx.request_processor = [RequestProcessor({})]
    (answer,) = handle([{"body": {"y": 1}}], ctx)
    assert ctx.get_response_status(0)[0] == 400 and answer["stage"] == "preprocess"


# ---------------------------------------------------------------- v2
def test_v2_fp32_inputs_come_back_as_fp32_outputs_for_tensors_and_float_lists(monkeypatch, tmp_path):
    for post in (None, post_floats):
        send = v2_handler(monkeypatch, tmp_path, preprocess_function=torch.tensor, postprocess_function=post)
        body, status = send({"inputs": [tensor("a", [1.0, 2.0, 3.0, 4.0]), tensor("b", [0.5, -1, 0, 2])]})
        assert status == 200
        assert [(o["name"], o["datatype"], list(o["shape"])) for o in body["outputs"]] == [
            ("a", "FP32", [2]),
            ("b", "FP32", [2]),
        ]


@pytest.mark.parametrize(
    "post, datatype",
    [(post_label, "INT64"), (post_dict, "BYTES"), (lambda out: "text", "BYTES"), (lambda out: True, "BOOL")],
)
def test_v2_non_float_answers_take_their_own_datatype(monkeypatch, tmp_path, post, datatype):
    send = v2_handler(monkeypatch, tmp_path, preprocess_function=torch.tensor, postprocess_function=post)
    body, status = send({"inputs": [tensor("a", [1.0, 2.0, 3.0, 4.0])]})
    assert status == 200 and body["outputs"][0]["datatype"] == datatype
    if post is post_dict:
        assert json.loads(body["outputs"][0]["data"][0]).keys() == {"label"}


def test_v2_a_failed_input_is_a_bytes_output_holding_the_error_as_json_text(monkeypatch, tmp_path):
    send = v2_handler(monkeypatch, tmp_path, preprocess_function=torch.tensor)
    body, status = send({"inputs": [tensor("good", [1.0, 2.0, 3.0, 4.0]), tensor("bad", [1.0, 2.0])]})
    assert status == 200
    good, bad = body["outputs"]
    assert (good["name"], good["datatype"]) == ("good", "FP32")
    assert (bad["name"], bad["datatype"], list(bad["shape"])) == ("bad", "BYTES", [1])
    error = json.loads(bad["data"][0])
    assert error["stage"] == "inference" and error["hint"]


def test_v2_an_empty_request_gets_a_200_with_an_error_output(monkeypatch, tmp_path):
    send = v2_handler(monkeypatch, tmp_path, preprocess_function=torch.tensor)
    body, status = send({"inputs": []})
    assert status == 200
    (out,) = body["outputs"]
    assert (out["name"], out["datatype"]) == ("error", "BYTES")
    assert '"inputs" is empty' in json.loads(out["data"][0])["error"]


def test_v2_a_bytes_input_holding_json_reaches_a_json_handler_decoded(monkeypatch, tmp_path):
    send = v2_handler(monkeypatch, tmp_path, preprocess_function=quickstart_preprocess, postprocess_function=post_dict)
    sample = json.dumps({"x": [1, 2, 3, 4]})
    body, status = send({"inputs": [tensor("input-0", [sample], "BYTES", [1])]})
    assert status == 200
    assert json.loads(body["outputs"][0]["data"][0]).keys() == {"label"}


# ---------------------------------------------------------------- the v2 datatype rules
@pytest.mark.parametrize(
    "answer, input_type, expected",
    [
        (torch.zeros(2, dtype=torch.float32), "INT64", "FP32"),  # a tensor keeps the model's dtype
        (torch.zeros(2, dtype=torch.bfloat16), "FP32", "FP32"),  # numpy has no bfloat16
        (np.zeros(2, dtype=np.float16), "FP32", "FP16"),
        ([0.25, 0.5], "FP64", "FP64"),
        ([0.25, 0.5], "FP16", "FP16"),
        ([1e6], "FP16", "FP64"),  # would overflow FP16
        ([1, 2], "INT8", "INT8"),
        ([300], "INT8", "INT64"),  # does not fit
        ([1, 2], "FP32", "INT64"),  # integers are not of a float input's kind
        ([[1.0, 2.0], [3.0]], "FP32", "BYTES"),  # ragged: JSON text
        (b"caf\xc3\xa9", "BYTES", "BYTES"),
    ],
)
def test_v2_output_datatypes(answer, input_type, expected):
    value = msnb_envelope.v2_output(answer, input_type)
    assert _to_datatype(np.array(value).flatten().dtype) == expected


def test_v2_bytes_that_are_not_text_are_a_serialise_error(monkeypatch, tmp_path):
    send = v2_handler(monkeypatch, tmp_path, preprocess_function=torch.tensor, postprocess_function=lambda o: b"\xff")
    body, _ = send({"inputs": [tensor("a", [1.0, 2.0, 3.0, 4.0])]})
    assert json.loads(body["outputs"][0]["data"][0])["stage"] == "serialise"


# ---------------------------------------------------------------- export's warning for v2
@pytest.mark.parametrize(
    "example, tensor", [([1, 2.5], True), ([[1, 2], [3, 4]], True), (3, True), (None, True), ({"x": [1]}, False)]
)
def test_export_knows_which_examples_can_be_sent_as_a_v2_tensor(example, tensor):
    from msnb.engines.kserve.layout import is_tensor

    assert is_tensor(example) is tensor
    assert is_tensor([[1], [2, 3]]) is False and is_tensor("text") is False


def test_the_v2_note_shows_a_request_that_works(monkeypatch, tmp_path):
    from msnb.engines.kserve.layout import v2_note

    note = v2_note({"x": [1, 2, 3, 4]})
    request = json.loads(note[note.index("{") : note.index("}]}") + 3])
    send = v2_handler(monkeypatch, tmp_path, preprocess_function=quickstart_preprocess, postprocess_function=post_dict)
    body, status = send(request)
    assert status == 200 and json.loads(body["outputs"][0]["data"][0]).keys() == {"label"}
