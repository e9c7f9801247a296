"""Capture: a handler cell plus the notebook's other cells become a HandlerSpec carrying the definitions it needs.

IPython syntax (``%magic``, ``!cmd``, ``x = !cmd``) is rewritten with IPython's own
``TransformerManager`` (pure text work, no running shell); cells that start with a cell magic
are skipped. Line numbers are the cell's as the notebook shows them and tracebacks count them: another cell's from its first
line, the handler cell's from its ``%%ms_handler`` line (``body_line=2``: the body starts on the cell's line 2).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from msnb.capture.magic_lines import cell_magic_first
from msnb.capture.rebuild import Rebuild
from msnb.capture.runtime_names import RUNTIME_HINT, Changes, Needed, values_of
from msnb.capture.scope import BUILTINS, IPYTHON_NAMES, Stmt, import_only, origin_phrase
from msnb.errors import CaptureError, SpecError
from msnb.forms import ROLES_FORM, Form, default_handler_import, handler_class_names
from msnb.roles import SIGNATURES, did_you_mean, form_and_roles
from msnb.spec import HandlerSpec, SourceBlock

__all__ = ["RUNTIME_HINT", "Pool", "capture", "transform"]


def capture(
    name: str,
    cell: str,
    pool: Sequence[tuple[str, str]],
    *,
    cell_origin: str = "handler cell",
    search_path: Sequence[str] | None = None,
    namespace: Mapping[str, Any] | None = None,
    body_line: int = 1,
    **config: Any,
) -> HandlerSpec:
    """Turn a handler cell into a spec, pulling in what it uses from ``pool`` ((origin, source) pairs); ``body_line``
    is the cell line of ``cell``'s first (2 under ``%%ms_handler``): messages count lines as tracebacks do.

    For each free name the latest top-level definition in ``pool`` wins; ``config`` goes straight to ``HandlerSpec``
    (version, checkpoint, ...). With a ``search_path`` (``local_code.search_path``) local modules are bundled and
    third-party imports pinned. Names bound at run time (or by a literal changed later) are snapshotted from
    ``namespace`` (the kernel's); without one they are refused.
    """
    include, named = config.pop("include_files", ()), config.pop("handler", None)  # (include: package data)
    cell, text, tree = _parse_handler(cell, cell_origin, body_line)
    others = Pool(pool)
    form, roles = _form(tree, cell_origin, handler_class_names(others.trees), named)
    stmts = [Stmt(cell_origin, (len(pool), i), node, text) for i, node in enumerate(tree.body)]
    handler, pulled, needed, warnings = _handler_and_closure(
        stmts, others, cell, cell_origin, namespace, _model_class(config.pop("model_file", None))
    )
    defined = {n for block in (*pulled, handler) for n in block.names}
    config |= values_of(needed, namespace, config.get("max_value_mb"), form.kind, defined)  # values.pt, hf_objects/
    warnings += tuple(config.pop("warnings", ()))  # (a misspelt role is the spec's near_misses, shown first)
    warnings += _secrets_let_through(name, (*pulled, handler), config, needed, namespace)
    config.setdefault("origin", cell_origin)
    default = default_handler_import(named) if named and form.entry not in handler.names else None
    blocks = (*((SourceBlock(default, f"--handler {named}", (form.entry,)),) if default else ()), *pulled, handler)
    spec = HandlerSpec(name, blocks, roles, form=form.kind, entry=form.entry, warnings=warnings, **config)
    if search_path is None:
        return spec
    from msnb.capture.local_code import make_hermetic

    return make_hermetic(spec, search_path, include)


def _secrets_let_through(name: str, blocks: tuple, config: dict, needed: dict, namespace: Any) -> tuple[str, ...]:
    """Refuse the secrets the archive would take from the notebook (``notebook_secrets``): its code, values, options
    and objects; the summary lines of those ``--allow-secret`` lets through."""
    from msnb.capture import notebook_secrets

    carried = notebook_secrets.carried_of(config, needed, namespace)
    return notebook_secrets.check(name, blocks, carried, config.pop("allow_secrets", ()))


def _model_class(name: Any) -> tuple[str, ...]:
    """--model-file CLASS: eager mode's model class travels although the handler never names it."""
    if name is None:
        return ()
    if not str(name).isidentifier():
        raise CaptureError(
            f"--model-file {name}: give the name of the notebook's nn.Module class.",
            "e.g. --model-file TinyNet; it becomes the archive's model file (msnb writes it).",
        )
    return (str(name),)


def _handler_and_closure(
    stmts: list[Stmt],
    others: "Pool",
    cell: str,
    origin: Any,
    namespace: Mapping[str, Any] | None = None,
    also: tuple[str, ...] = (),
) -> tuple[SourceBlock, tuple[SourceBlock, ...], dict[str, Needed], tuple[str, ...]]:
    """The handler cell's kept code, the definitions pulled in, the names whose values come from the kernel, warnings.

    A statement binding a runtime name the kept code needs travels as code when ``msnb.capture.rebuild`` says so; it joins
    the kept code, and what it reads is resolved in turn.
    """
    changes = Changes([*others.stmts, *stmts])
    as_code = changes.as_code(Rebuild([*others.stmts, *stmts], namespace))
    kept = [s for s in stmts if s.kind != "future" and not changes.runtime(s)]
    while True:
        bound = set().union(*(s.usage.binds | s.usage.global_binds for s in kept))
        wanted = [(n, s) for s in kept for n in sorted(s.usage.uses - bound)]
        dropped = [s for s in stmts if s not in kept and s.kind != "future"]
        needed = _bound_by_dropped(wanted, dropped, changes)
        rebuilt = [s for s in dropped if s.usage.binds & needed.keys() and as_code(s)]
        if not rebuilt:
            break
        kept = [s for s in stmts if s in kept or s in rebuilt]
    star = any(s.kind == "star" for s in kept)
    wanted += [(n, kept[-1]) for n in also if n not in bound and kept]  # named by an option (--model-file)
    free = [w for w in wanted if w[0] not in needed]
    pulled, warnings = others.closure(free, bound, star, changes, needed, as_code)
    classes = [(n, kept[-1]) for n in _object_classes(needed, namespace) if others.defines_class(n) and n not in bound]
    if classes:  # a Hugging Face object whose class a cell defines: the class travels as code
        pulled, warnings = others.closure(free + classes, bound, star, changes, needed, as_code)
    names = tuple(dict.fromkeys(n for s in kept for n in s.in_order(s.defines)))
    handler = joined([(s.text, s.first_line) for s in kept], origin, names)
    return handler, pulled, needed, _dropped_warnings([s for s in stmts if s not in kept], cell, set(needed)) + warnings


def _object_classes(needed: Mapping[str, Needed], namespace: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of the cell-defined classes of the Hugging Face objects among ``needed`` (msnb.capture.hf_objects)."""
    if namespace is None or not needed:
        return ()
    from msnb.capture.hf_objects import notebook_classes

    return notebook_classes([n for n in needed if n in namespace], namespace)


def transform(source: str) -> str | None:
    """The cell as plain Python (IPython syntax rewritten, lines kept), or None for a cell-magic cell."""
    body = source.lstrip("\n \t\r")
    if body.startswith("%%") or "".join(cell_magic_first(body.splitlines(True))).startswith("%%"):
        return None
    lead = source[: len(source) - len(body)].count("\n")
    try:
        return "\n" * lead + _ipython_transformer().transform_cell(body)
    except Exception:  # IPython gives up on some malformed input: let ast report it
        return source


@functools.cache
def _ipython_transformer():
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager()


class Pool:
    """The other cells' top-level bindings: for each name, the latest statement binding it."""

    def __init__(self, cells: Sequence[tuple[str, str]]):
        self.bindings: dict[str, list[Stmt]] = {}  # name -> statements binding it, in order
        self.stars: list[Stmt] = []
        self.skipped: list[str] = []
        self.trees: list[ast.Module] = []  # the parsed cells, in order
        self.stmts: list[Stmt] = []  # every top-level statement, in order
        for i, (origin, source) in enumerate(cells):
            text = transform(source)
            if text is None:
                continue
            try:
                tree = ast.parse(text)
            except SyntaxError:
                self.skipped.append(origin)
                continue
            self.trees.append(tree)
            for j, node in enumerate(tree.body):
                stmt = Stmt(origin, (i, j), node, text)
                self.stmts.append(stmt)
                for name in stmt.defines:
                    self.bindings.setdefault(name, []).append(stmt)
                if stmt.kind == "star":
                    self.stars.append(stmt)

    def defines_class(self, name: str) -> bool:
        """True when the latest statement binding ``name`` is a class statement."""
        latest = self.bindings.get(name, [None])[-1]
        return latest is not None and isinstance(latest.node, ast.ClassDef)

    def closure(
        self,
        wanted: list[tuple[str, Stmt]],
        bound: set[str],
        star: bool,
        changes: Changes,
        needed: dict[str, Needed],
        as_code: Callable[[Stmt], bool] = lambda stmt: False,
    ) -> tuple[tuple[SourceBlock, ...], tuple[str, ...]]:
        """Resolve ``wanted`` (name, statement using it) transitively; blocks in source order, warnings.

        A name read when a pulled statement runs (a base class, a decorator, a default) resolves to
        the latest binding *before* that statement, as it did in the notebook; any other name to
        the latest binding, or to the handler cell when ``bound`` there. A name whose binding runs code (or a
        literal changed later, see ``changes``) is added to ``needed``: its value comes from the kernel, unless
        ``as_code`` says the statement itself travels (``msnb.capture.rebuild``).
        """
        chosen: dict[tuple[int, int], tuple[Stmt, set[str]]] = {}
        queue = [(n, user, False) for n, user in wanted]
        seen, missing, warnings = set(), [], []
        while queue:
            name, user, eager = queue.pop(0)
            if name in bound and not eager:
                continue
            stmt = self._resolve(name, user if eager else None, warnings)
            if (name, stmt and stmt.pos) in seen:
                continue
            seen.add((name, stmt and stmt.pos))
            if stmt is None:
                self._not_found(name, user, eager, bound, missing)
                continue
            code = changes.runtime(stmt) and as_code(stmt)
            if changes.runtime(stmt) and not code:
                needed.setdefault(name, changes.needed(name, user, stmt))
                continue
            chosen.setdefault(stmt.pos, (stmt, set()))[1].add(name)
            if stmt.kind in ("def", "const") or code:
                queue.extend((n, stmt, n in stmt.usage.eager) for n in sorted(stmt.usage.uses))
        warnings += self._unresolved(missing, chosen, star)
        return _blocks(chosen), tuple(dict.fromkeys(warnings))

    def _resolve(self, name: str, before: Stmt | None, warnings: list[str]) -> Stmt | None:
        found = [s for s in self.bindings.get(name, ()) if before is None or s.pos < before.pos]
        stmt = found[-1] if found else None
        if stmt is not None and stmt.kind == "runtime" and name in BUILTINS:
            warnings.append(
                f"`{name}` is rebound at {stmt.where(name)}, which is not copied; the handler uses the builtin `{name}`"
            )
            return None
        return stmt

    def _not_found(self, name: str, user: Stmt, eager: bool, bound: set[str], missing: list) -> None:
        """No usable binding: a builtin, a definition-order problem, or a name defined nowhere."""
        if name in BUILTINS:
            return
        if eager and (name in bound or name in self.bindings):
            what = ", ".join(sorted(user.defines)) or "a definition"
            later = "the handler cell" if name in bound else self.bindings[name][-1].where(name)
            raise CaptureError(
                f"`{what}` ({user.where(name)}) needs `{name}` when it is defined, "
                f"but `{name}` is only bound later ({later}).",
                f"import or define `{name}` in {user.origin} or a cell above it.",
            )
        missing.append((name, user))

    def _unresolved(self, missing: list[tuple[str, Stmt]], chosen: dict, star: bool) -> list[str]:
        if not missing:
            return []
        for name, user in missing:
            if name in IPYTHON_NAMES:
                raise CaptureError(
                    f"`{name}` (used on {user.where(name)}) exists only in IPython.", IPYTHON_NAMES[name]
                )
        listed = ", ".join(f"`{n}` (used on {u.where(n)})" for n, u in missing)
        if not (star or self.stars):
            hint = "define it in the handler cell or an earlier cell (def, class, import or a literal constant)"
            if self.skipped:
                hint += f"; skipped because they do not parse: {', '.join(self.skipped)}"
            raise CaptureError(f"{listed} {'is' if len(missing) == 1 else 'are'} defined nowhere.", hint)
        for s in self.stars:
            chosen.setdefault(s.pos, (s, set()))
        return [
            f"{listed} may come from a star import (`from ... import *`); names from star imports cannot be checked"
        ]


def _blocks(chosen: dict[tuple[int, int], tuple[Stmt, set[str]]]) -> tuple[SourceBlock, ...]:
    """One block per origin cell, statements in source order; imports reduced to the aliases needed."""
    groups: dict[int, list[tuple[Stmt, set[str]]]] = {}
    for pos in sorted(chosen):
        groups.setdefault(pos[0], []).append(chosen[pos])
    blocks = []
    for items in groups.values():
        texts, names = [], []
        for stmt, needed in items:
            own = needed if stmt.kind == "import" else stmt.defines
            texts.append((import_only(stmt.node, needed) if stmt.kind == "import" else stmt.text, stmt.first_line))
            names += [n for n in stmt.in_order(own) if n not in names]
        blocks.append(joined(texts, items[0][0].origin, tuple(names)))
    return tuple(blocks)


def joined(parts: list[tuple[str, int]], origin: Any, names: tuple[str, ...]) -> SourceBlock:
    """One block of statements' ``(text, first cell line)``, a blank line between them, each line mapped to its cell's."""
    lines: list[int] = []
    for text, first in parts:
        lines += [0] if lines else []
        lines += range(first, first + text.count("\n") + 1)
    return SourceBlock("\n\n".join(text for text, _ in parts), origin, names, tuple(lines))


def _parse_handler(cell: str, origin: str, body_line: int = 1) -> tuple[str, str, ast.Module]:
    """The cell as numbered in the notebook (blank lines for the lines above ``body_line``), as Python, and parsed."""
    cell = "\n" * (body_line - 1) + cell
    text = transform(cell)
    if text is None:
        raise CaptureError(
            f"{_cap(origin_phrase(origin))} starts with a cell magic.",
            "put the handler code directly under the %%ms_handler line.",
        )
    try:
        return cell, text, ast.parse(text)
    except SyntaxError as err:
        raise CaptureError(
            f"{_cap(origin_phrase(origin))} does not parse: line {err.lineno}: {err.msg}.",
            f"fix the syntax on line {err.lineno} of {origin_phrase(origin)}.",
        ) from None


def _form(tree: ast.Module, origin: str, known: set[str], entry: str | None) -> tuple[Form, dict[str, str]]:
    try:
        form, roles = form_and_roles(tree, known, entry)
    except SpecError as err:
        raise CaptureError(err.message.replace("The cell", _cap(origin_phrase(origin)), 1), err.hint) from None
    if form.kind == ROLES_FORM and "init_function" not in roles:
        typo = [n for n in tree.body if isinstance(n, ast.FunctionDef) and did_you_mean(n.name) == "init_function"]
        guess = f" Did you mean `init_function` for `{typo[0].name}` (line {typo[0].lineno})?" if typo else ""
        raise CaptureError(
            f"{_cap(origin_phrase(origin))} defines no handler: no init_function, handler class or module-level handle.{guess}",
            f"define `{SIGNATURES['init_function']}` in {origin_phrase(origin)} (it returns the model), or your own "
            "TorchServe handler: a BaseHandler subclass, a class with initialize and handle, or handle(data, context).",
        )
    return form, roles


def _bound_by_dropped(wanted: list[tuple[str, Stmt]], dropped: list[Stmt], changes: Changes) -> dict[str, Needed]:
    """Names kept code uses that the handler cell binds only by statements not kept: values from the kernel."""
    needed: dict[str, Needed] = {}
    for stmt in dropped:
        for name, user in wanted:
            if name in stmt.usage.binds:
                needed[name] = changes.needed(name, user, stmt)
    return needed


def _dropped_warnings(stmts: list[Stmt], raw: str, values: set[str]) -> tuple[str, ...]:
    """Say which handler-cell statements stay behind (not those whose value travels), quoting the line as typed."""
    warnings = []
    for stmt in stmts:
        if stmt.usage.binds & values:
            continue
        if stmt.kind == "future":
            why = "a __future__ import cannot sit in the middle of the generated module"
        else:
            why = "only imports and definitions travel with the handler (values the code uses travel as data)"
        warnings.append(f"line {stmt.node.lineno}: `{_head(stmt, raw)}` is not kept: {why}")
    return tuple(warnings)


def _head(stmt: Stmt, raw: str) -> str:
    raw_lines, lines = raw.splitlines(), stmt.cell_text.splitlines()
    source = raw_lines if len(raw_lines) == len(lines) else lines
    line = source[stmt.node.lineno - 1].strip()
    if len(line) > 60:
        return line[:57] + "..."
    return line + (" ..." if (stmt.node.end_lineno or 0) > stmt.node.lineno else "")


def _cap(text: Any) -> str:
    text = str(text)  # an Origin reads as its label
    return text[:1].upper() + text[1:]
