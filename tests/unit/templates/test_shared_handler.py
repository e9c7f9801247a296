"""The shared handler (templates/msnb_runtime/handler/handler.py) driven the way TorchServe drives it, with TorchServe's own Context."""

from __future__ import annotations

import ast
import io
import json
import logging
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from ts.context import Context, RequestProcessor
from ts.metrics.metric_cache_yaml_impl import MetricsCacheYamlImpl

from msnb.templates import shared_handler_files

TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
sys.path.insert(0, str(TEMPLATES))  # as in a model dir: the runtime package sits beside handler_model.py

from msnb_runtime.handler import collate as msnb_collate  # noqa: E402
from msnb_runtime.handler import handler as msnb_handler  # noqa: E402
from msnb_runtime.handler import load as msnb_load  # noqa: E402
from msnb_runtime.handler import metrics as msnb_metrics  # noqa: E402
from msnb_runtime.handler.load import HandlerLoadError  # noqa: E402

TS_METRICS_YAML = Path(sys.modules["ts"].__file__).parent / "configs" / "metrics.yaml"


# ---------------------------------------------------------------- helpers: a TorchServe-like drive
class Recorder(nn.Module):
    """Linear(4, 2) that records the shape of every input it is called with."""

    def __init__(self, fail_on_nan: bool = False):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.calls: list = []
        self.fail_on_nan = fail_on_nan

    def forward(self, x):
        self.calls.append(_shapes(x))
        if self.fail_on_nan and torch.isnan(x).any():
            raise ValueError("NaN in the input")
        return self.fc(x)


