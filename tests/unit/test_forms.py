"""Bring your own handler: a cell with a handler class or a module-level handle is captured, rendered and
run in-process with TorchServe's own Context; mixed or broken cells are refused with a hint."""

from __future__ import annotations

import json
import textwrap
import zipfile

import pytest
import torch
from helpers import MLP_SOURCE, NET, OWN_BASE_HANDLER, OWN_FUNCTION, OWN_IMAGE_CLASS, scripted_mlp

from msnb.capture.cells import capture
from msnb.errors import CaptureError, HandlerRunError, SpecError
from msnb.package import archive
from msnb.package.render import render_handler
from msnb.spec import spec_from_source
from msnb.templates.msnb_runtime.handler.custom_handler import TORCHSCRIPT_HINT
from msnb.trial import runner
from msnb.ui.display import SpecSummary

POOL = [("cell In[1]", "import torch\n" + NET)]
SAMPLES = [{"x": [1, 2, 3, 4]}, {"x": [4, 3, 2, 1]}]


def test_a_base_handler_subclass_is_the_class_form_and_its_module_binds_handle(tmp_path):
    spec = capture("clf", OWN_BASE_HANDLER, POOL, checkpoint=scripted_mlp(tmp_path / "mlp.pt"))
    assert (spec.form, spec.entry, spec.roles) == ("class", "Classifier", {})
    source = render_handler(spec)
    assert "class Scale(" in source and "class Classifier(" in source  # two classes in one module
    assert source.rstrip().endswith("handle = _msnb_entry(Classifier)")
    answers = runner.predict_in_process(spec, SAMPLES)
    assert [set(a) for a in answers] == [{"label", "top"}] * 2
    assert "your class Classifier" in SpecSummary(spec).text()


def test_a_class_with_initialize_and_handle_answers_bytes_with_its_content_type():
    spec = spec_from_source("bg", OWN_IMAGE_CLASS)
    assert (spec.form, spec.entry) == ("class", "BackgroundRemover")
    (answer,) = runner.run_handler(spec, [{"pixels": [[-3.0, 3.0], [3.0, -3.0]]}])
    assert answer.ok and answer.body == b"P5 2 2 255\n" + bytes([0, 255, 255, 0])


def test_a_module_level_handle_pulls_in_the_model_class_from_another_cell():
    spec = capture("fn", OWN_FUNCTION, POOL)
    assert (spec.form, spec.entry) == ("function", "handle")
    assert [b.names for b in spec.pulled_in] == [("torch", "Net")]
    answers = runner.predict_in_process(spec, SAMPLES)
    assert all(set(a) == {"label"} for a in answers)


@pytest.mark.parametrize(
    "cell, message, hint",
    [
        (
            "class H:\n    def handle(self, data, context):\n        return data\n",
            "Handler class `H` (line 1) has no `initialize` method",
            "initialize(self, context)",
        ),
        (
            OWN_IMAGE_CLASS + "\ndef init_function():\n    return torch.nn.Identity()\n",
            "defines both init_function (roles) and handler class `BackgroundRemover`",
            "one form per handler cell",
        ),
        (
            OWN_BASE_HANDLER + "\nclass Other(Classifier):\n    pass\n",
            "2 handler classes (`Classifier`, `Other`)",
            "move the other one (e.g. a base class) to a cell above",
        ),
        ("def handle(data):\n    return data\n", "wrong signature", "def handle(data, context)"),
        ("import torch\nx = 1\n", "defines no handler", "a BaseHandler subclass"),
    ],
    ids=["no-initialize", "roles-and-class", "two-classes", "handle-arity", "nothing"],
)
def test_a_cell_that_is_not_one_clear_form_is_refused_at_capture(cell, message, hint):
    with pytest.raises(CaptureError) as err:
        capture("bad", cell, POOL)
    assert message in err.value.message and hint in err.value.hint


def test_a_handle_answering_the_wrong_number_of_requests_is_caught_before_serving():
    short = OWN_FUNCTION.replace("for o in _model(batch)]", "for o in _model(batch)][:1]")
    spec = capture("short", short, POOL, batch_size=2)  # the server sends both samples in one batch
    with pytest.raises(HandlerRunError) as err:
        runner.predict_in_process(spec, SAMPLES)
    assert "returned a list of 1 for a batch of 2" in err.value.message
    assert "number of batch response mismatched" in err.value.message and "one answer per request" in err.value.hint


