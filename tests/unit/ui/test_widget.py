"""The BuildWidget headless: typing (set_state) and clicks wire to the controller; the widgets show its state."""

from __future__ import annotations

import threading

import ipywidgets as widgets
import pytest
from helpers import CPU_ONLY, ONE_GPU, FakeSession

from msnb.ui.widget import BuildWidget
from msnb.ui.widget.devices import Device, Inventory


@pytest.fixture(autouse=True)
def _close_widgets():
    yield
    widgets.Widget.close_all()


@pytest.fixture
def fake(mlp_spec):
    return FakeSession(mlp_spec)


def make(fake, inventory=CPU_ONLY) -> BuildWidget:
    return BuildWidget("mlp", actions=fake.actions(), devices=inventory)


def type_(w: BuildWidget, field: str, text: str) -> None:
    w.fields[field].set_state({"value": text})


def click(w: BuildWidget, action: str, timeout: float = 10) -> None:
    w.buttons[action].click()
    assert w.wait(timeout), f"{action} still running after {timeout} s"


def disabled(w: BuildWidget) -> dict[str, bool]:
    return {name: b.disabled for name, b in w.buttons.items()}


def test_fields_have_stable_labels_classes_and_spec_values(fake):
    w = make(fake, ONE_GPU)
    assert w.fields["batch_size"].description == "Batch size" and w.fields["batch_size"].value == "1"
    assert "msnb-field-batch_size" in w.fields["batch_size"]._dom_classes
    assert w.fields["device"]._options_labels == ("auto", "GPU 0: T4", "CPU") and w.fields["device"].value == "auto"
    assert "msnb-predict" in w.buttons["predict"]._dom_classes and "msnb-result" in w.result._dom_classes
    assert disabled(w) == {
        "test": False,
        "build": False,
        "serve": False,
        "predict": True,
        "explain": True,
        "logs": True,
        "stop": True,
    }


def test_explain_click_draws_the_attributions_under_the_result(fake):
    w = make(fake)
    w.buttons["serve"].click()
    assert w.wait(10) and not w.buttons["explain"].disabled
    w.buttons["explain"].click()
    assert w.wait(10) and fake.names()[-1] == "explain"
    assert "msnb-chart" in w.chart._dom_classes and "msnb-attributions" in w.chart.value
    assert w.children.index(w.chart) == w.children.index(w.result) + 1


def test_no_gpu_note_is_shown_under_the_device(fake):
    w = make(fake)
    notes = [c for c in w.children if isinstance(c, widgets.HTML) and "msnb-device-note" in c._dom_classes]
    assert "No GPU found" in notes[0].value


def test_bad_batch_size_shows_next_to_the_field_and_nothing_runs(fake):
    w = make(fake)
    type_(w, "batch_size", "zero")
    click(w, "build")
    assert "Batch size takes a whole number" in w.field_errors["batch_size"].value and fake.calls == []
    assert "not started: fix" in w.result.value
    type_(w, "batch_size", "8")  # typing clears the field's error at the next refresh
    click(w, "build")
    assert w.field_errors["batch_size"].value == "" and fake.calls[0][1][0].batch_size == 8


def test_invalid_json_in_the_prediction_box(fake):
    w = make(fake)
    click(w, "serve")
    type_(w, "payload", "{'x': [1]}")
    click(w, "predict")
    assert "invalid JSON at line 1, column 2" in w.field_errors["payload"].value
    assert [c[0] for c in fake.calls] == ["serve"]


def test_max_gpu_memory_with_cpu_chosen(fake):
    w = make(fake, ONE_GPU)
    w.fields["device"].set_state({"index": 2})  # the dropdown's "CPU"
    type_(w, "max_gpu_memory", "1024")
    click(w, "serve")
    assert "the device is CPU" in w.field_errors["max_gpu_memory"].value and fake.calls == []


def test_serve_then_predict_shows_the_answer_and_stop_disables_predict(fake):
    w = make(fake)
    click(w, "serve")
    assert not disabled(w)["predict"] and "pid 4242" in w.status.value and w.progress.value == 1.0
    click(w, "predict")
    assert "&quot;label&quot;: 2" in w.result.value and "#1b5e20" in w.result.value
    click(w, "stop")
    assert disabled(w)["predict"] and "Server stopped." in w.result.value


def test_buttons_are_disabled_while_an_action_runs_in_the_background(fake):
    w = make(fake)
    fake.gate = threading.Event()
    w.buttons["build"].click()  # returns at once: the build waits on the gate in its thread
    assert all(disabled(w).values()) and "Building the archive" in w.status.value
    w.buttons["test"].click()  # a click that slips through is refused, not queued
    fake.gate.set()
    assert w.wait(10)
    assert [c[0] for c in fake.calls] == ["build"] and not disabled(w)["build"]
    assert "Built model_store/mlp.mar" in w.result.value


def test_server_died_shows_the_log_tail_and_serve_works_again(fake):
    w = make(fake)
    click(w, "serve")
    fake.alive = False
    click(w, "predict")
    assert "no longer running" in w.result.value and "#b71c1c" in w.result.value
    assert "OutOfMemoryError" in w.log_view.value and disabled(w)["predict"] and not disabled(w)["serve"]
    click(w, "serve")
    assert not disabled(w)["predict"]


def test_a_new_handler_starts_from_defaults_and_says_what_is_missing(fake):
    w = BuildWidget(
        "unknown", actions=fake.actions(), devices=Inventory((Device("auto", "auto"), Device("cpu", "CPU")))
    )
    assert w.fields["batch_size"].value == "1" and w.fields["version"].value == ""
    assert "No handler named" in w.result.value and "Hint:" in w.result.value
    click(w, "test")
    assert "Version is empty" in w.field_errors["version"].value


def test_the_handler_cell_run_again_refills_the_fields_the_user_did_not_type_in(fake):
    w = make(fake)
    type_(w, "batch_size", "4")
    fake.define_by_magic(fake.specs["mlp"].replace(example={"x": [9, 9, 9, 9]}, workers=2, batch_size=2))
    assert w.fields["payload"].value == '{"x": [9, 9, 9, 9]}' and w.fields["workers"].value == "2"
    assert w.fields["batch_size"].value == "4"  # typed: the form's edit on top of the cell
    click(w, "serve")
    served = fake.calls[-1][1][0]
    assert (served.workers, served.batch_size, served.example) == (2, 4, {"x": [9, 9, 9, 9]})