def _shapes(x):
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    if isinstance(x, dict):
        return {k: _shapes(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_shapes(v) for v in x)
    return x


def make_context(model_dir: Path, gpu=None, yaml_config=None, manifest=None) -> Context:
    metrics = MetricsCacheYamlImpl(config_file_path=str(TS_METRICS_YAML))
    metrics.initialize_cache()
    metrics.model_name = "m"
    return Context(
        "m",
        str(model_dir),
        manifest or {"model": {"modelName": "m"}},
        8,
        gpu,
        "0.12.0",
        metrics=metrics,
        model_yaml_config=yaml_config,
    )


def predict(handle, context: Context, bodies: list) -> tuple[list, list[int]]:
    """One application/json request per body."""
    return send(handle, context, [{"body": b} for b in bodies])


def send(handle, context: Context, requests: list[dict]) -> tuple[list, list[int]]:
    """What ts/service.py does per batch: request processors and ids, then handle(batch, context)."""
    context.request_processor = [RequestProcessor({}) for _ in requests]
    context.request_ids = {i: f"req-{i}" for i in range(len(requests))}
    context.metrics.request_ids = context.request_ids
    answers = handle(requests, context)
    codes = [context.get_response_status(i)[0] for i in range(len(requests))]
    json.dumps([a for a in answers if not isinstance(a, (bytes, bytearray, str))])  # what TorchServe will do
    return answers, codes


def loaded(tmp_path, model=None, **roles):
    model = model if model is not None else Recorder()
    handle = msnb_handler.handler_factory(lambda: model, **roles)
    context = make_context(tmp_path)
    assert handle(None, context) is None
    return handle, context, model


def to_x(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)


# ---------------------------------------------------------------- batching
def test_same_shape_tensors_run_as_one_forward_and_match_per_sample_results(tmp_path):
    handle, ctx, model = loaded(tmp_path, preprocess_function=to_x)
    xs = [[1, 2, 3, 4], [0, 0, 0, 1], [5, 6, 7, 8]]
    answers, codes = predict(handle, ctx, [{"x": x} for x in xs])
    assert model.calls == [(3, 4)]
    assert codes == [200, 200, 200]
    with torch.no_grad():
        expected = [model.fc(torch.tensor(x, dtype=torch.float32)) for x in xs]
    torch.testing.assert_close(torch.tensor(answers), torch.stack(expected))


class DictTupleModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls: list = []

    def forward(self, batch):
        self.calls.append(_shapes(batch))
        a, (b, c) = batch["a"], batch["pair"]
        return {"sum": a + b, "parts": (b.sum(1), c)}


def test_dict_and_tuple_samples_are_collated_element_wise_into_one_forward(tmp_path):
    def pre(s):
        return {"a": torch.tensor(s["a"]), "pair": (torch.tensor(s["b"]), torch.tensor(s["c"]))}

    def post(out):
        return {"sum": out["sum"], "bsum": out["parts"][0], "c": out["parts"][1]}

    handle, ctx, model = loaded(tmp_path, DictTupleModel(), preprocess_function=pre, postprocess_function=post)
    bodies = [{"a": [1, 2], "b": [3, 4], "c": 7}, {"a": [0, 1], "b": [1, 1], "c": 9}]
    answers, codes = predict(handle, ctx, bodies)
    assert model.calls == [{"a": (2, 2), "pair": ((2, 2), (2,))}]
    assert answers == [{"sum": [4, 6], "bsum": 7, "c": 7}, {"sum": [1, 2], "bsum": 2, "c": 9}]
    assert codes == [200, 200]


def test_ragged_samples_fall_back_to_one_forward_each_with_a_batch_dim_of_one(tmp_path):
    class Summer(nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = []

        def forward(self, x):
            self.calls.append(tuple(x.shape))
            return x.sum(dim=1, keepdim=True)

    handle, ctx, model = loaded(tmp_path, Summer(), preprocess_function=to_x)
    answers, codes = predict(handle, ctx, [{"x": [1, 2, 3]}, {"x": [1, 1, 1, 1, 1]}])
    assert model.calls == [(1, 3), (1, 5)]
    assert answers == [[6.0], [5.0]] and codes == [200, 200]


def test_samples_without_tensors_reach_the_model_as_one_python_list(tmp_path):
    class Lengths(nn.Module):
        def __init__(self):
            super().__init__()
            self.seen = []

        def forward(self, texts):
            self.seen.append(texts)
            return [len(t) for t in texts]

    handle, ctx, model = loaded(tmp_path, Lengths())
    answers, codes = predict(handle, ctx, ["ab", "abcd", ""])
    assert model.seen == [["ab", "abcd", ""]]
    assert answers == [2, 4, 0]
    assert codes == [200, 200, 200]


def test_bytes_and_str_answers_pass_through_and_numpy_becomes_json(tmp_path):
    outputs = iter([b"\x00raw", "plain text", np.arange(3, dtype=np.int64), np.float32(0.5)])
    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x, postprocess_function=lambda out: next(outputs))
    answers, codes = predict(handle, ctx, [{"x": [0, 0, 0, 0]}] * 4)
    assert answers == [b"\x00raw", "plain text", [0, 1, 2], 0.5]
    assert type(answers[3]) is float and codes == [200] * 4


def test_request_bodies_are_read_from_data_body_or_the_multipart_fields(tmp_path):
    seen = []
    handle, ctx, _ = loaded(tmp_path, nn.Identity(), preprocess_function=lambda s: seen.append(s) or torch.zeros(1))
    send(handle, ctx, [{"data": {"k": 1}}, {"body": bytearray(b"\xff")}, {"file": bytearray(b"x"), "name": "n"}])
    assert seen == [{"k": 1}, bytearray(b"\xff"), {"file": bytearray(b"x"), "name": "n"}]


@pytest.mark.parametrize(
    "headers",
    [{"body": {"content-type": "application/json"}}, {"content-type": "application/json; charset=utf-8"}],
    ids=["torchserve-part-header", "ray-request-header"],
)
def test_a_body_sent_as_json_that_does_not_parse_is_a_400_with_the_parsers_message(tmp_path, headers):
    seen = []
    handle, ctx, _ = loaded(tmp_path, nn.Identity(), preprocess_function=lambda s: seen.append(s) or torch.zeros(1))
    ctx.request_processor = [RequestProcessor(headers), RequestProcessor({})]
    ctx.request_ids = {0: "bad", 1: "raw"}
    ctx.metrics.request_ids = ctx.request_ids
    answers = handle([{"body": bytearray(b'{"x": [1, 2')}, {"body": bytearray(b"{raw")}], ctx)
    assert ctx.get_response_status(0)[0] == 400 and ctx.get_response_status(1)[0] == 200
    assert answers[0]["error"].startswith("the request body is not JSON: Expecting ")
    assert "line 1 column" in answers[0]["error"] and "Content-Type" in answers[0]["hint"]
    assert seen == [bytearray(b"{raw")]  # preprocess never saw the bad body; octet-stream bytes still pass


def test_a_json_body_nested_deeper_than_the_parser_goes_is_its_own_400_and_the_batch_is_answered(tmp_path):
    handle, ctx, _ = loaded(tmp_path, nn.Identity(), preprocess_function=lambda s: torch.zeros(1))
    part = {"body": {"content-type": "application/json"}}
    ctx.request_processor = [RequestProcessor(part), RequestProcessor(part)]
    ctx.request_ids = {0: "deep", 1: "fine"}
    ctx.metrics.request_ids = ctx.request_ids
    answers = handle([{"body": bytearray(b"[" * 100_000 + b"]" * 100_000)}, {"body": bytearray(b"[1]")}], ctx)
    assert ctx.get_response_status(0)[0] == 400 and ctx.get_response_status(1)[0] == 200
    assert answers[0]["error"] == "the request body is not JSON: nested too deeply to decode"


# ---------------------------------------------------------------- per-sample isolation
def test_bad_input_gets_its_own_400_and_the_rest_of_the_batch_succeeds(tmp_path, caplog):
    handle, ctx, model = loaded(tmp_path, preprocess_function=to_x)
    with caplog.at_level(logging.ERROR, logger="msnb_runtime.handler.handler"):
        answers, codes = predict(handle, ctx, [{"x": [1, 2, 3, 4]}, {"pixels": []}, {"x": [0, 0, 0, 0]}])
    assert codes == [200, 400, 200]
    assert model.calls == [(2, 4)]
    error = answers[1]
    assert error["stage"] == "preprocess" and error["type"] == "KeyError" and "'x'" in error["error"]
    assert error["hint"]
    assert all(isinstance(a, list) and len(a) == 2 for a in (answers[0], answers[2]))
    assert any(r.exc_info and "request 1 failed in preprocess" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", [0, 1])
def test_behind_a_request_envelope_a_bad_instance_stays_an_error_object_in_the_one_response(tmp_path, bad):
    """KServe's envelopes hand the handler the instances of ONE request: no per-request status to set."""
    handle, ctx, model = loaded(tmp_path, preprocess_function=to_x)
    instances = [{"x": [1, 2, 3, 4]}, {"x": [0, 0, 0, 0]}, {"x": [4, 3, 2, 1]}]
    instances[bad] = {"pixels": []}
    ctx.request_processor = [RequestProcessor({})]  # one request ...
    ctx.request_ids = {0: "req-0"}
    ctx.metrics.request_ids = ctx.request_ids
    answers = handle([{"data": i} for i in instances], ctx)  # ... three instances (what the envelope passes on)
    assert len(answers) == 3 and answers[bad]["stage"] == "preprocess"
    assert all(isinstance(a, list) for i, a in enumerate(answers) if i != bad)
    assert ctx.get_response_status(0)[0] == 200


def test_unserialisable_postprocess_output_is_a_500_with_a_hint(tmp_path):
    post = iter([{"ok": 1}, {"obj": object()}, {"ok": 3}])
    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x, postprocess_function=lambda out: next(post))
    answers, codes = predict(handle, ctx, [{"x": [0] * 4}] * 3)
    assert codes == [200, 500, 200]
    assert answers[0] == {"ok": 1} and answers[2] == {"ok": 3}
    assert answers[1]["stage"] == "serialise" and "JSON-serialisable" in answers[1]["hint"]


def test_postprocess_raising_is_a_500_for_that_request_only(tmp_path):
    def post(out):
        if out[0] > 1e6:
            raise RuntimeError("too large")
        return "fine"

    handle, ctx, model = loaded(tmp_path, nn.Identity(), preprocess_function=to_x, postprocess_function=post)
    answers, codes = predict(handle, ctx, [{"x": [1e7, 0, 0, 0]}, {"x": [1, 0, 0, 0]}])
    assert codes == [500, 200] and answers[1] == "fine"
    assert answers[0]["stage"] == "postprocess" and "too large" in answers[0]["error"]


def test_a_failing_batched_forward_is_retried_one_sample_at_a_time(tmp_path):
    handle, ctx, model = loaded(tmp_path, Recorder(fail_on_nan=True), preprocess_function=to_x)
    answers, codes = predict(handle, ctx, [{"x": [1, 2, 3, 4]}, {"x": [float("nan")] * 4}, {"x": [0] * 4}])
    assert model.calls == [(3, 4), (1, 4), (1, 4), (1, 4)]
    assert codes == [200, 500, 200]
    assert answers[1]["stage"] == "inference" and "NaN" in answers[1]["error"]
    assert len(answers[0]) == 2 and len(answers[2]) == 2


@pytest.mark.parametrize("pattern", ["", "b", "g", "gb", "bgbbg", "bbbb"])
def test_the_answer_list_always_has_one_item_per_request(tmp_path, pattern):
    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x)
    bodies = [{"x": [1, 2, 3, 4]} if c == "g" else {"x": "oops"} for c in pattern]
    answers, codes = predict(handle, ctx, bodies)
    assert len(answers) == len(pattern)
    assert codes == [200 if c == "g" else 400 for c in pattern]