def test_a_handle_that_raises_shows_the_users_frames_not_msnbs():
    spec = capture("boom", OWN_FUNCTION.replace("batch = torch", "raise KeyError('pixels')\n    batch = torch"), POOL)
    with pytest.raises(HandlerRunError) as err:
        runner.predict_in_process(spec, SAMPLES)
    assert err.value.message == "handle raised KeyError: 'pixels'"
    assert "handler_model.py" in err.value.details and "localtest" not in err.value.details


def test_a_base_handler_without_a_model_file_names_the_file_and_the_option():
    with pytest.raises(HandlerRunError) as err:
        runner.validate(spec_from_source("clf", OWN_BASE_HANDLER))
    assert "serializedFile" in err.value.message and "no model file" in err.value.message
    assert "--checkpoint" in err.value.hint


# BaseHandler with no model class in the captured code: no eager model file can be written, so TorchScript it is.
NO_MODEL_CLASS = OWN_BASE_HANDLER.replace(
    "class Scale(torch.nn.Module):\n    def forward(self, x):", "class Scale:\n    def __call__(self, x):"
)


def test_a_state_dict_given_to_base_handler_is_refused_at_capture_saying_it_needs_torchscript(tmp_path):
    torch.save(torch.nn.Linear(4, 3).state_dict(), tmp_path / "weights.pt")
    with pytest.raises(SpecError) as err:
        capture("clf", NO_MODEL_CLASS, POOL, checkpoint=tmp_path / "weights.pt")
    assert "torch.jit.load" in err.value.message and "'weights.pt' is not TorchScript" in err.value.message
    assert err.value.hint == TORCHSCRIPT_HINT and "torch.jit.script" in err.value.hint


@pytest.mark.parametrize(
    ("checkpoint", "named"),
    [(torch.nn.Linear(4, 3), "the Linear module variable"), (torch.nn.Linear(4, 3).state_dict(), "state_dict")],
)
def test_a_live_eager_model_given_to_base_handler_is_refused_at_capture(checkpoint, named):
    with pytest.raises(SpecError, match=f"{named}.* is not TorchScript[\\s\\S]*Hint: pass a TorchScript"):
        spec_from_source("clf", NO_MODEL_CLASS, checkpoint=checkpoint)


def test_a_base_handler_subclass_of_a_subclass_is_refused_but_an_own_initialize_takes_a_state_dict(tmp_path):
    torch.save(torch.nn.Linear(4, 3).state_dict(), tmp_path / "weights.pt")
    pool = [("cell In[1]", NO_MODEL_CLASS)]
    with pytest.raises(SpecError, match="`Child` keeps BaseHandler's initialize"):
        capture("clf", "class Child(Classifier):\n    pass\n", pool, checkpoint=tmp_path / "weights.pt")
    own_loading = OWN_BASE_HANDLER.replace(
        "    def postprocess", "    def initialize(self, context):\n        self.model = None\n\n    def postprocess"
    )
    assert spec_from_source("clf", own_loading, checkpoint=tmp_path / "weights.pt").entry == "Classifier"


def test_an_initialize_reading_a_missing_file_names_it_and_the_options():
    cell = textwrap.dedent("""
        import os

        class Labels:
            def initialize(self, context):
                with open(os.path.join(context.system_properties["model_dir"], "labels.txt")) as f:
                    self.labels = f.read().split()

            def handle(self, data, context):
                return [self.labels[0] for _ in data]
    """)
    with pytest.raises(HandlerRunError) as err:
        runner.validate(spec_from_source("labels", cell))
    assert "'labels.txt' is not in the archive" in err.value.message
    assert "--extra-files" in err.value.hint and "--checkpoint" in err.value.hint


def test_a_live_scripted_module_is_archived_as_torchscript_for_base_handler(tmp_path):
    scripted = torch.jit.load(str(scripted_mlp(tmp_path / "mlp.pt")))
    spec = spec_from_source("clf", OWN_BASE_HANDLER, checkpoint=scripted)
    assert len(runner.predict_in_process(spec, SAMPLES)) == 2
    assert "saved as TorchScript" in SpecSummary(spec).text()


