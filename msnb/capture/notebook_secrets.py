"""Secrets in what an archive takes from the notebook, found before anything is written: the handler cell's code, the
definitions pulled in from other cells, every str / bytes runtime value (inside lists, dicts and tuples too, keys
included), Hugging Face objects' saved files and the option values rendered into the archive.

The detectors are ``secret_scan``'s (detect-secrets'), as for bundled files. A finding is refused unless
``--allow-secret`` names it (a value or definition by its name, a shown value path, or a line as ``CELL:LINE``); what
is let through is listed in the capture summary. A secret is never shown whole (``Finding.masked``).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from msnb.capture import secret_scan
from msnb.capture.value_walk import render
from msnb.errors import CaptureError
from msnb.spec import Origin, SourceBlock
from msnb.templates.msnb_runtime.handler.names import HANDLER_MODULE, HF_DIR

FLAG = "--allow-secret"
SHORTEST = 8  # a shorter str / bytes is scanned only when its name or path says it is a password or key
LINE_MOST = 4096  # a text value up to this long, on one line, is scanned as `LABEL = 'text'` (its name counts)
WEIGHTS = (".safetensors",)  # an object's weights: numbers, not text (its JSON files are scanned)
SHOWN = 5  # findings named in one refusal (the rest counted)
_CACHE: dict[tuple[str, str], tuple] = {}  # (name, snapshot digest) -> its findings: an unchanged value is scanned once
_CACHE_MOST = 256
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL")  # a name worth suggesting as the variable's


@dataclass(frozen=True)
class Hit:
    """One secret found: where (as a message says it), the ways ``--allow-secret`` may name it, the one to suggest."""

    where: str
    found: secret_scan.Finding
    names: frozenset[str]  # tokens that let it through
    token: str  # the narrowest of them, for the hint
    variable: str  # the environment variable the hint suggests

    def line(self) -> str:
        return f"{self.where}: {self.found.kind} ({self.found.masked})"


@dataclass(frozen=True)
class Carried:
    """What an archive takes from the notebook besides code: runtime values and option values by name, each Hugging
    Face object's saved files (name -> {path: bytes}), where each is used, and the values' snapshot digests."""

    values: Mapping[str, Any]
    objects: Mapping[str, Mapping[str, bytes]]
    where: Mapping[str, str]
    digests: Mapping[str, str]


def check(model: str, blocks: Sequence[SourceBlock], carried: Carried, allow: Collection[str] = ()) -> tuple[str, ...]:
    """Refuse the secrets in ``blocks`` and ``carried`` unless ``allow`` names them; returns the capture summary's
    lines for those let through."""
    allow = {_unquoted(a.strip()) for a in allow}
    hits = [h for b in blocks for h in code_hits(b)]
    hits += [h for n in carried.values for h in _value(n, carried)]
    hits += [h for n, files in carried.objects.items() for h in files_hits(n, files, carried.where.get(n, ""))]
    refused = [h for h in hits if not (h.names & allow)]
    if refused:
        raise _refusal(model, refused)
    lines = (f"secret let through by {FLAG} {', '.join(sorted(h.names & allow))}: {h.line()}" for h in hits)
    return tuple(masked(line, hits) for line in lines)


def masked(text: str, hits: Sequence[Hit]) -> str:
    """``text`` with every secret found replaced by its masked form (a dict key that is a secret is in its path)."""
    for hit in hits:
        if len(hit.found.secret) >= 8:
            text = text.replace(hit.found.secret, hit.found.masked)
    return text


def code_hits(block: SourceBlock) -> Iterator[Hit]:
    """The secrets on the lines of one block of user code."""
    for found in secret_scan.findings(block.source, f"{HANDLER_MODULE}.py"):
        line = block.cell_line(found.line)
        cell = _cell_key(block.origin)
        names = {f"{cell}:{line}", f"{block.origin.cell if block.origin.cell is not None else cell}:{line}"}
        binding = _binding(block.source, found.line)
        token = binding[0] if binding and binding[1] else f"{cell}:{line}"
        if binding:
            names.add(binding[0])
        where = f"line {line} of {block.origin}"
        yield Hit(where, found, frozenset(names), token, _variable(binding[0] if binding else ""))


def _value(name: str, carried: Carried) -> Iterator[Hit]:
    """The hits in one value; its findings are cached by its snapshot's digest (an unchanged value is scanned once)."""
    key = (name, carried.digests.get(name, ""))
    found = _CACHE.get(key) if key[1] else None
    if found is None:
        found = tuple(value_findings(name, carried.values[name]))
        if key[1]:
            if len(_CACHE) >= _CACHE_MOST:
                _CACHE.clear()
            _CACHE[key] = found
    used = carried.where.get(name, "")
    what = f" ({used})" if used else ""
    for shown, finding, where in found:
        yield Hit(f"`{shown}`{where}{what}", finding, frozenset({name, shown}), _token(name, shown), _variable(name))


