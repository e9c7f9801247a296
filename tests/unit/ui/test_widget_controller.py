"""The widget's controller with injected fake actions: every validation rule, the button rules, results."""

from __future__ import annotations

import dataclasses
import re
import threading

import pytest
from helpers import CPU_ONLY, ONE_GPU, FakeSession

from msnb.errors import ServerError
from msnb.ui.widget.controller import BUTTONS, Controller


@pytest.fixture
def fake(mlp_spec):
    return FakeSession(mlp_spec)


def make(fake, inventory=CPU_ONLY, name="mlp"):
    return Controller(name, fake.actions(), inventory)


def test_fields_are_prefilled_from_the_spec(fake):
    c = make(fake)
    assert c.values["name"] == "mlp" and c.values["batch_size"] == "1" and c.values["device"] == "auto"
    assert c.values["payload"] == '{"x": [1, 2, 3, 4]}' and c.values["checkpoint"] == ""


def test_an_unknown_name_says_so_with_a_hint(fake):
    c = make(fake, name="nope")
    assert not c.result_ok and "No handler named 'nope'" in c.result and "Hint:" in c.result


@pytest.mark.parametrize("field", ["batch_size", "workers", "response_timeout", "max_batch_delay"])
@pytest.mark.parametrize("text", ["0", "-3", "abc", "2.5"])
def test_bad_numbers_are_field_errors_and_nothing_runs(fake, field, text):
    c = make(fake)
    c.set(field, text)
    for action in ("test", "build", "serve"):
        ok = c.run(action)
        if field == "max_batch_delay" and text == "0":
            assert ok  # 0 ms delay is valid
            continue
        assert not ok and field in c.errors and "Hint:" in c.errors[field]
        assert "not started: fix" in c.result
    assert fake.names() == (["test", "build", "serve"] if field == "max_batch_delay" and text == "0" else [])


def test_invalid_json_says_where_it_breaks(fake):
    c = make(fake)
    c.set("payload", '{"x": [1, 2,, 3]}')
    assert not c.run("test")
    assert "line 1, column 13" in c.errors["payload"] and "Hint:" in c.errors["payload"]
    assert fake.calls == []


def test_missing_checkpoint_is_a_field_error_before_building(fake, tmp_path):
    c = make(fake)
    c.set("checkpoint", str(tmp_path / "missing.pth"))
    assert not c.run("build")
    assert "does not exist" in c.errors["checkpoint"] and fake.calls == []
    (tmp_path / "real.pth").write_bytes(b"x")
    c.set("checkpoint", str(tmp_path / "real.pth"))
    assert c.run("build")
    assert fake.calls[0][1][0].checkpoint == str(tmp_path / "real.pth")


def test_missing_extra_file_is_a_field_error(fake, tmp_path):
    c = make(fake)
    c.set("extra_files", f"{tmp_path}/labels.json")
    assert not c.run("serve") and "labels.json" in c.errors["extra_files"]


@pytest.mark.parametrize(
    "device, text, error",
    [
        ("gpu:0", "16000", "above GPU 0's total of 15360 MB"),
        ("cpu", "1000", "the device is CPU"),
        ("gpu:0", "0", ">= 1"),
    ],
)
def test_max_gpu_memory_is_checked_against_the_chosen_device(fake, device, text, error):
    c = make(fake, ONE_GPU)
    c.set("device", device)
    c.set("max_gpu_memory", text)
    assert not c.run("build") and error in c.errors["max_gpu_memory"] and fake.calls == []


def test_edited_fields_make_the_spec_the_actions_get(fake):
    c = make(fake, ONE_GPU)
    for field, text in {
        "batch_size": "4",
        "max_batch_delay": "5",
        "requirements": "numpy\n  \nscipy>=1,<2",
        "device": "gpu:0",
        "max_gpu_memory": "2048",
        "version": "2.0",
    }.items():
        c.set(field, text)
    assert c.run("serve"), c.result
    spec = fake.calls[0][1][0]
    assert (spec.batch_size, spec.max_batch_delay, spec.version) == (4, 5, "2.0")
    assert spec.requirements == ("numpy", "scipy>=1,<2") and (spec.device, spec.max_gpu_memory) == ("gpu", 2048)


def test_test_sends_the_json_box_or_the_example(fake):
    c = make(fake)
    assert c.run("test") and fake.calls[-1][1][1] == [{"x": [1, 2, 3, 4]}]
    c.set("payload", "")
    assert c.run("test") and fake.calls[-1][1][1] is None
    assert '"label": 1' in c.result


def test_build_format_and_folder(fake):
    c = make(fake)
    c.set("format", "mar")
    c.set("export_path", "out")
    assert c.run("build") and fake.calls[0][1][1:3] == ("out", "mar") and "Built model_store/mlp.mar" in c.result
    c.set("export_path", " ")
    assert not c.run("build") and "Export folder is empty" in c.errors["export_path"]


