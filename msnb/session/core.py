"""The notebook's Python API: handler specs by name, and test/build/serve/predict/stop over them.

The magics, the widget and the top-level ``msnb.*`` functions are thin layers over one ``Session``;
each step itself lives in capture / package / trial / msnb.engines. This is the layer that
decides to run user code (``trial``) before packing; the staged folder reaches an engine through
``msnb.session.deploy``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from msnb.capture.kernel_values import values_changed
from msnb.engines import env_vars, registry
from msnb.engines.model_metrics import ModelMetrics, served_metrics
from msnb.engines.protocol import Engine
from msnb.errors import Interrupted, MsnbError, SpecError
from msnb.package import archive, build_inputs, formats, model_folder
from msnb.package.cell_lines import chunks_pointing_at_cells, in_cells, pointing_at_cells
from msnb.session.progress import Phase, Progress, silent
from msnb.session.reload import Reloads
from msnb.session.state import Built, Observers, Served, builds_in, keep_aside, read_built
from msnb.spec import HandlerSpec
from msnb.trial import processes, runner

DEFAULT_EXPORT = formats.DEFAULT_EXPORT
EngineFactory = Callable[[str, int | None], Engine]  # (engine, port) -> that engine, not started yet


def default_engine(engine: str, port: int | None = None) -> Engine:
    """The process-wide engine of that name (``msnb.engines.registry``): the notebook's TorchServe, its local Ray
    Serve (on ``port``), or any other registered engine."""
    return registry.get(engine).default(port)


class StaleModelWarning(UserWarning):
    """The served model was built from an older version of its cell."""


class Session:
    """Specs defined in this process (by ``%%ms_handler`` or by hand) and the server they run on."""

    def __init__(self, engine_factory: EngineFactory = default_engine):
        self.specs: dict[str, HandlerSpec] = {}
        self.archives: dict[str, Path] = {}  # name -> the archive built last
        self.built_from: dict[Path, str] = {}  # archive -> its cell's digest when built (the widget builds its edits)
        self.served: dict[str, Served] = {}  # name -> the version and digest the server runs
        self.namespaces: dict[str, Mapping[str, Any] | None] = {}  # name -> the kernel namespace of its values
        self.envs: dict[str, dict[str, str]] = {}  # name -> the variables (--env) its served workers were given
        self.observers = Observers()  # the widget and anything else that shows this session's state
        self._served_by: int | None = None  # the Java pid that serves them (a restart serves none of them)
        self._engine_factory = engine_factory
        self._server: Engine | None = None
        self.reloads = Reloads()  # code-only edits reload in the live worker (msnb.session.reload)
        self.engine = registry.reference().kind
        self._engine_port: int | None = None

    # ------------------------------------------------------------ specs
    def capture(
        self, name: str, cell: str, pool: Any, origin: Any, namespace: Mapping[str, Any], cwd: Path, **config: Any
    ) -> HandlerSpec:
        """Capture a handler cell run in this kernel (``cell``: its body under the ``%%ms_handler`` line; ``pool``:
        the cells run before it) and keep its spec."""
        from msnb.capture.cells import capture
        from msnb.capture.local_code import search_path

        where = {"cell_origin": origin, "search_path": search_path(cwd), "body_line": 2}
        spec = capture(name, cell, pool, namespace=namespace, **where, **config)
        return self.add(spec, namespace)

    def add(self, spec: HandlerSpec, namespace: Mapping[str, Any] | None = None) -> HandlerSpec:
        """Store (or replace) a spec under its name; ``namespace`` holds the live values its snapshot came from."""
        self.specs[spec.name] = spec
        self.namespaces[spec.name] = namespace
        self.observers.notify("defined", spec.name)
        return spec

    def subscribe(self, callback: Callable[[str, str | None], None]) -> Callable[[], None]:
        """Call ``callback(event, name)`` after every served / stopped / built / defined; returns unsubscribe."""
        return self.observers.subscribe(callback)

    def get(self, name_or_spec: str | HandlerSpec) -> HandlerSpec:
        if isinstance(name_or_spec, HandlerSpec):
            return name_or_spec
        try:
            return self.specs[name_or_spec]
        except KeyError:
            known = ", ".join(sorted(self.specs)) or "none yet"
            raise SpecError(
                f"No handler named {name_or_spec!r} (defined: {known}).",
                "run its %%ms_handler cell first (or check the name's spelling).",
            ) from None

    # ------------------------------------------------------------ steps
    def test(
        self, name_or_spec: str | HandlerSpec, samples: Iterable[Any] | None = None, *, explain: bool = False
    ) -> list[Any]:
        """Run the rendered handler in a test process on ``samples`` (default: the spec's example); ``explain``
        asks for explanations, as ``/explanations`` does."""
        spec = self.get(name_or_spec)
        if samples is None:
            if spec.example is None:
                raise SpecError(
                    f"No input to test {spec.name!r} with.",
                    "pass --data '<json>' (or samples=[...]), or give the handler --example.",
                )
            samples = [spec.example]
        with pointing_at_cells(spec):  # a traceback names the cell's lines, not the test process's copy
            return runner.predict_in_process(spec, samples, explain=explain)

    def describe(self, name_or_spec: str | HandlerSpec) -> Any:
        """What the server's ``GET /models/NAME?customized=true`` would show as ``customizedMetadata``, from the
        handler run in its test process (a BaseHandler's ``describe_handle``)."""
        return runner.describe(self.get(name_or_spec))

    def build(
        self,
        name_or_spec: str | HandlerSpec,
        export_path: str | Path = DEFAULT_EXPORT,
        *,
        fmt: str | None = None,
        dev: bool = False,
        progress: Progress | None = None,
    ) -> Path:
        """Stage the model folder once, run it on its example in a test process, then pack that folder (``fmt``;
        ``dev`` is the fast format)."""
        spec = self.get(name_or_spec)
        report = progress or silent
        report("validating handler in a test process", 0.1)
        folder = runner.folder_of(spec)  # the folder tested is the folder packed
        with pointing_at_cells(spec):  # a failed check names the cell's lines, as %ms_test does
            runner.validate(folder)
        fmt = fmt or (formats.DEV_FORMAT if dev else formats.EXPORT_FORMAT)
        kept = keep_aside(Path(export_path).expanduser() / f"{spec.name}.mar", spec.version)
        if kept is not None:
            report(f"kept the archive of another version as {kept}", 0.3)
        path = archive.pack(folder, export_path, fmt=fmt, progress=report)
        self.archives[spec.name] = path
        if (cell := self.specs.get(spec.name)) is not None:
            self.built_from[path.resolve()] = cell.digest()
        self.observers.notify("built", spec.name)
        return path

    def server(self, create: bool = True) -> Engine | None:
        """The session's engine (``engine_factory(self.engine, port)``), started on first use."""
        if self._server is None and create:
            self._server = self._engine_factory(self.engine, self._engine_port)
        if self._server is not None and create and not self._server.running:
            self._server.start()
        if self._server is not None and self._server.pid != self._served_by:
            lost = bool(self.served)
            self.served.clear()
            self._served_by = self._server.pid
            if lost:  # the server stopped or died: what it served is gone
                self.observers.notify("stopped")
        return self._server

    def use_engine(self, engine: str | None, port: int | None = None) -> None:
        """Serve on ``engine`` from now on (None keeps the current one); switching stops the other engine."""
        if engine is None or (engine == self.engine and port in (None, self._engine_port)):
            return
        registry.get(engine).require()  # an unknown engine, or one without its extra: refused before anything stops
        if self._server is not None:
            self.stop()
        self._server, self.engine, self._engine_port = None, engine, port

    def serve(
        self,
        name_or_spec: str | HandlerSpec,
        progress: Progress | None = None,
        engine: str | None = None,
        port: int | None = None,
        env: Iterable[str] = (),
    ) -> Engine:
        """Register the spec on the local server (``engine``: torchserve or ray, default the one in use), or
        redeploy it if it changed; ``env`` names variables of this process's environment its workers (replicas)
        get, and no other model's. Returns the server."""
        spec = self.get(name_or_spec)
        _refuse_a_missing_gpu(spec)
        values = env_vars.resolve(env, spec.name)  # a missing variable is refused before anything starts
        self.use_engine(engine, port)
        report = progress or silent
        with interrupted("starting the local TorchServe", lambda: "it was stopped; nothing is running"):
            server = self._started(report)
        self._give_env(server, spec.name, values)
        served = self.served.get(spec.name)
        if served is not None and served.digest == spec.digest():
            report(f"already serving {served.line()}", 1.0)
            return server
        detail = server.progress_detail(spec.name)
        files = build_inputs.taken_by(spec)  # as the build below copies them
        with interrupted(f"deploying {spec.name}", lambda: _serving(server, spec.name)), pointing_at_cells(spec):
            with Phase(report, f"registering {spec.name}", 0.4, 0.95, detail):
                status = self.reloads.serve(server, spec)  # a reload in the worker, or a new version
        cell = self.specs.get(spec.name)
        cell_digest = cell.digest() if cell else None
        self.served[spec.name] = Served(spec.name, status.version, spec.digest(), cell_digest, files)
        report(f"ready: {self.served[spec.name].line()}{self.reloads.note(spec.name)}", 1.0)
        self.observers.notify("served", spec.name)
        return server

    def _give_env(self, server: Engine, name: str, values: dict[str, str]) -> None:
        """Hand the server ``name``'s variables; changed ones need new workers: a deploy, not a reload."""
        if self.envs.get(name) != values:
            self.served.pop(name, None)
            self.reloads.forget(name)
        server.model_env(name, values)
        self.envs[name] = values

    def _started(self, report: Progress) -> Engine:
        server = self.server(create=False)
        if server is not None and server.running:
            return server
        with Phase(report, registry.get(self.engine).starting, 0.05, 0.35):
            return self.server()

    def stale(self, name: str) -> str | None:
        """Why the served ``name`` is not what its cell says now (None when it is, or when it is not served):
        a file it was built from changed, or the cell changed since it was served."""
        served, spec = self.served.get(name), self.specs.get(name)
        if served is None or spec is None:
            return None
        why = self._changed_files(name, served) or self._changed_values(name, spec, served)
        if why:
            return why
        now = spec.digest()  # hashes the source and config (and a live checkpoint's tensors): once
        if (served.cell_digest or served.digest) == now:
            return None  # (a widget serving its own edits of an unchanged cell is not stale)
        return (
            f"{name!r} was served from an older version of its cell ({served.line()}; the cell is now digest "
            f"{now}): this answer comes from the old code. Run %ms_serve {name} to redeploy."
        )

    def _changed_files(self, name: str, served: Served) -> str | None:
        """Why ``name`` is stale when a file it was built from changed since (None when none did)."""
        files = build_inputs.changed(served.files)
        if not files:
            return None
        return (
            f"{name!r} is stale: {build_inputs.describe(files)} changed since {served.line()} was built; the server "
            f"still answers with the file(s) as they were then. Run %ms_serve {name} to redeploy."
        )

    def _changed_values(self, name: str, spec: HandlerSpec, served: Served) -> str | None:
        """Why ``name`` is stale when a runtime value it was served with changed in the kernel since."""
        changed = values_changed(spec, self.namespaces.get(name))
        if not changed:
            return None
        return (
            f"{name!r} was served with the value of {changed} as it was when its cell ran ({served.line()}); "
            f"the kernel's value changed since: this answer comes from the old value. Run the %%ms_handler "
            f"cell again, then %ms_serve {name}, to serve the new one."
        )

    def batching(self, name: str) -> str:
        """What the server's batching of the served ``name`` did, in one line (empty when nothing is known)."""
        server = self.server(create=False)
        if name not in self.served or server is None or not server.running:
            return ""
        return served_metrics(server).get(name, ModelMetrics()).line()

    def logs(self, name: str, lines: int = 40) -> str:
        """The last ``lines`` lines the workers of ``name`` wrote to model_log.log."""
        server = self.server(create=False)
        if server is None:
            raise MsnbError("No local server has run in this session.", f"run %ms_serve {name} first.")
        found = server.model_log(name, lines)
        if not found:
            raise MsnbError(
                f"No {server.label} log lines for {name!r} in {server.log_dir}.", f"serve it: %ms_serve {name}."
            )
        return in_cells("\n".join(found), self._served_spec(name))

    def predict(
        self, name: str, data: Any = None, version: str | None = None, *, warn: bool = True, explain: bool = False
    ) -> Any:
        """Ask the local server (``/explanations`` with ``explain``); ``data`` None sends the handler's example;
        warns when the cell changed since."""
        server, data = self._serving(name, data, warn)
        waiting = interrupted(
            f"waiting for {name}'s answer", lambda: "the server keeps running and may still answer it"
        )
        with waiting, pointing_at_cells(self._served_spec(name)):
            if explain:
                return server.explain(name, data, version=version)
            return server.predict(name, data, version=version)

    def predict_stream(self, name: str, data: Any = None, version: str | None = None, *, warn: bool = True):
        """Ask the local server and iterate over the answer's chunks as they arrive (see ``predict``)."""
        server, data = self._serving(name, data, warn)
        return chunks_pointing_at_cells(server.predict_stream(name, data, version=version), self._served_spec(name))

    def _served_spec(self, name: str) -> HandlerSpec | None:
        """The cell's spec of the served ``name`` when it is the one served (its tracebacks then name cell lines)."""
        served, spec = self.served.get(name), self.specs.get(name)
        return spec if served and spec and spec.digest() in (served.digest, served.cell_digest) else None

    def _serving(self, name: str, data: Any, warn: bool) -> tuple[Any, Any]:
        """The server that serves ``name`` and the input to send it (the example when ``data`` is None)."""
        if data is None:
            data = self.get(name).example
            if data is None:
                raise SpecError(
                    f"No input to send to {name!r}.",
                    f"pass --data '<json>' (or @file, or a variable), or give {name}'s cell --example.",
                )
        elif name not in self.served:
            self.get(name)  # an unknown name says which cell to run first
        server = self.server(create=False)
        if server is None or not server.running:
            raise MsnbError("No local TorchServe is running.", f"run %ms_serve {name} (or msnb.serve({name!r})) first.")
        if name not in self.served:
            raise MsnbError(
                f"{name!r} is not served (serving: {', '.join(self.served) or 'nothing'}).",
                f"run %ms_serve {name} first.",
            )
        stale = self.stale(name) if warn else None
        if stale:
            warnings.warn(stale, StaleModelWarning, stacklevel=3)
        return server, data

    def explain(self, name: str, data: Any = None, version: str | None = None) -> Any:
        """Ask the local server's ``/explanations`` for the attributions of ``data`` (default: the example)."""
        return self.predict(name, data, version, explain=True)

    def stop(self) -> str:
        """Stop the server and the test processes; returns what was stopped, in words."""
        said = self._what_runs()
        processes.close()  # the test processes too: nothing of the session keeps running
        model_folder.forget()  # and the folders they ran
        if self._server is not None:
            self._server.stop()
        self.served.clear()
        self.envs.clear()
        self.reloads.forget()
        self.observers.notify("stopped")
        return said

    def _what_runs(self) -> str:
        server = self.server(create=False)
        if server is None or not server.running:
            return "Nothing to stop: no local server runs."
        served = ", ".join(s.line() for s in self.served.values()) or "no model"
        return f"Stopped the local {registry.get(self.engine).label} at {server.inference_url} (it served {served})."

    def status(self) -> dict[str, Any]:
        """What is defined, built and served, per handler, and where the server's URL, logs and key file are."""
        server = self.server(create=False)
        running = bool(server is not None and server.running)
        models = server.models() if running else []
        info = _server_info(server, running)
        handlers = {n: self._handler_status(s, models, info) for n, s in self.specs.items()}
        batched = served_metrics(server) if running else {}
        for name, handler in handlers.items():  # the batches the server formed, and those it retried one by one
            done = batched.get(name, ModelMetrics())
            handler |= {"batches": {str(k): v for k, v in done.sizes.items()}, "batch_fallbacks": done.fallbacks}
        return {
            "specs": {n: {"version": s.version, "digest": s.digest()} for n, s in self.specs.items()},
            "archives": {n: str(p) for n, p in self.archives.items()},
            "server": info,
            "models": models,
            "handlers": handlers,
        }

    def _handler_status(self, spec: HandlerSpec, models: list, info: dict[str, Any]) -> dict[str, Any]:
        builds = {b.path: b for b in builds_in(DEFAULT_EXPORT, spec.name)}
        if spec.name in self.archives and (b := read_built(self.archives[spec.name])) is not None:
            builds[b.path] = b
        served, digest, why = self.served.get(spec.name), spec.digest(), self.stale(spec.name)
        return {
            "version": spec.version,
            "digest": digest,
            "archives": [_archive_row(b, digest, self.built_from.get(b.path.resolve())) for b in builds.values()],
            "served": [
                {"version": m.version, "default": m.is_default, "digest": served.digest if served else None}
                | self.reloads.row(spec.name, m.version)
                for m in models
                if m.name == spec.name
            ],
            "stale": why is not None,
            "why": why,  # the stale warning %ms_predict shows (which file or cell changed), or None
            "url": f"{info['url']}/predictions/{spec.name}" if served and info["url"] else None,
        }


@contextmanager
def interrupted(doing: str, state: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C (Jupyter's stop button) during a step becomes one Interrupted error: what stopped, what remains."""
    try:
        yield
    except KeyboardInterrupt:
        try:
            remains = state()
        except Exception:  # the state report must not hide the interruption
            remains = "its state is unknown (see %ms_status)"
        raise Interrupted(f"Interrupted while {doing}: {remains}.", "run the step again when you are ready.") from None


def _serving(server: Engine, name: str) -> str:
    """What the server serves of ``name`` now, e.g. 'the server still runs; it serves mnist 1.0 (default)'."""
    if not server.running:
        return "the server was stopped"
    versions = [m.version + (" (default)" if m.is_default else "") for m in server.versions(name)]
    if not versions:
        return f"the server still runs; {name} is not registered"
    return f"the server still runs; it serves {name} {', '.join(versions)}"


def _archive_row(built: Built, digest: str, cell_digest: str | None = None) -> dict[str, Any]:
    """One archive on disk, stale when the cell's ``digest`` is not the one it was built from (``cell_digest``:
    the cell's when this session built it, which may have packed the widget's edits; else the archive's own)."""
    stale = (cell_digest or built.digest) != digest
    return {"path": str(built.path), "version": built.version, "digest": built.digest, "stale": stale}


def _refuse_a_missing_gpu(spec: HandlerSpec) -> None:
    """``--device gpu`` on a machine without one: the local worker would run on the CPU without a word, so the
    serve is refused (an archive for a GPU server is still built: %ms_build, msnb export)."""
    import torch

    if spec.device == "gpu" and not torch.cuda.is_available():
        raise SpecError(
            f"{spec.name!r} asks for --device gpu, but this machine has no GPU that torch can use "
            "(torch.cuda.is_available() is False): its local worker would run on the CPU.",
            "serve it here with --device auto (a GPU where there is one, else the CPU) or --device cpu; "
            "%ms_build and `msnb export` still build it for a GPU server.",
        )


def _server_info(server: Engine | None, running: bool) -> dict[str, Any]:
    known = server is not None
    return {
        "engine": server.kind if known else registry.reference().kind,
        "running": running,
        "url": server.inference_url if running else None,
        "openai_base_url": server.openai_base_url if running else None,  # /v1 and /mcp: the same key
        "mcp_url": server.mcp_url if running else None,
        # a stopped server's temporary folder is gone (logs and keys with it): name only what exists
        "log_dir": str(server.log_dir) if running or (known and Path(server.log_dir).is_dir()) else None,
        "key_file": str(server.key_file) if running and server.key_file else None,
    }


_default: Session | None = None


def warm_up() -> None:
    """Start the test processes' fork server now, so it has imported torch before the first ``%ms_test``."""
    processes.warm_up()


def current() -> Session:
    """The process-wide session the magics and widget share."""
    global _default
    if _default is None:
        _default = Session()
    return _default
