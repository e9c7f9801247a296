"""The shared handler answers a request's own fault with 400 and a hint about the input; explain hints fit the
handler; traceback folding knows every shared module."""

from __future__ import annotations

import pytest
import torch
from test_shared_handler import loaded, predict, to_x
from torch import nn
from ts.context import RequestProcessor

from msnb.engines.tracebacks import is_library_frame
from msnb.templates import ARCHIVE_ROOMS, DEV_ENTRY, DEV_ROOMS, runtime_files


def test_a_wrong_shape_input_is_a_400_with_the_input_hint_and_the_rest_answer(tmp_path):
    handle, ctx, model = loaded(tmp_path, preprocess_function=to_x)  # Linear(4, 2)
    answers, codes = predict(handle, ctx, [{"x": [1, 2, 3, 4]}, {"x": [1, 2, 3]}])
    assert codes == [200, 400]
    assert answers[1]["stage"] == "inference" and "shape" in answers[1]["hint"]
    with torch.no_grad():
        assert answers[0] == pytest.approx(model.fc(torch.tensor([1.0, 2, 3, 4])).tolist())


def test_an_index_out_of_range_is_the_input_s_fault(tmp_path):
    handle, ctx, _ = loaded(tmp_path, nn.Embedding(5, 2), preprocess_function=lambda s: torch.tensor(s["ids"]))
    answers, codes = predict(handle, ctx, [{"ids": [1, 2]}, {"ids": [9]}])
    assert codes == [200, 400] and answers[1]["type"] == "IndexError"


def test_a_non_finite_input_is_a_400_a_non_finite_answer_from_finite_input_a_500(tmp_path):
    handle, ctx, _ = loaded(tmp_path, nn.Identity(), preprocess_function=to_x)
    answers, codes = predict(handle, ctx, [{"x": [float("nan"), 0, 0, 0]}, {"x": [1e39, 0, 0, 0]}, {"x": [1] * 4}])
    assert codes == [400, 400, 200] and "send finite numbers" in answers[0]["hint"]
    overflowing = loaded(tmp_path, nn.Identity(), preprocess_function=to_x, postprocess_function=lambda o: o * 1e39)
    answers, codes = predict(overflowing[0], overflowing[1], [{"x": [1, 0, 0, 0]}])
    assert codes == [500] and "strict JSON has no NaN" in answers[0]["hint"]


def test_nan_that_preprocess_makes_from_a_finite_request_is_the_handler_s_fault_not_the_client_s(tmp_path):
    def standardise(sample):  # a standard deviation of 0 in the notebook's statistics: 0 / 0
        return (torch.tensor(sample["x"], dtype=torch.float32) - 1.0) / torch.zeros(4)

    handle, ctx, _ = loaded(tmp_path, nn.Identity(), preprocess_function=standardise)
    answers, codes = predict(handle, ctx, [{"x": [1, 2, 3, 4]}])
    assert codes == [500] and "preprocess(sample) made NaN" in answers[0]["hint"]
    assert "send finite numbers" not in answers[0]["hint"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the call succeeds where there is a GPU")
def test_a_cuda_call_in_preprocess_on_a_cpu_worker_is_not_hinted_as_a_bad_body(tmp_path):
    def on_cuda(sample):
        return torch.tensor(sample["x"], dtype=torch.float32).cuda()  # no GPU here: torch raises

    handle, ctx, _ = loaded(tmp_path, nn.Identity(), preprocess_function=on_cuda)
    answers, codes = predict(handle, ctx, [{"x": [1, 2, 3, 4]}])
    assert codes == [500] and "CUDA" in answers[0]["hint"] and "request body" not in answers[0]["hint"]


def test_a_model_bug_stays_a_500(tmp_path):
    class Broken(nn.Module):
        def forward(self, x):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    handle, ctx, _ = loaded(tmp_path, Broken(), preprocess_function=to_x)
    assert predict(handle, ctx, [{"x": [1, 2, 3, 4]}])[1] == [500]


def test_the_default_explanation_s_failure_hint_names_integrated_gradients_not_an_explain_role(tmp_path):
    class NoGrad(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom in forward")

    handle, ctx, _ = loaded(tmp_path, NoGrad(), preprocess_function=to_x)
    ctx.request_processor = [RequestProcessor({"explain": "True"})]  # what /explanations sets
    ctx.request_ids = {0: "req-0"}
    ctx.metrics.request_ids = ctx.request_ids
    (answer,) = handle([{"body": {"x": [1.0, 2, 3, 4]}}], ctx)
    assert answer["stage"] == "explain" and ctx.get_response_status(0)[0] == 500
    assert "Integrated Gradients" in answer["hint"] and "explain(model, model_input) raised" not in answer["hint"]


def test_traceback_folding_knows_every_shared_module():
    names = [inside for _, inside in runtime_files(ARCHIVE_ROOMS + DEV_ROOMS)]
    assert len(names) >= 7
    assert all(is_library_frame(f"/tmp/models/abc/{name}") for name in [*names, DEV_ENTRY])
    assert not is_library_frame("/tmp/models/abc/handler_model.py")


def test_a_raw_bytes_request_from_a_file_that_does_not_exist_is_refused_before_sending_naming_it(tmp_path):
    from msnb.engines.raw_request import from_options
    from msnb.errors import OptionError

    with pytest.raises(OptionError) as err:
        from_options("@nope.txt", None, [], tmp_path)
    assert "nope.txt" in err.value.message and "nothing was sent" in err.value.message
    assert "curl -T" in err.value.hint
    with pytest.raises(OptionError, match="not NAME:VALUE"):
        from_options("x", None, ["no-colon"], tmp_path)


@pytest.mark.parametrize(
    "message",
    [
        "AssertionError: Torch not compiled with CUDA enabled",  # torch's CPU build
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU",  # CUDA build
    ],
)
def test_a_cuda_call_without_a_gpu_is_recognised_from_either_torch_build(message):
    from msnb.templates.msnb_runtime.handler.faults import no_cuda

    assert no_cuda(message) and not no_cuda("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
