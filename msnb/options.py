"""The `%%ms_handler` option line: one parser for the magic and for `msnb export`, and its resolution."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Mapping

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from msnb.errors import SpecError

_NS = Mapping[str, Any]


@magic_arguments()
@argument("name", help="model name (letters, digits, '_', '-', '.'); the URL is /predictions/NAME")
@argument("--version", default="1.0", help="model version (default 1.0)")
@argument("--checkpoint", help="state_dict file, or a variable holding an nn.Module or state_dict")
@argument("--init-kwargs", dest="init_kwargs", help="JSON object (or a dict variable) passed to init_function(**kwargs)")
@argument("--requirements", help="requirements.txt file, comma-separated pip requirements, or a variable holding a list of them")
@argument("--extra-files", dest="extra_files", nargs="+", default=[],
          help="files or folders shipped beside the handler; .zip/.tar.gz archives are unpacked in the model dir")
@argument("--batch-size", dest="batch_size", type=int, default=1, help="TorchServe batch size (default 1)")
@argument("--max-batch-delay", dest="max_batch_delay", type=int, default=100,
          help="ms TorchServe waits to fill a batch (default 100)")
@argument("--workers", type=int, default=1, help="worker processes (default 1)")
@argument("--device", choices=["auto", "cpu", "gpu"], default="auto", help="auto (GPU when there is one), cpu or gpu")
@argument("--max-gpu-memory", dest="max_gpu_memory", type=int, help="per-worker GPU memory limit in MB")
@argument("--response-timeout", dest="response_timeout", type=int, default=120, help="seconds per batch (default 120)")
@argument("--example", help="an example input (JSON, @file or a variable): validated at build, default for %%ms_test")
def ms_handler(line: str) -> None:
    """%%ms_handler NAME [options]: capture this cell's init_function / preprocess / postprocess as a TorchServe handler."""


def parse_handler_line(line: str):
    """Parse the option line of a `%%ms_handler` cell; bad options raise IPython's UsageError."""
    return parse_argstring(ms_handler, line)


def handler_config(args: Any, namespace: _NS | None = None, base_dir: Path | None = None) -> dict[str, Any]:
    """HandlerSpec keyword arguments from parsed options.

    ``namespace`` (the kernel's user namespace) lets options name variables; without it (export)
    only literal values and paths are accepted. Relative paths resolve against ``base_dir``.
    """
    base = Path(base_dir or ".")
    config = {
        "version": args.version,
        "batch_size": args.batch_size,
        "max_batch_delay": args.max_batch_delay,
        "workers": args.workers,
        "device": args.device,
        "max_gpu_memory": args.max_gpu_memory,
        "response_timeout": args.response_timeout,
        "extra_files": tuple(str(_path(p, base)) for p in args.extra_files),
        "requirements": _requirements(args.requirements, namespace, base),
        "checkpoint": _checkpoint(args.checkpoint, namespace, base),
        "init_kwargs": _init_kwargs(args.init_kwargs, namespace),
    }
    if args.example is not None:
        config["example"] = parse_data(args.example, namespace, base, option="--example")
    return config


def parse_data(text: str, namespace: _NS | None = None, base_dir: Path | None = None, option: str = "--data") -> Any:
    """An input given on a magic line: JSON text, ``@file`` (JSON, else raw bytes), or a variable name."""
    text = _unquote(text.strip())
    if text.startswith("@"):
        path = _path(text[1:], Path(base_dir or "."))
        if not path.is_file():
            raise UsageError(f"{option}: file {str(path)!r} does not exist.\nHint: give @path/to/input.json or inline JSON.")
        raw = path.read_bytes()
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    if namespace is not None and text.isidentifier() and text in namespace:
        return namespace[text]
    try:
        return json.loads(text)
    except ValueError as err:
        raise UsageError(f"{option}: not valid JSON ({err}).\n"
                         f"Hint: quote JSON in single quotes, e.g. {option} '{{\"x\": [1, 2]}}', "
                         "or give @file.json or a variable name.") from None


def _checkpoint(value: str | None, namespace: _NS | None, base: Path) -> Any:
    if value is None:
        return None
    if namespace is not None and value.isidentifier() and value in namespace:
        obj = namespace[value]
        import torch

        if isinstance(obj, (torch.nn.Module, dict)):
            return obj
        raise SpecError(f"--checkpoint {value}: the variable is a {type(obj).__name__}, not a model or state_dict.",
                        "pass an nn.Module, a state_dict (model.state_dict()) or the path of a saved state_dict.")
    path = _path(value, base)
    if not path.is_file():
        raise SpecError(f"--checkpoint: {str(path)!r} does not exist.",
                        "save it first (torch.save(model.state_dict(), 'model.pt')) or name a model variable.")
    return str(path)


def _init_kwargs(value: str | None, namespace: _NS | None) -> dict[str, Any]:
    if value is None:
        return {}
    parsed = parse_data(value, namespace, option="--init-kwargs")
    if not isinstance(parsed, dict):
        raise UsageError(f"--init-kwargs must be a JSON object, got {type(parsed).__name__}.\n"
                         "Hint: e.g. --init-kwargs '{\"hidden\": 128}'.")
    return parsed


def _requirements(value: str | None, namespace: _NS | None, base: Path) -> tuple[str, ...]:
    """A requirements file, pip names separated by commas, or a variable holding a list (or text) of them.

    A name bound to anything else (``--requirements numpy`` after ``import numpy``) is a pip name.
    """
    value = _unquote((value or "").strip())
    if not value:
        return ()
    held = namespace.get(value) if namespace is not None and value.isidentifier() else None
    if isinstance(held, str):
        return _split_requirements(held)
    if isinstance(held, (list, tuple)):
        if not all(isinstance(r, str) for r in held):
            raise SpecError(f"--requirements {value}: the list holds {', '.join(sorted({type(r).__name__ for r in held}))}, "
                            "not only strings.", "give pip requirement strings, e.g. ['numpy==1.26.4'].")
        return tuple(r.strip() for r in held if r.strip())
    path = _path(value, base)
    if path.is_file():
        return _requirement_lines(path.read_text())
    if value.endswith(".txt"):
        raise SpecError(f"--requirements: {str(path)!r} does not exist.", "give an existing requirements file or pip names.")
    return _split_requirements(value)


def _split_requirements(text: str) -> tuple[str, ...]:
    """One requirement per line, or per comma that starts a new name ("numpy, scipy>=1,<2" is two)."""
    if "\n" in text.strip():
        return _requirement_lines(text)
    return tuple(p.strip() for p in re.split(r",\s*(?=[A-Za-z])", text) if p.strip())


def _requirement_lines(text: str) -> tuple[str, ...]:
    """requirements.txt text: one requirement per line, blank lines and comments dropped."""
    return tuple(ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#"))


def _path(value: str, base: Path) -> Path:
    path = Path(_unquote(value)).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return shlex.split(text)[0]
    return text
