"""The Ray Serve adapter without a cluster: a model folder loaded as a replica loads it, answered batch by batch
with TorchServe's semantics, and model-config mapped to deployment options (GPUs injected: there is none here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import MLP_SOURCE, mlp_model, notebook_answer

from msnb.package import archive
from msnb.spec import spec_from_source

pytest.importorskip("ray.serve")  # (msnb.engines.ray.require sets Ray's environment first where that matters)
from msnb.templates.msnb_runtime.ray import app as ray_app
from msnb.templates.msnb_runtime.ray.replica import replica_gpu_id

TEXT_SOURCE = MLP_SOURCE.split("def postprocess")[0] + textwrap.dedent(
    """
    def postprocess(output):
        return f"label {int(output.argmax())}"
    """
)


class FakeMetrics:
    """ray.serve.metrics' Gauge/Counter API, recording what was set."""

    values: dict = {}

    class Gauge:
        def __init__(self, name, description="", tag_keys=()):
            self.name = name

        def set(self, value, tags=None):
            FakeMetrics.values[self.name] = value

    class Counter(Gauge):
        def inc(self, value, tags=None):
            key = (self.name, *sorted((tags or {}).items()))
            FakeMetrics.values[key] = FakeMetrics.values.get(key, 0) + value


@pytest.fixture
def loaded(tmp_path, monkeypatch):
    """Load a spec's staged model folder as a replica does (cwd and import path), forgetting its modules after."""
    before = set(sys.modules)

    def load(spec):
        folder = archive.build(spec, tmp_path / "store", fmt="no-archive")
        monkeypatch.chdir(folder)
        monkeypatch.syspath_prepend(str(folder))
        return ray_app.LoadedModel(folder, metrics=ray_app.RayMetrics(spec.name, FakeMetrics))

    yield load
    for name in set(sys.modules) - before:
        if name == "handler_model" or name.startswith("msnb_"):
            del sys.modules[name]


def request(body, content_type="application/json", explain=False):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return explain, data, {"content-type": content_type}


def test_a_bad_sample_in_a_batch_of_8_gets_its_own_400_and_the_other_7_are_answered(loaded):
    model = loaded(spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, batch_size=8))
    inputs = [[i, 1.0, 2.0, 3.0] for i in range(8)]
    batch = [request({"x": x}) for x in inputs]
    batch[5] = request({"y": 1})
    replies = model.answer(batch)
    assert [status for status, _, _ in replies] == [200] * 5 + [400] + [200] * 2
    for idx, (_, headers, body) in enumerate(replies):
        assert headers["content-type"] == "application/json"
        if idx != 5:
            assert json.loads(body) == notebook_answer(mlp_model(), inputs[idx], batched=False)
    error = json.loads(replies[5][2])
    assert error["stage"] == "preprocess" and "expected a JSON object" in error["error"] and error["hint"]
    assert FakeMetrics.values["MsnbBatchSize"] == 8  # the Msnb metrics go to Ray's metrics
    formed = ("MsnbBatches", ("BatchSize", "8"), ("model_name", "mlp"))
    before = FakeMetrics.values.get(formed, 0)
    model.answer(batch)
    assert FakeMetrics.values[formed] == before + 1  # a counter, by batch size: the batches the replica formed


def test_a_str_answer_keeps_its_text_content_type(loaded):
    model = loaded(spec_from_source("text", TEXT_SOURCE, init_kwargs={"hidden": 8}))
    [(status, headers, body)] = model.answer([request({"x": [1, 2, 3, 4]})])
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert body.decode() == f"label {notebook_answer(mlp_model(), [1, 2, 3, 4], batched=False)['label']}"


def test_a_handler_answering_the_wrong_number_of_requests_fails_each_with_503_naming_the_mismatch(loaded):
    model = loaded(spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, batch_size=4))
    model.entry = lambda data, context: [] if data is None else [{"only": "one"}]
    replies = model.answer([request({"x": [1, 2, 3, 4]})] * 3)
    assert [status for status, _, _ in replies] == [503] * 3
    assert all("number of batch response mismatched" in json.loads(body)["message"] for _, _, body in replies)
    assert "3 requests, handle returned 1" in json.loads(replies[0][2])["message"]


def test_the_handler_gets_torchserve_s_own_context(loaded):
    from ts.context import Context

    model = loaded(spec_from_source("mlp", MLP_SOURCE, init_kwargs={"hidden": 8}, batch_size=4))
    assert isinstance(model.context, Context)
    props = model.context.system_properties
    assert Path(props["model_dir"]) == Path.cwd() and props["batch_size"] == 4 and props["gpu_id"] is None
    assert model.context.manifest["model"]["handler"] == "handler_model.py"


def test_a_failing_init_function_fails_the_replica_with_the_load_error_and_its_hint(loaded):
    broken = MLP_SOURCE.replace("torch.manual_seed(0)", "raise RuntimeError('no weights here')")
    with pytest.raises(Exception, match="no weights here") as info:
        loaded(spec_from_source("broken", broken, init_kwargs={"hidden": 8}))
    assert "Hint:" in str(info.value)