def test_predict_needs_a_served_model_and_stop_clears_it(fake):
    c = make(fake)
    assert c.enabled() == {
        "test": True,
        "build": True,
        "serve": True,
        "predict": False,
        "explain": False,
        "logs": False,
        "stop": False,
    }
    assert c.run("serve") and c.enabled()["predict"] and c.enabled()["stop"]
    assert "pid 4242" in c.status and "registering" in "\n".join(c.log)
    c.set("payload", '{"x": [0, 0, 0, 1]}')
    assert c.run("predict") and fake.calls[-1][1] == ("mlp", {"x": [0, 0, 0, 1]})
    assert '"scores": [\n    0.1,' in c.result
    assert c.run("stop") and not c.enabled()["predict"] and not c.enabled()["stop"]


def test_explain_shows_the_attributions_as_bars_once_served(fake):
    c = make(fake)
    assert not c.enabled()["explain"]
    assert c.run("serve") and c.enabled()["explain"]
    assert c.run("explain") and fake.calls[-1] == ("explain", ("mlp", {"x": [1, 2, 3, 4]}))
    assert '"attributions"' in c.result and c.chart.count("msnb-attributions") == 1
    assert c.chart.count("width:160px;background:#1b5e20") == 1  # the largest attribution fills the bar
    assert "background:#b71c1c" in c.chart and "target 2" in c.chart
    assert c.run("predict") and c.chart == ""  # a prediction replaces the chart


def test_an_explain_error_shows_its_hint_and_no_chart(fake):
    c = make(fake)
    assert c.run("serve")
    fake.fail = ServerError("mlp answered HTTP 400: explain failed", "define `def explain(model, model_input)`")
    assert not c.run("explain")
    assert "HTTP 400" in c.result and "Hint: define `def explain" in c.result and c.chart == ""


def test_predict_with_an_empty_request_box_is_a_field_error(fake):
    c = make(fake)
    assert c.run("serve")
    c.set("payload", "  ")
    assert not c.run("predict")
    assert "Request JSON is empty" in c.errors["payload"] and "Hint:" in c.errors["payload"]
    assert fake.names() == ["serve"]
    assert c.run("test")  # Test with an empty box runs the handler's --example
    assert fake.calls[-1][0] == "test" and fake.calls[-1][1][1] is None


def test_stop_is_enabled_for_a_server_started_elsewhere(fake):
    fake.alive = True
    assert make(fake).enabled()["stop"]


def test_every_button_is_disabled_while_an_action_runs(fake):
    changes = []
    c = Controller("mlp", fake.actions(), CPU_ONLY, on_change=lambda: changes.append(dict(c.enabled())))
    fake.gate = threading.Event()
    job = c.prepare("serve")
    worker = threading.Thread(target=job)
    worker.start()
    assert c.enabled() == dict.fromkeys(BUTTONS, False)
    assert c.prepare("predict") is None and "Busy starting/registering" in c.status
    fake.gate.set()
    worker.join(10)
    assert c.enabled()["predict"] and changes[0]["serve"] is False and changes[-1]["predict"] is True


def test_server_died_between_serve_and_predict(fake):
    c = make(fake)
    assert c.run("serve")
    fake.alive = False  # e.g. the Java process was killed
    assert not c.run("predict")
    assert "no longer running" in c.result and "Hint: click Serve" in c.result
    assert "OutOfMemoryError" in "\n".join(c.log) and "predict" not in fake.names()
    assert not c.enabled()["predict"] and c.enabled()["serve"]
    assert c.run("serve") and c.enabled()["predict"]


def test_errors_show_message_and_hint_never_a_traceback(fake):
    c = make(fake)
    fake.fail = ServerError("Registering 'mlp' failed: worker died.", "see the worker log below.", "model_log: boom")
    assert not c.run("serve")
    assert c.result == "Registering 'mlp' failed: worker died.\nHint: see the worker log below."
    assert (
        "model_log: boom" in c.log
        and c.progress[0] == "serve failed"
        and c.outcome == "failed"
        and not c.enabled()["predict"]
    )
    fake.fail = RuntimeError("disk full")
    assert not c.run("build")
    assert c.result.startswith("Build failed: RuntimeError: disk full\nHint:") and "Traceback" not in c.result
    assert c.running is None and c.enabled()["build"]


def test_server_dying_during_predict_is_reported_as_such(fake):
    def predict(name, data):
        fake.alive = not died  # the request fails; the server died meanwhile, or is up and has its own error
        raise ServerError("Cannot reach TorchServe: ConnectionError.", "is the server running?")

    c = Controller("mlp", dataclasses.replace(fake.actions(), predict=predict), CPU_ONLY)
    for died in (False, True):
        fake.alive = True
        assert c.run("serve")
        assert not c.run("predict")
        if died:
            assert "no longer running" in c.result and not c.enabled()["predict"]
        else:
            assert c.result.startswith("Cannot reach TorchServe") and c.enabled()["predict"]


def test_a_phase_ticking_its_seconds_logs_one_line(fake):
    c = make(fake)
    c.running = "serve"
    for second in range(5):
        c._progress(f"starting TorchServe (Java) ({second} s)", 0.1 + second / 100)
    c._progress("registering mlp (0 s)", 0.5)
    assert c.log == ["[serve] starting TorchServe (Java) (0 s)", "[serve] registering mlp (0 s)"]
    assert c.progress == ("registering mlp (0 s)", 0.5)  # the bar and step still follow every tick


