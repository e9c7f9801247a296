"""docs/ray.md's examples run as written, in order, from an empty folder (tests/docrun.py): its notebook cells in one
real kernel, and its terminal commands (archives -> local Ray -> compare -> export -> a two-node cluster: `ray start`,
`serve run`, `serve deploy`, curl, `msnb predict`, `ray stop`) in a machine of its own. Here, not in the docs tier, so
that their Ray starts run with the Ray tier's others, one at a time."""

from __future__ import annotations

import pytest
from docrun import DOCS, can_isolate, run_python_page, run_shell_page


@pytest.mark.timeout(900)
def test_the_ray_pages_examples_run_as_written_in_a_fresh_kernel(tmp_path):
    problems = run_python_page(DOCS / "ray.md", tmp_path, cell_timeout=400)  # a Ray start on a busy 2-core machine
    assert not problems, "\n\n".join(problems)


@pytest.mark.timeout(2400)
def test_the_ray_pages_commands_run_as_written_up_to_a_two_node_cluster(tmp_path):
    # `ray stop` ends every Ray process it can see and the page's ports are Ray's defaults: the page runs in Linux
    # namespaces of its own (its processes, its loopback), which ends whatever it started when the run ends.
    if not can_isolate():
        pytest.skip("this machine lets no unprivileged process make Linux namespaces (unshare --user --pid --net)")
    problems = run_shell_page(DOCS / "ray.md", tmp_path, isolated=True, block_timeout=600)
    assert not problems, "\n\n".join(problems)