def test_model_config_becomes_deployment_options():
    config = {"batchSize": 8, "maxBatchDelay": 50, "minWorkers": 1, "maxWorkers": 3}
    options = ray_app.deployment_options(config, ["numpy==1.26.4"], num_cpus=0.5)
    assert options["max_ongoing_requests"] >= 8  # below the batch size a batch never fills
    assert options["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 8}
    assert options["ray_actor_options"] == {"num_cpus": 0.5, "runtime_env": {"pip": ["numpy==1.26.4"]}}
    assert options["max_constructor_retry_count"] == 1
    assert ray_app.batch_settings(config) == (8, 0.05)
    assert ray_app.batch_settings({}) == (1, 0.1)  # TorchServe's defaults
    assert ray_app.deployment_options({"minWorkers": 2}, [])["num_replicas"] == 2


def test_a_gpu_model_asks_ray_for_a_gpu_and_sees_it_as_cuda_0():
    gpu = {"deviceType": "gpu", "system": {"maxGPUMemory": 4096}}
    assert ray_app.deployment_options(gpu, [], gpu_mb=16384)["ray_actor_options"]["num_gpus"] == 0.25
    assert ray_app.deployment_options({"deviceType": "gpu"}, [])["ray_actor_options"]["num_gpus"] == 1
    assert "num_gpus" not in ray_app.deployment_options({"deviceType": "cpu"}, [])["ray_actor_options"]
    # Ray sets CUDA_VISIBLE_DEVICES to the assigned GPU: physical GPU 3 is cuda:0 inside the replica.
    assert replica_gpu_id([3]) == 0 and replica_gpu_id([]) is None


def test_request_bodies_are_decoded_as_a_torchserve_worker_decodes_them():
    from msnb.templates.msnb_runtime.ts import wire

    assert wire.decode_body(b'{"a": 1}', "application/json") == {"a": 1}
    assert wire.decode_body(b"hello", "text/plain; charset=utf-8") == "hello"
    assert wire.decode_body(b"\x89PNG", "image/png") == b"\x89PNG"
    assert wire.decode_body(b"{not json", "application/json") == b"{not json"
    status, _, body = wire.encode_answer({"x": float("nan")}, 200, {})
    assert status == 503 and "strict JSON" in json.loads(body)["message"]


@pytest.mark.parametrize(
    "answer", [{"y": [3, 6], "batch_size": 4}, [[0.25, -1e-07]], {"label": "caf\u00e9", "n": None}, 7]
)
def test_a_json_answer_is_the_bytes_torchserves_worker_writes(answer):
    from ts.protocol.otf_message_handler import create_predict_response

    from msnb.templates.msnb_runtime.ts import wire

    torchserve = wire.predict_responses(create_predict_response([answer], {0: "r"}, "OK", 200))[0][2]
    assert wire.encode_answer(answer, 200, {})[2] == torchserve


def test_the_notebook_engine_pickles_its_own_context_module_even_with_an_exported_folder_on_sys_path(tmp_path):
    # An exported Ray folder holds a top-level msnb_runtime package. With it importable in the kernel, the engine's
    # classes must still refer to msnb.templates' modules: Ray pickles them by module name, and a replica has no
    # exported folder on its path.
    shutil.copytree(Path(ray_app.__file__).parents[1], tmp_path / "msnb_runtime")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import msnb_runtime.ts.context, msnb_runtime.ray.replica\n"
        "from msnb.templates.msnb_runtime.ray import app as ray_app\n"
        "print(ray_app.ChunkSocket.__module__, ray_app.RayMetrics.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["msnb.templates.msnb_runtime.ts.context", "msnb.templates.msnb_runtime.ray.replica"]


def test_a_streaming_handler_answered_whole_gathers_its_chunks_and_tells_the_router_to_stream(loaded):
    from charlm import HANDLER_BODY, MODEL_SOURCE, char_lm, greedy

    from msnb.templates.msnb_runtime.ray.streaming import STREAM_HEADER, StreamRoutes, answer_whole, streams

    seeded = HANDLER_BODY.replace("    return CharLM(", "    torch.manual_seed(0)\n    return CharLM(")
    model = loaded(spec_from_source("rgen", MODEL_SOURCE + seeded))
    assert streams(model)
    [(status, headers, body)] = answer_whole(model, [request(b"the cat", "text/plain")])
    torch.manual_seed(0)
    assert status == 200 and body.decode() == "".join(greedy(char_lm()(29).eval(), "the cat"))
    routes = StreamRoutes()
    assert STREAM_HEADER not in routes.note("rgen", headers) and routes.streaming["rgen"]


def test_a_batched_stream_yields_each_requests_chunks_then_ends_each_one(loaded):
    import asyncio
    import threading

    from charlm import HANDLER_BODY, MODEL_SOURCE, char_lm, greedy

    from msnb.templates.msnb_runtime.ray.streaming import CHUNK, stream_batch

    seeded = HANDLER_BODY.replace("    return CharLM(", "    torch.manual_seed(0)\n    return CharLM(")
    model = loaded(spec_from_source("rgen2", MODEL_SOURCE + seeded, batch_size=2))
    prompts = ["the cat", "a dog sat"]
    batch = [(*request(p.encode(), "text/plain"), threading.Event()) for p in prompts]

    async def collect() -> list:
        return [items async for items in stream_batch(model, batch)]

    steps = asyncio.run(collect())
    assert steps[-1] == [StopIteration, StopIteration]
    texts = [
        "".join(piece.decode() for item in column if item not in (None, StopIteration) for piece in item[3])
        for column in zip(*steps)
    ]
    assert all(item[0] == CHUNK for column in zip(*steps[:-1]) for item in column if item is not None)
    torch.manual_seed(0)
    lm = char_lm()(29).eval()
    assert texts == ["".join(greedy(lm, p)) for p in prompts]


def test_a_request_whose_client_left_gets_no_more_chunks_and_its_generator_is_closed(loaded):
    import asyncio
    import threading

    from charlm import MODEL_SOURCE, char_lm, greedy

    from msnb.templates.msnb_runtime.ray.streaming import stream_batch

    closing = textwrap.dedent(
        """
        CLOSED = []

        def init_function():
            torch.manual_seed(0)
            return CharLM(len(CHARS))

        def preprocess(prompt):
            return torch.tensor([STOI.get(c, 0) for c in prompt.lower()])

        def inference(model, batch):
            ids = batch
            try:
                for _ in range(24):
                    nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
                    ids = torch.cat([ids, nxt], 1)
                    yield nxt[:, 0]
            finally:
                CLOSED.append(ids.shape[1])

        def postprocess(step):
            return CHARS[int(step)]
        """
    )
    model = loaded(spec_from_source("rgone", MODEL_SOURCE + closing, batch_size=2))
    prompts = ["the cat", "a dog sat"]
    batch = [(*request(p.encode(), "text/plain"), threading.Event()) for p in prompts]
    batch[0][3].set()  # the first request's client has gone

    async def collect() -> list:
        return [items async for items in stream_batch(model, batch)]

    steps = asyncio.run(collect())
    texts = [
        "".join(piece.decode() for item in column if item not in (None, StopIteration) for piece in item[3])
        for column in zip(*steps)
    ]
    torch.manual_seed(0)
    lm = char_lm()(29).eval()
    assert texts == ["".join(greedy(lm, prompts[0])[:1]), "".join(greedy(lm, prompts[1]))]
    closed = sys.modules["handler_model"].CLOSED
    assert sorted(closed) == [len(prompts[0]) + 1, len(prompts[1]) + 24]  # the first generator stopped after 1 step


def test_the_router_sends_again_only_a_call_whose_replica_went():
    from ray.exceptions import ActorDiedError, ActorUnavailableError, OwnerDiedError, RayTaskError
    from ray.serve.exceptions import ReplicaUnavailableError

    gone = [
        ActorDiedError(),
        ActorUnavailableError("the node went", None),
        OwnerDiedError("ff" * 28, "", ""),
        ReplicaUnavailableError("r1"),
        RayTaskError("infer", "traceback", ActorDiedError()).as_instanceof_cause(),  # as a Serve handle raises it
    ]
    assert [ray_app.replica_lost(err) for err in gone] == [True] * len(gone)
    wrapped = RuntimeError("upstream")
    wrapped.__cause__ = ActorDiedError()
    assert ray_app.replica_lost(wrapped)
    assert not ray_app.replica_lost(ValueError("the adapter's own bug"))
    assert not ray_app.replica_lost(RayTaskError("infer", "traceback", ValueError("x")).as_instanceof_cause())


def test_chunks_sent_while_the_last_went_out_travel_together_per_request_in_order():
    import asyncio

    from msnb.templates.msnb_runtime.ray.streaming import coalesce

    text, jsonl = "text/plain; charset=utf-8", "application/jsonl"

    async def drain(items: list) -> tuple:
        queue: asyncio.Queue = asyncio.Queue()
        for item in items:
            queue.put_nowait(item)
        return coalesce(queue, {0: "a"}, {0: text}), queue.qsize()

    waiting = [({0: "b", 1: b'{"n": 1}\n'}, {0: text, 1: jsonl}), ({0: "c"}, {0: text}), None]
    (pieces, types, ended), left = asyncio.run(drain(waiting))
    assert pieces == {0: [b"a", b"b", b"c"], 1: [b'{"n": 1}\n']} and types == {0: text, 1: jsonl}
    assert ended and left == 0
    assert asyncio.run(drain([]))[0] == ({0: [b"a"]}, {0: text}, False)  # nothing waiting: sent at once, alone


def test_a_describe_answer_leaves_out_null_members_as_torchserves_frontend_does():
    answer = json.dumps({"echo": None, "batch": 1, "labels": ["a", None], "nested": {"x": None, "y": 2}})
    assert ray_app.metadata(answer) == {"batch": 1, "labels": ["a", None], "nested": {"y": 2}}
