"""`%ms_compare NAME` in a real IPython shell: the handler cell served by the notebook's TorchServe and by its Ray
Serve side by side (the shared local Ray), each request sent to both, the table shown; the cell fails when an
answer differs."""

from __future__ import annotations

import json
import textwrap

import torch
from test_ray_notebook import cell

# A request without "x" makes the input from the serving process's pid: the two engines' answers then differ.
HANDLER = textwrap.dedent(
    """
    import os
    import torch

    def init_function():
        torch.manual_seed(0)
        return torch.nn.Linear(2, 1)

    def preprocess(sample):
        return torch.tensor(sample["x"] if "x" in sample else [os.getpid(), 0], dtype=torch.float32)

    def postprocess(output):
        return {"y": round(float(output), 4)}
    """
)


def test_ms_compare_shows_both_engines_answers_and_fails_the_cell_on_a_difference(ip, ray_session, tmp_path):
    cell(ip, f"%%ms_handler cmp --example '{{\"x\": [1, 2]}}'\n{HANDLER}")
    try:
        shown = cell(ip, "%ms_compare cmp")  # the --example, sent to both
        assert "answered all 1 requests alike" in shown.text()
        assert "1: predictions cmp  200" in shown.pre and "equal" in shown.pre
        torch.manual_seed(0)  # the notebook's own computation: plain torch on the same weights and input
        with torch.no_grad():
            expected = round(float(torch.nn.Linear(2, 1)(torch.tensor([0.5, -2.0]))), 4)
        shown = cell(ip, """%ms_compare cmp --data '{"x": [0.5, -2]}'""")
        assert "1: predictions cmp  200" in shown.pre and "equal" in shown.pre
        assert ray_session.predict("cmp", {"x": [0.5, -2]}) == {"y": expected}

        requests = tmp_path / "requests.jsonl"
        requests.write_text("\n".join(json.dumps(r) for r in [{"body": {"x": [1, 2]}}, {"body": {"pid": 1}}]))
        result = ip.run_cell(f"%ms_compare cmp --data @{requests}")
        assert not result.success, "a difference fails the cell"
        error = result.error_in_exec
        assert "disagree on 1 of 2 requests" in error.message and "Hint:" in error.render()
        rows = {line.split("  ")[0]: line.split() for line in error.details.splitlines() if line[:1].isdigit()}
        assert rows["1: predictions cmp"][-3:] == ["200", "200", "equal"]
        assert rows["2: predictions cmp"][3:6] == ["200", "200", "$.y:"]
    finally:
        ip.run_line_magic("ms_stop", "")  # the notebook's TorchServe (the shared Ray stays, as the fixture keeps it)
