"""The `%%ms_handler` option line: one parser for the magic and for `msnb export`, and its resolution."""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msnb.errors import OptionError, SpecError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_BATCH_DELAY_MS, DEFAULT_RESPONSE_TIMEOUT_S, options_from

UserNamespace = Mapping[str, Any]  # the kernel's user namespace, where options may name variables
CONFIG_HINT = "give a YAML mapping of model-config keys, e.g. `batchSize: 4` and a `handler:` section"
ALLOW_FLAG = "--allow-files"  # `msnb export`'s option naming a further folder the notebook may take files from
# The request options of %ms_test, %ms_predict (and --data of %ms_explain) and `msnb predict`, declared once:
# flag -> argparse's keyword arguments.
REQUEST_ARGUMENTS: dict[str, dict[str, Any]] = {
    "--data": {
        "metavar": "JSON|@FILE",
        "help": "input: inline JSON, or @file (JSON, else raw bytes); a magic also takes a variable, and defaults to "
        "the handler's --example",
    },
    "--data-binary": {"metavar": "@FILE|TEXT", "help": "sent as raw bytes, as curl -T / --data-binary @file send it"},
    "--content-type": {"help": "the request's Content-Type (with --data-binary: default octet-stream)"},
    "--header": {
        "action": "append",
        "metavar": "NAME:VALUE",
        "help": "a request header, repeatable (e.g. ts_request_sequence_id:s1)",
    },
}


@dataclass(frozen=True)
class Option:
    """One `%%ms_handler` option: its flag, default, limits and help, and the widget's label for it."""

    dest: str
    help: str
    default: Any = None
    type: type | None = None
    minimum: int | None = None
    choices: tuple[str, ...] | None = None
    label: str | None = None  # the widget's field label (None: not a widget field)
    nargs: str | None = None
    action: str | None = None  # "store_true": a flag that takes no value

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    @property
    def help_text(self) -> str:
        """The help line with the default (said here once, not in each help string)."""
        return self.help if self.default in (None, ()) else f"{self.help} (default: {self.default})"


# The one table of handler options: the %%ms_handler parser, HandlerSpec's defaults and checks, the widget's
# fields and the model-config all read it.
OPTIONS: tuple[Option, ...] = (
    Option("version", "model version (letters, digits, '_', '-', '.')", "1.0", label="Version"),
    Option("checkpoint", "state_dict file, or a variable holding an nn.Module or state_dict", label="Checkpoint"),
    Option("init_kwargs", "JSON object (or a dict variable) passed to init_function(**kwargs)"),
    Option(
        "requirements",
        "requirements.txt file, comma-separated pip requirements, or a variable holding a list of them",
        label="Requirements",
    ),
    Option(
        "extra_files",
        "files or folders shipped beside the handler; .zip/.tar.gz archives are unpacked in the model dir",
        (),
        label="Extra files",
        nargs="+",
    ),
    Option(
        "include_file",
        "a package data file that looks like a secret (a key, .env, credentials*, token*) but must travel",
        (),
        nargs="+",
    ),
    Option(
        "allow_secret",
        "a secret capture refuses that is none (a test key, a public id): a value or definition by its name, a "
        "value's part as the refusal shows it, or a line as CELL:LINE; listed in the capture summary",
        (),
        nargs="+",
    ),
    Option("batch_size", "TorchServe batch size", 1, int, 1, label="Batch size"),
    Option(
        "max_batch_delay",
        "ms TorchServe waits to fill a batch",
        DEFAULT_BATCH_DELAY_MS,
        int,
        0,
        label="Max batch delay (ms)",
    ),
    Option("workers", "worker processes", 1, int, 1, label="Workers"),
    Option(
        "response_timeout",
        "seconds per batch",
        DEFAULT_RESPONSE_TIMEOUT_S,
        int,
        1,
        label="Response timeout (s)",
    ),
    Option(
        "device", "auto (GPU when there is one), cpu or gpu", "auto", choices=("auto", "cpu", "gpu"), label="Device"
    ),
    Option("max_gpu_memory", "per-worker GPU memory limit in MB", None, int, 1, label="Max GPU memory (MB)"),
    Option(
        "max_value_mb",
        "largest runtime value (MB) snapshotted from the kernel into the archive",
        64,
        int,
        1,
    ),
    Option(
        "max_requirements",
        "most requirement entries the archive may carry (pip installs each at registration)",
        200,
        int,
        1,
    ),
    Option("example", "an example input (JSON, @file or a variable): validated at build, default for %%ms_test"),
    Option("schema", "a JSON Schema file for the input: the MCP tool's inputSchema (default: inferred from --example)"),
    Option(
        "embeddings",
        "the model's answer to one input (a string) is an embedding, a list of numbers: served at /v1/embeddings",
        action="store_true",
    ),
    Option(
        "config_file",
        "your own model-config.yaml (torch-model-archiver's --config-file): its keys reach "
        "context.model_yaml_config and win over the options (batchSize over --batch-size)",
    ),
    Option(
        "model_file",
        "the notebook's nn.Module class that BaseHandler's eager mode loads (torch-model-archiver's --model-file): "
        "it becomes the archive's model file and --checkpoint its state_dict",
    ),
    Option(
        "handler",
        "the entry point TorchServe calls: a function or class of the cell (torch-model-archiver's --handler "
        "file:NAME), or one of TorchServe's default handlers by name",
    ),
)
OPTION = {o.dest: o for o in OPTIONS}
DEFAULTS = {o.dest: o.default for o in OPTIONS}
INT_OPTIONS = {o.dest: o.minimum for o in OPTIONS if o.type is int}  # name -> minimum
DEVICES = OPTION["device"].choices


