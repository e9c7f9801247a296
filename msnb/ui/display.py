"""What the magics show: a spec summary, an error with its Hint, progress, a prediction, the status (HTML and text)."""

from __future__ import annotations

import html
import json
from typing import Any

from msnb.capture.requirement_rules import LISTED, summarise
from msnb.engines.model_metrics import ModelMetrics
from msnb.errors import MsnbError, shown
from msnb.forms import ROLES_FORM
from msnb.spec import HandlerSpec

_MAX = 200  # characters of an example / prediction shown inline
_AMBER = " style='background:#fff4d6'"  # a warning row stands out from the summary it is part of


class View:
    """Rows of (label, value) shown as a small HTML table in notebooks and as text in a terminal."""

    css_class = "msnb"

    def __init__(self, title: str, rows: list[tuple[str, str]] = (), pre: str | None = None):
        self.title, self.rows, self.pre = title, list(rows), pre

    def text(self) -> str:
        lines = [shown(self.title, lines=True)] + [f"  {shown(label)}: {shown(value)}" for label, value in self.rows]
        if self.pre:
            lines.append(shown(self.pre.rstrip(), lines=True))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr{_AMBER if k == 'warning' else ''}><th style='text-align:left'>{_escaped(k)}</th>"
            f"<td style='text-align:left'>{_escaped(v)}</td></tr>"
            for k, v in self.rows
        )
        pre = f"<pre>{_escaped(self.pre)}</pre>" if self.pre else ""
        return f"<div class='{self.css_class}'><b>{_escaped(self.title)}</b><table>{rows}</table>{pre}</div>"


class ErrorView(View):
    """An MsnbError: message, ``Hint:`` and details (e.g. TorchServe worker log lines) — no traceback."""

    css_class = "msnb-error"

    def __init__(self, err: MsnbError):
        rows = [("Hint", err.hint)] if err.hint else []
        super().__init__(err.message, rows, pre=err.details)

    def text(self) -> str:
        lines = [self.title] + [f"Hint: {hint}" for _, hint in self.rows]
        return shown("\n".join(lines + ([self.pre.rstrip()] if self.pre else [])), lines=True)

    def _repr_html_(self) -> str:
        hint = f"<div><b>Hint:</b> {_escaped(self.rows[0][1])}</div>" if self.rows else ""
        pre = f"<pre>{_escaped(self.pre)}</pre>" if self.pre else ""
        return (
            f"<div class='msnb-error' style='border-left:4px solid #c33;padding-left:8px'>"
            f"<div style='color:#c33'>{_escaped(self.title)}</div>{hint}{pre}</div>"
        )


class SpecSummary(View):
    """A captured handler: who handles requests, init kwargs, pulled-in definitions, checkpoint, config, warnings, next steps."""

    def __init__(self, spec: HandlerSpec):
        rows = [("handler", spec.handled_by)]
        if spec.init_kwargs:
            rows.append(("init kwargs", _short(json.dumps(spec.init_kwargs))))
        pulled = "; ".join(f"{', '.join(b.names) or '(code)'} from {b.origin}" for b in spec.pulled_in)
        rows.append(("pulled in", pulled or "nothing from other cells"))
        rows.append(("bundled", ", ".join(spec.bundled) or "no local modules"))
        rows.append(("checkpoint", describe_checkpoint(spec.checkpoint, spec.form)))
        if spec.values is not None:
            rows += [("value", f"{v.line()} (snapshotted from the kernel)") for v in spec.values.items]
        if spec.objects is not None:
            rows += [("object", f"{o.line()} (saved from the kernel)") for o in spec.objects.items]
        rows.append(("config", ", ".join(f"{k}={v}" for k, v in spec.model_config().items())))
        if spec.requirements:
            rows.append(("requirements", summarise(spec.requirements, LISTED, quote=False)))
        if spec.extra_files:
            rows.append(("extra files", ", ".join(spec.extra_files)))
        if spec.example is not None:
            rows.append(("example", _short(_as_text(spec.example))))
        if spec.embeddings:
            rows.append(("embeddings", f"an answer is an embedding: POST /v1/embeddings with model {spec.name!r}"))
        rows += [("warning", w) for w in spec.warnings]
        rows.append(("next", f"%ms_test {spec.name}, %ms_build {spec.name}, %ms_serve {spec.name}"))
        super().__init__(f"Handler {spec.name!r} v{spec.version} captured (digest {spec.digest()})", rows)
        self.first = [WarningView(miss.warning()) for miss in spec.near_misses]  # a misspelt role: said first

    def text(self) -> str:
        return "\n".join([*(w.text() for w in self.first), super().text()])

    def _repr_html_(self) -> str:
        return "".join([*(w._repr_html_() for w in self.first), super()._repr_html_()])


class Note(View):
    """One grey line beside a result (how long a prediction took)."""

    css_class = "msnb-note"

    def text(self) -> str:
        return shown(self.title)

    def _repr_html_(self) -> str:
        return f"<div class='msnb-note' style='color:#666'>{_escaped(self.title)}</div>"


class Printed(list):
    """A streamed answer's chunks (a list) that ``%ms_predict --stream`` printed as they came: no Out repeats them."""

    def _ipython_display_(self) -> None:
        pass


