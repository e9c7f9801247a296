"""The one exception type users see: what went wrong, and a `Hint:` saying how to fix it."""

from __future__ import annotations

from IPython.core.error import UsageError


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


class OptionError(MsnbError, UsageError):
    """A bad option or input on a magic or command line: IPython shows it as a usage error, the CLI exits 2."""


class SpecError(MsnbError):
    """The handler definition or its options are wrong (caught before anything is built)."""


class CaptureError(SpecError):
    """A handler cell cannot be captured: syntax, roles, or an unresolvable name."""


class BuildError(MsnbError):
    """Rendering, validating or archiving a handler failed."""


class HandlerRunError(MsnbError):
    """The handler itself failed when run in-process (load or a sample)."""


class ServerError(MsnbError):
    """The local TorchServe could not start, register, answer or stop."""


class Interrupted(MsnbError):
    """Ctrl-C (or Jupyter's stop button) ended a step: the message says which, and what state remains."""
