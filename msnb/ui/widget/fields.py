"""The build widget's fields: their labels, the text each shows for a spec, and parsing with field errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msnb.engines import registry
from msnb.errors import MsnbError
from msnb.options import DEFAULTS, OPTION, OPTIONS, option_value
from msnb.package.formats import DEFAULT_EXPORT, DEV_FORMAT, FORMATS, SERVE_FORMAT
from msnb.ui.widget.devices import Inventory

# field -> the label the widget shows (its ``description``); the handler options' labels come from their table.
LABELS = {
    "name": "Model name",
    **{o.dest: o.label for o in OPTIONS if o.label},
    "export_path": "Export folder",
    "format": "Format",
    "engine": "Engine",
    "payload": "Request JSON",
}
SPEC_FIELDS = ("name", *(o.dest for o in OPTIONS if o.label))
FIELDS_FOR = {
    "test": SPEC_FIELDS + ("payload",),
    "build": SPEC_FIELDS + ("export_path", "format"),
    "serve": SPEC_FIELDS + ("engine",),
    "predict": ("payload",),
    "explain": ("payload",),
    "logs": (),
    "stop": (),
}
REQUIRED = {"predict": ("payload",), "explain": ("payload",)}
# The build dropdown: (label, archive format) for the formats a person builds by hand.
FORMAT_CHOICES = tuple((f"{f.name} ({f.help})", f.name) for f in FORMATS.values() if f.name != SERVE_FORMAT)
NO_PAYLOAD = object()


class FieldError(ValueError):
    """What is wrong with one field's text (shown next to the field)."""


def engine_choices() -> tuple[tuple[str, str], ...]:
    """The serve dropdown: (label, engine) for every engine of the registry, the reference (TorchServe) first."""
    return tuple((registry.get(kind).choice, kind) for kind in registry.kinds())


def empty_values() -> dict[str, str]:
    """The form of a new handler: defaults where TorchServe has them, the rest empty."""
    values = {field: "" for field in LABELS}
    values.update({k: str(v) for k, v in DEFAULTS.items() if k in LABELS and isinstance(v, (int, str))})
    values.update(version="", export_path=DEFAULT_EXPORT, format=DEV_FORMAT, engine=registry.reference().kind)
    return values


def values_from_spec(spec: Any, inventory: Inventory) -> dict[str, str]:
    """The text each field shows for ``spec``."""
    return {
        "name": spec.name,
        "version": spec.version,
        "checkpoint": _checkpoint_text(spec.checkpoint),
        "requirements": "\n".join(spec.requirements),
        "extra_files": "\n".join(spec.extra_files),
        "batch_size": str(spec.batch_size),
        "max_batch_delay": str(spec.max_batch_delay),
        "workers": str(spec.workers),
        "response_timeout": str(spec.response_timeout),
        "device": inventory.key_for(spec.device),
        "max_gpu_memory": "" if spec.max_gpu_memory is None else str(spec.max_gpu_memory),
        "payload": "" if spec.example is None else json.dumps(spec.example),
        "engine": registry.reference().kind,
    }


def parse(field: str, text: Any, base: Any = None, required: bool = False) -> Any:
    """The value of ``field`` from its text; raises FieldError saying what is wrong and how to fix it."""
    text = "" if text is None else str(text).strip()
    if field == "checkpoint" and base is not None and text and text == _checkpoint_text(base.checkpoint):
        return base.checkpoint  # unchanged: keep the file as it was given, or the in-memory state_dict / module
    if field in OPTION and field not in ("version", "device"):  # the %%ms_handler line's own parser reads the rest
        try:
            value = option_value(field, text, Path.cwd())
        except MsnbError as err:
            raise FieldError(err.render().replace(OPTION[field].flag, LABELS[field], 1)) from None
        return _check_files(value) if field == "extra_files" else value
    if field == "payload":
        return _parse_json(text, required)
    if field == "engine" and text not in registry.kinds():
        raise FieldError(f"unknown engine {text!r}. Hint: choose {' or '.join(registry.kinds())}.")
    if not text and field in ("name", "version", "export_path"):
        example = {
            "name": "mnist (the name of a %%ms_handler cell)",
            "version": DEFAULTS["version"],
            "export_path": DEFAULT_EXPORT,
        }
        raise FieldError(f"{LABELS[field]} is empty. Hint: e.g. {example[field]}.")
    if field == "version" and any(c.isspace() for c in text):
        raise FieldError(f"version {text!r} contains spaces. Hint: e.g. 1.0 or 2024-06-01.")
    return text


def spec_changes(parsed: dict[str, Any], inventory: Inventory) -> dict[str, Any]:
    """The ``HandlerSpec.replace`` arguments for the parsed fields."""
    changes = {f: parsed[f] for f in SPEC_FIELDS if f in parsed}
    if "device" in changes:
        device = inventory.get(changes["device"])
        changes["device"] = device.kind if device else "auto"
    return changes


def pretty(value: Any) -> str:
    """An answer as a person reads it: JSON indented, an HTTP error status named."""
    status = getattr(value, "status", None)
    if status is not None and hasattr(value, "body"):
        body = pretty(value.body)
        return body if status < 400 else f"HTTP {status}: {body}"
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, default=str)


def _parse_json(text: str, required: bool) -> Any:
    if not text:
        if required:
            raise FieldError('Request JSON is empty. Hint: type the request body, e.g. {"x": [1, 2, 3, 4]}.')
        return NO_PAYLOAD
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        near = text.splitlines()[err.lineno - 1][max(0, err.colno - 11) : err.colno + 10] if text.splitlines() else ""
        raise FieldError(
            f"invalid JSON at line {err.lineno}, column {err.colno}: {err.msg} (near {near!r}). Hint: {_json_hint(err)}"
        ) from None


def _json_hint(err: json.JSONDecodeError) -> str:
    """The fix for what the decoder met: an input cut short, single quotes, or another mistake."""
    if err.pos >= len(err.doc.rstrip()) or err.msg.startswith("Unterminated string"):
        return "the JSON ends early: close every string, [ and { it opens."
    if "double quotes" in err.msg or err.doc[err.pos : err.pos + 1] == "'":
        return 'use double quotes for strings and keys, e.g. {"x": [1, 2]}.'
    return 'fix the JSON there, e.g. {"x": [1, 2]}.'


def _checkpoint_text(checkpoint: Any) -> str:
    if checkpoint is None:
        return ""
    if isinstance(checkpoint, (str, Path)):
        return str(checkpoint)
    return f"(in memory: {type(checkpoint).__name__})"


def _check_files(paths: tuple[str, ...]) -> tuple[str, ...]:
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise FieldError(
            f"extra file(s) not found: {', '.join(missing)}. "
            "Hint: one path per line, relative to the notebook's folder."
        )
    return paths