def check_gpu_memory(max_gpu_memory: int | None, device_kind: str, shown_as: str | None = None) -> str | None:
    """Why a GPU memory limit does not fit the device kind (auto, cpu, gpu), or None.

    ``shown_as`` is the device's name where the person chose it (the widget says "CPU").
    """
    if max_gpu_memory is not None and device_kind == "cpu":
        return f"max GPU memory is set but the device is {shown_as or device_kind}"
    return None


def _with_options(func: Callable) -> Callable:
    """Decorate ``func`` with IPython magic arguments: the name, then one per row of OPTIONS."""
    from IPython.core.magic_arguments import argument, magic_arguments

    for option in reversed(OPTIONS):
        kwargs: dict[str, Any] = {"dest": option.dest, "help": option.help_text}
        for key in ("type", "choices", "nargs", "action"):
            if getattr(option, key) is not None:
                kwargs[key] = getattr(option, key)
        if option.default is not None:
            kwargs["default"] = list(option.default) if option.nargs else option.default
        func = argument(option.flag, **kwargs)(func)
    func = argument("name", help="model name (letters, digits, '_', '-', '.'); the URL is /predictions/NAME")(func)
    return magic_arguments()(func)


@functools.cache
def handler_magic() -> Callable:
    """The `%%ms_handler` magic's argument holder (``.parser``, and its help as ``__doc__``), built on first use:
    importing this module imports no IPython (the `msnb` command's help stays light)."""

    def ms_handler(line: str) -> None:
        """%%ms_handler NAME [options]: capture this cell's init_function / preprocess / postprocess as a TorchServe handler."""

    return _with_options(ms_handler)


def parse_handler_line(line: str):
    """Parse the option line of a `%%ms_handler` cell; bad options raise IPython's UsageError (argparse) or OptionError."""
    from IPython.core.magic_arguments import parse_argstring

    return parse_argstring(handler_magic(), line)


def option_value(dest: str, text: str, base_dir: Path | None = None, namespace: UserNamespace | None = None) -> Any:
    """One handler option's value from the text a person typed for it (a widget field: one item per line where the
    option takes several), through the magic line's own parser and resolution; a whole number below its minimum is
    refused as HandlerSpec refuses it. Raises OptionError (or SpecError) saying what is wrong."""
    option = OPTION[dest]
    items = [line.strip() for line in text.splitlines() if line.strip()]
    if dest == "requirements" and items:
        items = [",".join(items)]
    words = [option.flag, *items] if items else []
    try:
        args = parse_handler_line(shlex.join(["_", *words]))
    except Exception as err:  # argparse's error, raised as IPython's UsageError
        if option.type is int:
            problem, hint = f"takes a whole number, got {text.strip()!r}", f"type a number >= {option.minimum}."
        else:
            problem, hint = str(err).removeprefix(f"argument {option.flag}: "), option.help_text
        raise OptionError(f"{option.flag} {problem}.", hint) from None
    value = handler_config(args, {} if namespace is None else namespace, base_dir)[dest]
    if option.minimum is not None and value is not None and value < option.minimum:
        raise OptionError(f"{option.flag} must be >= {option.minimum}, got {value}.", f"e.g. {max(option.minimum, 1)}.")
    return value


def handler_config(args: Any, namespace: UserNamespace | None = None, base_dir: Path | None = None) -> dict[str, Any]:
    """HandlerSpec keyword arguments from parsed options.

    ``namespace`` (the kernel's user namespace) lets options name variables; without it (export)
    only literal values and paths are accepted. Relative paths resolve against ``base_dir``.
    """
    base = Path(base_dir or ".")
    config = {o.dest: getattr(args, o.dest) for o in OPTIONS if o.type is int or o.dest in ("version", "device")}
    config |= {
        "extra_files": tuple(str(_path(p, base)) for p in args.extra_files),
        "include_files": tuple(str(_path(p, base)) for p in args.include_file),
        "allow_secrets": tuple(args.allow_secret),
        "requirements": _requirements(args.requirements, namespace, base),
        "checkpoint": _checkpoint(args.checkpoint, namespace, base),
        "init_kwargs": _init_kwargs(args.init_kwargs, namespace),
    }
    if args.example is not None:
        config["example"] = parse_data(args.example, namespace, base, option="--example")
    if args.schema:
        config["input_schema"] = _schema(_path(args.schema, base))
    if args.embeddings:
        config["embeddings"] = True
    if args.handler:
        config["handler"] = args.handler
    if args.model_file:
        config["model_file"] = args.model_file
    if args.config_file:
        config["model_yaml"] = _config_file(_path(args.config_file, base))
        config |= options_from(config["model_yaml"])
    return config