def test_predict_of_a_streaming_model_shows_each_chunk_before_the_next_is_produced(fake):
    shown_before_next: list[str] = []

    def stream(name, data):
        for chunk in ("the", " cat", " sat"):
            yield chunk
            shown_before_next.append(c.result)  # runs only when the widget asks for the next chunk

    c = Controller("mlp", dataclasses.replace(fake.actions(), predict_stream=stream), CPU_ONLY)
    assert c.run("serve") and c.run("predict")
    receiving = "Predict · served mlp v1.0 (digest abc) · receiving\n"
    assert shown_before_next == [receiving + "the", receiving + "the cat", receiving + "the cat sat"] and c.result_ok
    assert re.fullmatch(r"Predict · served mlp v1\.0 \(digest abc\) · \d+ ms\nthe cat sat", c.result), c.result


def test_predict_of_json_lines_shows_one_per_line_and_a_whole_answer_pretty(fake):
    chunks = {"lines": [{"step": 1}, {"step": 2}], "whole": [{"label": 3}]}
    for kind, expected in (("lines", '{"step": 1}\n{"step": 2}'), ("whole", '{\n  "label": 3\n}')):
        actions = dataclasses.replace(fake.actions(), predict_stream=lambda name, data, k=kind: iter(chunks[k]))
        c = Controller("mlp", actions, CPU_ONLY)
        assert c.run("serve") and c.run("predict") and c.result.split("\n", 1)[1] == expected


# ------------------------------------------------------------------ each thing said once, with its duration
def test_a_bad_json_is_said_once_under_its_field_and_a_cut_input_is_not_blamed_on_quotes(fake):
    c = make(fake)
    c.set("payload", '{"x": [1, 2')  # cut short while typing
    assert not c.run("test")
    assert "ends early" in c.errors["payload"] and "double quotes" not in c.errors["payload"]
    assert "Expecting" not in c.result and "Request JSON" in c.result  # Result names the field, the field says why
    c.set("payload", "{'x': [1]}")
    assert not c.run("test") and "use double quotes" in c.errors["payload"]


def test_test_predict_and_stop_each_log_a_line_and_results_say_which_and_how_long(fake):
    c = make(fake)
    assert c.run("test") and re.match(r"Test · test process, no server · \d+ ms\n", c.result)
    assert c.run("serve") and re.match(r"Serving mlp v1\.0 \(digest abc\) \(took \d+ ms\): click Predict", c.result)
    assert "pid 4242" not in c.result and "pid 4242" in c.status  # the server's line once, in the status
    assert c.run("predict") and re.match(r"Predict · served mlp v1\.0 \(digest abc\) · \d+ ms\n", c.result)
    assert c.run("stop")
    logged = "\n".join(c.log)
    assert all(f"[{action}]" in logged for action in ("test", "serve", "predict", "stop")), logged


def test_an_error_about_a_server_stopped_elsewhere_is_cleared_from_the_result(fake):
    c = make(fake)
    assert c.run("serve")
    fake.fail = ServerError("predict failed", "look at the log")
    assert not c.run("predict") and "predict failed" in c.result
    fake.fail = None
    fake.stop_by_magic()  # %ms_stop in another cell
    assert c.result == "" and c.result_ok and "predict failed" not in c.result


# ------------------------------------------------------------------ the cell as the kernel holds it now
def test_the_cell_run_again_is_what_serve_test_and_build_use_with_the_forms_edits_on_top(fake):
    c = make(fake)
    c.set("batch_size", "4")  # the form's own edit
    edited = fake.specs["mlp"].replace(example={"x": [4, 3, 2, 1]}, response_timeout=7, max_batch_delay=9)
    fake.define_by_magic(edited)  # the handler cell edited and run again
    assert c.values["payload"] == '{"x": [4, 3, 2, 1]}' and c.values["response_timeout"] == "7"  # refilled
    assert c.values["batch_size"] == "4"  # the user's edit stays
    assert "ran again: the form uses it" in "\n".join(c.log)
    for action in ("serve", "test", "build"):
        assert c.run(action), c.result
        spec = fake.calls[-1][1][0]
        assert (spec.response_timeout, spec.max_batch_delay, spec.batch_size) == (7, 9, 4), action
        assert spec.digest() == edited.replace(batch_size=4).digest()


def test_an_unedited_form_serves_exactly_the_kernels_spec(fake):
    c = make(fake)
    new = fake.specs["mlp"].replace(version="2.0")
    fake.specs["mlp"] = new  # even without the event (a spec replaced by hand), the action asks the kernel
    assert c.run("serve") and fake.calls[-1][1][0] is new


def test_the_status_line_says_the_batches_the_server_formed(fake):
    actions = dataclasses.replace(fake.actions(), batching=lambda name: "batches formed: size 4 ×2")
    c = Controller("mlp", actions, CPU_ONLY)
    assert c.run("serve") and c.run("predict")
    assert "serving mlp v1.0 (digest abc); " in c.status and "Batches formed: size 4 ×2." in c.status
