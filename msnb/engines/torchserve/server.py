"""LocalServer: a private TorchServe on 127.0.0.1 that this process starts, deploys archives to, and stops.

The process lifecycle is here; HTTP goes through its ``client`` (a ``TorchServeClient``) and files
through its ``store`` (a ``ModelStore``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from msnb.engines import env_vars, watchdog
from msnb.engines.auth import Keys
from msnb.engines.model_metrics import ModelMetrics, per_model
from msnb.engines.models import ModelStatus
from msnb.engines.protocol import local_url, mcp_url, openai_url
from msnb.engines.store import ModelStore
from msnb.engines.torchserve import ENGINE, deploy
from msnb.engines.torchserve import config as tsconfig
from msnb.engines.torchserve.api_models import TorchServeModels
from msnb.engines.torchserve.client import TorchServeClient
from msnb.engines.torchserve.ingress import Ingress
from msnb.engines.torchserve.logs import model_lines, tail, worker_progress
from msnb.engines.ts_properties import LOOPBACK_HOSTS
from msnb.engines.watchdog import TEMP_PREFIX
from msnb.errors import MsnbError, ServerError
from msnb.templates.msnb_runtime.handler.cancel import CANCEL_DIR_VAR
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES

_LIVE: "weakref.WeakSet[LocalServer]" = weakref.WeakSet()
LAUNCHER_TIMEOUT_S = 60  # `torchserve --start` returns in ~0.1 s once Java is spawned


class LocalServer:
    """A TorchServe owned by this process: its own workdir, free ports, token auth, stopped with it.

    Without ``workdir`` it makes a temporary one; ``stop()`` (or the watchdog, when this process dies) then
    deletes the model store in it (the registered archives) and keeps the logs.

    ``ports`` may request fixed ports by name (see ``msnb.engines.torchserve.config.PORT_NAMES``); the others are free
    ones picked at start. ``token_expiration_min`` shortens TorchServe's key life (keys are renewed).
    ``properties`` adds config.properties entries (addresses excepted: they stay on loopback), ``env``
    environment variables (e.g. ``TS_SERVICE_ENVELOPE``), ``model_store`` serves a store elsewhere, ``python``
    runs TorchServe and its workers on another interpreter (e.g. a clean environment with only torch and TorchServe).
    ``max_request_size`` / ``max_response_size`` (bytes) raise TorchServe's 6.5 MB body limits.
    """

    def __init__(
        self,
        workdir: str | Path | None = None,
        *,
        auth: bool = True,
        quiet_logs: bool = True,
        startup_timeout: float = 60.0,
        ports: dict[str, int] | None = None,
        token_expiration_min: float | None = None,
        properties: dict | None = None,
        env: dict[str, str] | None = None,
        model_store: str | Path | None = None,
        max_request_size: int | None = None,
        max_response_size: int | None = None,
        python: str | Path | None = None,
    ):
        # A temporary workdir's own model store is deleted by stop(); a store given here never is.
        self._owns_workdir = workdir is None and model_store is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=TEMP_PREFIX)).resolve()
        if self._owns_workdir:
            watchdog.mark_owner(self.workdir)
        self.layout = tsconfig.Layout(self.workdir, Path(model_store).resolve() if model_store else None)
        self.properties, self.env = dict(properties or {}), dict(env or {})
        self.auth, self.quiet_logs, self.startup_timeout = auth, quiet_logs, startup_timeout
        self.token_expiration_min = token_expiration_min
        self.limits = tsconfig.Limits(max_request_size, max_response_size)
        self._requested_ports = dict(ports or {})
        self.ports: dict[str, int] = {}
        self._java: psutil.Process | None = None
        self._watchdog: subprocess.Popen | None = None
        self._client: TorchServeClient | None = None
        self._ingress: Ingress | None = None  # OpenAI's /v1 and MCP's /mcp beside TorchServe (torchserve.ingress)
        self.store = ModelStore(self.layout.model_store)
        self.python = str(python or sys.executable)  # the interpreter TorchServe and its workers run on
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "LocalServer":
        """Start TorchServe and wait until /ping answers; a no-op when it already runs."""
        with self._lock:
            if self.running:
                return self
            java = tsconfig.java_executable()  # refuse before launching: the launcher would return 0 anyway
            self._refuse_shared_workdir()
            self.stop()  # a server that died by itself: clean up its watchdog and workers first
            watchdog.sweep_stale(Path(tempfile.gettempdir()), TEMP_PREFIX)  # what killed owners left behind
            try:
                self._start(java)
            except OSError as err:
                self.stop()
                raise ServerError(
                    f"Cannot start TorchServe in {self.workdir}: {err}",
                    "give LocalServer(workdir=...) a folder you can write to.",
                ) from None
            except BaseException:  # a failed or interrupted (Ctrl-C) start leaves nothing running
                self.stop()
                raise
            _LIVE.add(self)
            return self

    def _start(self, java: str) -> None:
        for attempt in (1, 2):
            self.layout.create()  # again after a failed attempt: its stop() may have removed the workdir
            if self._owns_workdir:  # and with it the owner file that sweep_stale reads
                watchdog.mark_owner(self.workdir)
            self.ports = tsconfig.choose_ports(self._requested_ports)
            tsconfig.write_config(
                self.layout,
                self.ports,
                auth=self.auth,
                quiet_logs=self.quiet_logs,
                token_expiration_min=self.token_expiration_min,
                extra=self.properties,
                limits=self.limits,
            )
            try:
                self._launch(java)
                self._wait_ready()
                self._start_ingress()
                return
            except _PortTaken:
                if attempt == 2 or self._requested_ports:
                    raise

    def _start_ingress(self) -> None:
        """/v1 and /mcp beside TorchServe (msnb.engines.torchserve.ingress). It takes this run's client as it is: no
        check that Java lives on each request (two reads of /proc); a dead server is a refused connection anyway."""
        client = self.client
        models = TorchServeModels(lambda: client, self.layout.model_store, self.layout.cancel_dir)
        limit = self.limits.max_request_size or DEFAULT_MAX_BYTES  # /v1 and /mcp refuse what TorchServe would
        self._ingress = Ingress(models, lambda: client.keys.header("inference"), limit).start()

    def stop(self) -> None:
        """Stop this server's Java process and workers and wait until they are gone; idempotent."""
        with self._lock:
            if self._ingress is not None:  # /v1 and /mcp first: nothing answers for a server that is going
                self._ingress.stop()
                self._ingress = None
            if self._java is not None:
                watchdog.stop_tree(self._java)
                self._java = None
            self._kill_leftovers()
            if self._watchdog is not None:
                self._watchdog.stdin.close()
                try:
                    self._watchdog.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._watchdog.kill()
                    self._watchdog.wait()
                self._watchdog = None
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._owns_workdir:  # a temporary workdir goes whole: archives, checkpoint copies, logs, keys
                shutil.rmtree(self.layout.model_store, ignore_errors=True)
                shutil.rmtree(self.workdir, ignore_errors=True)
            # TorchServe's scratch (pid file, worker sockets, unpacked models; a folder in /tmp when the workdir
            # is deep) and the keys of a server that no longer runs.
            shutil.rmtree(self.layout.tmp_dir, ignore_errors=True)
            self.layout.key_file.unlink(missing_ok=True)
            env_vars.remove(self.layout.env_dir)  # the models' variables (--env) live as long as the server
            _LIVE.discard(self)

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._java is not None and watchdog.alive(self._java)

    @property
    def pid(self) -> int | None:
        return self._java.pid if self.running else None

    @property
    def inference_url(self) -> str:
        return local_url(LOOPBACK_HOSTS[0], self.ports.get("inference"))

    @property
    def management_url(self) -> str:
        return local_url(LOOPBACK_HOSTS[0], self.ports.get("management"))

    @property
    def metrics_url(self) -> str:
        return local_url(LOOPBACK_HOSTS[0], self.ports.get("metrics"))

    @property
    def openai_base_url(self) -> str:
        """OpenAI's API over the streaming and embedding models: ``OpenAI(base_url=server.openai_base_url,
        api_key=KEY)``."""
        return openai_url(self._ingress and self._ingress.url)

    @property
    def mcp_url(self) -> str:
        """MCP's streamable HTTP endpoint: every served model is a tool (the inference key as bearer)."""
        return mcp_url(self._ingress and self._ingress.url)

    @property
    def log_dir(self) -> Path:
        return self.layout.log_dir

    @property
    def model_store(self) -> Path:
        return self.layout.model_store

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the worker log (model_log.log), else of TorchServe's own output."""
        text = tail(self.layout.model_log, lines) or tail(self.layout.java_out, lines)
        return "\n".join(text)

    @property
    def client(self) -> TorchServeClient:
        """The HTTP client of the running server (an error when it is not running)."""
        client = self._client  # read once: stop() in another thread sets it to None
        if client is None or not self.running:
            raise ServerError("The local TorchServe is not running.", "start it with server.start() (or %ms_serve).")
        return client

    # ------------------------------------------------------------------ archives (msnb.engines.torchserve.deploy)
    def register(self, path: str | Path, **params: Any) -> ModelStatus:
        """Link a .mar or a no-archive folder into the model store, register it, wait for a ready worker.

        ``params``: workers, batch_size, max_batch_delay, response_timeout (override the archive's config).
        """
        status = deploy.register(self.client, self.store, path, **params)
        self._forget_cards()  # the new version's card (msnb_api.json) from now on
        return status

    def deploy_many(self, models: list[tuple[Path, dict]]) -> Iterator[tuple[str, ModelStatus | MsnbError]]:
        """Register each model folder (or archive) with its register parameters (``deploy.register_many``)."""
        return deploy.register_many(self.register, models)

    def describe(self, name: str) -> tuple[int, bytes]:
        """``GET /models/NAME?customized=true`` on the management API: its status and body."""
        resp = self.client.call("GET", f"{self.management_url}/models/{name}?customized=true", "management")
        return resp.status_code, resp.content

    def redeploy(self, path: str | Path, **params: Any) -> ModelStatus:
        """Register the archive as its model's new default version and unregister the old ones; no restart."""
        status = deploy.redeploy(self.client, self.store, path, **params)
        self._forget_cards()  # the new version's card (msnb_api.json) from now on
        return status

    def unregister(self, name: str, version: str | None = None) -> None:
        """Unregister one version (or every version) of a model and delete its files from the model store."""
        deploy.unregister(self.client, self.store, name, version)
        self._forget_cards()
        if version is None:
            env_vars.remove(self.layout.env_dir, name)

    def _forget_cards(self) -> None:
        ingress = self._ingress
        if ingress is not None:
            ingress.models.forget()

    def model_env(self, name: str, values: dict[str, str]) -> None:
        """Give the workers ``name`` starts from now on these variables (none: no more), and no other model's workers
        (a file its runtime reads: see ``msnb.engines.env_vars``)."""
        env_vars.write(self.layout.env_dir, name, values)

    # ------------------------------------------------------------------ the client's calls, for convenience
    def predict(self, name: str, data: Any, **kwargs: Any) -> Any:
        return self.client.predict(name, data, **kwargs)

    def predict_stream(self, name: str, data: Any, **kwargs: Any) -> Iterator[Any]:
        """The answer's chunks as they arrive (see TorchServeClient.predict_stream)."""
        return self.client.predict_stream(name, data, **kwargs)

    def predict_many(self, name: str, inputs: list, **kwargs: Any) -> list:
        return self.client.predict_many(name, inputs, **kwargs)

    def explain(self, name: str, data: Any, **kwargs: Any) -> Any:
        return self.client.explain(name, data, **kwargs)

    def models(self) -> list[ModelStatus]:
        return self.client.models()

    def status(self, name: str, version: str | None = None) -> ModelStatus:
        return self.client.status(name, version)

    def scale(self, name: str, workers: int, *, version: str | None = None) -> ModelStatus:
        return self.client.scale(name, workers, version=version)

    def metrics(self) -> dict[str, ModelMetrics]:
        """Model name -> what its workers counted, read from TorchServe's metrics API (``client.metrics()``: every
        sample, parsed)."""
        return per_model(self.client.metrics())

    # ------------------------------------------------------------------ the Engine protocol (msnb.engines.protocol)
    kind, label = ENGINE.kind, ENGINE.label  # declared once, in the package (msnb.engines.registry lists it)

    @property
    def key_file(self) -> Path | None:
        return self.layout.key_file if self.auth else None

    def free_version(self, name: str, version: str) -> str:
        return self.client.free_version(name, version)

    def versions(self, name: str) -> list[ModelStatus]:
        return self.client.versions(name)

    def model_log(self, name: str, lines: int = 40) -> list[str]:
        """The newest lines the workers of ``name`` wrote to model_log.log (any version)."""
        log = self.layout.model_log
        return model_lines(log.read_text(errors="replace"), name, lines) if log.exists() else []

    def progress_detail(self, name: str) -> Callable[[], str]:
        return worker_progress(self.layout.model_log, name)

    def __repr__(self) -> str:
        state = f"running pid {self.pid}, {self.inference_url}" if self.running else "stopped"
        return f"<LocalServer {state}, workdir {self.workdir}>"

    # ------------------------------------------------------------------ internals
    def _launch(self, java: str) -> None:
        """Run TorchServe's launcher, which starts Java and returns; then watch Java and connect to it."""
        lay = self.layout
        for stale in (lay.pid_file, lay.key_file):
            stale.unlink(missing_ok=True)
        self._run_launcher(self._launch_command(), self._launch_env(java))
        try:
            pid = int(lay.pid_file.read_text().strip())
            self._java = psutil.Process(pid)
        except (OSError, ValueError, psutil.NoSuchProcess):
            raise ServerError(
                "TorchServe's launcher did not start Java.",
                "see TorchServe's output below.",
                details="\n".join(tail(lay.java_out, 20)),
            ) from None
        self._watchdog = watchdog.spawn(pid, [*([lay.model_store] if self._owns_workdir else []), lay.env_dir])
        self._client = TorchServeClient(
            self.inference_url,
            self.management_url,
            self.metrics_url,
            keys=Keys(lay.key_file, self.management_url, enabled=self.auth),
            log_dir=self.log_dir,
            alive=lambda: self.running,
            limits=self.limits,
        )

    def _launch_env(self, java: str) -> dict[str, str]:
        """The launcher's environment: no TS_* of ours leaks in, and every path of this server is its own."""
        lay = self.layout
        # A model gets the kernel's credentials only when named (--env, msnb.engines.env_vars): none by inheritance.
        inherited = env_vars.without_credentials(os.environ)
        env = {k: v for k, v in inherited.items() if not k.startswith("TS_")} | self.env
        env[env_vars.ENV_DIR_VAR] = str(lay.env_dir)
        env[CANCEL_DIR_VAR] = str(lay.cancel_dir)  # the streams the ingress ended early (msnb_runtime.handler.cancel)
        # One server per temp dir: the launcher keeps its pid file in $TMPDIR, Java its worker sockets
        # (/tmp/.ts.sock.9000, shared by every server otherwise) in java.io.tmpdir, which the launcher sets from $TEMP.
        env.update(
            TMPDIR=str(lay.tmp_dir),
            TEMP=str(lay.tmp_dir),
            LOG_LOCATION=str(lay.log_dir),
            METRICS_LOCATION=str(lay.log_dir),
            JAVA_HOME=env.get("JAVA_HOME") or str(Path(java).resolve().parent.parent),
        )
        return env

    def _launch_command(self) -> list[str]:
        lay = self.layout
        cmd = [self.python, "-m", "ts.model_server", "--start", "--ncs", "--ts-config", str(lay.config)]
        cmd += ["--model-store", str(lay.model_store)]
        return cmd + (["--log-config", str(lay.log_config)] if self.quiet_logs else [])

    def _run_launcher(self, cmd: list[str], env: dict[str, str]) -> None:
        # Never a pipe: Java inherits the launcher's stdout and would hold it open forever.
        java_out = self.layout.java_out
        with java_out.open("ab") as out:
            launcher = subprocess.Popen(
                cmd,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                launcher.wait(timeout=LAUNCHER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
                raise ServerError(
                    f"TorchServe's launcher did not return within {LAUNCHER_TIMEOUT_S} s.",
                    "see TorchServe's output below; check Java 17 and the installed torchserve.",
                    details="\n".join(tail(java_out, 20)),
                ) from None

    def _refuse_shared_workdir(self) -> None:
        try:
            other = psutil.Process(int(self.layout.pid_file.read_text().strip()))
            in_use = str(self.layout.config) in other.cmdline()
        except (OSError, ValueError, psutil.Error):
            return
        if in_use:
            raise ServerError(
                f"Another TorchServe (pid {other.pid}) already runs in {self.workdir}.",
                "give each LocalServer its own workdir (or none: msnb makes a fresh one), "
                "or stop the other server first.",
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if not self.running:
                self._fail_start("TorchServe exited while starting.")
            if self._client.keys.ready() and self._answers():
                return
            if time.monotonic() > deadline:
                self._fail_start(f"TorchServe did not become healthy within {self.startup_timeout} s.")
            time.sleep(0.1)

    def _answers(self) -> bool:
        """Whether both APIs answer: /ping on the inference port, and the management port, which Java binds a moment
        later (a register sent between the two was refused; a management port another process took ends Java)."""
        try:
            if not self._client.call("GET", f"{self.inference_url}/ping", "inference", timeout=2).ok:
                return False
            return self._client.call("GET", f"{self.management_url}/models", "management", timeout=2).status_code < 500
        except ServerError:
            return False

    def _fail_start(self, message: str) -> None:
        output = "\n".join(tail(self.layout.java_out, 25))
        self.stop()
        if "Address already in use" in output:
            raise _PortTaken(
                message + " A port was taken by another process.",
                "free the port or leave ports unset so msnb picks free ones.",
                details=output,
            )
        hint = (
            f"pass a larger startup_timeout= (now {self.startup_timeout} s)"
            if "healthy" in message
            else "read TorchServe's output below; check Java 17 and the installed torchserve."
        )
        raise ServerError(message, hint, details=output)

    def _kill_leftovers(self) -> None:
        """Processes whose command line names this server's TMPDIR (workers of a Java that died)."""
        mine = str(self.layout.tmp_dir)
        procs = []
        for proc in psutil.process_iter(["cmdline"]):
            if any(mine in part for part in (proc.info["cmdline"] or ())):
                procs.append(proc)
        for proc in procs:
            watchdog.stop_tree(proc, grace_s=2.0)


class _PortTaken(ServerError):
    """Java could not bind a port (another process took it between our check and its bind)."""


_default: LocalServer | None = None
_default_lock = threading.Lock()


def default_server(create: bool = True) -> LocalServer | None:
    """The process-wide server of the notebook surfaces, started on first use, stopped at exit."""
    global _default
    with _default_lock:
        if _default is None and create:
            _default = LocalServer()
        if _default is not None and create and not _default.running:
            _default.start()
        return _default


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        try:
            server.stop()
        except Exception:  # best effort at interpreter exit; the watchdog is the backstop
            pass