def parse_data(
    text: str, namespace: UserNamespace | None = None, base_dir: Path | None = None, option: str = "--data"
) -> Any:
    """An input given on a magic line: JSON text, ``@file`` (JSON, else raw bytes), or a variable name."""
    text = _unquote(text.strip())
    if text.startswith("@"):
        path = _path(text[1:], Path(base_dir or "."))
        if not path.is_file():
            raise OptionError(
                f"{option}: file {str(path)!r} does not exist.", "give @path/to/input.json or inline JSON."
            )
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
        raise OptionError(
            f"{option}: not valid JSON ({err}).",
            f"quote JSON in single quotes, e.g. {option} '{{\"x\": [1, 2]}}', or give @file.json or a variable name.",
        ) from None


def _schema(path: Path) -> dict:
    """``--schema FILE``: a JSON Schema object (the MCP tool's inputSchema)."""
    try:
        schema = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise OptionError(
            f"--schema: cannot read a JSON Schema from {str(path)!r}: {err}.",
            'give a JSON file holding a schema, e.g. {"type": "object", "properties": {...}}.',
        ) from None
    if not isinstance(schema, dict):
        raise OptionError(
            f"--schema: {str(path)!r} holds a {type(schema).__name__}, not a JSON Schema object.",
            'give a JSON object, e.g. {"type": "string"}.',
        )
    return schema


def _config_file(path: Path) -> dict[str, Any]:
    """A user's own model-config.yaml (``--config-file``): its mapping; a missing file, bad YAML or a non-mapping is
    an OptionError naming the file (and line)."""
    import yaml  # here: the option table loads without it

    if not path.is_file():
        raise OptionError(f"--config-file: {str(path)!r} does not exist.", CONFIG_HINT + ".")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise OptionError(f"--config-file {path.name}:{where}: not YAML ({problem}).", CONFIG_HINT + ".") from None
    except (OSError, UnicodeDecodeError) as err:
        raise OptionError(f"--config-file {path.name}: cannot be read ({err}).", CONFIG_HINT + ".") from None
    if not isinstance(loaded, dict):
        raise OptionError(
            f"--config-file {path.name}: holds a {type(loaded).__name__}, not a mapping of model-config keys.",
            CONFIG_HINT + ".",
        )
    return loaded


def _checkpoint(value: str | None, namespace: UserNamespace | None, base: Path) -> Any:
    if value is None:
        return None
    if namespace is not None and value.isidentifier() and value in namespace:
        obj = namespace[value]
        import torch

        if isinstance(obj, (torch.nn.Module, dict)):
            return obj
        raise SpecError(
            f"--checkpoint {value}: the variable is a {type(obj).__name__}, not a model or state_dict.",
            "pass an nn.Module, a state_dict (model.state_dict()) or the path of a saved state_dict.",
        )
    path = _path(value, base)
    if not path.is_file():
        hint = "save it first (torch.save(model.state_dict(), 'model.pt')) or name a model variable."
        if namespace is None:  # `msnb export` reads the file: the notebook that saves the weights has not run
            hint = f"the notebook saves it when it runs: `msnb export --execute` runs it in a fresh kernel first; or {hint}"
        raise SpecError(f"--checkpoint: {str(path)!r} does not exist.", hint)
    return str(path)


def _init_kwargs(value: str | None, namespace: UserNamespace | None) -> dict[str, Any]:
    if value is None:
        return {}
    parsed = parse_data(value, namespace, option="--init-kwargs")
    if not isinstance(parsed, dict):
        raise OptionError(
            f"--init-kwargs must be a JSON object, got {type(parsed).__name__}.",
            "e.g. --init-kwargs '{\"hidden\": 128}'.",
        )
    return parsed


def _requirements(value: str | None, namespace: UserNamespace | None, base: Path) -> tuple[str, ...]:
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
            raise SpecError(
                f"--requirements {value}: the list holds {', '.join(sorted({type(r).__name__ for r in held}))}, "
                "not only strings.",
                "give pip requirement strings, e.g. ['numpy==1.26.4'].",
            )
        return tuple(r.strip() for r in held if r.strip())
    path = _path(value, base)
    if path.is_file():
        return _requirement_lines(path.read_text())
    if value.endswith(".txt"):
        raise SpecError(
            f"--requirements: {str(path)!r} does not exist.", "give an existing requirements file or pip names."
        )
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