# ---------------------------------------------------------------- metrics
def test_stage_timings_and_batch_size_are_recorded_as_torchserve_metrics(tmp_path, caplog):
    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x)
    with caplog.at_level(logging.INFO):
        predict(handle, ctx, [{"x": [0] * 4}] * 3)
    keys = ctx.metrics.cache_keys()
    for name in ("MsnbPreprocessTime", "MsnbInferenceTime", "MsnbPostprocessTime", "MsnbBatchSize"):
        assert f"gauge:{name}" in keys
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[METRICS]Msnb")]
    assert any(line.startswith("[METRICS]MsnbBatchSize.Count:3|") for line in lines)
    assert any(line.startswith("[METRICS]MsnbInferenceTime.Milliseconds:") for line in lines)


def test_under_load_metrics_are_the_means_of_a_window_reported_once_per_interval(tmp_path, caplog):
    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x)
    now = [100.0]
    handle.metrics = msnb_metrics.MetricsWindow(interval_s=1.0, clock=lambda: now[0])

    def batch_size_lines(sizes):
        caplog.clear()
        for size in sizes:
            predict(handle, ctx, [{"x": [0] * 4}] * size)
            now[0] += 0.1
        return [
            r.getMessage().split("|")[0] for r in caplog.records if r.getMessage().startswith("[METRICS]MsnbBatchSize")
        ]

    with caplog.at_level(logging.INFO):
        assert batch_size_lines([3]) == ["[METRICS]MsnbBatchSize.Count:3"]  # the first batch reports at once
        assert batch_size_lines([1, 2, 4]) == []  # within the interval: summed, not logged
        now[0] += 1.0
        assert batch_size_lines([5]) == ["[METRICS]MsnbBatchSize.Count:3"]  # mean of 1, 2, 4, 5
        inference = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[METRICS]MsnbInference")]
        assert len(inference) == 1


