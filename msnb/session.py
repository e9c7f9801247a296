"""The notebook's Python API: handler specs by name, and test/build/serve/predict/stop over them.

The magics, the widget and the top-level ``msnb.*`` functions are thin layers over one ``Session``;
each step itself lives in capture / localtest / archive / msnb.torchserve. This is the layer that
decides to run user code (``localtest``) before packing, and that turns a spec into an archive the
server can take (``deploy``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from msnb import archive, localtest
from msnb.errors import Interrupted, MsnbError, SpecError
from msnb.files import remove
from msnb.spec import HandlerSpec

Progress = Callable[[str, float], None]
DEFAULT_EXPORT = archive.DEFAULT_EXPORT


class Session:
    """Specs defined in this process (by ``%%ms_handler`` or by hand) and the server they run on."""

    def __init__(self, server_factory: Callable[[], Any] | None = None):
        self.specs: dict[str, HandlerSpec] = {}
        self.archives: dict[str, Path] = {}
        self.served: dict[str, str] = {}  # name -> digest of the spec the server runs
        self._served_by: int | None = None  # the Java pid that serves them (a restart serves none of them)
        self._server_factory = server_factory
        self._server = None

    # ------------------------------------------------------------ specs
    def add(self, spec: HandlerSpec) -> HandlerSpec:
        """Store (or replace) a spec under its name."""
        self.specs[spec.name] = spec
        return spec

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
    def test(self, name_or_spec: str | HandlerSpec, samples: Iterable[Any] | None = None) -> list[Any]:
        """Run the rendered handler in-process on ``samples`` (default: the spec's example)."""
        spec = self.get(name_or_spec)
        if samples is None:
            if spec.example is None:
                raise SpecError(
                    f"No input to test {spec.name!r} with.",
                    "pass --data '<json>' (or samples=[...]), or give the handler --example.",
                )
            samples = [spec.example]
        return localtest.predict_in_process(spec, samples)

    def build(
        self,
        name_or_spec: str | HandlerSpec,
        export_path: str | Path = DEFAULT_EXPORT,
        *,
        fmt: str | None = None,
        dev: bool = False,
        progress: Progress | None = None,
    ) -> Path:
        """Run the handler on its example in-process, then pack it (``fmt``; ``dev`` is the fast format)."""
        spec = self.get(name_or_spec)
        report = progress or (lambda step, frac: None)
        report("validating handler in-process", 0.1)
        localtest.validate(spec)
        fmt = fmt or (archive.DEV_FORMAT if dev else archive.EXPORT_FORMAT)
        path = archive.build(spec, export_path, fmt=fmt, progress=report)
        self.archives[spec.name] = path
        return path

    def server(self, create: bool = True):
        """The session's LocalServer, started on first use."""
        if self._server is None and create:
            if self._server_factory is None:
                from msnb.torchserve import default_server

                self._server = default_server()
            else:
                self._server = self._server_factory()
        if self._server is not None and create and not self._server.running:
            self._server.start()
        if self._server is not None and self._server.pid != self._served_by:
            self.served.clear()
            self._served_by = self._server.pid
        return self._server

    def serve(self, name_or_spec: str | HandlerSpec, progress: Progress | None = None):
        """Register the spec on the local server, or redeploy it if it changed; returns the server."""
        spec = self.get(name_or_spec)
        report = progress or (lambda step, frac: None)
        report("starting the local TorchServe", 0.1)
        with interrupted("starting the local TorchServe", lambda: "it was stopped; nothing is running"):
            server = self.server()
        if self.served.get(spec.name) == spec.digest():
            report("already serving this version", 1.0)
            return server
        report(f"registering {spec.name}", 0.5)
        with interrupted(f"deploying {spec.name}", lambda: _serving(server, spec.name)):
            deploy(server, spec)  # registers it, or replaces the version(s) already there
        self.served[spec.name] = spec.digest()
        report("ready", 1.0)
        return server

    def predict(self, name: str, data: Any = None, version: str | None = None) -> Any:
        """Ask the local server; ``data`` None sends the handler's example."""
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
        with interrupted(f"waiting for {name}'s answer", lambda: "the server keeps running and may still answer it"):
            return server.predict(name, data, version=version)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        self.served.clear()

    def status(self) -> dict[str, Any]:
        server = self.server(create=False)
        running = bool(server is not None and server.running)
        return {
            "specs": {n: {"version": s.version, "digest": s.digest()} for n, s in self.specs.items()},
            "archives": {n: str(p) for n, p in self.archives.items()},
            "server": {"running": running, "url": server.inference_url if running else None},
            "models": server.models() if running else [],
        }


def deploy(server: Any, spec: HandlerSpec, **params: Any):
    """Build ``spec`` into ``server``'s model store (no-archive) and make it the served version.

    The first deploy registers ``spec.version``; a later one registers a free ``VERSION-rN`` beside it,
    makes that the default and unregisters the old version(s), with no restart.
    """
    from msnb.torchserve.store import safe_name

    version = server.client.free_version(spec.name, spec.version)
    if version != spec.version:
        spec = spec.replace(version=version)
    path = archive.build(spec, server.store.root, fmt=archive.SERVE_FORMAT, archive_name=safe_name(spec.name, version))
    try:
        return server.redeploy(path, **{"workers": spec.workers, **params})
    except BaseException:
        remove(path)
        raise


@contextmanager
def interrupted(doing: str, state: Callable[[], str]) -> Iterator[None]:
    """Ctrl-C (Jupyter's stop button) during a step becomes one Interrupted error: what stopped, what remains."""
    try:
        yield
    except KeyboardInterrupt:
        try:
            remains = state()
        except Exception:  # noqa: BLE001 - the state report must not hide the interruption
            remains = "its state is unknown (see %ms_status)"
        raise Interrupted(f"Interrupted while {doing}: {remains}.", "run the step again when you are ready.") from None


def _serving(server: Any, name: str) -> str:
    """What the server serves of ``name`` now, e.g. 'the server still runs; it serves mnist 1.0 (default)'."""
    if not server.running:
        return "the server was stopped"
    versions = [m.version + (" (default)" if m.is_default else "") for m in server.client.versions(name)]
    if not versions:
        return f"the server still runs; {name} is not registered"
    return f"the server still runs; it serves {name} {', '.join(versions)}"


_default: Session | None = None


def current() -> Session:
    """The process-wide session the magics and widget share."""
    global _default
    if _default is None:
        _default = Session()
    return _default