def value_findings(name: str, value: Any) -> Iterator[tuple[str, secret_scan.Finding, str]]:
    """The secrets in a value's str and bytes parts (keys too), each with its part as shown (``CONFIG['aws'][1]``)
    and, for a multi-line text, its line; ``value`` passed ``value_walk.check`` (bounded).

    Each short text is scanned as one line ``LABEL = 'text'``, LABEL its nearest str key (else the value's name), so
    that a detector reading names (``password = ...``) sees it; a path is rendered only for a finding."""
    short, long = [], []
    for path, text in leaves(value):
        label = _label(name, path)
        if len(text) < SHORTEST and not secret_scan.SECRET_WORDS.search(label):
            continue  # a word of a vocabulary: no key is this short, and no name here makes it a password
        if isinstance(text, str) and len(text) <= LINE_MOST and "\n" not in text and "\r" not in text:
            short.append((path, f"{label} = {text!r}"))
        else:
            long.append((path, text))
    for found in secret_scan.findings("\n".join(t for _, t in short), "values.py"):
        yield f"{name}{render(short[found.line - 1][0])}", found, ""
    for path, text in long:
        found = secret_scan.scan_bytes(text, "value.txt") if isinstance(text, bytes) else secret_scan.scan_text(text)
        if found:
            yield f"{name}{render(path)}", found, f", line {found.line} of its text"


def _label(name: str, path: Any) -> str:
    """The nearest str key on ``path`` (a (parent, key) chain), else ``name``: what names a value's part."""
    while path is not None:
        path, key = path
        if isinstance(key, str):
            return key[:80]
    return name


def leaves(value: Any) -> Iterator[tuple[Any, str | bytes]]:
    """Each str / bytes in ``value`` with its path (a (parent, key) chain, as ``value_walk.render`` reads): the
    value itself, the entries of lists, tuples and dicts, and dict keys (a key's path ends at its entry)."""
    if isinstance(value, (str, bytes)):
        yield None, value
    if not isinstance(value, (list, tuple, dict)):
        return  # a number, a tensor: no text
    stack: list[tuple[Any, Any]] = [(value, None)]
    seen: set[int] = set()
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        is_dict = isinstance(obj, dict)
        for key, item in obj.items() if is_dict else enumerate(obj):
            if is_dict and not isinstance(key, int):
                yield from _key_texts(key, (path, key))
            if isinstance(item, (str, bytes)):
                yield (path, key), item
            elif isinstance(item, (list, tuple, dict)):
                stack.append((item, (path, key)))


def _key_texts(key: Any, path: Any) -> tuple[tuple[Any, str | bytes], ...]:
    """The str / bytes of a dict key (a tuple key's parts too), each at its entry's path."""
    if isinstance(key, (str, bytes)):
        return ((path, key),)
    return tuple((path, part) for part in key if isinstance(part, (str, bytes))) if isinstance(key, tuple) else ()