def test_every_batch_formed_is_counted_by_its_size_when_the_model_batches(tmp_path, caplog):
    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x)  # (the context's batch size is 8)
    handle.metrics = msnb_metrics.MetricsWindow(interval_s=60.0)  # a window holds no batch count back
    with caplog.at_level(logging.INFO):
        for size in (3, 1, 3):
            predict(handle, ctx, [{"x": [0] * 4}] * size)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[METRICS]MsnbBatches")]
    assert [line.split("|")[0] for line in lines] == ["[METRICS]MsnbBatches.Count:1"] * 3
    assert ["BatchSize:3" in lines[0], "BatchSize:1" in lines[1], "ModelName:m" in lines[2]] == [True] * 3
    ctx.system_properties["batch_size"] = 1  # a model that does not batch: every batch is one request, not counted
    caplog.clear()
    with caplog.at_level(logging.INFO):
        predict(handle, ctx, [{"x": [0] * 4}])
    assert not [r for r in caplog.records if r.getMessage().startswith("[METRICS]MsnbBatches")]


def test_broken_metrics_never_fail_a_request(tmp_path):
    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("metrics backend down")

    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x)
    ctx.request_processor = [RequestProcessor({})]
    ctx.metrics = Broken()
    answers = handle([{"body": {"x": [0] * 4}}], ctx)
    assert len(answers) == 1 and len(answers[0]) == 2


