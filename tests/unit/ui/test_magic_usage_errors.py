"""A magic's OptionError reaches IPython as its UsageError (msnb.errors itself imports no IPython)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from msnb.errors import MsnbError, OptionError
from msnb.ui import magics


def test_a_magics_option_error_is_an_ipython_usage_error_with_the_same_message():
    @magics._usage_errors
    def ms_example(line: str) -> None:
        raise OptionError(f"bad {line}", "give a good one.", details="usage: %ms_example NAME")

    with pytest.raises(UsageError) as err:
        ms_example("--nope")
    assert isinstance(err.value, OptionError) and isinstance(err.value, MsnbError)
    assert str(err.value) == "bad --nope\nHint: give a good one.\nusage: %ms_example NAME"
    assert err.value.hint == "give a good one."


def test_other_errors_pass_through_unchanged():
    @magics._usage_errors
    def ms_example(line: str) -> None:
        raise MsnbError("server down", "start it.")

    with pytest.raises(MsnbError) as err:
        ms_example("x")
    assert type(err.value) is MsnbError and not isinstance(err.value, UsageError)


def test_every_magic_raises_its_option_errors_as_usage_errors():
    wrapper = magics._usage_errors(print).__code__
    for kind in ("line", "cell"):
        for name, method in magics.MsnbMagics.magics[kind].items():
            assert getattr(magics.MsnbMagics, method).__code__ is wrapper, name
