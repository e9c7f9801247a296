"""The notebook loop without traps, in a real Jupyter kernel (nbclient): the widget serves the cell as the kernel now
holds it; a misspelt role is said first and beside %ms_test's and %ms_serve's answers; a role's bad return is said
as that role's; every line number counts the %%ms_handler line as line 1; %ms_status says which batches formed."""

from __future__ import annotations

import json
import re
import textwrap

import nbformat
import pytest
import torch
from nbrun import execute_notebook

# One notebook run for the module (its tests read it): one worker runs them all.
pytestmark = [
    pytest.mark.kernel,
    pytest.mark.server,
    pytest.mark.timeout(900),
    pytest.mark.xdist_group("notebook-loop"),
]

HANDLER = textwrap.dedent(
    """\
    %%ms_handler churn --batch-size 4 --max-batch-delay 300 --example '{{"x": [1, 2, 3, 4]}}'
    import torch

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 2)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {{"code": {code}, "scores": [round(float(v), 5) for v in output]}}
    """
)
# Line 1 is %%ms_handler, as the notebook numbers the cell: preprocess raises on line 5, postprocesss is on line 7.
TYPO = textwrap.dedent(
    """\
    %%ms_handler typo --example '{"x": [1, 2, 3, 4]}'
    import torch

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32) * sample["scale"]

    def postprocesss(output):
        return output.tolist()

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 2)
    """
)
ROLE_RETURNS = textwrap.dedent(
    """\
    import msnb
    from msnb.errors import MsnbError
    for name, source in {
        "listy": "def init_function():\\n    return torch.nn.Linear(4, 2)\\n\\ndef preprocess(s):\\n    return s['x']\\n",
        "setty": "def init_function():\\n    return torch.nn.Linear(4, 2)\\n\\n"
        "def preprocess(s):\\n    return torch.tensor(s['x'], dtype=torch.float32)\\n\\n"
        "def postprocess(out):\\n    return {'tags': {'a'}}\\n",
    }.items():
        get_ipython().run_cell_magic("ms_handler", name, "import torch\\n" + source)
        try:
            msnb.test_handler(name, [{"x": [1.0, 2.0, 3.0, 4.0]}])
        except MsnbError as err:
            print(f"{name} said:", err.render(details=False).replace("\\n", " | "))
    """
)
WIDGET_SERVE = """\
w.click("serve")
assert w.wait(300)
print("{label}:", json.dumps(w.controller.result))
w.click("predict")
assert w.wait(120)
print("{label} predict:", json.dumps(w.controller.result))
print("{label} log:", json.dumps(w.controller.log))
"""
BATCHES = """\
import time
server = msnb.session.current().server()
until = time.monotonic() + 120
while time.monotonic() < until and not msnb.session.current().status()["handlers"]["churn"]["batches"].get("4"):
    server.predict_many("churn", [{"x": [float(i), 1.0, 2.0, 3.0]} for i in range(8)])  # concurrent: batched
status = %ms_status
print("status:", json.dumps(status.text()))
print("batches:", json.dumps(status["handlers"]["churn"]["batches"]))
w.click("predict")  # the widget's status line after its next action
assert w.wait(120)
print("widget status:", json.dumps(w.controller.status))
"""