# ---------------------------------------------------------------- loading
def test_a_matching_checkpoint_is_loaded_from_the_model_dir(tmp_path):
    trained = Recorder()
    torch.save(trained.state_dict(), tmp_path / "w.pth")
    handle = msnb_handler.handler_factory(Recorder)
    handle(None, make_context(tmp_path, manifest={"model": {"serializedFile": "w.pth"}}))
    assert torch.equal(handle.model.fc.weight, trained.fc.weight)
    assert not handle.model.training and handle.device == torch.device("cpu")


def test_a_mismatched_checkpoint_names_the_missing_and_unexpected_keys(tmp_path):
    state = Recorder().state_dict()
    state["head.weight"] = state.pop("fc.weight")
    torch.save(state, tmp_path / "w.pth")
    handle = msnb_handler.handler_factory(Recorder)
    with pytest.raises(HandlerLoadError) as info:
        handle(None, make_context(tmp_path, manifest={"model": {"serializedFile": "w.pth"}}))
    text = str(info.value)
    assert "missing keys [fc.weight]" in text and "unexpected keys [head.weight]" in text and "Hint:" in text


@pytest.mark.parametrize(
    "payload, words", [([1, 2, 3], "holds a list, not a state_dict"), (nn.Linear(4, 2), "weights_only=True")]
)
def test_a_checkpoint_that_is_not_a_state_dict_is_refused(tmp_path, payload, words):
    torch.save(payload, tmp_path / "w.pth")
    handle = msnb_handler.handler_factory(Recorder)
    with pytest.raises(HandlerLoadError, match=words):
        handle(None, make_context(tmp_path, manifest={"model": {"serializedFile": "w.pth"}}))
    assert handle.model is None


def test_init_function_must_return_a_module_and_its_errors_are_named(tmp_path):
    with pytest.raises(HandlerLoadError, match="init_function returned a dict, not a torch.nn.Module"):
        msnb_handler.handler_factory(lambda: {"not": "a model"})(None, make_context(tmp_path))

    def init_function(hidden=1):
        raise ValueError(f"hidden={hidden} too small")

    with pytest.raises(HandlerLoadError, match=r"init_function\(\*\*\{'hidden': 0\}\) raised ValueError: hidden=0"):
        msnb_handler.handler_factory(init_function, hidden=0)(None, make_context(tmp_path))


@pytest.mark.parametrize("yaml_config", [None, {}])
def test_an_empty_or_missing_model_config_loads_on_cpu(tmp_path, yaml_config):
    handle = msnb_handler.handler_factory(Recorder)
    handle(None, make_context(tmp_path, yaml_config=yaml_config, manifest={}))
    assert handle.device == torch.device("cpu") and handle.memory_fraction is None


def test_setup_roles_run_once_in_order_before_the_model_is_built(tmp_path):
    events = []
    handle = msnb_handler.handler_factory(
        lambda: events.append("init") or Recorder(),
        preprocess_function=to_x,
        install_packages=lambda: events.append("install"),
        unpack_dependencies=lambda: events.append("unpack"),
    )
    ctx = make_context(tmp_path)
    handle(None, ctx)
    handle(None, ctx)
    assert predict(handle, ctx, [{"x": [0] * 4}])[1] == [200]
    assert events == ["unpack", "install", "init"]


# ---------------------------------------------------------------- device choice (GPU facts injected)
@pytest.mark.parametrize(
    "gpu_id, device_type, cuda, expected",
    [
        (1, None, True, "cuda:1"),
        ("0", "gpu", True, "cuda:0"),
        (1, "cpu", True, "cpu"),
        (1, None, False, "cpu"),
        (None, "gpu", True, "cpu"),
        (None, None, False, "cpu"),
    ],
)
def test_choose_device(gpu_id, device_type, cuda, expected):
    assert msnb_load.choose_device(gpu_id, device_type, cuda) == torch.device(expected)