def files_hits(name: str, files: Mapping[str, bytes], used: str = "") -> Iterator[Hit]:
    """The secrets in a saved object's files (JSON, text; weights are searched for key armor only)."""
    what = f" ({used})" if used else ""
    for path, data in files.items():
        found = secret_scan.scan_bytes(data, path)
        if found:
            yield Hit(f"{path}, line {found.line}{what}", found, frozenset({name, path}), name, _variable(name))


def _refusal(model: str, hits: list[Hit]) -> CaptureError:
    listed = "; ".join(h.line() for h in hits[:SHOWN])
    more = f"; and {len(hits) - SHOWN} more" if len(hits) > SHOWN else ""
    first = hits[0]
    token = first.token if first.found.secret not in first.token else next(iter(sorted(first.names, key=len)))
    return CaptureError(
        masked(
            f"The archive of {model!r} would carry {'a secret' if len(hits) == 1 else f'{len(hits)} secrets'} from "
            f"the notebook: {listed}{more}. msnb never ships credentials: the archive travels to servers, "
            "registries and colleagues.",
            hits,
        ),
        f'read it on the server from the environment instead (`os.environ["{first.variable}"]` inside the function '
        f"that uses it, not at a cell's top level) and give the variable to the server, not the archive: "
        f"`%ms_serve {model} --env {first.variable}` (`msnb serve PATH --env {first.variable}`; an export: the "
        f"platform's own, e.g. a Kubernetes Secret). Not a secret? Let it through with {FLAG} {token} on "
        "the %%ms_handler line.",
    )


def _binding(source: str, line: int) -> tuple[str, bool] | None:
    """The first name bound by the top-level statement holding ``line`` of ``source``, and whether that statement is
    an assignment (naming it lets through no more than that line's value); None when it binds no name."""
    for node in _tree(source).body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                return node.name, False
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            return (names[0], True) if names else None
    return None


@functools.lru_cache(maxsize=64)
def _tree(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def _cell_key(origin: Origin) -> str:
    """How ``--allow-secret CELL:LINE`` names a cell: ``In[4]`` in a kernel, ``5`` in a notebook file."""
    if origin.cell is not None:
        return f"In[{origin.cell}]" if origin.label.endswith(f"In[{origin.cell}]") else str(origin.cell)
    return origin.label.removeprefix("cell ")


def _token(name: str, shown: str) -> str:
    return shown if shown == name else f'"{shown}"'


def _unquoted(token: str) -> str:
    """A token as typed on the option line, its outer quotes (which IPython's parser keeps) removed."""
    return token[1:-1] if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"" else token


def _variable(name: str) -> str:
    """The environment variable the hint suggests: the secret's own name in capitals, else API_KEY."""
    upper = name.upper()
    return upper if upper.isidentifier() and SECRET_NAME.search(upper) else "API_KEY"


def carried_of(config: Mapping[str, Any], needed: Mapping[str, Any], namespace: Mapping[str, Any] | None) -> Carried:
    """What ``HandlerSpec(**config)`` will carry from the notebook besides code: the snapshotted values (``needed``:
    name -> ``Needed``), the options rendered into the archive and the Hugging Face objects' files but weights."""
    snapshot, objects = config.get("values"), config.get("objects")
    values = {n: namespace[n] for n in (snapshot.names if snapshot and namespace is not None else ())}
    where = {n: f"a runtime value used on {needed[n].used}" for n in values if n in needed}
    for option, key in (("--init-kwargs", "init_kwargs"), ("--config-file", "model_yaml")):
        if config.get(key):
            values[option], where[option] = config[key], f"the {option} option"
    files: dict[str, dict[str, bytes]] = {}
    for path, data in objects.files if objects else ():
        if not path.endswith(WEIGHTS):
            files.setdefault(path.split("/")[0], {})[f"{HF_DIR}/{path}"] = data
    where |= {n: f"a Hugging Face object used on {needed[n].used}" for n in files if n in needed}
    digests = {i.name: i.digest for i in snapshot.items} if snapshot else {}
    return Carried(values, files, where, digests)
