"""Hugging Face objects the handler uses (models, tokenizers, processors, configs): saved at capture, in safe formats.

An object travels when it has ``save_pretrained(dir)`` and its class ``from_pretrained(dir)``: capture saves it
(weights as safetensors, never a pickle) into a frozen copy that the archive writes under ``hf_objects/NAME/``;
the server rebinds it with the class's own ``from_pretrained`` (templates/msnb_runtime/handler/hf.py). A class a cell defines (a
``PreTrainedModel`` or ``PretrainedConfig`` subclass) travels as code with the handler (capture pulls its statement)
and is rebound by that class. Classes from dynamic modules (``trust_remote_code``), objects whose save raises, pickled
files and folders over the size limit are refused, all names at once, before anything is written to an archive.
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from msnb.capture import hf_peft
from msnb.capture.kernel_values import Snapshot, human
from msnb.errors import CaptureError
from msnb.options import DEFAULTS, OPTION
from msnb.templates.msnb_runtime.handler.hf import HF_DIR, quiet_progress

_MB = 2**20
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")  # what torch.save / pickle write
DYNAMIC_PREFIX = "transformers_modules"  # where trust_remote_code classes live: no server can import them
NOTEBOOK = "__main__"  # the kernel's module: a class a cell defines, which travels as code
# Packages a saved object needs on the server beyond its class's own (tokenizer.json needs tokenizers).
NEEDS = {
    "transformers": ("transformers", "tokenizers", "safetensors"),
    "peft": ("peft", "accelerate", "safetensors"),  # peft imports accelerate (a dependency it declares)
}


@dataclass(frozen=True)
class ObjectInfo:
    """One saved object as the capture summary lists it, and what the server needs to rebind it."""

    name: str
    cls: str  # "transformers.models.bert.modeling_bert:BertForSequenceClassification"
    files: tuple[str, ...]
    size: int
    dtype: str | None  # a model's dtype ("float32"); None for tokenizers, configs, processors
    live: str  # the object's fingerprint at capture (see ``fingerprint``)
    base: str | None = None  # a PEFT model's base model class, "module:Qual.Name" (msnb.capture.hf_peft)

    def line(self) -> str:
        return f"{self.name}: {self.cls.rpartition(':')[2]}, {', '.join(self.files)}, {human(self.size)}"


@dataclass(frozen=True)
class SavedObjects(Snapshot):
    """The objects saved at capture: each file's bytes under ``NAME/...`` (a frozen copy) and one ObjectInfo each."""

    files: tuple[tuple[str, bytes], ...]
    items: tuple[ObjectInfo, ...]

    def parts(self) -> Iterator[bytes]:
        for path, data in self.files:
            yield path.encode() + b"\0" + hashlib.sha256(data).digest()

    @property
    def imports(self) -> str:
        """Import lines for the packages the server needs (requirements are inferred from them)."""
        classes = [c for i in self.items for c in (i.cls, i.base) if c is not None and not _in_notebook(c)]
        tops = dict.fromkeys(t for c in classes for t in NEEDS.get(_top(c), (_top(c),)))
        return "".join(f"import {t}\n" for t in tops if importlib.util.find_spec(t) is not None)

    def changed(self, namespace: Mapping[str, Any]) -> list[str]:
        """The names whose object in ``namespace`` is not the one saved (trained further, replaced, gone)."""
        return [i.name for i in self.items if i.name not in namespace or fingerprint(namespace[i.name]) != i.live]

    def write(self, model_dir: Path) -> None:
        for path, data in self.files:
            target = model_dir / HF_DIR / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def render(self, *, after_code: bool = False) -> str:
        """handler_model.py lines that rebind each object before the user's code runs; ``after_code``: those whose
        class the user's code defines (rendered after it, before the entry point)."""
        items = [i for i in self.items if any(_in_notebook(c) for c in (i.cls, i.base or "")) == after_code]
        if not items:
            return ""
        lines = [
            f"# --- msnb: Hugging Face objects saved from the kernel ({HF_DIR}/): {', '.join(i.name for i in items)} ---",
            "from msnb_runtime.handler.hf import load_object as _msnb_load_object",
            "",
            *(f"{i.name} = _msnb_load_object(__file__, {i.name!r}, {_arguments(i)})" for i in items),
        ]
        return "\n".join(lines) + "\n\n"


