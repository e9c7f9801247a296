"""docs/ray.md's examples run as written, in order, from an empty folder, in one real kernel (tests/docrun.py): the
docs tier's Ray page, here so that its one Ray start runs with the Ray tier's others, one at a time."""

from __future__ import annotations

import pytest
from docrun import DOCS, run_python_page


@pytest.mark.timeout(900)
def test_the_ray_pages_examples_run_as_written_in_a_fresh_kernel(tmp_path):
    problems = run_python_page(DOCS / "ray.md", tmp_path, cell_timeout=400)  # a Ray start on a busy 2-core machine
    assert not problems, "\n\n".join(problems)
