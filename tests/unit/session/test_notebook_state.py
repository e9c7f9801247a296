"""One state for magics and widget, readable tracebacks, the status table, help and completion (no server)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers import CPU_ONLY, FakeSession

from msnb.engines.torchserve.logs import model_lines
from msnb.engines.tracebacks import user_frames
from msnb.roles import ROLES
from msnb.session.progress import Phase
from msnb.ui import help as magic_help
from msnb.ui.display import Status, WarningView
from msnb.ui.widget.controller import Controller

TORCH = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
WORKER_TRACE = [
    "Traceback (most recent call last):",
    '  File "/tmp/models/abc/msnb_runtime/handler/handler.py", line 270, in infer',
    "    outputs = self._forward(inputs)",
    '  File "/tmp/models/abc/handler_model.py", line 12, in forward',
    "    return self.fc(x)",
    "           ^^^^^^^^^^",
    *[line for _ in range(6) for line in (f'  File "{TORCH}", line 1789, in _call_impl', "    return f(*a)")],
    "RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x3 and 4x2)",
]


@pytest.fixture
def fake(mlp_spec):
    return FakeSession(mlp_spec)


def test_a_serve_by_magic_enables_the_widgets_predict_and_a_stop_by_magic_shows_stopped(fake):
    changes = []
    c = Controller("mlp", fake.actions(), CPU_ONLY, on_change=lambda: changes.append(1))
    assert not c.enabled()["predict"]
    fake.serve_by_magic("mlp")
    assert c.enabled()["predict"] and c.enabled()["stop"] and c.enabled()["logs"]
    assert "serving mlp v1.0 (digest abc)" in c.status and changes
    fake.stop_by_magic()
    assert not c.enabled()["predict"] and "serving" not in c.status


def test_a_closed_controller_stops_following_the_session(fake):
    changes = []
    c = Controller("mlp", fake.actions(), CPU_ONLY, on_change=lambda: changes.append(1))
    c.unsubscribe()
    fake.serve_by_magic("mlp")
    assert changes == []


def test_field_errors_are_named_by_their_labels_and_the_bar_is_not_red(fake):
    c = Controller("mlp", fake.actions(), CPU_ONLY)
    c.set("batch_size", "zero")
    assert not c.run("build")
    assert "Batch size" in c.result and "batch_size" not in c.result
    assert c.outcome == "invalid" and c.progress == ("build not started", 0.0)


def test_the_widget_shows_the_workers_log(fake):
    c = Controller("mlp", fake.actions(), CPU_ONLY)
    assert c.run("serve") and c.run("logs") and "mlp worker: ready" in c.log


def test_a_worker_traceback_keeps_only_the_users_frames():
    lines = user_frames(WORKER_TRACE)
    assert lines[0].startswith("Traceback") and lines[-1].startswith("RuntimeError: mat1")
    assert any("handler_model.py" in line for line in lines) and not any("_call_impl" in line for line in lines)
    assert "(7 frames of torch, TorchServe and msnb hidden)" in lines[-2]


def test_model_lines_keep_one_models_worker_lines_of_any_version():
    log = "\n".join(
        f"2026-11-22T07:26:20,310 [INFO ] W-900{i}-{name}-stdout MODEL_LOG - {text}"
        for i, (name, text) in enumerate([("tiny_1.0", "a"), ("other_1.0", "b"), ("tiny_1.0-r2", "c")])
    )
    assert model_lines(log, "tiny", 10) == ["a", "c"] and model_lines(log, "tiny", 1) == ["c"]


def test_status_is_a_table_per_handler_with_stale_archives_and_served_versions():
    handler = {
        "version": "1.1",
        "digest": "new",
        "archives": [{"path": "model_store/clf-1.0.mar", "version": "1.0", "digest": "old", "stale": True}],
        "served": [{"version": "1.0-r2", "default": True, "digest": "old"}],
        "stale": True,
        "url": "http://127.0.0.1:8080/predictions/clf",
    }
    server = {"running": True, "url": "http://127.0.0.1:8080", "log_dir": "/w/logs", "key_file": "/w/key_file.json"}
    status = Status({"handlers": {"clf": handler}, "server": server})
    text, page = repr(status), status._repr_html_()
    assert "clf-1.0.mar v1.0 (stale: older than the cell)" in text and "v1.0-r2 (default) (stale)" in text
    assert "key file: /w/key_file.json" in text and "logs: /w/logs" in text
    assert "<table class='msnb-status-table'>" in page and "<th style='text-align:left'>served</th>" in page


def test_warnings_read_as_warnings():
    assert WarningView("old code").text() == "Warning: old code"


def test_handler_help_has_cell_magic_usage_roles_and_an_example():
    text = magic_help.handler_help()
    assert text.startswith("Usage: %%ms_handler ") and "::" not in text
    assert "def init_function(**kwargs)" in text and "def preprocess(sample)" in text
    assert "%%ms_handler tiny --version 1.0" in text and "--batch-size" in text


def test_every_role_has_its_description_in_the_handler_help():
    text = magic_help.handler_help()
    assert set(magic_help.ROLE_HELP) == set(ROLES)
    assert "def explain(model, model_input)" in text and "Integrated Gradients on the predicted class" in text


@pytest.mark.parametrize(
    ("line", "expected"),
    [("%ms_serve ", ["clf", "mlp"]), ("%ms_serve m", ["mlp"]), ("%ms_serve mlp --", ["--data"])],
)
def test_completion_offers_handler_names_then_options(line, expected):
    complete = magic_help.completer(lambda: {"mlp": 1, "clf": 2}, ["--data"])
    assert complete(None, SimpleNamespace(line=line, symbol=line.split()[-1])) == expected


def test_a_phase_reports_elapsed_seconds_and_moves_within_its_span():
    seen = []
    with Phase(lambda step, f: seen.append((step, f)), "starting Java", 0.1, 0.3, detail=lambda: "worker up"):
        pass
    assert seen[0][0] == "starting Java: worker up (0 s)" and all(0.1 <= f < 0.3 for _, f in seen)


def test_a_widget_serving_its_own_edits_is_not_stale_until_the_cell_changes(mlp_spec):
    from msnb.session.core import Session
    from msnb.session.state import Served

    session = Session()
    session.add(mlp_spec)
    edited = mlp_spec.replace(version="2.0", batch_size=2)  # the widget's form, not the cell
    session.served["mlp"] = Served("mlp", "2.0", edited.digest(), cell_digest=mlp_spec.digest())
    assert session.stale("mlp") is None
    session.add(mlp_spec.replace(init_kwargs={"hidden": 16}))  # the cell is run again, changed
    assert "older version of its cell" in session.stale("mlp")
