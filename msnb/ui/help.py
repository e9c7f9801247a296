"""What the notebook tells a user about the magics: the `%%ms_handler?` help and tab completion."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Iterable

from msnb import options
from msnb.roles import SIGNATURES

ROLE_HELP = {
    "init_function": "required: build and return the torch.nn.Module (the handler loads --checkpoint into it)",
    "preprocess": "one request's decoded body -> the model's input for that sample",
    "postprocess": "one sample's output -> the answer (JSON-able, str or bytes); a generator streams that "
    "request's chunks",
    "install_packages": "run once in the worker before init_function (e.g. pip installs)",
    "unpack_dependencies": "run once in the worker before init_function (e.g. unpack an --extra-files archive)",
    "explain": "one sample's attributions for /explanations and %ms_explain (JSON-able); without it, Captum's "
    "Integrated Gradients on the predicted class",
    "inference": "the loaded model and the collated batch -> the batch output (default: model(batch)); a generator "
    "streams: each yield is one chunk of every request's answer (split per sample, then postprocess)",
}
EXAMPLE = """\
    %%ms_handler tiny --version 1.0 --example '{"x": [1, 2, 3, 4]}'
    import torch

    def init_function():
        return torch.nn.Linear(4, 2)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return output.tolist()
"""


def _plain_parser() -> argparse.ArgumentParser:
    """The option parser with argparse's own formatting: IPython's writes ``::`` and a one-% line-magic prefix."""
    parser = copy.copy(options.handler_magic().parser)
    parser.prog, parser.formatter_class = "%%ms_handler", argparse.HelpFormatter
    return parser


def handler_usage() -> str:
    """The usage line as a cell magic (``%%ms_handler NAME [options]``)."""
    return argparse.ArgumentParser.format_usage(_plain_parser()).replace("usage: ", "", 1).strip()


def handler_help() -> str:
    """The whole ``%%ms_handler?`` text: usage, what it does, the roles, an example, then every option."""
    roles = "\n".join(f"    {SIGNATURES[r]}\n        {ROLE_HELP.get(r, '')}" for r in SIGNATURES)
    option_help = argparse.ArgumentParser.format_help(_plain_parser())
    option_help = option_help[option_help.find("positional arguments") :]
    return (
        f"Usage: {handler_usage()}\n\n"
        "Runs the cell, then captures its functions (and the definitions they use from earlier cells)\n"
        "as a TorchServe handler named NAME: next %ms_test NAME, %ms_build NAME, %ms_serve NAME.\n\n"
        f"Roles (functions the cell may define):\n{roles}\n\nExample:\n{EXAMPLE}\n{option_help}"
    )


def flags(magic: str) -> list[str]:
    """The ``--options`` a magic takes (from its own argument parser)."""
    parser = getattr(magic, "parser", None)
    if parser is None:
        return []
    return sorted(s for a in parser._actions for s in a.option_strings if s.startswith("--"))


def completer(handler_names: Callable[[], Iterable[str]], magic_flags: list[str]) -> Callable:
    """An IPython completer for ``%magic NAME --option``: handler names first, then the magic's flags."""

    def complete(_shell, event) -> list[str]:
        words = event.line.split()
        typing = "" if event.line.endswith(" ") else words[-1]
        if typing.startswith("-"):
            return [f for f in magic_flags if f.startswith(typing)]
        if len(words) - (typing != "") <= 1:  # only the magic so far: the name comes next
            return [n for n in sorted(handler_names()) if n.startswith(typing)]
        return [f for f in magic_flags if f.startswith(typing)]

    return complete
