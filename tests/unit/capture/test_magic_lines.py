"""How people type magics: comments after msnb's magic lines, comments above `%%ms_handler` (live and on export)."""

from __future__ import annotations

import nbformat

from msnb.capture.magic_lines import msnb_lines, without_comment
from msnb.capture.notebook import handler_cells


def test_a_trailing_comment_is_dropped_and_a_quoted_hash_kept():
    assert without_comment("ms_serve tiny  # 0.2 s here: a reload") == "ms_serve tiny"
    assert without_comment("""--data '{"tag": "#1"}' --header a:#b""") == """--data '{"tag": "#1"}' --header a:#b"""


def test_only_msnb_magic_lines_lose_their_comment_and_other_cell_magics_are_left_alone():
    assert msnb_lines(["x = 1  # kept\n", "y = %ms_test t  # dropped\n"]) == ["x = 1  # kept\n", "y = %ms_test t\n"]
    assert msnb_lines(["%%bash\n", "%ms_stop # not Python\n"]) == ["%%bash\n", "%ms_stop # not Python\n"]


def test_the_export_reads_a_handler_cell_that_starts_with_comments():
    source = "# the model we ship\n\n%%ms_handler tiny --version 2.0\ndef init_function():\n    return None\n"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    (cell,) = handler_cells(nb, "nb.ipynb")
    assert cell.line == "tiny --version 2.0"
    assert cell.body.splitlines()[:2] == ["# the model we ship", ""]  # line numbers as the user sees them
