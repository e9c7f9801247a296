"""Benchmark: a trained tokenizer + BERT to a registered model, msnb (zero extra steps) vs the manual route.

msnb: capture (``save_pretrained`` into the frozen copy, requirements pinned), build the .mar, register it.
Manual: ``save_pretrained`` both objects into a folder, a hand-written handler that loads them with
``from_pretrained``, ``torch-model-archiver``, register it. Both archives are the standard compressed .mar and
are registered without requirements.txt (the server's environment has transformers): a pinned requirements file
adds TorchServe's per-model pip install at registration, the same for both routes.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from bench.anchors import BIN
from bench.harness import Settings, interleave, msnb_engine, run_child, stop_engine, summary, timed
from msnb.capture.cells import capture
from msnb.capture.local_code import search_path
from msnb.engines.torchserve import LocalServer
from msnb.package import archive

POOL = [("In [3]", "tokenizer = train_tokenizer()\nmodel = BertForSequenceClassification(config)\n")]
CELL = """\
def init_function():
    return model

def preprocess(text):
    return tokenizer(text, padding="max_length", max_length=16, truncation=True, return_tensors="pt")

def postprocess(output):
    return {"logits": output["logits"].tolist()}
"""
MANUAL_HANDLER = """\
import torch
from transformers import BertForSequenceClassification, PreTrainedTokenizerFast

_loaded = {}


def handle(data, context):
    if not _loaded:
        folder = context.system_properties["model_dir"]
        _loaded["model"] = BertForSequenceClassification.from_pretrained(folder, local_files_only=True).eval()
        _loaded["tokenizer"] = PreTrainedTokenizerFast.from_pretrained(folder, local_files_only=True)
    if data is None:
        return None
    texts = [row.get("data") or row.get("body") for row in data]
    texts = [t.decode() if isinstance(t, (bytes, bytearray)) else str(t) for t in texts]
    batch = _loaded["tokenizer"](texts, padding="max_length", max_length=16, truncation=True, return_tensors="pt")
    with torch.inference_mode():
        return [{"logits": row.tolist()} for row in _loaded["model"](**batch).logits]
"""
MB = 2**20


def models(quick: bool) -> dict[str, dict]:
    """name -> BertConfig arguments: a tiny BERT, and (full runs) BERT-base's shape (~110M parameters)."""
    tiny = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    return {"tiny BERT": tiny} if quick else {"tiny BERT": tiny, "BERT-base (110M)": {"vocab_size": 30522}}


def run(settings: Settings) -> dict:
    from transformers import BertConfig, BertForSequenceClassification

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hf_models import train_tokenizer  # the tests' locally trained tokenizer: no hub

    work = settings.workdir / "hf_objects"
    work.mkdir(parents=True, exist_ok=True)
    server, rows, sizes = msnb_engine("torchserve", work, settings), {}, {}
    try:
        server.start()
        for label, shape in models(settings.quick).items():
            tokenizer = train_tokenizer()
            model = BertForSequenceClassification(BertConfig(**{"vocab_size": tokenizer.vocab_size, **shape}))
            ns = {"tokenizer": tokenizer, "model": model}
            params = sum(p.numel() for p in model.parameters())
            variants = {"msnb": _msnb(server, ns, work), "manual": _manual(server, ns, work)}
            runs = interleave(variants, 1 if "base" in label or settings.quick else 3)
            rows[f"{label}, {params / 1e6:.2f}M parameters"] = {
                route: {k: summary([r[k] for r in rs]) for k in rs[0]} for route, rs in runs.items()
            }
            sizes[label] = {route: rs[-1]["archive MB"] for route, rs in runs.items()}
    finally:
        stop_engine(server, settings)
        shutil.rmtree(work, ignore_errors=True)
    return report(rows, settings)


def _msnb(server: LocalServer, ns: dict, work: Path):
    def measure() -> dict[str, float]:
        store = Path(tempfile.mkdtemp(dir=work))
        captured: list = []
        limit = {"max_value_mb": 1024}
        seconds = timed(
            lambda: captured.append(capture("hfm", CELL, POOL, namespace=ns, search_path=search_path(work), **limit))
        )
        spec = captured[0].replace(requirements=())  # pinned as %%ms_handler pins them; installed already
        built = timed(lambda: captured.append(archive.build(spec, store, fmt=archive.EXPORT_FORMAT)))
        register = timed(lambda: server.register(captured[1]))
        size = captured[1].stat().st_size / MB
        server.unregister("hfm")
        shutil.rmtree(store, ignore_errors=True)
        return _row(seconds, built, register, size)

    return measure


def _manual(server: LocalServer, ns: dict, work: Path):
    def measure() -> dict[str, float]:
        folder, store = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
        saved = timed(lambda: [ns[k].save_pretrained(folder / "files") for k in ("model", "tokenizer")])
        (folder / "handler.py").write_text(MANUAL_HANDLER)
        built = run_child(_archiver_command(folder, store), folder / "archiver.log", cwd=folder)["seconds"]
        register = timed(lambda: server.register(store / "hfmanual.mar"))
        size = (store / "hfmanual.mar").stat().st_size / MB
        server.unregister("hfmanual")
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
        return _row(saved, built, register, size)

    return measure


def _archiver_command(folder: Path, store: Path) -> list[str]:
    files = folder / "files"
    extra = ",".join(str(p) for p in sorted(files.iterdir()) if p.name != "model.safetensors")
    return [
        str(BIN / "torch-model-archiver"),
        *("--model-name", "hfmanual", "--version", "1.0", "--handler", str(folder / "handler.py")),
        *("--serialized-file", str(files / "model.safetensors"), "--extra-files", extra),
        *("--export-path", str(store), "-f"),
    ]


def _row(save: float, build: float, register: float, size: float) -> dict[str, float]:
    return {
        "capture/save s": save,
        "build s": build,
        "register s": register,
        "total s": save + build + register,
        "archive MB": size,
    }


def report(rows: dict, settings: Settings) -> dict:
    ratios = {
        f"{label}: msnb / manual (total)": r["msnb"]["total s"]["median"] / r["manual"]["total s"]["median"]
        for label, r in rows.items()
    }
    targets = [
        {
            "target": f"{label}: msnb capture + build + register within 1.5x of the manual route",
            "value": f"{ratio:.2f}x",
            "met": ratio <= 1.5,
        }
        for label, ratio in ratios.items()
    ]
    return {
        "title": "Hugging Face objects: capture + build + register, msnb vs save_pretrained + torch-model-archiver",
        "unit": "s / MB",
        "rows": rows,
        "ratios": ratios,
        "targets": targets,
        "notes": f"{'quick mode (tiny BERT only, one repetition); ' if settings.quick else ''}"
        "models built from a BertConfig with random weights (no hub; the tiny one measured 3 times, BERT-base once); the tokenizer is trained locally. "
        "msnb: capture() with the kernel's objects (save_pretrained into memory, digest, requirements), "
        "archive.build of the standard compressed .mar, LocalServer.register. Manual: save_pretrained of both, "
        "a hand-written handler, the torch-model-archiver CLI (its whole process), the same register. Both "
        "archives are registered without requirements.txt (transformers is installed in the server's environment).",
    }
