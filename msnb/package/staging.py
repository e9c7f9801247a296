"""Write a HandlerSpec as a TorchServe model directory (without the manifest, written when it is packed).

Only ``msnb.package.model_folder`` calls this: a ModelFolder is staged in one place.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import yaml

from msnb.capture import requirement_rules, secret_rules
from msnb.errors import SpecError
from msnb.files import clone_file, clone_tree, link_or_copy
from msnb.forms import MODEL_FILE, ROLES_FORM
from msnb.package import api_card
from msnb.package.render import HANDLER_MODULE, render_handler
from msnb.spec import USE_VENV, BundledFile, HandlerSpec
from msnb.templates import ARCHIVE_ROOMS, RUNTIME, copy_runtime
from msnb.templates.msnb_runtime.handler.names import API_CARD, CHECKPOINT, CONFIG, HF_DIR, REQUIREMENTS, VALUES_FILE


def write(spec: HandlerSpec, model_dir: Path, *, temporary: bool = False) -> Path:
    """Write the model directory exactly as TorchServe will unpack it (without the manifest).

    Checkpoint and extra files are private copies (a copy-on-write clone where the filesystem has them):
    a model dir that is served never changes when the notebook re-saves its files. A ``temporary``
    staging dir (packed into a zip, which copies them, or a local test) links them instead.
    """
    model_dir = Path(model_dir)
    _check_extra_names(spec.extra_files, {f.arcname.split("/")[0] for f in spec.bundle}, checkpoint_name(spec))
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / f"{HANDLER_MODULE}.py").write_text(render_handler(spec))
    copy_runtime(model_dir, ARCHIVE_ROOMS)
    _write_config(model_dir, spec.model_config())
    api_card.write(spec, model_dir)  # how /v1 and /mcp show it (msnb_api.json)
    if spec.requirements:
        write_requirements(spec, model_dir, spec.requirements)
    _stage_checkpoint(spec, model_dir / checkpoint_name(spec), temporary)
    model_file = spec.model_file()
    if model_file is not None:  # eager BaseHandler: the manifest's modelFile (see msnb.forms)
        (model_dir / MODEL_FILE).write_text(model_file)
    if (
        spec.values is not None
    ):  # the kernel's runtime values, frozen at capture (read by msnb_runtime/handler/values.py)
        (model_dir / VALUES_FILE).write_bytes(spec.values.data)
    if spec.objects is not None:  # Hugging Face objects saved at capture (rebound by msnb_runtime/handler/hf.py)
        spec.objects.write(model_dir)
    for extra in spec.extra_files:
        _stage_extra(Path(extra), model_dir, temporary)
    for item in spec.bundle:
        _stage_bundled(item, model_dir)
    return model_dir


def write_requirements(spec: HandlerSpec, model_dir: Path, requirements: tuple[str, ...]) -> None:
    """The folder of ``spec`` made to install ``requirements`` (its own, or fewer): requirements.txt, and without
    any, no file and no useVenv in model-config.yaml (unless the user's own config sets it)."""
    path = Path(model_dir) / REQUIREMENTS
    if requirements:
        path.write_text("\n".join(requirement_rules.check(requirements, spec.max_requirements)) + "\n")
        return
    path.unlink(missing_ok=True)
    config = yaml.safe_load((Path(model_dir) / CONFIG).read_text()) or {}
    if USE_VENV not in spec.serving.extra and config.pop(USE_VENV, None) is not None:
        _write_config(Path(model_dir), config)


def _write_config(model_dir: Path, config: dict) -> None:
    (model_dir / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))


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
    import torch  # here: a folder opened from an archive (`msnb serve A.mar`) stages no checkpoint, nor imports torch

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
        RUNTIME,
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
