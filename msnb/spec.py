"""HandlerSpec: the immutable description of one handler, from capture to archive."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msnb.errors import SpecError
from msnb.forms import FORMS, ROLES_FORM, Form, detect
from msnb.options import DEFAULTS, DEVICES, INT_OPTIONS, OPTION, check_gpu_memory
from msnb.torchserve.store import SEGMENT_RULE, valid_segment

# Role name -> (keyword the shared handler's factory takes, positional arity it calls with).
# Arity None means "callable with **kwargs" (init_function(**init_kwargs)).
ROLES: dict[str, tuple[str, int | None]] = {
    "init_function": ("init_function", None),
    "preprocess": ("preprocess_function", 1),
    "postprocess": ("postprocess_function", 1),
    "install_packages": ("install_packages", 0),
    "unpack_dependencies": ("unpack_dependencies", 0),
    "explain": ("explain_function", 2),
}
# Aliases a user may write instead of the role name (the model-servers helper spelling).
ROLE_ALIASES = {
    "preprocess_function": "preprocess",
    "postprocess_function": "postprocess",
    "explain_function": "explain",
}
SIGNATURES = {
    "init_function": "def init_function(**kwargs) -> torch.nn.Module",
    "preprocess": "def preprocess(sample)",
    "postprocess": "def postprocess(output)",
    "install_packages": "def install_packages()",
    "unpack_dependencies": "def unpack_dependencies()",
    "explain": "def explain(model, model_input) (or explain(model, model_input, target=None))",
}


@dataclass(frozen=True, eq=False)
class Origin:
    """Where user code came from: its label as people read it (``cell In[3]``, ``nb.ipynb, cell 5``),
    and, as structure, the notebook file and the cell number (None in a kernel / for hand-made specs).

    Compares equal to its label, so ``block.origin == "cell In[3]"`` reads as it looks.
    """

    label: str
    notebook: str | None = None
    cell: int | None = None

    @classmethod
    def of(cls, value: "Origin | str") -> "Origin":
        return value if isinstance(value, Origin) else cls(str(value))

    @property
    def short(self) -> str:
        """``cell 5`` for a notebook cell, else the label."""
        return f"cell {self.cell}" if self.cell is not None and self.notebook else self.label

    def __str__(self) -> str:
        return self.label

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Origin):
            return (self.label, self.notebook, self.cell) == (other.label, other.notebook, other.cell)
        return isinstance(other, str) and other == self.label

    def __hash__(self) -> int:
        return hash(self.label)


@dataclass(frozen=True)
class SourceBlock:
    """A piece of user code and where it came from."""

    source: str
    origin: Origin
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "origin", Origin.of(self.origin))


@dataclass(frozen=True)
class BundledFile:
    """A local file that travels in the archive: its path inside the model dir, where it is read from, its module."""

    arcname: str  # e.g. "mypkg/sub/mod.py" (imports work from the model dir as they did from the notebook's)
    source: str
    module: str = ""  # "mypkg.sub.mod"; "" for package data

    @property
    def top(self) -> str:
        return self.arcname.split("/")[0].removesuffix(".py")


@dataclass(frozen=True)
class HandlerSpec:
    """Everything needed to render, test, archive and serve one handler.

    ``blocks`` hold the user's code verbatim in module order: pulled-in definitions from other
    cells first, the handler cell last. ``roles`` maps a role (see ``ROLES``) to the function
    name that implements it in that code. ``checkpoint`` is a path, a ``state_dict`` or an
    ``nn.Module`` (saved as a state_dict when archived), or None. ``bundle`` holds the local modules
    (and package data) the code imports; ``requirements`` the given ones plus the pinned third-party imports.
    """

    name: str
    blocks: tuple[SourceBlock, ...]
    roles: Mapping[str, str]
    form: str = ROLES_FORM
    entry: str = ""
    version: str = DEFAULTS["version"]
    init_kwargs: Mapping[str, Any] = field(default_factory=dict)
    checkpoint: Any = None
    requirements: tuple[str, ...] = ()
    extra_files: tuple[str, ...] = ()
    bundle: tuple[BundledFile, ...] = ()
    batch_size: int = DEFAULTS["batch_size"]
    max_batch_delay: int = DEFAULTS["max_batch_delay"]
    workers: int = DEFAULTS["workers"]
    response_timeout: int = DEFAULTS["response_timeout"]
    device: str = DEFAULTS["device"]
    max_gpu_memory: int | None = DEFAULTS["max_gpu_memory"]
    example: Any = None
    origin: Origin = Origin("<python>")
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "requirements", tuple(self.requirements))
        object.__setattr__(self, "extra_files", tuple(str(p) for p in self.extra_files))
        object.__setattr__(self, "bundle", tuple(self.bundle))
        object.__setattr__(self, "roles", dict(self.roles))
        object.__setattr__(self, "init_kwargs", dict(self.init_kwargs or {}))
        object.__setattr__(self, "version", str(self.version))
        object.__setattr__(self, "origin", Origin.of(self.origin))
        self._validate()

    # ---------------------------------------------------------------- validation
    def _validate(self) -> None:
        for what, value, example in (("name", self.name, "'mnist'"), ("version", self.version, "'1.0', '2-beta'")):
            if not valid_segment(value):
                raise SpecError(
                    f"Model {what} {value!r} is not valid: it is part of the model's URLs.",
                    f"use {SEGMENT_RULE} (e.g. {example}).",
                )
        self._validate_form()
        unknown = set(self.roles) - set(ROLES)
        if unknown:
            raise SpecError(f"Unknown role(s) {sorted(unknown)}.", f"roles are {sorted(ROLES)}.")
        for key, minimum in INT_OPTIONS.items():
            if getattr(self, key) is not None or DEFAULTS[key] is not None:
                _check_int(key, getattr(self, key), minimum)
        if self.device not in DEVICES:
            raise SpecError(f"device={self.device!r} is not one of {DEVICES}.", "use --device auto, cpu or gpu.")
        problem = check_gpu_memory(self.max_gpu_memory, self.device)
        if problem:
            raise SpecError(f"{problem}.", "drop --max-gpu-memory or use --device gpu/auto.")
        try:
            json.dumps(self.init_kwargs, allow_nan=False)  # rendered as a Python literal: inf/nan would not load
        except (TypeError, ValueError) as err:
            raise SpecError(
                f"init_kwargs are not JSON-serialisable: {err}.",
                "pass plain (finite) numbers, strings, lists and dicts; ship tensors as a checkpoint.",
            ) from None
        try:
            tree = ast.parse(self.source)
            compile(tree, f"<handler {self.name}>", "exec")
        except SyntaxError as err:
            raise SpecError(f"Handler {self.name!r} does not compile: {err}.", "fix the cell's syntax.") from None
        if "init_function" in self.roles:
            check_init_kwargs(tree, self.roles["init_function"], self.init_kwargs)

    def _validate_form(self) -> None:
        if self.form not in FORMS:
            raise SpecError(f"form={self.form!r} is not one of {sorted(FORMS)}.", "leave form out; capture finds it.")
        if self.form == ROLES_FORM and "init_function" not in self.roles:
            raise SpecError(
                f"Handler {self.name!r} has no init_function.",
                f"define `{SIGNATURES['init_function']}` in the handler cell; it returns the model.",
            )
        if self.form != ROLES_FORM and (self.roles or not self.entry.isidentifier()):
            raise SpecError(f"A {self.form} handler needs its entry name and no roles.", "capture the cell again.")
        if self.form != ROLES_FORM and self.init_kwargs:
            raise SpecError(
                f"--init-kwargs go to init_function, but {self.name!r} uses its own handler {self.form}.",
                "drop --init-kwargs; your handler reads settings from the context (model-config) or extra files.",
            )

    # ---------------------------------------------------------------- derived views
    @property
    def source(self) -> str:
        """The user's code as one module body (pulled-in definitions first)."""
        return "\n\n".join(b.source.rstrip() for b in self.blocks) + "\n"

    @property
    def handled_by(self) -> str:
        """Who answers requests, in a few words: the roles, or the user's own class / function."""
        if self.form == ROLES_FORM:
            return ", ".join(f"{role}={fn}" if role != fn else role for role, fn in self.roles.items())
        return f"your {Form(self.form, self.entry).label}"

    @property
    def pulled_in(self) -> tuple[SourceBlock, ...]:
        """Definitions brought in from other cells (all blocks but the handler cell)."""
        return self.blocks[:-1]

    @property
    def bundled(self) -> tuple[str, ...]:
        """The local modules that travel, one entry per top-level name: ``model.py``, ``mypkg/ (4 files)``."""
        groups: dict[str, list[str]] = {}
        for f in self.bundle:
            groups.setdefault(f.arcname.split("/")[0], []).append(f.arcname)
        return tuple(n if len(g) == 1 and "/" not in g[0] else f"{n}/ ({len(g)} files)" for n, g in groups.items())

    @property
    def checkpoint_path(self) -> Path | None:
        if isinstance(self.checkpoint, (str, Path)):
            return Path(self.checkpoint).expanduser()
        return None

    def replace(self, **changes: Any) -> "HandlerSpec":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def digest(self) -> str:
        """A short hash of everything that ends up in the archive (source and config)."""
        h = hashlib.sha256()
        h.update(self.source.encode())
        h.update(
            json.dumps(
                [
                    self.name,
                    self.version,
                    self.roles,
                    self.form,
                    self.entry,
                    self.init_kwargs,
                    self.model_config(),
                    self.requirements,
                    self.extra_files,
                    [(f.arcname, _file_stamp(f.source)) for f in self.bundle],
                ],
                sort_keys=True,
                default=str,
            ).encode()
        )
        ckpt = self.checkpoint_path
        if ckpt is not None:
            st = ckpt.stat() if ckpt.exists() else None
            h.update(f"{ckpt.resolve()}:{st and st.st_size}:{st and st.st_mtime_ns}".encode())
        elif self.checkpoint is not None:
            h.update(_live_fingerprint(self.checkpoint).encode())
        return h.hexdigest()[:12]

    def model_config(self) -> dict[str, Any]:
        """The values written to the archive's model-config.yaml."""
        cfg: dict[str, Any] = {
            "minWorkers": self.workers,
            "maxWorkers": self.workers,
            "batchSize": self.batch_size,
            "maxBatchDelay": self.max_batch_delay,
            "responseTimeout": self.response_timeout,
        }
        if self.device == "cpu":
            cfg["deviceType"] = "cpu"
        elif self.device == "gpu":
            cfg["deviceType"] = "gpu"
        system: dict[str, Any] = {}
        archives = [Path(p).name for p in self.extra_files if _is_archive(p)]
        if archives:
            system["extraFiles"] = archives
        if self.max_gpu_memory is not None:
            system["maxGPUMemory"] = self.max_gpu_memory
        if system:
            cfg["system"] = system
        return cfg