def _in_notebook(cls: str) -> bool:
    return cls.partition(":")[0] == NOTEBOOK


def _arguments(item: ObjectInfo) -> str:
    """load_object's arguments after the name: the class, the dtype and, for a PEFT model, its base model's class."""
    base = f", base={_class_expr(item.base)}" if item.base else ""
    return f"{_class_expr(item.cls)}, {item.dtype!r}{base}"


def _class_expr(cls: str) -> str:
    """The class as handler_model.py names it: a cell's class by its name (its code travels), else its import path."""
    return cls.partition(":")[2] if _in_notebook(cls) else repr(cls)


def _top(cls: str) -> str:
    return cls.split(".")[0].split(":")[0]


def travels(value: Any) -> bool:
    """True for an object with the Hugging Face protocol: ``save_pretrained`` on it, ``from_pretrained`` on its class."""
    return callable(getattr(value, "save_pretrained", None)) and callable(getattr(type(value), "from_pretrained", None))


def split_objects(needed: Mapping[str, str], namespace: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(names bound to such objects, the other names) of ``needed`` (name -> where it is used)."""
    objects = {n: w for n, w in needed.items() if n in namespace and travels(namespace[n])}
    return objects, {n: w for n, w in needed.items() if n not in objects}


def notebook_classes(names: Iterable[str], namespace: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of the classes that cells define among those of the objects bound to ``names``: their code travels."""
    found = (c for n in names if travels(namespace[n]) for c in _classes(namespace[n]))
    return tuple(dict.fromkeys(c.__qualname__ for c in found if c.__module__ == NOTEBOOK))


def save_objects(
    needed: Mapping[str, str], namespace: Mapping[str, Any], max_mb: int | None, defined: Collection[str] = ()
) -> SavedObjects | None:
    """Save each object of ``needed`` (name -> where it is used; ``defined``: the classes the handler's code defines);
    every one that cannot travel is refused at once."""
    if not needed:
        return None
    limit = (max_mb or DEFAULTS["max_value_mb"]) * _MB
    files, infos, refused = [], [], []
    for name, where in needed.items():
        value = namespace[name]
        problem = _object_problem(value, namespace, defined) or _too_big(_weights_size(value), limit)
        saved = None if problem else _save(value)
        if isinstance(saved, str):
            problem, saved = saved, None
        if saved is not None and (size := sum(len(d) for _, d in saved)) > limit:
            problem = f"saves {human(size)}, over the {limit // _MB} MB limit"
        if problem:
            refused.append(f"`{name}` ({where}, {_qualified(type(value))}) {problem}")
            continue
        files += [(f"{name}/{path}", data) for path, data in saved]
        infos.append(_info(name, value, saved))
    if refused:
        raise _refused(refused, limit // _MB)
    return SavedObjects(tuple(files), tuple(infos))


def _info(name: str, value: Any, saved: list[tuple[str, bytes]]) -> ObjectInfo:
    dtype = str(value.dtype).removeprefix("torch.") if isinstance(value, torch.nn.Module) else None
    files, live = tuple(p for p, _ in saved), fingerprint(value) if dtype else _files_digest(saved)
    base = _qualified(hf_peft.base_class(value)) if hf_peft.is_peft(value) else None
    return ObjectInfo(name, _qualified(type(value)), files, sum(len(d) for _, d in saved), dtype, live, base)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _classes(value: Any) -> tuple[type, ...]:
    """The classes the server needs to rebind ``value``: its own, and a PEFT model's base model's."""
    return (type(value), hf_peft.base_class(value)) if hf_peft.is_peft(value) else (type(value),)


def _object_problem(value: Any, namespace: Mapping[str, Any], defined: Collection[str]) -> str | None:
    """Why ``value`` cannot travel, known before it is saved, or None."""
    problems = [_class_problem(c, namespace, defined) for c in _classes(value)]
    problems.append(hf_peft.problem(value) if hf_peft.is_peft(value) else None)
    return next((p for p in problems if p), None)


def _class_problem(cls: type, namespace: Mapping[str, Any], defined: Collection[str]) -> str | None:
    """Why the server could not find the object's class (by its qualified name, or as code that travels), or None."""
    module, qualname = cls.__module__ or "", cls.__qualname__
    if module == NOTEBOOK and qualname in defined:
        if namespace.get(qualname) is cls:
            return None
        return f"was built from an earlier definition of {qualname}: a cell defined the class again since"
    if module.startswith(DYNAMIC_PREFIX) or module == NOTEBOOK or "<locals>" in qualname:
        return f"has a class from {module!r}, which the server cannot import by name"
    return None


def _weights_size(value: Any) -> int:
    """The bytes of a model's parameters and buffers (each storage once): known before anything is saved."""
    if not isinstance(value, torch.nn.Module):
        return 0
    seen = {id(t): t.nbytes for t in (*value.parameters(), *value.buffers())}
    return sum(seen.values())


def _too_big(size: int, limit: int) -> str | None:
    return f"holds {human(size)} of weights, over the {limit // _MB} MB limit" if size > limit else None


def _save(value: Any) -> list[tuple[str, bytes]] | str:
    """Each file ``save_pretrained`` writes (relative path, bytes); a str says why it could not be saved."""
    with tempfile.TemporaryDirectory(prefix="msnb-hf-") as tmp:
        try:
            with quiet_progress():
                _save_pretrained(value, tmp)
        except Exception as err:
            return f"cannot be saved: save_pretrained raised {type(err).__name__}: {str(err).strip()}"
        found = sorted(p for p in Path(tmp).rglob("*") if p.is_file())
        pickled = [p.name for p in found if p.suffix in PICKLE_SUFFIXES]
        if pickled:
            return f"saves {', '.join(pickled)}: a pickle, which msnb never ships"
        return [(p.relative_to(tmp).as_posix(), p.read_bytes()) for p in found]


def _save_pretrained(value: Any, folder: str) -> None:
    if hf_peft.is_peft(value):
        hf_peft.save(value, folder)
    elif isinstance(value, torch.nn.Module):
        value.save_pretrained(folder, safe_serialization=True)
    else:
        value.save_pretrained(folder)


def fingerprint(value: Any) -> str:
    """Which state ``value`` holds now: a model's tensors by version (training bumps them), else its saved bytes."""
    if isinstance(value, torch.nn.Module):
        # Every in-place write (an optimizer step) bumps a tensor's version: no need to hash the weights.
        live = [str(id(value))] + [f"{k}:{t.data_ptr()}:{t._version}" for k, t in value.state_dict().items()]
        config = getattr(value, "config", None)
        live.append(config.to_json_string() if hasattr(config, "to_json_string") else "")
        return hashlib.sha256("|".join(live).encode()).hexdigest()
    saved = _save(value)
    return saved if isinstance(saved, str) else _files_digest(saved)


def _files_digest(saved: list[tuple[str, bytes]]) -> str:
    return hashlib.sha256(b"".join(p.encode() + hashlib.sha256(d).digest() for p, d in saved)).hexdigest()


def _refused(refused: list[str], limit_mb: int) -> CaptureError:
    problems = " ".join(refused)
    hints = []
    if "limit" in problems:
        hints.append(f"raise the limit with {OPTION['max_value_mb'].flag} (now {limit_mb}) to at least the size shown")
    if "cannot import" in problems:
        hints.append(
            "define the class in a cell with a class statement (its code then travels with the handler), or ship "
            "its module (a trust_remote_code class) beside the notebook and import it from there"
        )
    if "earlier definition" in problems:
        hints.append("run the cell that builds the object again, so that it is an instance of the class as defined now")
    if "adapters (" in problems:
        hints.append(
            "delete the adapters the handler does not use (`model.delete_adapter(name)`), or merge them into the "
            "base model (`model = model.merge_and_unload()`): the merged model travels"
        )
    if "cannot be saved" in problems:
        hints.append("call save_pretrained on it in the notebook to see why; an object must save and load to travel")
    if "pickle" in problems:
        hints.append("save it with safe formats only (safetensors, JSON)")
    return CaptureError(
        f"These Hugging Face objects cannot travel with the handler ({HF_DIR}/): {'; '.join(refused)}.",
        "; ".join(hints) + ".",
    )
