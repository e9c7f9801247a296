"""What the test tiers share, as a plain module (never imported from a conftest): tiny handler sources
(no model downloads: each builds its own model), archives built by the real archiver CLI, a bounded poll,
the processes a server leaves, notebooks for the export tier, and the widget's fake actions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nbformat
import psutil
import torch

from msnb.errors import MsnbError
from msnb.session.state import Observers
from msnb.ui.widget.controller import Actions
from msnb.ui.widget.devices import Device, Inventory

MLP_CLASS = textwrap.dedent(
    """
    class MLP(torch.nn.Module):
        def __init__(self, hidden=8):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, hidden)
            self.fc2 = torch.nn.Linear(hidden, 3)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))
    """
)


# What a wheel build leaves out of its private copy of the tree: environments, caches and what builds write.
NOT_SOURCE = (
    ".venv*",
    ".git",
    "build",
    "dist",
    "site",
    "artifacts",
    ".cache",
    ".hypothesis",
    ".ruff_cache",
    "*.egg-info",
)


def build_wheel(out: Path) -> Path:
    """msnb's wheel, built from a private copy of the source tree into ``out``: setuptools writes ``build/`` inside the
    tree it builds, so two builds of one tree at once (two workers, or the other tested Python's run beside this one)
    would delete each other's files."""
    root = Path(__file__).resolve().parents[1]
    source = out / "source"
    shutil.copytree(root, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
        check=True,
        cwd=out,
    )
    shutil.rmtree(source)
    return next(out.glob("msnb-*.whl"))


def mlp_class(name: str = "MLP") -> str:
    """The source of a tiny 4 -> hidden -> 3 MLP class called ``name`` (it needs ``torch`` imported)."""
    return MLP_CLASS.replace("class MLP(", f"class {name}(")


# torch, the MLP class and a seeded init_function: a handler cell without preprocess/postprocess yet.
MLP_MODEL = (
    "\nimport torch\n"
    + MLP_CLASS
    + textwrap.dedent(
        """
    def init_function(hidden=8):
        torch.manual_seed(0)
        return MLP(hidden)
    """
    )
)

MLP_SOURCE = MLP_MODEL + textwrap.dedent(
    """
    def preprocess(sample):
        if not isinstance(sample, dict) or "x" not in sample:
            raise ValueError("expected a JSON object with key 'x' (4 numbers)")
        values = torch.tensor(sample["x"], dtype=torch.float32)
        if values.shape != (4,):
            raise ValueError(f"'x' must hold 4 numbers, got shape {tuple(values.shape)}")
        return values

    def postprocess(output):
        return {"label": int(output.argmax()), "scores": [round(float(v), 5) for v in output]}
    """
)
BATCH_ONLY_BUG = MLP_SOURCE.replace("self.fc1(x)", "self.fc1(x.view(1, -1))")  # fine for one sample only
BATCH_BUG_INPUTS = [{"x": [float(i), 1.0, -2.0, 0.5]} for i in range(4)]  # a batch of them: a fallback


def file_digests(path: Path) -> dict[str, str]:
    """Each file of a folder (links followed) or a .mar, by its relative path -> the sha256 of its bytes."""
    if Path(path).is_file():
        with zipfile.ZipFile(path) as zf:
            return {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist() if not n.endswith("/")}
    found = {}
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            file = Path(dirpath) / name
            found[file.relative_to(path).as_posix()] = hashlib.sha256(file.read_bytes()).hexdigest()
    return found


def strict_loads(text: str):
    """A strict JSON parser: NaN, Infinity and -Infinity are refused, as browsers and most clients do."""

    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


# MLP_SOURCE with an explain role (gradient x input), and a token-id model Integrated Gradients cannot explain.
CUSTOM_EXPLAIN = (
    MLP_SOURCE
    + '''

def explain(model, model_input, target=None):
    """Gradient x input: needs autograd inside the handler's explain path."""
    x = model_input.unsqueeze(0).requires_grad_()
    out = model(x)[0]
    out[out.argmax() if target is None else target].backward()
    return {"custom": True, "target": target, "attributions": (x.grad * x)[0].tolist()}
'''
)
TOKENS_SOURCE = """
import torch

class Bag(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.EmbeddingBag(10, 3)

    def forward(self, ids):
        return self.embedding(ids)

def init_function():
    return Bag()

def preprocess(sample):
    return torch.tensor(sample["ids"])  # token ids: int64
"""


def mlp_model(hidden: int = 8) -> torch.nn.Module:
    """MLP_SOURCE's model, built here independently (its init_function seeds the weights): a reference."""
    namespace: dict = {}
    exec(MLP_SOURCE, namespace)
    return namespace["init_function"](hidden=hidden).eval()


def label_and_scores(output: torch.Tensor, digits: int = 5) -> dict:
    """MLP_SOURCE's postprocess rule, written out here: the argmax label and the scores rounded to ``digits``."""
    return {"label": int(output.argmax()), "scores": [round(float(v), digits) for v in output]}


def notebook_answer(
    model: torch.nn.Module,
    x: Any,
    postprocess: Callable[[torch.Tensor], Any] = label_and_scores,
    batched: bool = True,
) -> Any:
    """The truth a served answer is compared with: plain torch (no msnb code) on the notebook's model and input
    ``x``, then the cell's own postprocess. ``batched`` runs a batch of one and takes row 0, as a server's batched
    forward does; otherwise the bare sample goes through the model."""
    with torch.inference_mode():
        sample = torch.tensor(x, dtype=torch.float32)
        output = model(sample.unsqueeze(0))[0] if batched else model(sample)
    return postprocess(output)


ARCHIVER = Path(sys.executable).parent / "torch-model-archiver"
# The xdist group of every test that starts a Ray (the Ray tier and the benchmark smoke run): one worker runs them one
# after another, so that no two Rays start at once (two Ray-heavy tests side by side on two cores each ran 3-4 times
# slower, and Serve's replicas timed out); the other worker runs the rest (tests/conftest.py GROUP_ORDER).
RAY_GROUP = "ray"
# The benchmark smoke run of the benchmarks that start no Ray (tests/bench): one worker runs it, once.
BENCH_GROUP = "bench-smoke"
# The tests that use the clean_python fixture (tests/kernel/conftest.py) share one worker: the venv is built once.
CLEAN_PYTHON_GROUP = "clean-python"

ECHO = textwrap.dedent(
    """
    import os
    import time

    def handle(data, context):
        if data is None:
            print("echo handler loaded")
            return None
        out = []
        for idx, request in enumerate(data):
            body = request.get("body") if request.get("body") is not None else request.get("data")
            if isinstance(body, (bytes, bytearray)):
                out.append(bytes(body[::-1]))
                continue
            if isinstance(body, dict) and body.get("die"):
                os._exit(3)
            if isinstance(body, dict) and "sleep" in body:
                time.sleep(body["sleep"])
            if isinstance(body, dict) and body.get("reject"):
                context.set_response_status(422, "Unprocessable", idx)
                out.append({"error": "sample rejected: 'reject' is set", "hint": "drop the 'reject' key"})
                continue
            out.append({"echo": body, "batch": len(data)})
        return out
    """
)

# A handler whose answer is the server's own request id: TorchServe's frontend makes UUIDs, a Ray replica its own
# (two servers never answer it alike).
REQUEST_IDS = "def handle(data, context):\n    return None if data is None else [context.get_request_id(0)]\n"

BROKEN_INIT = textwrap.dedent(
    """
    def load_weights():
        raise ValueError("user error 42: weights do not match")

    def handle(data, context):
        if data is None:
            load_weights()
        return [None for _ in data]
    """
)

IMPORT_ERROR = "import msnb_no_such_module_xyz\n\ndef handle(data, context):\n    return None\n"


def build_mar(
    directory: Path,
    name: str,
    source: str,
    *,
    version: str = "1.0",
    requirements: list[str] | None = None,
    entry: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> Path:
    """A .mar built by the torch-model-archiver CLI from a one-module handler (``--handler file:ENTRY`` with an
    ``entry``: the module's path without .py, as TorchServe's README writes it)."""
    directory.mkdir(parents=True, exist_ok=True)
    handler = directory / f"{name}_handler.py"
    handler.write_text(source)
    cmd = [
        str(ARCHIVER),
        "--model-name",
        name,
        "--version",
        version,
        "--handler",
        f"{handler.with_suffix('')}:{entry}" if entry else str(handler),
        "--export-path",
        str(directory),
        "-f",
        *extra_args,
    ]
    if requirements:
        req = directory / f"{name}_requirements.txt"
        req.write_text("\n".join(requirements) + "\n")
        cmd += ["--requirements-file", str(req)]
    # The archiver stages in $TMPDIR/<model-name>/: a private TMPDIR keeps parallel builds apart.
    env = {**os.environ, "TMPDIR": str(directory)}
    subprocess.run(cmd, check=True, env=env, capture_output=True, timeout=120)
    return directory / f"{name}.mar"


def processes_naming(path: Path) -> list[psutil.Process]:
    """Every live process whose command line mentions ``path`` (Java, workers, launcher)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(str(path) in part for part in (proc.info["cmdline"] or ())):
            found.append(proc)
    return found


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port no server answers while the block runs: bound and never listened on, so a connection is
    refused and no test running beside this one can take it (a port only found free could be bound by a parallel
    test's server, whose answers would then come back from what should be down)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def poll(
    condition: Callable[[], Any],
    timeout: float,
    what: str = "",
    interval: float = 0.1,
    log: Callable[[], str] | None = None,
) -> Any:
    """Call ``condition`` until it returns something truthy (returned) or ``timeout`` seconds pass.

    With ``what`` a timeout fails the test naming it (and ``log()``); without, the last value is returned.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            break
        time.sleep(interval)
    if not value and what:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}" + (f"\n{log()}" if log else ""))
    return value


# ---------------------------------------------------------------- notebooks for the export and CLI tiers
IMPORTS = "import torch\n"
NET = mlp_class("Net")
BODY = textwrap.dedent("""
    import torch

    def init_function(hidden=8):
        return Net(hidden)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {"label": int(output.argmax()), "scores": [round(float(v), 4) for v in output]}
""")
EXAMPLE = '{"x": [1, 2, 3, 4]}'


def handler(name: str, options: str = "", body: str = BODY) -> str:
    return f"%%ms_handler {name} --checkpoint weights.pt --example '{EXAMPLE}' {options}".rstrip() + "\n" + body


def make_notebook(folder: Path, *cells: str, name: str = "demo.ipynb", weights: bool = True) -> Path:
    """A notebook of code cells ("# md: ..." makes a markdown cell) plus weights.pt for Net beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(c[6:]) if c.startswith("# md: ") else nbformat.v4.new_code_cell(c) for c in cells
    ]
    path = folder / name
    nbformat.write(nb, str(path))
    if weights:
        torch.manual_seed(3)
        namespace: dict = {"torch": torch}
        exec(NET, namespace)
        torch.save(namespace["Net"]().state_dict(), folder / "weights.pt")
    return path


def standard(folder: Path, *handlers: str, **kw) -> Path:
    return make_notebook(folder, "# md: # A demo", IMPORTS, NET, *(handlers or (handler("mlp"),)), **kw)


def run(capsys, *argv) -> tuple[int, str, str]:
    """`msnb ARGV...` in-process: (exit code, stdout, stderr)."""
    from msnb.cli.main import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- the widget with fake actions
CPU_ONLY = Inventory((Device("auto", "auto"), Device("cpu", "CPU")), "No GPU found by NVML: the model runs on CPU.")
ONE_GPU = Inventory((Device("auto", "auto"), Device("gpu:0", "GPU 0: T4", 0, 15360, 15000), Device("cpu", "CPU")))


class FakeSession:
    """Records what the buttons asked for; ``alive`` is the fake server's state, ``gate`` can hold an action."""

    def __init__(self, spec):
        self.specs, self.calls, self.alive = {spec.name: spec}, [], False
        self.gate: threading.Event | None = None
        self.fail: Exception | None = None
        self.serving: set[str] = set()
        self.observers = Observers()

    def actions(self) -> Actions:
        return Actions(
            get=self.get,
            test=self.record("test"),
            build=self.record("build"),
            serve=self.record("serve"),
            predict=self.record("predict"),
            stop=self.record("stop"),
            server_state=lambda: (self.alive, "pid 4242, workdir /tmp/msnb-server-x" if self.alive else "none"),
            log_tail=lambda: "2024 WORKER died: java.lang.OutOfMemoryError",
            served=lambda name: f"{name} v1.0 (digest abc)" if self.alive and name in self.serving else None,
            logs=lambda name: f"{name} worker: ready",
            subscribe=self.observers.subscribe,
            explain=self.record("explain"),
        )

    def serve_by_magic(self, name):
        """What %ms_serve does to the session the widget watches."""
        self.alive = True
        self.serving.add(name)
        self.observers.notify("served", name)

    def define_by_magic(self, spec):
        """What running the %%ms_handler cell again does: the kernel holds a new spec of that name."""
        self.specs[spec.name] = spec
        self.observers.notify("defined", spec.name)

    def stop_by_magic(self):
        self.alive = False
        self.serving.clear()
        self.observers.notify("stopped")

    def get(self, name):
        if name not in self.specs:
            raise MsnbError(f"No handler named {name!r}.", "run its %%ms_handler cell first.")
        return self.specs[name]

    def record(self, action):
        def run(*args):
            self.calls.append((action, args))
            if self.gate is not None:
                assert self.gate.wait(10)
            if self.fail is not None:
                raise self.fail
            if action == "serve":
                args[1]("registering", 0.5)
                self.alive = True
                self.serving.add(args[0].name)
            if action == "stop":
                self.alive = False
                self.serving.clear()
            return {
                "test": [{"label": 1}],
                "build": "model_store/mlp.mar",
                "serve": SimpleNamespace(),
                "predict": {"label": 2, "scores": [0.1, 0.9]},
                "explain": {"method": "integrated_gradients", "target": 2, "attributions": [0.5, -0.25, 0.0, 1.0]},
                "logs": "mlp worker: ready",
                "stop": None,
            }[action]

        return run

    def names(self):
        return [c[0] for c in self.calls]


# ---------------------------------------------------------------- a user's own TorchServe handlers (no roles)
# A BaseHandler subclass: BaseHandler.initialize loads the TorchScript checkpoint; an nn.Module sits beside it.
OWN_BASE_HANDLER = textwrap.dedent("""
    import torch
    from ts.torch_handler.base_handler import BaseHandler

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class Classifier(BaseHandler):
        def preprocess(self, data):
            return Scale()(torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32))

        def postprocess(self, output):
            return [{"label": int(o.argmax()), "top": round(float(o.max()), 4)} for o in output]
""")
# Any class with initialize and handle, answering image bytes (a PGM mask) with its own content type.
OWN_IMAGE_CLASS = textwrap.dedent("""
    import torch

    class BackgroundRemover:
        def initialize(self, context):
            self.threshold = torch.tensor(0.5)

        def handle(self, data, context):
            answers = []
            for idx, row in enumerate(data):
                pixels = torch.tensor(row["body"]["pixels"], dtype=torch.float32)
                mask = (torch.sigmoid(pixels) > self.threshold).to(torch.uint8) * 255
                height, width = mask.shape
                answers.append(f"P5 {width} {height} 255\\n".encode() + bytes(mask.flatten().tolist()))
                context.set_response_content_type(idx, "image/x-portable-graymap")
            return answers
""")
# MMS's custom-service style: a module-level handle that loads the model when data is None.
OWN_FUNCTION = textwrap.dedent("""
    import torch

    _model = None

    def handle(data, context):
        global _model
        if data is None:
            torch.manual_seed(0)
            _model = Net()
            return None
        batch = torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)
        return [{"label": int(o.argmax())} for o in _model(batch)]
""")


# A TorchServe module-level handler importing captum (whose requirements name torch): it answers which torch the
# worker imported and where its model folder is, so a test can check that no second torch was installed there.
OWN_CAPTUM_REPORT = textwrap.dedent("""
    import captum
    import torch

    def handle(data, context):
        if data is None:
            return None
        where = context.system_properties["model_dir"]
        return [{"torch": torch.__version__, "file": torch.__file__, "model_dir": where} for _ in data]
""")


# A module-level entry point as TorchServe's custom-service page writes one: a module logger, a lock, a compiled
# pattern and a constant computed by a call, all bound at module level.
TS_MODULE_LEVEL = textwrap.dedent("""
    import logging
    import re
    import threading

    logger = logging.getLogger(__name__)
    lock = threading.Lock()
    WORD = re.compile(r"[a-z]+")
    STOP = frozenset(["the", "a"])
    N_STOP = len(STOP)

    def handle(data, context):
        if data is None:
            return None
        with lock:
            logger.info("batch of %d", len(data))
        return [[w for w in WORD.findall(str(row.get("body"))) if w not in STOP][:N_STOP] for row in data]
""")


# TorchServe's custom-service page: a module-level entry point with its own name, archived with
# `--handler custom_handler:entry_point_function_name`; and the class entry point served through a module-level
# handle that creates the class once (the same page's second example).
TS_NAMED_ENTRY = textwrap.dedent("""
    import torch

    model = None

    def entry_point_function_name(data, context):
        global model
        if data is None:
            torch.manual_seed(0)
            model = torch.nn.Linear(3, 2)
            return None
        rows = torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)
        return [[round(v, 5) for v in out.tolist()] for out in model(rows)]
""")
TS_SERVICE_OBJECT = textwrap.dedent("""
    import torch

    class ModelHandler(object):
        def __init__(self):
            self.initialized = False
            self.model = None

        def initialize(self, context):
            torch.manual_seed(0)
            self.model = torch.nn.Linear(3, 2)
            self.initialized = True

        def handle(self, data, context):
            rows = torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)
            return [[round(v, 5) for v in out.tolist()] for out in self.model(rows)]

    _service = ModelHandler()

    def handle(data, context):
        if not _service.initialized:
            _service.initialize(context)
        if data is None:
            return None
        return _service.handle(data, context)
""")


# BaseHandler's eager mode as TorchServe's README archives it: the model class in model.py (--model-file), its
# state_dict (--serialized-file), and a handler file holding only the BaseHandler subclass.
TS_EAGER_MODEL = textwrap.dedent("""
    import torch

    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x)
""")


def eager_files(
    folder: Path, source: str = TS_EAGER_MODEL, cls: str = "TinyNet", weights: str = "w.pt"
) -> tuple[torch.nn.Module, tuple[str, ...]]:
    """TorchServe's eager-mode files in a new ``folder``: model.py (``source``) and ``weights``, the state_dict of its
    class ``cls`` seeded with 0; returns the network (the truth) and the archiver's ``--model-file`` /
    ``--serialized-file``."""
    folder.mkdir()
    (folder / "model.py").write_text(source)
    torch.manual_seed(0)
    namespace: dict = {}
    exec(source, namespace)
    net = namespace[cls]()
    torch.save(net.state_dict(), folder / weights)
    return net, ("--model-file", str(folder / "model.py"), "--serialized-file", str(folder / weights))


TS_EAGER_HANDLER = textwrap.dedent("""
    import torch
    from ts.torch_handler.base_handler import BaseHandler

    class Classifier(BaseHandler):
        def preprocess(self, data):
            return torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)

        def postprocess(self, output):
            return [[round(v, 4) for v in o.tolist()] for o in output]
""")


# A model for TorchServe's default text_classifier: forward(text, offsets) and an `embedding` (its Captum layer).
TS_TEXT_MODEL = textwrap.dedent("""
    import torch

    class TextClassificationModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.EmbeddingBag(12, 8)
            self.fc = torch.nn.Linear(8, 2)

        def forward(self, text, offsets):
            return self.fc(self.embedding(text, offsets))
""")


# TorchServe's inference API page: a handler streaming three intermediate responses, then its last one.
TS_STREAMING = textwrap.dedent("""
    from ts.handler_utils.utils import send_intermediate_predict_response


    def handle(data, context):
        if type(data) is list:
            for i in range(3):
                send_intermediate_predict_response(
                    ["intermediate_response"], context.request_ids, "Intermediate Prediction success", 200, context
                )
            return ["hello world "]
""")

# A BaseHandler with customized metadata (`GET /models/NAME?customized=true`).
TS_DESCRIBED = textwrap.dedent("""
    import json

    from ts.torch_handler.base_handler import BaseHandler


    class Described(BaseHandler):
        def initialize(self, context):
            self.context = context
            self.initialized = True

        def preprocess(self, data):
            return [row.get("body") for row in data]

        def inference(self, data, *args, **kwargs):
            return data

        def postprocess(self, data):
            return [{"echo": d} for d in data]

        def describe_handle(self):
            return json.dumps({"labels": ["cat", "dog"], "input": "json"})
""")

# BaseHandler in eager mode (model file + state_dict) whose get_insights uses Captum's layer attributions: layer
# hooks, which a TorchScript model does not support.
TS_EXPLAINED = textwrap.dedent("""
    import torch
    from captum.attr import LayerIntegratedGradients
    from ts.torch_handler.base_handler import BaseHandler


    class Explained(BaseHandler):
        def preprocess(self, data):
            return torch.tensor([row["body"]["x"] for row in data], dtype=torch.float32)

        def postprocess(self, output):
            return [[round(v, 4) for v in o.tolist()] for o in output]

        def get_insights(self, tensor_data, _, target=0):
            lig = LayerIntegratedGradients(self.model, self.model.fc)
            found = lig.attribute(tensor_data, target=target, n_steps=16, attribute_to_layer_input=True)
            return [[round(v, 4) for v in row.tolist()] for row in found]
""")


# TorchServe's stateful convention (examples/stateful): a model file, a BaseHandler keeping each sequence's state,
# and the model-config turning sequence batching on.
TS_STATEFUL_MODEL = textwrap.dedent("""
    import torch


    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(1, 1)

        def forward(self, x):
            return self.fc(x)
""")

TS_STATEFUL_HANDLER = textwrap.dedent("""
    import logging

    import torch
    from lru import LRU
    from ts.torch_handler.base_handler import BaseHandler

    logger = logging.getLogger(__name__)


    class RunningTotal(BaseHandler):
        def initialize(self, context):
            super().initialize(context)
            capacity = context.model_yaml_config["handler"]["cache"]["capacity"]
            self.totals = LRU(int(capacity))
            logger.info("keeping %s sequences", capacity)

        def preprocess(self, data):
            totals = []
            for idx, row in enumerate(data):
                sequence = self.context.get_sequence_id(idx)
                body = row.get("data") or row.get("body")
                if isinstance(body, (bytes, bytearray)):
                    body = body.decode("utf-8")
                total = self.totals.get(sequence, 0) + int(body)
                self.totals[sequence] = total
                totals.append([float(total)])
            return torch.tensor(totals)

        def postprocess(self, output):
            return [round(v, 4) for v in output[:, 0].tolist()]
""")

TS_STATEFUL_CONFIG = textwrap.dedent("""
    minWorkers: 2
    maxWorkers: 2
    batchSize: 4
    maxNumSequence: 4
    sequenceMaxIdleMSec: 60000
    maxSequenceJobQueueSize: 10
    sequenceBatching: true

    handler:
      cache:
        capacity: 4
""")


def torch_packages(folder: str | Path) -> list[Path]:
    """Every torch package under ``folder`` (a model folder that should hold none)."""
    return sorted(Path(folder).rglob("torch/__init__.py"))


def scripted_mlp(path: Path) -> Path:
    """A TorchScript 4 -> 3 MLP saved at ``path`` (what BaseHandler.initialize loads)."""
    torch.manual_seed(1)
    namespace: dict = {"torch": torch}
    exec(MLP_CLASS, namespace)
    torch.jit.save(torch.jit.trace(namespace["MLP"](), torch.zeros(1, 4)), str(path))  # exec'd: no source to script
    return path


# A handler that answers which deploy it came from (ANSWER) and the sum of its input: redeploy tests tell versions apart.
ANSWER_SOURCE = """
import torch

ANSWER = {answer!r}

def init_function():
    return torch.nn.Identity()

def preprocess(sample):
    return torch.tensor(sample["x"], dtype=torch.float32)

def postprocess(output):
    return {{"answer": ANSWER, "sum": float(output.sum())}}
"""


# ---------------------------------------------------------------- a kernel-tier shell, driven as a notebook does
def run_cell(shell, source: str) -> str:
    """Run a cell as a notebook does (stored in history); it must succeed; returns everything it showed."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        result = shell.run_cell(source, store_history=True)
    shown = "".join([cap.stdout, cap.stderr, *(o.data.get("text/plain", "") for o in cap.outputs)])
    assert result.success, shown
    return shown


def run_magic(shell, name: str, line: str = ""):
    """``%name line``: (its value, everything it showed)."""
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        value = shell.run_line_magic(name, line)
    return value, "".join([cap.stdout, cap.stderr, *(o.data.get("text/plain", "") for o in cap.outputs)])


# A key a handler reads from its environment (--env): a realistic fake (split: this file holds none whole), the
# variable it is given in, and a handler that answers with the key's SHA-256 (never the key), read at each request.
ENV_KEY = "sk-proj-" + "Qx7Lm2Np9Rs4Tv6Wy8Za1Bc3" + "De5F" + "T3BlbkFJ" + "Gh7Jk9Lm2Np4Qr6St8Uv0"
ENV_VAR = "MSNB_TEST_OPENAI_API_KEY"
ENV_HANDLER = textwrap.dedent(f"""
    import hashlib
    import os

    import torch

    def init_function():
        return torch.nn.Identity()

    def preprocess(sample):
        return torch.zeros(1)

    def postprocess(output):
        key = os.environ.get("{ENV_VAR}")
        return {{"key_sha256": hashlib.sha256(key.encode()).hexdigest() if key else None}}
""")


def files_holding(root: Path, secret: str, skip: Path | None = None) -> list[Path]:
    """Every file under ``root`` (but ``skip``) whose bytes hold ``secret`` as UTF-8 or UTF-16, zip members too."""
    import zipfile

    needles = [secret.encode(), secret.encode("utf-16-le")]
    found = []
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and not p.is_symlink()):
        if skip is not None and path.is_relative_to(skip):
            continue
        data = path.read_bytes()
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                data += b"".join(zf.read(n) for n in zf.namelist())
        if any(n in data for n in needles):
            found.append(path)
    return found


# ---------------------------------------------------------------- `msnb serve`'s state file
RECORDED = ("inference_url", "management_url", "metrics_url", "openai_url", "mcp_url")  # every address it prints


def reach_recorded(state: dict) -> dict[str, int]:
    """Each address a `msnb serve` state file holds, asked as a client asks it (its key where it needs one): the
    status of each (inference /ping, management /models, metrics /metrics, OpenAI's /models, MCP's tools/list)."""
    import requests

    keys = json.loads(Path(state["key_file"]).read_text())
    bearer = {kind: {"Authorization": f"Bearer {keys[kind]['key']}"} for kind in ("inference", "management")}
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    asks = {
        "inference_url": lambda url: requests.get(f"{url}/ping", headers=bearer["inference"], timeout=60),
        "management_url": lambda url: requests.get(f"{url}/models", headers=bearer["management"], timeout=60),
        "metrics_url": lambda url: requests.get(f"{url}/metrics", timeout=60),
        "openai_url": lambda url: requests.get(f"{url}/models", headers=bearer["inference"], timeout=60),
        "mcp_url": lambda url: requests.post(
            url, json=rpc, timeout=60, headers={**bearer["inference"], "Accept": "application/json, text/event-stream"}
        ),
    }
    return {field: ask(state[field]).status_code for field, ask in asks.items()}
