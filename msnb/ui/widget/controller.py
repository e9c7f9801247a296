"""The build widget's logic without any widget: form fields, validation, button rules, running actions."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from msnb.engines.protocol import Engine
from msnb.engines.tracebacks import user_frames
from msnb.errors import MsnbError
from msnb.ui.attributions import bars_html
from msnb.ui.display import took
from msnb.ui.widget import fields
from msnb.ui.widget.devices import Inventory, check_max_gpu_memory, list_devices
from msnb.ui.widget.fields import FieldError

_ELAPSED = re.compile(r" \(\d+ s\)$")
BUTTONS = ("test", "build", "serve", "predict", "explain", "logs", "stop")
BUSY = {
    "test": "testing in a test process",
    "build": "building the archive",
    "serve": "starting/registering on TorchServe",
    "predict": "sending the prediction",
    "explain": "computing the explanation on the server",
    "logs": "reading the worker log",
    "stop": "stopping the server",
}


@dataclass(frozen=True)
class Actions:
    """What the buttons do; the widget's defaults call the notebook's ``Session`` (tests inject fakes)."""

    get: Callable[[str], Any]  # name -> HandlerSpec
    test: Callable[[Any, Any], Any]  # (spec, samples | None) -> answers
    build: Callable[[Any, str, str, Callable], Any]  # (spec, export_path, format, progress) -> path
    serve: Callable[..., Any]  # (spec, progress[, engine]) -> server
    predict: Callable[[str, Any], Any]  # (name, data) -> answer
    stop: Callable[[], str | None]  # -> what it stopped, in words
    server_state: Callable[[], tuple[bool, str]]  # (running, one line: pid, url, workdir)
    log_tail: Callable[[], str]  # the server's recent log lines
    served: Callable[[str], str | None] = lambda name: None  # name -> "NAME vV (digest D)" while served
    stale: Callable[[str], str | None] = lambda name: None  # name -> why the served model is older than its cell
    logs: Callable[[str], str] = lambda name: ""  # name -> the newest lines of its worker log
    batching: Callable[[str], str] = lambda name: ""  # name -> the batches the server formed, its fallbacks
    subscribe: Callable[[Callable], Callable[[], None]] = lambda callback: lambda: None  # session events
    explain: Callable[[str, Any], Any] | None = None  # (name, data) -> explanation; None: no Explain action
    predict_stream: Callable[[str, Any], Any] | None = None  # (name, data) -> the answer's chunks as they arrive

    @classmethod
    def from_session(cls, session: Any = None) -> "Actions":
        """Actions over ``session`` (default: the process-wide ``msnb.session.current()``)."""
        if session is None:
            from msnb.session.core import current

            session = current()
        return cls(
            get=session.get,
            test=session.test,
            build=lambda spec, path, fmt, progress: session.build(spec, path, fmt=fmt, progress=progress),
            serve=lambda spec, progress, engine=None: session.serve(spec, progress=progress, engine=engine),
            predict=session.predict,
            stop=session.stop,
            server_state=lambda: _server_state(session.server(create=False)),
            log_tail=lambda: _log_tail(session.server(create=False)),
            served=lambda name: (
                session.served[name].line() + session.reloads.note(name) if name in session.served else None
            ),
            stale=session.stale,
            logs=session.logs,
            batching=session.batching,
            subscribe=session.subscribe,
            explain=session.explain,
            predict_stream=session.predict_stream,
        )


class Controller:
    """Form state and the rules of the widget; ``on_change()`` is called after every change of state."""

    def __init__(
        self,
        name: str | None,
        actions: Actions,
        inventory: Inventory | None = None,
        on_change: Callable[[], None] | None = None,
    ):
        self.actions, self.inventory = actions, inventory or list_devices()
        self.on_change = on_change or (lambda: None)
        self.base, self.values, self.errors = None, fields.empty_values(), {}
        self.shown: dict[str, str] = {}  # the text each field showed for ``base``: what differs is the form's edit
        self.running: str | None = None
        self.progress: tuple[str, float] = ("", 0.0)
        self.log: list[str] = []
        self.result, self.result_ok = "", True
        self.chart = ""  # the last explanation's attributions as HTML (bars or a heat strip)
        self.outcome = ""  # "", "running", "ok", "failed" or "invalid" (fields to fix): the bar's colour
        self._lock = threading.Lock()
        if name:
            self.values["name"] = name
            self._load(name)
        self.status = self._server_line()
        self.unsubscribe = actions.subscribe(self._session_changed)

    @property
    def served(self) -> str | None:
        """The model name this form serves, when the session serves it (whoever clicked or typed Serve)."""
        name = str(self.values.get("name", "")).strip() or getattr(self.base, "name", "")
        return name if name and self.actions.served(name) else None

    def _session_changed(self, event: str, name: str | None) -> None:
        """The session changed (a magic, another widget, this one): show it unless an action of ours runs; a
        handler cell of this form's name run again refills the fields the user did not edit."""
        if event == "defined" and self.base is not None and name == self.base.name:
            self._reload(name)
        if self.running is None:
            self.status = self._server_line()
            if event == "stopped" and not self.result_ok:  # an error about the stopped server is stale now
                self._set_result("", ok=True)
                self.progress, self.outcome = ("", 0.0), ""
        self.on_change()

    def _load(self, name: str) -> None:
        try:
            self.base = self.actions.get(name)
        except MsnbError as err:
            self._finish_error(err)
            return
        self.shown = fields.values_from_spec(self.base, self.inventory)
        self.values.update(self.shown)

    def _reload(self, name: str) -> None:
        """The kernel holds a new spec of ``name``: the fields show it, except those the user edited."""
        old, edited = self.base, self.edited()
        self.base = self.actions.get(name)
        self.shown = fields.values_from_spec(self.base, self.inventory)
        self.values.update({f: v for f, v in self.shown.items() if f not in edited})
        if old is None or old.digest() != self.base.digest():
            self._log(f"[cell] {name} v{self.base.version} (digest {self.base.digest()}) ran again: the form uses it")

    def edited(self) -> set[str]:
        """The spec fields whose text the user changed from what the spec shows."""
        return {f for f in fields.SPEC_FIELDS if f in self.shown and str(self.values.get(f)) != self.shown[f]}

    # ------------------------------------------------------------ form
    def set(self, field: str, value: Any) -> None:
        """A field changed (the user typed): keep the text, clear that field's error."""
        self.values[field] = value
        self.errors.pop(field, None)

    def enabled(self) -> dict[str, bool]:
        """Which buttons can act now: none while an action runs; Predict only with a served model."""
        idle = self.running is None
        served = self.served is not None
        return {
            "test": idle,
            "build": idle,
            "serve": idle,
            "predict": idle and served,
            "explain": idle and served and self.actions.explain is not None,
            "logs": idle and served,
            "stop": idle and (served or self.actions.server_state()[0]),
        }

    def validate(self, action: str) -> dict[str, Any]:
        """Parse the fields ``action`` needs; fills ``self.errors`` (field -> text) and returns the parsed values."""
        parsed, self.errors = {}, {}
        for field in fields.FIELDS_FOR[action]:
            try:
                parsed[field] = fields.parse(
                    field, self.values.get(field, ""), self.base, required=field in fields.REQUIRED.get(action, ())
                )
            except FieldError as err:
                self.errors[field] = str(err)
        if "device" in parsed and "max_gpu_memory" in parsed:
            problem = check_max_gpu_memory(parsed["max_gpu_memory"], parsed["device"], self.inventory)
            if problem:
                self.errors["max_gpu_memory"] = problem
        return parsed

    # ------------------------------------------------------------ actions
    def prepare(self, action: str) -> Callable[[], None] | None:
        """Validate and claim the widget for ``action``; returns the job to run (None: refused, see status)."""
        with self._lock:
            if self.running is not None:
                self.status = f"Busy {BUSY[self.running]}: wait for it to finish, then click {action.title()} again."
                self.on_change()
                return None
            parsed = self.validate(action)
            if self.errors:
                labels = ", ".join(fields.LABELS[f] for f in self.errors)
                self._set_result(f"{action.title()} not started: fix {labels} (see under the field).", ok=False)
                self.progress, self.outcome = (f"{action} not started", 0.0), "invalid"
                self.on_change()
                return None
            self.running, self.progress, self.outcome = action, (BUSY[action], 0.0), "running"
            self.status = f"{BUSY[action].capitalize()}…"
        self.on_change()
        return lambda: self._run(action, parsed)

    def run(self, action: str) -> bool:
        """Validate and run ``action`` in this thread; True when it succeeded."""
        job = self.prepare(action)
        if job is not None:
            job()
        return job is not None and self.result_ok

    def _run(self, action: str, parsed: dict[str, Any]) -> None:
        started = time.perf_counter()
        try:
            text = getattr(self, f"_do_{action}")(parsed, lambda: took(time.perf_counter() - started))
        except MsnbError as err:
            self._finish_error(err)
        except Exception as err:  # a bug or an unexpected failure: one line, not a traceback
            self._finish_error(
                MsnbError(
                    f"{action.title()} failed: {type(err).__name__}: {err}",
                    "this is unexpected; the log below may say more.",
                )
            )
        else:
            self._set_result(text, ok=True)
            self.progress, self.outcome = (f"{action} done", 1.0), "ok"
        finally:
            self.running = None
            self.status = self._server_line()
            self.on_change()

    def _spec(self, parsed: dict[str, Any]) -> Any:
        """The handler as the kernel holds it now (what ``%ms_serve NAME`` serves), with the form's edits on top."""
        if self.base is None:  # a form opened without a name: every field is the user's
            return self.actions.get(parsed["name"]).replace(**fields.spec_changes(parsed, self.inventory))
        now = self.actions.get(self.base.name)
        edited = {f: v for f, v in parsed.items() if f in self.edited()}
        return now.replace(**fields.spec_changes(edited, self.inventory)) if edited else now

    def _do_test(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        payload = parsed.get("payload", fields.NO_PAYLOAD)
        spec = self._spec(parsed)
        answers = self.actions.test(spec, None if payload is fields.NO_PAYLOAD else [payload])
        took = elapsed()
        self._log(f"[test] {spec.name} answered in its test process in {took}")
        answer = "\n".join(fields.pretty(a) for a in answers)
        return f"Test · test process, no server · {took}\n{answer}" + _near_misses(spec)

    def _do_build(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        path = self.actions.build(self._spec(parsed), parsed["export_path"], parsed["format"], self._progress)
        took = elapsed()
        self._log(f"[build] built {path} in {took}")
        return f"Built {path} in {took}"

    def _do_serve(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        spec = self._spec(parsed)
        self.actions.serve(spec, self._progress, parsed.get("engine"))
        took = elapsed()
        serving = self.actions.served(spec.name) or f"{spec.name} v{spec.version} (digest {spec.digest()})"
        said = f"Serving {serving} (took {took}): click Predict to ask it (the status line says where it runs)."
        return said + _near_misses(spec)

    def _do_predict(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        heading = f"Predict · served {self.actions.served(self.served) or self.served}"
        if self.actions.predict_stream is None:
            answer = fields.pretty(self._ask_server(self.actions.predict, parsed["payload"]))
        else:  # a streamed answer shows its chunks as they come; a whole one arrives as one chunk
            answer = self._ask_server(
                lambda name, data: self._show(self.actions.predict_stream(name, data), heading), parsed["payload"]
            )
        took = elapsed()
        self._log(f"[predict] {self.served} answered in {took}")
        stale = self.actions.stale(self.served)
        return f"{heading} · {took}\n{answer}" + (f"\nWarning: {stale}" if stale else "")

    def _show(self, chunks: Any, heading: str) -> str:
        """Show the chunks in the result as each arrives; returns the whole answer's text."""
        got: list = []
        for chunk in chunks:
            got.append(chunk)
            self.result, self.result_ok = f"{heading} · receiving\n{chunks_text(got)}", True
            self.on_change()
        return chunks_text(got)

    def _do_explain(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        answer = self._ask_server(self.actions.explain, parsed["payload"])
        self.chart = bars_html(answer)
        stale = self.actions.stale(self.served)
        return fields.pretty(answer) + (f"\nWarning: {stale}" if stale else "")

    def _ask_server(self, ask: Callable[[str, Any], Any], payload: Any) -> Any:
        """The served model's answer to ``payload``; a server that died after Serve says so."""
        if self.actions.server_state()[0] and self.served:
            try:
                return ask(self.served, payload)
            except MsnbError:
                if self.actions.server_state()[0]:
                    raise  # the server is up: its own error (bad input, handler failure) says more
        raise MsnbError(
            "The local TorchServe is no longer running: it stopped or died after Serve.",
            "click Serve to start it again (the log below has its last lines).",
            self._tail(),
        )

    def _do_logs(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        text = self.actions.logs(self.served)
        self._log(text)
        return f"Worker log of {self.served!r}: the newest lines are in the log below."

    def _do_stop(self, parsed: dict[str, Any], elapsed: Callable[[], str]) -> str:
        said = self.actions.stop()
        self._log(f"[stop] {said or 'server stopped'}")
        return "Server stopped."

    # ------------------------------------------------------------ reporting
    def _progress(self, step: str, fraction: float) -> None:
        self.progress = (step, float(fraction))
        phase = _ELAPSED.sub("", step)  # a phase ticks every second: the log gets its line once
        if phase != self._last_phase:
            self._log(f"[{self.running}] {step}")
            self._last_phase = phase
        self.on_change()

    _last_phase = ""

    def _log(self, line: str) -> None:
        self.log = (self.log + str(line).splitlines())[-200:]

    def _set_result(self, text: str, ok: bool) -> None:
        self.result, self.result_ok = text, ok
        if self.running != "explain" or not ok:
            self.chart = ""

    def _finish_error(self, err: MsnbError) -> None:
        text = err.render(details=False)
        self._set_result(text, ok=False)
        self._log(f"error: {err.message}")
        details = err.details or (self._tail() if self.running in ("serve", "predict", "explain") else "")
        if details:
            self._log(details)
        self.progress, self.outcome = (f"{self.running or 'loading'} failed", self.progress[1]), "failed"

    def _tail(self) -> str:
        try:
            return self.actions.log_tail() or ""
        except Exception:  # a log tail is a courtesy; never hide the real error behind it
            return ""

    def _server_line(self) -> str:
        running, line = self.actions.server_state()
        name = self.served
        served = f" serving {self.actions.served(name)};" if running and name else ""
        batched = self.actions.batching(name) if running and name else ""
        stale = self.actions.stale(name) if running and name else None
        line = f"Server:{served} {line}" + (f" {batched[:1].upper()}{batched[1:]}." if batched else "")
        return line + (f" Warning: {stale}" if stale else "")


def _near_misses(spec: Any) -> str:
    """What a misspelt role changed in the answer, one warning line each (as %ms_test and %ms_serve say it)."""
    return "".join(f"\nWarning: {miss.beside_answer()}" for miss in spec.near_misses)


def chunks_text(chunks: list) -> str:
    """A streamed answer so far: text chunks joined, other chunks one JSON line each; a whole answer pretty."""
    if len(chunks) == 1 and not isinstance(chunks[0], str):
        return fields.pretty(chunks[0])
    if all(isinstance(c, str) for c in chunks):
        return "".join(chunks)
    return "\n".join(json.dumps(c) if not isinstance(c, str) else c for c in chunks)


def _server_state(server: Engine | None) -> tuple[bool, str]:
    if server is None or not server.running:
        return False, "no local TorchServe running."
    return True, f"{server.label} running at {server.inference_url} (pid {server.pid}, workdir {server.workdir})."


def _log_tail(server: Engine | None) -> str:
    return "\n".join(user_frames(server.log_tail(40).splitlines())) if server is not None else ""
