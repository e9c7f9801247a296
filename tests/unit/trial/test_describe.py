"""`%ms_test NAME --describe` (runner.describe): the describe job TorchServe sends for
`GET /models/NAME?customized=true`, answered in the test process, shown as TorchServe shows `customizedMetadata`."""

from __future__ import annotations

from helpers import MLP_SOURCE

from msnb.capture.cells import capture
from msnb.spec import spec_from_source
from msnb.trial import runner

TEXT = """
def handle(data, context):
    if data is None:
        return None
    if context.get_request_header(0, "describe") == "True":
        return ["a plain sentence"]
    return [row["body"] for row in data]
"""


def test_a_roles_handler_describes_its_model_and_device_as_the_shared_handler_serves_it():
    assert runner.describe(spec_from_source("mlp", MLP_SOURCE)) == {"model": "MLP", "device": "cpu"}


def test_a_describe_answer_that_is_not_json_is_shown_as_its_text_and_the_job_carries_no_body():
    spec = capture("text", TEXT, [])
    assert runner.describe(spec) == "a plain sentence"
    assert runner.predict_in_process(spec, [{"x": 1}]) == [{"x": 1}], "a prediction is not a describe job"