def test_init_kwargs_are_refused_for_an_own_handler():
    with pytest.raises(SpecError) as err:
        spec_from_source("bg", OWN_IMAGE_CLASS, init_kwargs={"hidden": 8})
    assert "--init-kwargs" in err.value.message and "drop --init-kwargs" in err.value.hint


def test_the_roles_form_is_unchanged():
    spec = spec_from_source("mlp", MLP_SOURCE)
    assert spec.form == "roles" and spec.handled_by == "init_function, preprocess, postprocess"
    assert "handler_factory" in render_handler(spec)


def test_a_handler_subclassing_a_handler_class_from_a_cell_above_is_the_class_form(tmp_path):
    pool = [*POOL, ("cell In[2]", OWN_BASE_HANDLER)]
    spec = capture("sub", "class Tuned(Classifier):\n    pass\n", pool, checkpoint=scripted_mlp(tmp_path / "m.pt"))
    assert (spec.form, spec.entry) == ("class", "Tuned")
    assert "Classifier" in spec.pulled_in[-1].names
    assert len(runner.predict_in_process(spec, SAMPLES)) == 2


def test_the_widget_tests_and_builds_an_own_handler_with_its_edits(tmp_path):
    from helpers import CPU_ONLY

    from msnb.session.core import Session
    from msnb.ui.widget.controller import Actions, Controller

    session = Session()
    session.add(spec_from_source("bg", OWN_IMAGE_CLASS, example={"pixels": [[3.0]]}))
    c = Controller("bg", Actions.from_session(session), CPU_ONLY)
    c.set("batch_size", "2")
    assert c.run("test"), c.result
    assert "P5 1 1 255" in c.result
    c.set("export_path", str(tmp_path / "out"))
    c.set("format", "zip-store")
    assert c.run("build"), c.result
    assert (tmp_path / "out" / "bg.mar").is_file()


def test_a_refusal_in_a_notebook_cell_names_the_cell():
    from msnb.spec import Origin

    with pytest.raises(CaptureError) as err:
        capture(
            "bad",
            "class H:\n    def handle(self, data, context):\n        return data\n",
            POOL,
            cell_origin=Origin("nb.ipynb, cell 4", "nb.ipynb", 4),
        )
    assert err.value.message.startswith("Handler class `H`") and "initialize" in err.value.message


def test_a_module_level_entry_point_of_any_name_is_the_one_data_context_function_or_the_one_named():
    cell = "def helper(x):\n    return x\n\ndef entry_point_function_name(data, context):\n    return data\n"
    spec = capture("fn", cell, POOL)
    assert (spec.form, spec.entry) == ("function", "entry_point_function_name")
    two = cell + "\ndef other(data, context):\n    return data\n"
    with pytest.raises(CaptureError) as err:
        capture("fn", two, POOL)
    assert "2 functions taking (data, context)" in err.value.message
    assert "--handler entry_point_function_name" in err.value.hint
    assert capture("fn", two, POOL, handler="other").entry == "other"


def test_a_module_level_handle_beside_a_handler_class_is_what_torchserve_calls():
    spec = capture("both", OWN_IMAGE_CLASS + "\ndef handle(data, context):\n    return data\n", POOL)
    assert (spec.form, spec.entry) == ("function", "handle")


def test_handler_names_an_entry_the_cell_lacks_and_the_refusal_lists_torchserves_default_handlers():
    with pytest.raises(CaptureError) as err:
        capture("fn", OWN_FUNCTION, POOL, handler="no_such_handler")
    assert "no function or class named `no_such_handler`" in err.value.message
    assert "text_classifier" in err.value.hint and "image_classifier" in err.value.hint


EAGER = textwrap.dedent("""
    import torch
    from ts.torch_handler.base_handler import BaseHandler

    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)

    class Classifier(BaseHandler):
        def preprocess(self, data):
            return torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)

        def postprocess(self, output):
            return [[round(v, 4) for v in o.tolist()] for o in output]
""")


