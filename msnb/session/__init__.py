"""Session: the notebook's state — its handler specs, what was built and served, and on which engine.

``core`` holds ``Session`` (what the magics, the widget and ``msnb.*`` call); ``state`` what it knows and tells;
``deployment`` the staged folder laid out in an engine and served; ``reload`` code-only edits reloaded in a live
worker; ``progress`` the progress a step shows. ``current()``, ``Session`` and ``deploy`` are public here.
"""

from msnb.session.core import Session, StaleModelWarning, current
from msnb.session.deployment import deploy

__all__ = ["Session", "StaleModelWarning", "current", "deploy"]
