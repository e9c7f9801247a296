"""HandlerSpec: the immutable description of one handler, from capture to archive."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a spec carries values; making them needs torch, reading a spec does not
    from msnb.capture.hf_objects import SavedObjects
    from msnb.capture.kernel_values import Values
from msnb.errors import SpecError
from msnb.files import fingerprint
from msnb.forms import (
    CLASS_FORM,
    FORMS,
    ROLES_FORM,
    Form,
    check_checkpoint,
    eager,
    handler_class_names,
    model_file_source,
)
from msnb.options import DEFAULTS, DEVICES, INT_OPTIONS, OPTION, check_gpu_memory
from msnb.roles import ROLES, SIGNATURES, NearMiss, check_init_kwargs, form_and_roles, streaming_roles
from msnb.roles import near_misses as find_near_misses
from msnb.templates.msnb_runtime.handler.names import SEGMENT_RULE, valid_segment
from msnb.templates.msnb_runtime.handler.serving import ServingConfig

# TorchServe (>= 0.10) installs an archive's requirements.txt into a virtual environment that sees the server's own
# packages (``pip install -U --upgrade-strategy only-if-needed``), and the worker runs in it: only what the server
# lacks is installed. Without it, ``pip install -t MODEL_DIR`` ignores what is installed and a requirement that
# depends on torch (captum, peft, accelerate) puts a second, multi-GB torch in the model folder, which the worker
# then imports instead of the server's. Written only with requirements: the venv costs ~2-3 s per registration.
USE_VENV = "useVenv"


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

    @property
    def phrase(self) -> str:
        """The origin in a sentence: ``handler cell`` reads as "the handler cell"; ``cell In[3]`` stays as it is."""
        return f"the {self.label}" if self.label == "handler cell" else self.label

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
    lines: tuple[int, ...] = ()  # the origin cell's line number of each line of ``source`` (0: none; empty: unknown)

    def __post_init__(self) -> None:
        object.__setattr__(self, "origin", Origin.of(self.origin))
        object.__setattr__(self, "lines", tuple(self.lines))

    def cell_line(self, line: int) -> int:
        """The origin cell's line for line ``line`` of ``source`` (``line`` itself when the mapping is unknown)."""
        return self.lines[line - 1] if 0 < line <= len(self.lines) and self.lines[line - 1] else line


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
    input_schema: Mapping[str, Any] | None = None  # --schema FILE: the MCP tool's input schema (msnb.package.api_card)
    embeddings: bool = (
        False  # --embeddings: an answer is an embedding, served at /v1/embeddings (msnb.package.api_card)
    )
    values: Values | None = None  # runtime values snapshotted from the kernel (values.pt)
    objects: SavedObjects | None = None  # Hugging Face objects saved from the kernel (hf_objects/)
    max_value_mb: int = DEFAULTS["max_value_mb"]
    max_requirements: int = DEFAULTS["max_requirements"]
    origin: Origin = Origin("<python>")
    warnings: tuple[str, ...] = ()
    model_yaml: Mapping[str, Any] = field(
        default_factory=dict
    )  # the user's --config-file (msnb.templates.msnb_runtime.handler.serving)

    def __post_init__(self) -> None:
        object.__setattr__(self, "blocks", tuple(self.blocks))
        object.__setattr__(self, "requirements", tuple(self.requirements))
        object.__setattr__(self, "extra_files", tuple(str(p) for p in self.extra_files))
        object.__setattr__(self, "bundle", tuple(self.bundle))
        object.__setattr__(self, "roles", dict(self.roles))
        object.__setattr__(self, "init_kwargs", dict(self.init_kwargs or {}))
        object.__setattr__(self, "model_yaml", dict(self.model_yaml or {}))
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
        self._validate_options()
        self._validate_source()

    def _validate_options(self) -> None:
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

    def _validate_source(self) -> None:
        try:
            tree = ast.parse(self.source)
            compile(tree, f"<handler {self.name}>", "exec")
        except SyntaxError as err:
            raise SpecError(f"Handler {self.name!r} does not compile: {err}.", "fix the cell's syntax.") from None
        if "init_function" in self.roles:
            check_init_kwargs(tree, self.roles["init_function"], self.init_kwargs)
        if self.form == CLASS_FORM:
            check_checkpoint(tree, self.entry, self.checkpoint)
            self.model_file()  # refuses two model classes, as TorchServe would

    def model_file(self) -> str | None:
        """The eager model file's source (msnb.forms) when BaseHandler.initialize loads an eager model, else None."""
        tree = ast.parse(self.source)
        if self.form != CLASS_FORM or not eager(tree, self.entry, self.checkpoint):
            return None
        return model_file_source(self.source, handler_class_names([tree]))

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

    def where(self, line: int) -> str:
        """Line ``line`` of ``source`` as a person finds it: ``line 9 of cell In[5]`` (its block's cell and line)."""
        at = 1
        for block in self.blocks:
            count = block.source.rstrip().count("\n") + 1
            if line < at + count:
                return f"line {block.cell_line(line - at + 1)} of {block.origin.phrase}"
            at += count + 1  # the blank line between two blocks
        return f"line {line} of the handler code"

    @property
    def near_misses(self) -> tuple[NearMiss, ...]:
        """The handler cell's functions that nothing calls, named like a role it lacks (``msnb.roles.NearMiss``)."""
        if self.form != ROLES_FORM or not self.blocks:
            return ()
        cell = self.blocks[-1]
        return find_near_misses(ast.parse(cell.source), self.form, self.roles, cell.cell_line)

    @property
    def streaming(self) -> tuple[str, ...]:
        """The roles that are generators, so that answers stream (empty: answers are whole)."""
        if self.form != ROLES_FORM or not self.blocks:
            return ()
        return streaming_roles(ast.parse(self.blocks[-1].source), self.roles)

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
        """The local modules that travel, one entry per top-level name, with the names of data files:
        ``model.py``, ``mypkg/ (4 files; data: vocab.txt)``."""
        groups: dict[str, list[BundledFile]] = {}
        for f in self.bundle:
            groups.setdefault(f.arcname.split("/")[0], []).append(f)
        return tuple(_bundled_entry(n, g) for n, g in groups.items())

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
                    self.values and self.values.digest,
                    self.objects and self.objects.digest,
                    *(["embeddings"] if self.embeddings else []),
                ],
                sort_keys=True,
                default=str,
            ).encode()
        )
        ckpt = self.checkpoint_path
        if ckpt is not None:  # its content (hashed once per save): the same weights saved again are no change
            h.update(f"{ckpt.resolve()}:{fingerprint(ckpt) if ckpt.is_file() else 'missing'}".encode())
        elif self.checkpoint is not None:
            h.update(_live_fingerprint(self.checkpoint).encode())
        return h.hexdigest()[:12]

    @property
    def serving(self) -> ServingConfig:
        """The serving settings (the user's --config-file as its extra keys)."""
        return ServingConfig(
            self.workers,
            self.batch_size,
            self.max_batch_delay,
            self.response_timeout,
            self.device,
            self.max_gpu_memory,
            self.model_yaml,
        )

    def model_config(self) -> dict[str, Any]:
        """The values written to the archive's model-config.yaml: the serving settings, the archives to unpack
        (system.extraFiles) and, with requirements, useVenv."""
        archives = [Path(p).name for p in self.extra_files if _is_archive(p)]
        own = {USE_VENV: True} if self.requirements else {}
        return self.serving.to_model_config({"extraFiles": archives} if archives else None, **own)


# ---------------------------------------------------------------- helpers
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


def _bundled_entry(top: str, files: list[BundledFile], shown: int = 8) -> str:
    if len(files) == 1 and "/" not in files[0].arcname:
        return top
    data = [f.arcname.removeprefix(top + "/") for f in files if not f.module]
    listed = ", ".join(data[:shown]) + (f" and {len(data) - shown} more" if len(data) > shown else "")
    return f"{top}/ ({len(files)} files" + (f"; data: {listed})" if data else ")")
