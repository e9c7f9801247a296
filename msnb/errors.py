"""The one exception type users see: what went wrong, and a `Hint:` saying how to fix it."""

from __future__ import annotations

import re
from typing import Any

# Characters a name may hold that would act on a terminal or a page instead of showing: C0 and C1 controls, DEL,
# and the bidirectional overrides that reorder a line. Shown escaped (\x1b, \u202e) wherever msnb shows text.
_BEYOND_C0 = "\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
_ANY_CONTROL = re.compile("[\x00-\x1f" + _BEYOND_C0 + "]")
_INLINE_CONTROL = re.compile("[\x00-\x08\x0b-\x1f" + _BEYOND_C0 + "]")  # keeps tabs and newlines


def shown(text: Any, lines: bool = False) -> str:
    """``text`` safe to print: control characters escaped (``lines``: newlines and tabs kept, as in a message)."""
    pattern = _INLINE_CONTROL if lines else _ANY_CONTROL
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


class MsnbError(Exception):
    """A failure a person can act on.

    ``str(err)`` is the message followed by ``Hint: ...`` (when there is a hint) and any
    ``details`` (e.g. the worker log lines that explain a server-side failure).
    """

    def __init__(self, message: str, hint: str | None = None, details: str | None = None):
        self.message = message
        self.hint = hint
        self.details = details
        super().__init__(self.render())

    def render(self, details: bool = True) -> str:
        """The one rendering of an error: message, ``Hint: ...`` and (unless ``details`` is False) the details."""
        parts = [self.message]
        if self.hint:
            parts.append(f"Hint: {self.hint}")
        if self.details and details:
            parts.append(self.details.rstrip())
        return "\n".join(parts)


class OptionError(MsnbError):
    """A bad option or input on a magic or command line: the CLI exits 2; a magic raises it as IPython's
    UsageError (``msnb.ui.magics`` re-raises it as a subclass of both, so this module imports no IPython)."""


class SpecError(MsnbError):
    """The handler definition or its options are wrong (caught before anything is built)."""


class CaptureError(SpecError):
    """A handler cell cannot be captured: syntax, roles, or an unresolvable name."""


class BuildError(MsnbError):
    """Rendering, validating or archiving a handler failed."""


class HandlerRunError(MsnbError):
    """The handler itself failed in its pre-flight test process (load or a sample)."""


class ServerError(MsnbError):
    """The local TorchServe could not start, register, answer or stop."""


class Interrupted(MsnbError):
    """Ctrl-C (or Jupyter's stop button) ended a step: the message says which, and what state remains."""
