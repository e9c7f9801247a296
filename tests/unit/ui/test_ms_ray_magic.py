"""`%ms_ray up|down|status`: the shared Ray's commands from a notebook cell, with IPython's own usage errors."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output


def test_ms_ray_status_with_nothing_up_says_so_and_how_to_start_it(ip, tmp_path, monkeypatch):
    monkeypatch.setenv("MSNB_STATE_DIR", str(tmp_path))
    with capture_output() as printed:
        ip.run_line_magic("ms_ray", "status")
    assert "no shared Ray is up; start it with `msnb ray up` (in a notebook: `%ms_ray up`" in printed.stdout


def test_ms_ray_down_with_nothing_up_says_so_and_leaves_no_state_file(ip, tmp_path, monkeypatch):
    monkeypatch.setenv("MSNB_STATE_DIR", str(tmp_path))
    with capture_output() as printed:
        ip.run_line_magic("ms_ray", "down")
    assert printed.stdout.strip() == "no shared Ray is up"
    assert not (tmp_path / "ray-shared.json").exists()


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("", "the following arguments are required: action"),
        ("sideways", "argument action: invalid choice: 'sideways'"),
        ("up --port x", "argument --port: invalid int value: 'x'"),
    ],
)
def test_a_bad_ms_ray_line_is_a_usage_error_that_says_what_is_wrong(ip, line, said):
    with pytest.raises(UsageError) as told:
        ip.run_line_magic("ms_ray", line)
    assert said in str(told.value)