def loop_notebook(folder):
    cells = [
        "%load_ext msnb\nimport json\nimport msnb",
        HANDLER.format(code=1),
        "w = msnb.BuildWidget('churn')",
        WIDGET_SERVE.format(label="first"),
        HANDLER.format(code=2),  # the handler cell edited and run again: the widget must serve this one
        WIDGET_SERVE.format(label="edited"),
        BATCHES,
        TYPO,
        '%ms_test typo --data \'{"x": [1, 2, 3, 4], "scale": 2}\'',
        "%ms_serve typo",
        "try:\n    msnb.test_handler('typo', [{'x': [1, 2, 3, 4]}])\nexcept Exception as err:\n"
        "    print('traceback:', json.dumps(str(err)))",
        ROLE_RETURNS,
        "%ms_stop",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "loop.ipynb"
    nbformat.write(nb, path)
    return path


def texts(cell) -> str:
    """Everything a cell showed: its prints, displays and results as text."""
    shown = []
    for out in cell.get("outputs", []):
        shown.append(out.get("text", ""))
        shown.append(str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(shown)


def printed(nb, label: str):
    lines = [ln for cell in nb.cells for ln in texts(cell).splitlines() if ln.startswith(f"{label}: ")]
    assert lines, f"nothing printed as {label!r}"
    return json.loads(lines[-1][len(label) + 2 :])


def scores() -> list[float]:
    """The notebook's own model(x), in plain torch."""
    torch.manual_seed(0)
    with torch.no_grad():
        return [round(float(v), 5) for v in torch.nn.Linear(4, 2)(torch.tensor([1.0, 2.0, 3.0, 4.0]))]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loop")
    return execute_notebook(loop_notebook(folder), folder / "run", timeout=300)


def test_the_widget_serves_the_cell_as_the_kernel_now_holds_it_and_never_calls_the_old_one_done(ran):
    first, edited = printed(ran, "first"), printed(ran, "edited")
    digests = [re.search(r"digest (\w+)", said).group(1) for said in (first, edited)]
    assert digests[0] != digests[1] and first.startswith("Serving churn v1.0") and edited.startswith("Serving churn")
    assert '"code": 1' in printed(ran, "first predict") and '"code": 2' in printed(ran, "edited predict")
    log = "\n".join(printed(ran, "edited log"))
    assert "ran again: the form uses it" in log and f"digest {digests[0]}" not in log.split("ran again")[-1]
    assert "already serving" not in log.split("ran again")[-1]
    answer = json.loads(printed(ran, "edited predict").split("\n", 1)[1])
    assert answer["scores"] == pytest.approx(scores(), abs=1e-5)  # plain torch's model(x)


def test_status_and_the_widget_say_which_batches_the_server_formed(ran):
    batches = printed(ran, "batches")
    assert batches.get("4", 0) >= 1 and all(1 <= int(size) <= 4 for size in batches), batches
    assert "batches formed: size 4 ×" in printed(ran, "status")
    assert "Batches formed: size 4 ×" in printed(ran, "widget status")


def test_a_misspelt_role_is_said_first_and_beside_the_answers_of_ms_test_and_ms_serve(ran):
    summary, tested, served = (texts(ran.cells[i]) for i in (7, 8, 9))
    assert summary.lstrip().startswith("Warning: line 7: `postprocesss` is not a role and nothing calls it")
    beside = "no postprocess role (`postprocesss` on line 7 is none): this is the model's raw output"
    assert beside in tested and beside in served and "ready: typo v1.0" in served


def test_line_numbers_count_the_ms_handler_line_in_capture_messages_and_tracebacks(ran):
    traceback = printed(ran, "traceback")  # preprocess reads sample["scale"], which this sample lacks
    assert re.search(r"cell In\[\d+\], line 5, in preprocess", traceback), traceback
    assert "line 7: `postprocesss`" in texts(ran.cells[7])  # the same cell, the same numbering


def test_a_roles_bad_return_is_said_as_that_roles_with_its_type_and_a_hint(ran):
    listy, setty = printed_plain(ran, "listy said"), printed_plain(ran, "setty said")
    assert "preprocess returned a list of 4 floats, not a tensor, and the model cannot take it" in listy
    assert "Hint: return a tensor from preprocess" in listy and "shape" not in listy.split("Hint:")[1]
    assert "postprocess returned a dict with keys 'tags', holding a set at ['tags'], which JSON cannot carry" in setty
    assert "Hint: return JSON-serialisable values from postprocess" in setty


def printed_plain(nb, label: str) -> str:
    lines = [ln for cell in nb.cells for ln in texts(cell).splitlines() if ln.startswith(f"{label}: ")]
    assert lines, f"nothing printed as {label!r}"
    return lines[-1]
