"""TorchServe archives of every handler kind, made by torch-model-archiver (not msnb) from handlers and tiny models
of these tests' own, and the bad archives a user may be handed: what ``msnb serve --engine ray`` must serve (or
refuse) as a plain TorchServe does."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import textwrap
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from helpers import (
    ARCHIVER,
    BROKEN_INIT,
    TS_DESCRIBED,
    TS_EAGER_HANDLER,
    TS_NAMED_ENTRY,
    TS_STREAMING,
    TS_TEXT_MODEL,
    eager_files,
    scripted_mlp,
)

# A class entry point (one class with initialize/handle, no module-level handle): reads its model-config's
# handler section, records context.metrics, answers a flagged request with a status of its own.
CLASS_ENTRY = textwrap.dedent("""
    class Scaler:
        def initialize(self, context):
            self.factor = context.model_yaml_config["handler"]["factor"]
            self.batch = context.system_properties["batch_size"]

        def handle(self, data, context):
            context.metrics.add_counter("ScaledRequests", len(data))
            out = []
            for idx, row in enumerate(data):
                body = row.get("body") or row.get("data")
                if body.get("reject"):
                    context.set_response_status(422, "Unprocessable", idx)
                    out.append({"error": "rejected"})
                    continue
                out.append({"y": [v * self.factor for v in body["x"]], "batch_size": self.batch})
            return out
""")
CLASS_CONFIG = "batchSize: 4\nmaxBatchDelay: 20\nresponseTimeout: 30\nhandler:\n  factor: 3\n"
# Served with TorchServe's service_envelope kserve: handle gets the request's "instances", one row each, and its list
# becomes {"predictions": [...]} (or {"explanations": [...]} on /explanations).
ENVELOPED = textwrap.dedent("""
    def handle(data, context):
        if data is None:
            return None
        return [{"y": [v * 2 for v in row["x"]]} for row in data]
""")
# Slower than its model-config's responseTimeout when a request asks it to sleep.
SLOW = textwrap.dedent("""
    import time

    def handle(data, context):
        if data is None:
            return None
        body = data[0].get("body") or data[0].get("data")
        time.sleep(body.get("sleep", 0))
        return [{"slept": body.get("sleep", 0)} for _ in data]
""")
SLOW_CONFIG = "responseTimeout: 2\n"
# A streaming handler that sends ``chunks`` intermediate responses, then stalls ``stall`` seconds (past its
# responseTimeout of 2 s when asked) before its last piece.
STALLS = textwrap.dedent("""
    import time

    from ts.handler_utils.utils import send_intermediate_predict_response

    def handle(data, context):
        if data is None:
            return None
        body = data[0].get("body") or data[0].get("data")
        for i in range(body["chunks"]):
            send_intermediate_predict_response([f"c{i} "], context.request_ids, "Intermediate", 200, context)
        time.sleep(body["stall"])
        return ["end"]
""")
TS_SCRIPTED_HANDLER = TS_EAGER_HANDLER.replace("class Classifier", "class ScriptedClassifier")
VOCAB = ["a", "good", "movie", "a good", "good movie", "bad", "bad movie"]


def archiver(folder: Path, name: str, handler: str, *args: str) -> list[str]:
    return [
        str(ARCHIVER),
        "--model-name",
        name,
        "--version",
        "1.0",
        "--handler",
        handler,
        "--export-path",
        str(folder),
        "-f",
        *args,
    ]


def _handler_file(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}_handler.py").write_text(source)
    return folder / f"{name}_handler.py"


def commands(root: Path, names: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The archiver command of each archive (their files written under ``root``); the eager, TorchScript and text
    models (saved with torch) only when ``names`` asks for them (empty: all)."""
    cmds = {}
    wanted = set(names) or {"eager", "scripted", "news"}
    named = _handler_file(root / "named", "named", TS_NAMED_ENTRY)
    (root / "named" / "requirements.txt").write_text("numpy\n")  # satisfied here: nothing is installed
    cmds["named"] = archiver(
        root / "named",
        "named",
        f"{named.with_suffix('')}:entry_point_function_name",
        "--requirements-file",
        str(root / "named" / "requirements.txt"),
    )
    klass = _handler_file(root / "klass", "klass", CLASS_ENTRY)
    (root / "klass" / "model-config.yaml").write_text(CLASS_CONFIG)
    cmds["klass"] = archiver(
        root / "klass", "klass", str(klass), "--config-file", str(root / "klass" / "model-config.yaml")
    )
    if "eager" in wanted:
        _, eager = eager_files(root / "eager")
        handler = _handler_file(root / "eager", "eager", TS_EAGER_HANDLER)
        cmds["eager"] = archiver(root / "eager", "eager", str(handler), *eager)
    if "scripted" in wanted:
        scripted = scripted_mlp(root / "scripted.pt")
        handler = _handler_file(root / "scripted", "scripted", TS_SCRIPTED_HANDLER)
        cmds["scripted"] = archiver(root / "scripted", "scripted", str(handler), "--serialized-file", str(scripted))
    if "news" in wanted:
        cmds["news"] = archiver(root / "news", "news", "text_classifier", *text_classifier_files(root / "news"))
    cmds["stream"] = archiver(root / "stream", "stream", str(_handler_file(root / "stream", "stream", TS_STREAMING)))
    cmds["desc"] = archiver(root / "desc", "desc", str(_handler_file(root / "desc", "desc", TS_DESCRIBED)))
    cmds["broken"] = archiver(root / "broken", "broken", str(_handler_file(root / "broken", "broken", BROKEN_INIT)))
    cmds["kserved"] = archiver(root / "kserved", "kserved", str(_handler_file(root / "kserved", "kserved", ENVELOPED)))
    slow = _handler_file(root / "slow", "slow", SLOW)
    (root / "slow" / "model-config.yaml").write_text(SLOW_CONFIG)
    cmds["slow"] = archiver(root / "slow", "slow", str(slow), "--config-file", str(root / "slow" / "model-config.yaml"))
    stalls = _handler_file(root / "stalls", "stalls", STALLS)
    (root / "stalls" / "model-config.yaml").write_text(SLOW_CONFIG)
    config = str(root / "stalls" / "model-config.yaml")
    cmds["stalls"] = archiver(root / "stalls", "stalls", str(stalls), "--config-file", config)
    return cmds