def took(seconds: float) -> str:
    """A duration as a person reads it: ``12 ms`` or ``3.4 s``."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


class ProgressView(View):
    """One step of a long action: a progress bar in notebooks, ``[####....]  40% step`` in a terminal."""

    def __init__(self, label: str, step: str, fraction: float):
        self.fraction = max(0.0, min(1.0, float(fraction)))
        super().__init__(label, [("step", step)])

    def text(self) -> str:
        filled = round(self.fraction * 20)
        return f"{self.title}: [{'#' * filled}{'.' * (20 - filled)}] {self.fraction:4.0%} {self.rows[0][1]}"

    def _repr_html_(self) -> str:
        return (
            f"<div class='msnb-progress'>{_escaped(self.title)} <progress value='{self.fraction:.2f}' max='1'></progress> "
            f"{self.fraction:.0%} {_escaped(self.rows[0][1])}</div>"
        )


class WarningView(View):
    """A warning (e.g. the served model is older than its cell): one line, amber, not an error."""

    css_class = "msnb-warning"

    def __init__(self, message: str):
        super().__init__(message)

    def text(self) -> str:
        return f"Warning: {self.title}"

    def _repr_html_(self) -> str:
        return f"<div class='msnb-warning' style='border-left:4px solid #e6a700;padding-left:8px'>{_escaped(self.text())}</div>"


class LogView(View):
    """The newest worker log lines of one model."""

    def __init__(self, name: str, text: str):
        super().__init__(f"Worker log of {name!r} (newest last)", pre=text)


STATUS_COLUMNS = ("handler", "cell", "built archives", "served", "URL")


class Status(View, dict):
    """``Session.status()`` as a dict (so it can be used) that shows itself as a table per handler."""

    def __init__(self, status: dict[str, Any]):
        dict.__init__(self, status)
        server = status.get("server", {})
        rows = [("server", f"running at {server['url']}" if server.get("running") else "not running")]
        rows += [
            (label, server[key])
            for label, key in (
                ("OpenAI API", "openai_base_url"),
                ("MCP", "mcp_url"),
                ("logs", "log_dir"),
                ("key file", "key_file"),
            )
            if server.get(key)
        ]
        View.__init__(self, "msnb status", rows)
        self.table = [_handler_cells(n, h) for n, h in status.get("handlers", {}).items()]
        self.warnings = [h["why"] for h in status.get("handlers", {}).values() if h.get("why")]

    def text(self) -> str:
        lines = [View.text(self)]
        for cells in self.table:
            lines.append("  " + " | ".join(f"{c}: {v}" for c, v in zip(STATUS_COLUMNS, cells) if v))
        return "\n".join(lines + [f"Warning: {why}" for why in self.warnings])

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{c}</th>" for c in STATUS_COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{_escaped(v)}</td>" for v in cells) + "</tr>"
            for cells in self.table
        )
        table = (
            f"<table class='msnb-status-table'><tr>{head}</tr>{body}</table>"
            if self.table
            else "no handler defined yet"
        )
        warned = "".join(f"<div><b>Warning:</b> {_escaped(why)}</div>" for why in self.warnings)
        return View._repr_html_(self).removesuffix("</div>") + table + warned + "</div>"

    __eq__ = dict.__eq__
    __hash__ = None


def _handler_cells(name: str, h: dict[str, Any]) -> tuple[str, ...]:
    built = "; ".join(
        f"{a['path']} v{a['version']}" + (" (stale: older than the cell)" if a["stale"] else "") for a in h["archives"]
    )
    served = "; ".join(
        f"v{m['version']}"
        + (" (default)" if m["default"] else "")
        + (" (stale)" if h["stale"] else "")
        + _generation(m)
        for m in h["served"]
    )
    sizes = {int(k): v for k, v in h.get("batches", {}).items()}
    batched = ModelMetrics(fallbacks=h.get("batch_fallbacks", 0), sizes=sizes).line()
    if batched:  # the batches the server formed, and those it retried one sample at a time
        served += f" ({batched})"
    return name, f"v{h['version']} digest {h['digest']}", built or "none", served or "not served", h["url"] or ""


def _generation(served: dict[str, Any]) -> str:
    """' generation 3 (last: reload)' for a version the notebook's server reloads in place (msnb.session.reload)."""
    if "generation" not in served:
        return ""
    return f" generation {served['generation']} (last: {served['redeploy']}, {served['why']})"


def describe_checkpoint(checkpoint: Any, form: str = ROLES_FORM) -> str:
    """A one-line description of a spec's checkpoint (path, module or state_dict)."""
    if checkpoint is None:
        return "none (init_function's own weights)" if form == ROLES_FORM else "none (no serializedFile)"
    if type(checkpoint).__module__.startswith("torch.jit") and form != ROLES_FORM:
        return f"{type(checkpoint).__name__} variable (saved as TorchScript)"
    if isinstance(checkpoint, dict):
        return f"state_dict variable ({len(checkpoint)} entries)"
    if hasattr(checkpoint, "state_dict") and not isinstance(checkpoint, str):
        return f"{type(checkpoint).__name__} module variable (saved as a state_dict)"
    return str(checkpoint)


def _as_text(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _short(text: str, limit: int = _MAX) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escaped(text: Any) -> str:
    """``text`` as HTML text (its str(), with <, >, & and quotes escaped, control characters shown escaped)."""
    return html.escape(shown(text, lines=True))
