"""Files a notebook names on its option lines (--checkpoint, --extra-files, a requirements file, an @example): on
export only from the notebook's own folder or a folder the person exporting allows, and never one holding a secret.

``msnb export`` runs on notebooks people did not write (in CI): a line like ``--checkpoint ~/.ssh/id_ed25519`` must
not copy the exporting machine's files into an archive. In the kernel the user is the author: nothing is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from msnb.capture import secret_rules
from msnb.errors import SpecError
from msnb.options import ALLOW_FLAG, parse_handler_line


def named_paths(spec: Any, line: str | None, base: Path) -> list[tuple[str, Path]]:
    """(option, path) of every file ``spec`` (and its cell's option ``line``, when known) names."""
    found = [("--extra-files", Path(p)) for p in spec.extra_files]
    if isinstance(spec.checkpoint, (str, Path)):
        found.append(("--checkpoint", Path(spec.checkpoint)))
    if line is not None:
        args = parse_handler_line(line)
        requirements, example = _unquoted(args.requirements), _unquoted(args.example)
        named = [("--requirements", requirements), ("--example", example[1:] if example.startswith("@") else "")]
        named.append(("--schema", _unquoted(args.schema)))
        for option, text in named:
            path = Path(text).expanduser() if text else None
            path = path if path is None or path.is_absolute() else base / path
            if path is not None and path.is_file():
                found.append((option, path))
    return found


def _unquoted(value: str | None) -> str:
    text = (value or "").strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" else text


def problems(paths: Iterable[tuple[str, Path]], roots: Sequence[Path]) -> list[str]:
    """What is wrong with each named file: outside every allowed root, or holding a secret."""
    found = []
    resolved = [Path(r).expanduser().resolve() for r in roots]
    for option, path in paths:
        real = path.expanduser().resolve()
        if not any(real.is_relative_to(root) for root in resolved):
            found.append(f"{option} {str(path)!r} is outside the notebook's folder")
            continue
        why = secret_rules.why_secret(real) if real.is_file() else None
        if why:
            found.append(f"{option} {str(path)!r} {why}")
    return found


def refusal(spec: Any, line: str | None, notebook: Path, allowed: Sequence[Path] = ()) -> SpecError | None:
    """The export error for ``spec``'s named files, or None when every one is the notebook's own and no secret."""
    folder = Path(notebook).resolve().parent
    found = problems(named_paths(spec, line, folder), [folder, *allowed])
    if not found:
        return None
    return SpecError(
        f"{'; '.join(found)}. Export takes only the notebook's own files, and never secrets.",
        f"move the file into the notebook's folder ({folder}), or, if you trust this notebook, allow the folder "
        f"with {ALLOW_FLAG} DIR; a file holding a secret never travels (keep secrets on the server).",
    )