def text_classifier_files(folder: Path) -> list[str]:
    """TorchServe's default text_classifier's files: an eager model, its vocabulary and index_to_name.json."""
    _, eager = eager_files(folder, TS_TEXT_MODEL, "TextClassificationModel", "model.pt")
    torch.save({w: i for i, w in enumerate(VOCAB)}, folder / "source_vocab.pt")
    (folder / "index_to_name.json").write_text(json.dumps({"0": "neg", "1": "pos"}))
    return [*eager, "--extra-files", f"{folder / 'source_vocab.pt'},{folder / 'index_to_name.json'}"]


DEFAULT = ("named", "klass", "eager", "scripted", "news", "stream", "desc", "broken")


def build_all(root: Path, names: tuple[str, ...] = DEFAULT) -> dict[str, Path]:
    """The archives ``names`` (by default every good one and ``broken``, whose initialize fails) as NAME -> .mar,
    built side by side."""
    cmds = {name: command for name, command in commands(root, names).items() if name in names}

    def build(name: str) -> Path:
        subprocess.run(cmds[name], check=True, capture_output=True, timeout=180, env=_env(root / name))
        return root / name / f"{name}.mar"

    with ThreadPoolExecutor(4) as pool:
        return dict(zip(cmds, pool.map(build, cmds)))


def _env(folder: Path) -> dict:
    import os

    return {**os.environ, "TMPDIR": str(folder)}  # the archiver stages in $TMPDIR/<model-name>/


def as_tgz(mar: Path, name: str, dest: Path) -> Path:
    """The archive in torch-model-archiver's tgz format: its members under ``name/``."""
    out = dest / f"{name}.tar.gz"
    with zipfile.ZipFile(mar) as zf, tarfile.open(out, "w:gz") as tf:
        for info in zf.infolist():
            member = tarfile.TarInfo(f"{name}/{info.filename}")
            member.size = info.file_size
            with zf.open(info) as data:
                tf.addfile(member, data)
    return out


def as_folder(mar: Path, dest: Path) -> Path:
    """The archive in torch-model-archiver's no-archive format: a folder."""
    with zipfile.ZipFile(mar) as zf:
        zf.extractall(dest)
    return dest


def rewritten(mar: Path, dest: Path, drop: str = "", replace: dict[str, bytes] | None = None) -> Path:
    """A copy of ``mar`` named after ``dest`` (its manifest's modelName), without member ``drop`` and with
    ``replace``'s members' new content."""
    replace = dict(replace or {})
    with zipfile.ZipFile(mar) as src:
        manifest = json.loads(src.read("MAR-INF/MANIFEST.json"))
    manifest["model"]["modelName"] = dest.stem
    replace["MAR-INF/MANIFEST.json"] = json.dumps(manifest).encode()
    with zipfile.ZipFile(mar) as src, zipfile.ZipFile(dest, "w") as out:
        for info in src.infolist():
            if info.filename != drop:
                out.writestr(info, replace.get(info.filename, src.read(info)))
    return dest


def truncated(mar: Path, dest: Path) -> Path:
    data = mar.read_bytes()
    dest.write_bytes(data[: len(data) // 2])
    return dest


def duplicate(mar: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(mar, dest)
    return dest


def config_file(folder: Path, store: Path, inference_port: int, **more: str) -> Path:
    """A TorchServe team's config.properties: loopback addresses (the inference one given, the others free), the
    model store, the models loaded at start (``more`` overrides any key)."""
    from msnb.engines.ray.nodes import free_port

    lines = {
        "inference_address": f"http://127.0.0.1:{inference_port}",
        "management_address": f"http://127.0.0.1:{free_port()}",
        "metrics_address": f"http://127.0.0.1:{free_port()}",
        "model_store": str(store),
        "load_models": "named.mar",
        "default_workers_per_model": "1",
        "enable_model_api": "true",
        "metrics_mode": "prometheus",
        **more,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.properties").write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return folder / "config.properties"