def test_a_gpu_worker_caps_its_memory_at_max_gpu_memory(tmp_path):
    applied = []
    handle = msnb_handler.handler_factory(Recorder)
    handle.device_facts = msnb_load.DeviceFacts(
        cuda_available=lambda: True,
        total_memory_mb=lambda d: 16000.0,
        set_memory_fraction=lambda f, d: applied.append((f, d)),
    )
    ctx = make_context(tmp_path, gpu=1, yaml_config={"system": {"maxGPUMemory": 4000}})
    assert handle.pick_device(ctx) == torch.device("cuda:1")
    assert applied == [(0.25, torch.device("cuda:1"))] and handle.memory_fraction == 0.25
    cpu_ctx = make_context(tmp_path, gpu=1, yaml_config={"deviceType": "cpu", "system": {"maxGPUMemory": 4000}})
    assert handle.pick_device(cpu_ctx) == torch.device("cpu") and len(applied) == 1
    assert msnb_load.gpu_memory_fraction(64000, 16000) == 1.0


# ---------------------------------------------------------------- extra files
def _tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def _zip(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name), data)


def test_extra_archives_are_unpacked_into_the_model_dir_keeping_folders(tmp_path):
    _tar(tmp_path / "deps.tgz", {"pkg/__init__.py": b"", "pkg/sub/mod.py": b"VALUE = 3\n"})
    _zip(tmp_path / "data.zip", {"assets/labels.txt": b"cat\ndog\n"})
    handle = msnb_handler.handler_factory(Recorder)
    handle(None, make_context(tmp_path, yaml_config={"system": {"extraFiles": ["deps.tgz", "data.zip"]}}))
    assert (tmp_path / "pkg" / "sub" / "mod.py").read_text() == "VALUE = 3\n"
    assert (tmp_path / "assets" / "labels.txt").read_bytes() == b"cat\ndog\n"


@pytest.mark.parametrize("maker, archive", [(_tar, "evil.tar.gz"), (_zip, "evil.zip")])
@pytest.mark.parametrize("bad_name", ["../evil.txt", "ok/../../evil.txt", "ABSOLUTE"])
def test_archive_members_escaping_the_model_dir_are_refused_and_nothing_is_written(tmp_path, maker, archive, bad_name):
    model_dir, outside = tmp_path / "model", tmp_path / "evil.txt"
    model_dir.mkdir()
    name = str(outside) if bad_name == "ABSOLUTE" else bad_name
    maker(model_dir / archive, {"fine.txt": b"ok", name: b"pwned"})
    handle = msnb_handler.handler_factory(Recorder)
    with pytest.raises(HandlerLoadError, match="unsafe member"):
        handle(None, make_context(model_dir, yaml_config={"system": {"extraFiles": [archive]}}))
    assert not outside.exists() and not (model_dir / "fine.txt").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(["model", archive, ".msnb-unpack.lock"])


def test_a_missing_extra_file_is_a_load_error_naming_it(tmp_path):
    handle = msnb_handler.handler_factory(Recorder)
    with pytest.raises(HandlerLoadError, match="'deps.tgz' is not in the model dir"):
        handle(None, make_context(tmp_path, yaml_config={"system": {"extraFiles": ["deps.tgz"]}}))


@pytest.mark.parametrize("where", ["torch/__init__.py", "venv/lib/python3.11/site-packages/torch/__init__.py"])
def test_a_torch_installed_into_the_model_folder_is_refused_at_load(tmp_path, where):
    with pytest.raises(HandlerLoadError, match=r"from the model folder[\s\S]*Hint: serve on TorchServe 0.10 or later"):
        msnb_load.check_server_torch(tmp_path, str(tmp_path / where))
    msnb_load.check_server_torch(tmp_path, str(tmp_path / ".venv/lib/torch/__init__.py"))  # the server's own env
    msnb_load.check_server_torch(tmp_path)  # this process's torch lives elsewhere


# ---------------------------------------------------------------- pure helpers
def test_collate_rules():
    c = msnb_collate.collate
    assert c([np.zeros(3), np.ones(3)]).shape == (2, 3)
    assert c([{"t": torch.zeros(2), "id": "a"}, {"t": torch.ones(2), "id": "b"}])["id"] == ["a", "b"]
    assert c([[1, 2], [3]]) == [[1, 2], [3]]
    for ragged in (
        [torch.zeros(2), torch.zeros(3)],
        [torch.zeros(2), "x"],
        [{"a": torch.zeros(1)}, {"b": torch.zeros(1)}],
    ):
        with pytest.raises(msnb_collate.CollateError):
            c(ragged)


