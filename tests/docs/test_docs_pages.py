"""Every docs page's examples run as a reader runs them: in order, from an empty folder, in one real kernel per page
(tests/docrun.py reads the page; the Ray page runs in the Ray tier, tests/ray/test_ray_docs_page.py)."""

from __future__ import annotations

import pytest
from docrun import DOCS, blocks, can_isolate, run_python_page, run_shell_page
from helpers import RAY_GROUP

PYTHON_PAGES = [
    "quickstart.md",
    "notebook-loop.md",
    "capture.md",
    "runtime-values.md",
    "testing-without-a-server.md",
    "edit-loop.md",
    "own-handler.md",
    "streaming.md",
    "explanations.md",
    "widget.md",
    "serving.md",
    "hardening.md",
    "openai-mcp.md",
]
SHELL_PAGES = ["export.md", "kserve.md"]
RAY_PAGES = ["ray.md"]  # one more local Ray: run in the Ray tier, one after another with its other Rays
ISOLATED_PAGES = ["shadow.md"]  # servers on their default ports, kept from block to block: in a machine of its own


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_a_pages_python_examples_run_as_written_in_a_fresh_kernel(page, tmp_path):
    problems = run_python_page(DOCS / page, tmp_path)
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("page", SHELL_PAGES)
def test_a_shell_pages_commands_run_as_written_in_an_empty_folder(page, tmp_path):
    problems = run_shell_page(DOCS / page, tmp_path)
    assert not problems, "\n\n".join(problems)


def test_every_page_with_an_example_is_run_by_this_tier():
    with_examples = {p.name for p in DOCS.glob("*.md") if any(b.kind == "cell" for b in blocks(p))}
    run = set(PYTHON_PAGES) | set(RAY_PAGES)
    assert with_examples <= run, f"pages whose examples no test runs: {sorted(with_examples - run)}"
    assert not [p for p in run if not any(b.kind == "cell" for b in blocks(DOCS / p))], "a page here has no example"
    assert all(any(b.kind == "shell" for b in blocks(DOCS / p)) for p in SHELL_PAGES)


@pytest.mark.timeout(1800)
@pytest.mark.xdist_group(RAY_GROUP)  # its candidate is a local Ray: one Ray at a time
@pytest.mark.parametrize("page", ISOLATED_PAGES)
def test_a_migration_pages_commands_run_as_written_in_a_machine_of_their_own(page, tmp_path):
    # A plain TorchServe on 8080-8082 and `msnb shadow` in the background, used by the blocks after the one that
    # started them: the page runs in Linux namespaces of its own (its processes, its loopback).
    if not can_isolate():
        pytest.skip("this machine lets no unprivileged process make Linux namespaces (unshare --user --pid --net)")
    problems = run_shell_page(DOCS / page, tmp_path, isolated=True, block_timeout=600)
    assert not problems, "\n\n".join(problems)
