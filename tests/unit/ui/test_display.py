"""What the magics show, without a kernel: summaries, errors with their Hint, progress and status."""

from __future__ import annotations

import torch

from msnb.errors import ServerError
from msnb.spec import HandlerSpec, SourceBlock
from msnb.ui.display import ErrorView, ProgressView, SpecSummary, Status, describe_checkpoint


def spec_with_pulled_in() -> HandlerSpec:
    blocks = (
        SourceBlock("import torch\nclass Net(torch.nn.Module):\n    pass\n", "cell In[3]", ("torch", "Net")),
        SourceBlock("VOCAB = {'<a&b>': 1}\n", "cell In[4]", ("VOCAB",)),
        SourceBlock("def init_function():\n    return Net()\n", "cell In[5]", ("init_function",)),
    )
    return HandlerSpec(
        name="clf",
        blocks=blocks,
        roles={"init_function": "init_function"},
        init_kwargs={"k": 2},
        batch_size=8,
        example={"text": "<b>hi</b>"},
        warnings=("line 3: `train()` is not kept",),
    )


def test_summary_names_what_was_pulled_in_from_which_cell():
    summary = SpecSummary(spec_with_pulled_in())
    text = repr(summary)
    assert "torch, Net from cell In[3]; VOCAB from cell In[4]" in text
    assert "batchSize=8" in text and '{"k": 2}' in text and "train()" in text and "%ms_test clf" in text
    html = summary._repr_html_()
    assert "<b>hi</b>" not in html and "&lt;b&gt;hi&lt;/b&gt;" in html  # user text is escaped


def test_error_shows_message_hint_and_log_lines_but_no_traceback():
    err = ServerError("Registering clf failed.", "fix init_function.", details="worker: ValueError: bad <shape>")
    view = ErrorView(err)
    assert repr(view) == "Registering clf failed.\nHint: fix init_function.\nworker: ValueError: bad <shape>"
    html = view._repr_html_()
    assert "msnb-error" in html and "<pre>worker: ValueError: bad &lt;shape&gt;</pre>" in html
    assert repr(ErrorView(ServerError("No hint here."))) == "No hint here."


def test_progress_and_status():
    assert "[##########..........]  50% packing" in repr(ProgressView("Building clf", "packing", 0.5))
    assert "value='1.00'" in ProgressView("Building clf", "done", 3)._repr_html_()
    status = Status(
        {
            "specs": {"clf": {"version": "1.0", "digest": "abc"}},
            "archives": {},
            "server": {"running": False, "url": None},
            "models": [],
        }
    )
    assert status["specs"]["clf"]["digest"] == "abc" and "server: not running" in repr(status)


def test_checkpoint_descriptions():
    assert describe_checkpoint(None).startswith("none")
    assert describe_checkpoint("/m/model.pt") == "/m/model.pt"
    assert describe_checkpoint(torch.nn.Linear(2, 2)).startswith("Linear module")
    assert describe_checkpoint(torch.nn.Linear(2, 2).state_dict()) == "state_dict variable (2 entries)"


def test_status_shows_the_openai_and_mcp_urls_of_a_running_server():
    server = {
        "running": True,
        "url": "http://127.0.0.1:1",
        "openai_base_url": "http://127.0.0.1:2/v1",
        "mcp_url": "http://127.0.0.1:2/mcp",
    }
    shown = repr(Status({"server": server, "handlers": {}}))
    assert "OpenAI API: http://127.0.0.1:2/v1" in shown and "MCP: http://127.0.0.1:2/mcp" in shown


def test_a_misspelt_role_is_shown_first_as_a_warning_box_above_the_summary():
    from msnb.capture.cells import capture

    cell = "import torch\n\ndef init_function():\n    return torch.nn.Identity()\n\ndef postprocesss(out):\n    return out\n"
    summary = SpecSummary(capture("typo", cell, [], body_line=2))
    text, html = summary.text(), summary._repr_html_()
    assert text.startswith("Warning: line 7: `postprocesss` is not a role and nothing calls it: did you mean")
    assert html.startswith("<div class='msnb-warning'") and html.index("msnb-warning") < html.index("captured")
    assert text.count("postprocesss") == 2  # said once: its name and its Hint; no summary row repeats it


def test_status_says_the_batches_the_server_formed_and_its_fallbacks_beside_the_served_version():
    row = {"version": "1.0", "digest": "d", "archives": [], "stale": False, "why": None, "url": "u"}
    row |= {"served": [{"version": "1.0", "default": True}], "batches": {"4": 3, "1": 2}, "batch_fallbacks": 1}
    shown = repr(Status({"server": {"running": True, "url": "u"}, "handlers": {"churn": row}}))
    assert "served: v1.0 (default) (batches formed: size 4 ×3, size 1 ×2; 1 batch fallback (see %ms_logs))" in shown