def test_split_rules():
    s = msnb_collate.split
    assert [t.tolist() for t in s(torch.arange(6).reshape(3, 2), 3)] == [[0, 1], [2, 3], [4, 5]]
    assert s([{"box": 1}, {"box": 2}], 2) == [{"box": 1}, {"box": 2}]
    assert [len(p) for p in s([torch.zeros(2, 5), torch.zeros(2)], 2)] == [2, 2]
    assert s(torch.tensor(7.0), 1) == [torch.tensor(7.0)]
    with pytest.raises(msnb_collate.SplitError):
        s(torch.zeros(3, 2), 2)


def test_json_safe_converts_tensors_and_numpy_recursively():
    value = {"t": torch.tensor([[1.5]]), "n": [np.int64(2), np.array([True])], "k": (torch.tensor(3),), "s": "x"}
    assert msnb_collate.json_safe(value) == {"t": [[1.5]], "n": [2, [True]], "k": [3], "s": "x"}
    assert json.dumps(msnb_collate.json_safe(value))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 6), shape=st.lists(st.integers(1, 3), max_size=3), as_dict=st.booleans())
def test_split_undoes_collate_for_any_batch_of_same_shape_samples(n, shape, as_dict):
    samples = [torch.randn(shape) for _ in range(n)]
    samples = [{"x": s, "pair": (s, s + 1)} for s in samples] if as_dict else samples
    back = msnb_collate.split(msnb_collate.collate(samples), n)
    assert len(back) == n
    for got, want in zip(back, samples):
        if as_dict:
            assert torch.equal(got["x"], want["x"]) and torch.equal(got["pair"][1], want["pair"][1])
        else:
            assert torch.equal(got, want)


def test_the_shipped_modules_import_only_torch_the_standard_library_and_each_other():
    allowed = set(sys.stdlib_module_names) | {"torch", "ts", "__future__"}  # each other: relative imports
    for path in shared_handler_files():
        # Captum (the optional extra) only where explanations are computed, imported when one is asked for
        allowed_here = allowed | ({"captum"} if path.name == "explain.py" else set())
        # transformers (the hf extra) only where saved Hugging Face objects are loaded, when one is
        allowed_here |= {"transformers"} if path.name == "hf.py" else set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            assert {n.split(".")[0] for n in names} <= allowed_here, (path.name, names)


# ---------------------------------------------------------------- a role's return said as the role's doing
def test_a_preprocess_returning_a_list_is_named_as_preprocess_with_the_type_and_no_fallback_is_counted(tmp_path):
    handle, ctx, _ = loaded(tmp_path, model=nn.Linear(4, 2), preprocess_function=lambda s: s["x"])
    answers, codes = predict(handle, ctx, [{"x": [1.0, 2.0, 3.0, 4.0]}] * 3)
    assert codes == [500] * 3 and all(a["stage"] == "preprocess" for a in answers)
    said = answers[0]["error"]
    assert said.startswith("preprocess returned a list of 4 floats, not a tensor, and the model cannot take it")
    assert "must be Tensor, not list" in said and "return a tensor from preprocess" in answers[0]["hint"]
    assert handle.fallbacks.count == 0  # no batch was lost: there was none to form


def test_a_preprocess_returning_tensors_still_fails_as_the_model_with_its_own_hint(tmp_path):
    handle, ctx, _ = loaded(tmp_path, model=nn.Linear(4, 2), preprocess_function=to_x)
    answers, codes = predict(handle, ctx, [{"x": [1, 2, 3]}])  # a shape the model cannot take: the request's fault
    assert codes == [400] and answers[0]["stage"] == "inference"


def test_a_postprocess_answer_json_cannot_carry_names_postprocess_the_type_and_where(tmp_path):
    def post(out):
        return {"label": 1, "tags": {"a", "b"}, "scores": out}  # the tensor converts; the set cannot

    handle, ctx, _ = loaded(tmp_path, preprocess_function=to_x, postprocess_function=post)
    answers, codes = predict(handle, ctx, [{"x": [0] * 4}])
    assert codes == [500] and answers[0]["stage"] == "serialise"
    assert answers[0]["error"] == (
        "postprocess returned a dict with keys 'label', 'tags', 'scores', holding a set at ['tags'], which JSON "
        "cannot carry"
    )
    assert "JSON-serialisable" in answers[0]["hint"]