# ---------------------------------------------------------------- helpers
def find_roles(tree: ast.Module) -> dict[str, str]:
    """Map each role to the top-level function implementing it (aliases accepted)."""
    roles: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            role = ROLE_ALIASES.get(node.name, node.name)
            if role in ROLES:
                roles[role] = node.name
    return roles


def check_arity(role: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """Refuse a role whose signature the shared handler cannot call."""
    _, arity = ROLES[role]
    args = fn.args
    positional = args.posonlyargs + args.args
    required = len(positional) - len(args.defaults)
    required_kwonly = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    ok = not required_kwonly or arity is None
    if arity is None:  # init_function(**init_kwargs): parameters without defaults are checked against them
        ok = ok and not any(a in args.posonlyargs for a in positional[:required])
    else:
        ok = ok and required <= arity and (len(positional) >= arity or args.vararg is not None)
    if isinstance(fn, ast.AsyncFunctionDef):
        ok = False
    if not ok:
        raise SpecError(
            f"`{fn.name}` (role {role}) has the wrong signature (line {fn.lineno}).",
            f"the shared handler calls it as `{SIGNATURES[role]}`"
            + (" (values come from --init-kwargs by keyword: no positional-only parameters)" if arity is None else ""),
        )


def check_init_kwargs(tree: ast.Module, name: str, init_kwargs: Mapping[str, Any]) -> None:
    """Every init_function parameter without a default must be supplied by init_kwargs (its last definition)."""
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not defs:
        return
    args = defs[-1].args
    positional = args.posonlyargs + args.args
    required = [a.arg for a in positional[: len(positional) - len(args.defaults)]]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    missing = [p for p in required if p not in init_kwargs]
    if missing:
        listed = ", ".join(f"`{p}`" for p in missing)
        example = json.dumps({p: "..." for p in missing})
        raise SpecError(
            f"`{name}` needs {listed} but --init-kwargs does not supply {'it' if len(missing) == 1 else 'them'}.",
            f"pass --init-kwargs '{example}' (or the widget's init kwargs), or give the parameter a default.",
        )


def check_roles(tree: ast.Module) -> dict[str, str]:
    """The roles a module implements (see find_roles), each checked against how the shared handler calls it."""
    roles = find_roles(tree)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            role = ROLE_ALIASES.get(node.name, node.name)
            if roles.get(role) == node.name:
                check_arity(role, node)
    return roles


def spec_from_source(name: str, source: str, origin: Origin | str = "<python>", **config: Any) -> HandlerSpec:
    """Build a spec from one self-contained module source (no dependency closure)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise SpecError(f"Handler {name!r} does not parse: {err}.", "fix the syntax.") from None
    form, roles = form_and_roles(tree)
    return HandlerSpec(
        name=name,
        blocks=(SourceBlock(source, origin),),
        roles=roles,
        form=form.kind,
        entry=form.entry,
        origin=origin,
        **config,
    )


def form_and_roles(tree: ast.Module, known: Collection[str] = ()) -> tuple[Form, dict[str, str]]:
    """The cell's form (see msnb.forms; ``known``: handler classes of other cells) and its checked roles."""
    form = detect(tree, find_roles(tree), known)
    return form, check_roles(tree) if form.kind == ROLES_FORM else {}


def _check_int(key: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{key}={value!r} is not valid.", f"{OPTION[key].flag} takes a whole number >= {minimum}.")


def _file_stamp(path: str) -> str:
    try:
        st = Path(path).stat()
    except OSError:
        return "missing"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _is_archive(path: str) -> bool:
    return str(path).endswith((".zip", ".tar", ".tar.gz", ".tgz"))


def _live_fingerprint(checkpoint: Any) -> str:
    """Which weights a live nn.Module / state_dict holds now, without hashing them.

    Training changes tensors in place: every in-place write bumps a tensor's version counter (shared
    with the detached tensors ``state_dict()`` returns), so the versions tell a retrained model apart.
    """
    state = checkpoint.state_dict() if hasattr(checkpoint, "state_dict") else checkpoint
    parts = [str(id(checkpoint))]
    for key, value in state.items():
        if hasattr(value, "_version"):
            parts.append(f"{key}:{value.data_ptr()}:{value._version}")
    return "|".join(parts)
