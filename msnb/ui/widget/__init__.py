"""The build widget: a form (``form``) and its rules (``controller``) under a thin ipywidgets view (``view``)."""

from msnb.ui.widget.view import BuildWidget

__all__ = ["BuildWidget"]
