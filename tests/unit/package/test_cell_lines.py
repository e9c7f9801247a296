"""A frame in the rendered handler_model.py is named by the cell and the cell's line its code came from."""

from __future__ import annotations

from msnb.capture.cells import capture
from msnb.errors import HandlerRunError
from msnb.package.cell_lines import in_cells, pointing_at_cells
from msnb.package.render import render_handler
from msnb.spec import Origin

NET = "import torch\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
HANDLER = "import torch\n\ndef init_function():\n    return Net()\n\ndef preprocess(sample):\n    y = sample + 1\n    return y\n"


def spec():
    pool = [(Origin("cell In[1]", cell=1), NET)]
    return capture("frames", HANDLER, pool, cell_origin=Origin("cell In[2]", cell=2), body_line=2)


def frame(rendered: str, code: str, function: str) -> str:
    line = rendered.splitlines().index(code) + 1
    return f'  File "/tmp/msnb-forkserver-x/model/handler_model.py", line {line}, in {function}\n{code}'


def test_frames_of_the_handler_cell_and_of_a_pulled_in_cell_name_their_cell_lines():
    s = spec()
    rendered = render_handler(s)
    text = (
        frame(rendered, "    y = sample + 1", "preprocess") + "\n" + frame(rendered, "        return x * 2", "forward")
    )
    shown = in_cells(text, s)
    assert "  cell In[2], line 8, in preprocess" in shown  # line 1 of the cell is its %%ms_handler line
    assert "  cell In[1], line 5, in forward" in shown and "handler_model.py" not in shown


def test_an_error_raised_inside_says_cell_lines_and_its_exception_once():
    s = spec()
    details = frame(render_handler(s), "    y = sample + 1", "preprocess") + "\nTypeError: boom"
    try:
        with pointing_at_cells(s):
            raise HandlerRunError("preprocess failed: TypeError: boom", "fix it", details=details)
    except HandlerRunError as err:
        assert "cell In[2], line 8, in preprocess" in str(err) and str(err).count("TypeError: boom") == 1
