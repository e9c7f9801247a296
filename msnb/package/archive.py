"""Stage a HandlerSpec as a TorchServe model directory and pack it with torch-model-archiver's own API."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from model_archiver.model_archiver_config import ModelArchiverConfig
from model_archiver.model_packaging_utils import ModelExportUtils

from msnb.capture import requirement_rules, secret_rules
from msnb.errors import BuildError, SpecError
from msnb.files import clone_file, clone_tree, disk_error, link_or_copy, partial_sibling, replace_tree
from msnb.forms import MODEL_FILE, ROLES_FORM
from msnb.package import api_card
from msnb.package.formats import EXPORT_FORMAT, FORMATS, SERVE_FORMAT
from msnb.package.render import HANDLER_MODULE, render_handler
from msnb.spec import BundledFile, HandlerSpec
from msnb.templates import shared_handler_files
from msnb.templates.msnb_names import API_CARD, CHECKPOINT, CONFIG, HF_DIR, REQUIREMENTS, VALUES_FILE

Progress = Callable[[str, float], None]


def stage(spec: HandlerSpec, model_dir: Path, *, temporary: bool = False) -> Path:
    """Write the model directory exactly as TorchServe will unpack it (without the manifest).

    Checkpoint and extra files are private copies (a copy-on-write clone where the filesystem has them):
    a model dir that is served never changes when the notebook re-saves its files. A ``temporary``
    staging dir (packed into a zip, which copies them, or a local test) links them instead.
    """
    model_dir = Path(model_dir)
    _check_extra_names(spec.extra_files, {f.arcname.split("/")[0] for f in spec.bundle}, checkpoint_name(spec))
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / f"{HANDLER_MODULE}.py").write_text(render_handler(spec))
    for src in shared_handler_files():
        shutil.copy2(src, model_dir / src.name)
    (model_dir / CONFIG).write_text(yaml.safe_dump(spec.model_config(), sort_keys=False))
    api_card.write(spec, model_dir)  # how /v1 and /mcp show it (msnb_api.json)
    if spec.requirements:
        (model_dir / REQUIREMENTS).write_text(
            "\n".join(requirement_rules.check(spec.requirements, spec.max_requirements)) + "\n"
        )
    _stage_checkpoint(spec, model_dir / checkpoint_name(spec), temporary)
    model_file = spec.model_file()
    if model_file is not None:  # eager BaseHandler: the manifest's modelFile (see msnb.forms)
        (model_dir / MODEL_FILE).write_text(model_file)
    if spec.values is not None:  # the kernel's runtime values, frozen at capture (read by msnb_values.py)
        (model_dir / VALUES_FILE).write_bytes(spec.values.data)
    if spec.objects is not None:  # Hugging Face objects saved at capture (rebound by msnb_hf.py)
        spec.objects.write(model_dir)
    for extra in spec.extra_files:
        _stage_extra(Path(extra), model_dir, temporary)
    for item in spec.bundle:
        _stage_bundled(item, model_dir)
    return model_dir


def build(
    spec: HandlerSpec,
    export_path: str | Path,
    fmt: str = EXPORT_FORMAT,
    archive_name: str | None = None,
    *,
    progress: Progress | None = None,
) -> Path:
    """Build ``<export_path>/<archive_name>.mar`` (or a no-archive folder) from ``spec``; runs no user code.

    Whether to run the handler first (``trial.runner.validate``) is the caller's decision.
    """
    if fmt not in FORMATS:
        raise BuildError(f"Unknown archive format {fmt!r}.", f"use one of {', '.join(FORMATS)}.")
    report = progress or (lambda step, frac: None)
    archive_name = archive_name or spec.name
    export_path = Path(export_path).expanduser()
    ensure_writable(export_path)
    final = export_path / (archive_name if fmt == SERVE_FORMAT else f"{archive_name}.mar")
    try:
        _build_into(spec, export_path, archive_name, fmt, report)
    except OSError as err:
        raise disk_error(final, err) from None
    report("done", 1.0)
    return final


def _build_into(spec: HandlerSpec, export_path: Path, archive_name: str, fmt: str, report: Progress) -> None:
    """Stage and pack; the result appears under its final name only when complete (a rename)."""
    if fmt == SERVE_FORMAT:  # staged in a hidden sibling, renamed into place: never a half-written folder
        with partial_sibling(export_path / archive_name) as partial:
            report("staging model directory", 0.5)
            _pack(spec, stage(spec, partial / archive_name), partial, archive_name, fmt)
            replace_tree(partial / archive_name, export_path / archive_name)
        return
    with tempfile.TemporaryDirectory(prefix="msnb-stage-") as tmp:
        report("staging model directory", 0.4)
        staged = stage(spec, Path(tmp) / "model", temporary=True)
        report(f"packing {fmt} archive", 0.6)
        _pack(spec, staged, export_path, archive_name, fmt)


def _pack(spec: HandlerSpec, staged: Path, export_path: Path, archive_name: str, fmt: str) -> None:
    config = ModelArchiverConfig(
        model_name=spec.name,
        handler=f"{HANDLER_MODULE}.py",
        version=spec.version,
        serialized_file=checkpoint_name(spec) if (staged / checkpoint_name(spec)).exists() else None,
        model_file=MODEL_FILE if (staged / MODEL_FILE).exists() else None,
        requirements_file=REQUIREMENTS if spec.requirements else None,
        config_file=CONFIG,
        export_path=str(export_path),
        archive_format=FORMATS[fmt].archiver,
        force=True,
    )
    manifest = ModelExportUtils.generate_manifest_json(config)
    if fmt == SERVE_FORMAT:  # staged in place: the archiver only writes MAR-INF/MANIFEST.json
        ModelExportUtils.archive(str(export_path), archive_name, str(staged), manifest, FORMATS[fmt].archiver)
        return
    # The archiver names its output after the name it is given: pack under a hidden partial name in
    # the same folder and rename, so a failed build never leaves a half-written .mar behind.
    partial = f".{archive_name}.partial"
    try:
        ModelExportUtils.archive(str(export_path), partial, str(staged), manifest, FORMATS[fmt].archiver)
        os.replace(export_path / f"{partial}.mar", export_path / f"{archive_name}.mar")
    except BaseException:
        (export_path / f"{partial}.mar").unlink(missing_ok=True)
        raise


def checkpoint_name(spec: HandlerSpec) -> str:
    """The checkpoint's name in the model dir: an own handler's checkpoint file keeps its name (a handler may load
    ``model.safetensors`` by name, as on plain TorchServe); msnb's roles and objects from the kernel use CHECKPOINT."""
    ckpt = spec.checkpoint
    if spec.form != ROLES_FORM and isinstance(ckpt, (str, os.PathLike)):
        return Path(ckpt).name
    return CHECKPOINT


