"""BuildWidget: the ipywidgets form over the notebook's Session; it only wires events to the controller.

A click validates the fields at once in the kernel's main thread (field errors), then the action
(build, server start, registration) runs in a daemon thread whose progress callback updates the
progress bar, log and status widgets. Measured in Voila 0.5 + Chromium: widget updates reach the
page as they happen both from such a thread and from inside a click handler, but a click handler
keeps the kernel busy, so typing and later clicks would queue behind a 60 s server start; the
thread keeps the kernel free. Buttons are disabled while an action runs, and a click that slips
through is refused with a status line, never queued. ``wait()`` joins the running action.
"""

from __future__ import annotations

import html
import threading

import ipywidgets as widgets

from msnb.ui.widget.controller import BUTTONS, Actions, Controller
from msnb.ui.widget.devices import Inventory, list_devices
from msnb.ui.widget.fields import FORMAT_CHOICES, LABELS, engine_choices

_TEXTAREAS = ("requirements", "extra_files", "payload")
_STYLE = {"description_width": "160px"}
_BAR_STYLE = {"ok": "success", "failed": "danger"}  # "invalid" (fields to fix) leaves the bar empty and plain
FIELD_WIDTH = "760px"  # label 160 px + the longest choice ("zip-store (an uncompressed .mar, ...)") uncut
LOG_LINES = 40
# widget-html's line-height is a widget row (28 px): reset it, or a wrapped line or a log tail fills the screen
_WRAP = "white-space:pre-wrap;overflow-wrap:break-word;line-height:1.35"  # the log area shows the newest lines; the controller keeps 200


class BuildWidget(widgets.VBox):
    """Fields prefilled from the ``%%ms_handler`` spec ``name``; Test / Build / Serve / Predict / Explain / Stop."""

    def __init__(
        self, name: str | None = None, *, actions: Actions | None = None, devices: Inventory | None = None, **kwargs
    ):
        inventory = devices if devices is not None else list_devices()
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self.controller = Controller(name, actions or Actions.from_session(), inventory, on_change=self.refresh)
        self.fields = {field: self._field(field, inventory) for field in LABELS}
        self.field_errors = {field: _html(f"msnb-error-{field}") for field in LABELS}
        self.buttons = {b: self._button(b) for b in BUTTONS}
        self.progress = widgets.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="Progress", style=_STYLE
        ).add_class("msnb-progress")
        self.step, self.status = _html("msnb-step"), _html("msnb-status")
        self.result, self.log_view = _html("msnb-result"), _html("msnb-log")
        self.chart = _html("msnb-chart")  # Explain's attributions as bars
        note = _html("msnb-device-note", _line(inventory.note or ""))
        rows = [widgets.VBox([self.fields[f], self.field_errors[f]]) for f in LABELS]
        rows.insert(list(LABELS).index("device") + 1, note)
        title = widgets.HTML(f"<b>msnb</b> · {html.escape(name or 'new handler')}")
        super().__init__(
            children=[
                title,
                *rows,
                widgets.HBox(list(self.buttons.values())),
                widgets.HBox([self.progress, self.step]),
                self.status,
                widgets.HTML("<b>Result</b>"),
                self.result,
                self.chart,
                widgets.HTML("<b>Log</b>"),
                self.log_view,
            ],
            **kwargs,
        )
        self.add_class("msnb-widget")
        self.refresh()

    def _field(self, field: str, inventory: Inventory) -> widgets.Widget:
        common = dict(
            description=LABELS[field], style=_STYLE, layout=widgets.Layout(width="100%", max_width=FIELD_WIDTH)
        )
        value = self.controller.values[field]
        if field == "device":
            w = widgets.Dropdown(options=inventory.options(), value=value, **common)
        elif field == "format":
            w = widgets.Dropdown(options=FORMAT_CHOICES, value=value, **common)
        elif field == "engine":
            w = widgets.Dropdown(options=engine_choices(), value=value, **common)
        elif field in _TEXTAREAS:
            w = widgets.Textarea(value=value, rows=3 if field == "payload" else 2, **common)
        else:
            w = widgets.Text(value=value, **common)
        w.observe(lambda change: self.controller.set(field, change["new"]), names="value")
        return w.add_class(f"msnb-field-{field}")

    def _button(self, action: str) -> widgets.Button:
        button = widgets.Button(description=action.title(), tooltip=f"{action} the handler")
        button.on_click(lambda _: self.click(action))
        return button.add_class(f"msnb-{action}")

    def click(self, action: str) -> None:
        """What a button does: validate now, then run the action in a background thread."""
        job = self.controller.prepare(action)
        if job is not None:
            self._thread = threading.Thread(target=job, name=f"msnb-widget-{action}", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop following the session, then close the widgets."""
        self.controller.unsubscribe()
        super().close()

    def wait(self, timeout: float = 300.0) -> bool:
        """Wait for the running action to finish; True when none is running any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.controller.running is None

    def refresh(self) -> None:
        """Show the controller's state: fields (a handler cell run again refills them), buttons, field errors,
        progress, status, result, log."""
        c = self.controller
        with self._lock:
            for field, widget in getattr(self, "fields", {}).items():
                if widget.value != c.values[field]:
                    widget.value = c.values[field]
            for action, enabled in c.enabled().items():
                self.buttons[action].disabled = not enabled
            for field, label in self.field_errors.items():
                label.value = _error_html(c.errors.get(field, ""))
            step, fraction = c.progress
            self.progress.value = max(0.0, min(1.0, fraction))
            self.progress.bar_style = _BAR_STYLE.get(c.outcome, "")
            self.step.value = html.escape(step)
            self.status.value = _line(c.status)
            self.result.value = _pre(c.result, "#1b5e20" if c.result_ok else "#b71c1c")
            self.chart.value = c.chart
            self.log_view.value = _pre("\n".join(c.log[-LOG_LINES:]), "#333")


def _pre(text: str, colour: str) -> str:
    return f'<pre style="color:{colour};{_WRAP};margin:0">{html.escape(text)}</pre>'


def _line(text: str) -> str:
    """A line of text that wraps between words within the widget's width (a long path only where it must)."""
    return f'<div style="{_WRAP}">{html.escape(text)}</div>' if text else ""


def _html(css_class: str, value: str = "") -> widgets.HTML:
    return widgets.HTML(value).add_class(css_class)


def _error_html(text: str) -> str:
    return f'<span style="color:#b71c1c">{html.escape(text)}</span>' if text else ""