def test_base_handlers_eager_mode_loads_the_notebooks_model_class_from_the_model_file_with_a_state_dict(tmp_path):
    torch.manual_seed(0)
    namespace: dict = {}
    exec(EAGER, namespace)
    net = namespace["TinyNet"]()
    torch.save(net.state_dict(), tmp_path / "w.pt")
    spec = capture("clf", EAGER, POOL, checkpoint=tmp_path / "w.pt")
    assert "class TinyNet" in spec.model_file() and "class Classifier" not in spec.model_file()
    expected = [round(v, 4) for v in net(torch.tensor([1.0, 2, 3, 4])).tolist()]
    assert runner.predict_in_process(spec, [{"x": [1, 2, 3, 4]}]) == [expected]
    assert capture("live", EAGER, POOL, checkpoint=net).model_file() is not None, "a live module: its state_dict"


def test_a_handler_whose_initialize_calls_base_handlers_first_loads_the_eager_model_too(tmp_path):
    # TorchServe's stateful example: initialize calls super().initialize(ctx), then builds its own state
    own = EAGER.replace(
        "    def preprocess(self, data):",
        "    def initialize(self, context):\n        super().initialize(context)\n        self.calls = 0\n\n"
        "    def preprocess(self, data):",
        1,
    )
    torch.manual_seed(0)
    namespace: dict = {}
    exec(EAGER, namespace)
    net = namespace["TinyNet"]()
    torch.save(net.state_dict(), tmp_path / "w.pt")
    spec = capture("clf", own, POOL, checkpoint=tmp_path / "w.pt")
    assert "class TinyNet" in spec.model_file()
    expected = [round(v, 4) for v in net(torch.tensor([1.0, 2, 3, 4])).tolist()]
    assert runner.predict_in_process(spec, [{"x": [1, 2, 3, 4]}]) == [expected]
    replaced = own.replace("super().initialize(context)", "self.model = TinyNet()")  # its own loading: no model file
    assert capture("own", replaced, POOL, checkpoint=tmp_path / "w.pt").model_file() is None


def test_eager_mode_with_two_model_classes_is_refused_as_torchserve_refuses_it_naming_both(tmp_path):
    two = EAGER.replace("class Classifier", "class Head(torch.nn.Module):\n    pass\n\nclass Classifier")
    with pytest.raises(SpecError) as err:
        capture("clf", two, POOL, checkpoint=torch.nn.Linear(4, 3).state_dict())
    assert "`TinyNet`, `Head`" in err.value.message and "Expected only one class" in err.value.message
    assert "TorchScript --checkpoint" in err.value.hint


def test_a_prediction_exception_is_answered_with_its_own_status_and_message_as_torchserve_does():
    cell = (
        "from ts.utils.util import PredictionException\n\n"
        "def handle(data, context):\n"
        "    if data is None:\n"
        "        return None\n"
        "    raise PredictionException('the input is not a sentence', 513)\n"
    )
    spec = capture("pe", cell, POOL)
    with pytest.raises(HandlerRunError) as err:
        runner.predict_in_process(spec, [{"x": 1}])
    assert err.value.message == "Sample 0 failed with status 513: the input is not a sentence"


def test_an_own_handlers_checkpoint_file_keeps_its_name_as_the_manifests_serialized_file(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    cell = (
        "import os\n\n"
        "def handle(data, context):\n"
        "    if data is None:\n"
        "        return None\n"
        "    name = context.manifest['model']['serializedFile']\n"
        "    where = os.path.join(context.system_properties['model_dir'], 'model.safetensors')\n"
        "    return [{'serialized': name, 'read': open(where, 'rb').read().decode()} for _ in data]\n"
    )
    spec = capture("st", cell, POOL, checkpoint=str(tmp_path / "model.safetensors"))
    assert runner.predict_in_process(spec, [1]) == [{"serialized": "model.safetensors", "read": "weights"}]
    mar = archive.build(spec, tmp_path / "out", fmt=archive.EXPORT_FORMAT)
    with zipfile.ZipFile(mar) as zf:
        assert "model.safetensors" in zf.namelist()
        assert json.loads(zf.read("MAR-INF/MANIFEST.json"))["model"]["serializedFile"] == "model.safetensors"
