"""A third engine in one folder: model folders served in-process behind TorchServe's inference URLs, each version by
one worker process of its own (``worker.py``: TorchServe's loader and the shared handler), over a plain
``http.server`` on loopback. It exists to show that an engine is one folder and one registry entry: the session,
the magics and the reload of code-only edits drive it through the ``Engine`` protocol alone."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from msnb.engines.inference_api import InferenceClient
from msnb.engines.models import ModelStatus, WorkerStatus
from msnb.engines.store import ModelStore, read_manifest
from msnb.errors import MsnbError, ServerError
from msnb.templates.msnb_runtime.ts.wire import error_reply

WORKER = Path(__file__).with_name("worker.py")
_starts = itertools.count(1)


class Worker:
    """One model version's worker process; ``ask`` sends it one request at a time (a lock: one batch of one)."""

    def __init__(self, folder: Path, name: str, log: Path):
        self.folder, self.log = folder, log
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), str(folder), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("ab"),
            text=True,
        )
        self.lock = threading.Lock()
        if not self.process.stdout.readline():
            self.process.wait()
            raise ServerError(f"{name} failed to load.", "read its log lines below.", details=log.read_text()[-3000:])

    def ask(self, body: bytes, headers: dict[str, str]) -> dict:
        with self.lock:
            request = {"body": base64.b64encode(body).decode(), "headers": headers}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            return json.loads(self.process.stdout.readline())

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


class StandIn:
    """The stand-in engine (kind ``standin``): start, deploy folders, answer ``/predictions/NAME[/VERSION]``, stop."""

    kind, label = "standin", "the stand-in engine"
    python = None  # the workers run this interpreter: its packages are what a model need not bring

    def __init__(self) -> None:
        self.store = ModelStore(Path(tempfile.gettempdir()) / "msnb-standin-unstarted")
        self.client: InferenceClient | None = None
        self._http: ThreadingHTTPServer | None = None
        self._start_id: int | None = None
        self._root: Path | None = None
        self._workers: dict[str, dict[str, Worker]] = {}  # name -> version -> its worker
        self._default: dict[str, str] = {}  # name -> its default version

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> StandIn:
        if self.running:
            return self
        self._root = Path(tempfile.mkdtemp(prefix="msnb-standin-"))
        self.store = ModelStore(self._root / "store")
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        self.client, self._start_id = InferenceClient(self.inference_url), next(_starts)
        return self

    def stop(self) -> None:
        for name in list(self._workers):
            self.unregister(name)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
        self._http = self.client = self._start_id = self._root = None

    @property
    def running(self) -> bool:
        return self._http is not None

    @property
    def pid(self) -> int | None:
        return self._start_id  # a new start serves nothing of the old one

    @property
    def inference_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}" if self._http else ""

    @property
    def openai_base_url(self) -> str:
        return f"{self.inference_url}/v1"

    @property
    def mcp_url(self) -> str:
        return f"{self.inference_url}/mcp"

    @property
    def log_dir(self) -> Path:
        return (self._root or Path(tempfile.gettempdir())) / "logs"

    @property
    def workdir(self) -> Path | None:
        return self._root

    @property
    def key_file(self) -> Path | None:
        return None  # loopback only, no key: a stand-in

    # ------------------------------------------------------------------ models
    def free_version(self, name: str, version: str) -> str:
        taken = self._workers.get(name, {})
        candidates = itertools.chain([version], (f"{version}-r{n}" for n in itertools.count(2)))
        return next(v for v in candidates if v not in taken)

    def redeploy(self, path: str | Path, **params: Any) -> ModelStatus:
        """Serve the folder as its model's version and default, then stop the versions before it."""
        name, version = read_manifest(Path(path))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        worker = Worker(Path(path), name, self.log_dir / f"{name}.log")
        old = self._workers.setdefault(name, {})
        stale = dict(old)
        old[version], self._default[name] = worker, version
        for gone in stale:
            old.pop(gone).stop()
        return self.status(name)

    def deploy_many(self, models: list[tuple[Path, dict]]) -> Iterator[tuple[str, Any]]:
        for path, params in models:
            try:
                status = self.redeploy(path, **params)
            except MsnbError as err:
                yield Path(path).name, err
            else:
                yield status.name, status

    def unregister(self, name: str, version: str | None = None) -> None:
        for gone in [version] if version else list(self._workers.get(name, {})):
            self._workers.get(name, {}).pop(gone).stop()
        if not self._workers.get(name):
            self._workers.pop(name, None)
            self._default.pop(name, None)

    def model_env(self, name: str, values: dict[str, str]) -> None:
        if values:
            raise ServerError("The stand-in engine gives workers no variables.", "serve without --env.")

    def status(self, name: str, version: str | None = None) -> ModelStatus:
        version = version or self._default[name]
        worker = self._workers[name][version]
        alive = "READY" if worker.process.poll() is None else "UNLOADING"
        return ModelStatus(name, version, version == self._default[name], (WorkerStatus("1", alive),))

    def models(self) -> list[ModelStatus]:
        return [self.status(name) for name in self._workers]

    def versions(self, name: str) -> list[ModelStatus]:
        return [self.status(name, v) for v in self._workers.get(name, {})]

    def worker(self, name: str, version: str | None) -> Worker | None:
        return self._workers.get(name, {}).get(version or self._default.get(name, ""))

    def predict(self, name: str, data: Any, **kwargs: Any) -> Any:
        return self.client.predict(name, data, **kwargs)

    def predict_stream(self, name: str, data: Any, **kwargs: Any) -> Iterator[Any]:
        return self.client.predict_stream(name, data, **kwargs)

    def explain(self, name: str, data: Any, **kwargs: Any) -> Any:
        return self.client.explain(name, data, **kwargs)

    def model_log(self, name: str, lines: int = 40) -> list[str]:
        log = self.log_dir / f"{name}.log"
        return log.read_text().splitlines()[-lines:] if log.is_file() else []

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(line for name in self._workers for line in self.model_log(name, lines))

    def metrics(self) -> dict:
        return {}  # its workers report no metrics (status shows no batching)

    def progress_detail(self, name: str) -> Callable[[], str]:
        return lambda: "loading in its worker"


def _handler_for(engine: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # /predictions/NAME[/VERSION]
            _, kind, name, *version = self.path.split("?")[0].split("/")
            worker = engine.worker(name, version[0] if version else None) if kind == "predictions" else None
            if worker is None:  # TorchServe's answer to an unknown model
                status, headers, data = error_reply(404, "ModelNotFoundException", f"Model not found: {name}")
                return self._send(status, headers["content-type"], data)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            answer = worker.ask(body, {k.lower(): v for k, v in self.headers.items()})
            self._send(answer["status"], answer["content_type"], base64.b64decode(answer["body"]))

        def _send(self, status: int, ctype: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # quiet: the test's output is the notebook's
            pass

    return Handler