def _stage_checkpoint(spec: HandlerSpec, dst: Path, symlink_ok: bool) -> None:
    ckpt = spec.checkpoint
    if ckpt is None:
        return
    if isinstance(ckpt, torch.jit.ScriptModule) and spec.form != ROLES_FORM:
        torch.jit.save(ckpt, str(dst))  # what BaseHandler.initialize loads (torch.jit.load)
        return
    if isinstance(ckpt, torch.nn.Module):
        ckpt = ckpt.state_dict()
    if isinstance(ckpt, dict):
        torch.save(ckpt, dst)
        return
    path = Path(ckpt).expanduser()
    if not path.is_file():
        raise SpecError(
            f"Checkpoint {str(path.resolve())!r} does not exist.",
            "pass the path of a saved state_dict (torch.save(model.state_dict(), 'model.pt')), "
            "or the model / state_dict variable itself.",
        )
    _take(path, dst, symlink_ok)


def _check_extra_names(extra_files: tuple[str, ...], bundled: set[str], checkpoint: str = CHECKPOINT) -> None:
    """Extra files keep their names in the model dir: none may replace a generated, bundled or other extra file."""
    generated = {
        f"{HANDLER_MODULE}.py",
        CONFIG,
        REQUIREMENTS,
        checkpoint,
        MODEL_FILE,
        VALUES_FILE,
        HF_DIR,
        API_CARD,
        "MAR-INF",
        *(p.name for p in shared_handler_files()),
    }
    clash = bundled & generated
    if clash:
        raise SpecError(
            f"The local module(s) {', '.join(sorted(clash))} would replace a file msnb writes in the model dir.",
            "rename the local module (the shared handler's own files keep their names).",
        )
    generated |= bundled
    seen: set[str] = set()
    for extra in extra_files:
        name = Path(extra).expanduser().name
        if secret_rules.unsafe_name(name):
            raise SpecError(
                f"Extra file {extra!r} has {secret_rules.unsafe_name(name)}: archives never store such names.",
                "rename the file (letters, digits, dots, dashes and underscores are always safe).",
            )
        if name in generated or name in seen:
            what = "a bundled local module or a file msnb writes" if name in generated else "another extra file"
            raise SpecError(
                f"Extra file {extra!r} would replace {what} of the same name ({name!r}) in the model dir.",
                "rename it (extra files keep their names; the checkpoint goes with --checkpoint).",
            )
        seen.add(name)


def _stage_extra(src: Path, model_dir: Path, symlink_ok: bool) -> None:
    src = src.expanduser()
    if not src.exists():
        raise SpecError(f"Extra file {str(src.resolve())!r} does not exist.", "check the path given to --extra-files.")
    dst = model_dir / src.name
    if src.is_dir():
        clone_tree(src, dst)
    else:
        _take(src, dst, symlink_ok)


def _take(src: Path, dst: Path, temporary: bool) -> None:
    """A file from the user's folder into the model dir: linked into a temporary one, else a private copy."""
    if temporary:
        link_or_copy(src, dst, symlink_ok=True)
    else:
        clone_file(src, dst)


def _stage_bundled(item: BundledFile, model_dir: Path) -> None:
    """Copied, never linked: a source file edited in place must not change an archive already served."""
    src = Path(item.source)
    if not src.is_file():
        raise SpecError(
            f"The local file {item.source!r} (bundled as {item.arcname}) is gone.",
            "run the %%ms_handler cell again so msnb finds the handler's imports anew.",
        )
    dst = model_dir / item.arcname
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def ensure_writable(path: Path) -> bool:
    """Create ``path`` if needed (True when this created it); a folder that cannot be written is a clear error."""
    existed = path.is_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.NamedTemporaryFile(dir=path, prefix=".msnb-probe-").close()
        return not existed
    except OSError as err:
        raise BuildError(
            f"Cannot write to the output folder {str(path.resolve())!r}: {err.strerror or err}.",
            "choose a folder you can write to (-o OUTDIR, --kserve DIR or --export-path DIR).",
        ) from None
