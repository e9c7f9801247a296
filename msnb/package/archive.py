"""Pack a model folder (``ModelFolder``) with torch-model-archiver's own API: a .mar, or a no-archive folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from model_archiver.model_archiver_config import ModelArchiverConfig
from model_archiver.model_packaging_utils import ModelExportUtils

from msnb.errors import BuildError
from msnb.files import disk_error, partial_sibling, replace_tree
from msnb.forms import MODEL_FILE
from msnb.package.formats import EXPORT_FORMAT, FORMATS, SERVE_FORMAT
from msnb.package.model_folder import ModelFolder
from msnb.package.render import HANDLER_MODULE
from msnb.spec import HandlerSpec
from msnb.templates.msnb_runtime.handler.names import CONFIG

Progress = Callable[[str, float], None]
Rewrite = Callable[[ModelFolder], ModelFolder]  # a laid-out private copy -> that copy as it is to be served


def build(
    spec: HandlerSpec,
    export_path: str | Path,
    fmt: str = EXPORT_FORMAT,
    archive_name: str | None = None,
    *,
    progress: Progress | None = None,
) -> Path:
    """Build ``<export_path>/<archive_name>.mar`` (or a no-archive folder) from ``spec``: its model folder staged
    (in place for a no-archive folder, else in a private temp dir) and packed; runs no user code."""
    return _writing(export_path, fmt, archive_name or spec.name, progress, lambda *a: _build(spec, *a))


def pack(
    folder: ModelFolder,
    export_path: str | Path,
    fmt: str = EXPORT_FORMAT,
    archive_name: str | None = None,
    *,
    progress: Progress | None = None,
    rewrite: Rewrite | None = None,
) -> Path:
    """Pack the staged ``folder`` as ``<export_path>/<archive_name>.mar`` (or lay it out as a no-archive folder of
    private copies, which ``rewrite`` may change before its manifest is written: an engine's version, see
    ``model_folder.relabel``); runs no user code. Whether to run the folder first (``trial.runner.validate``) is the
    caller's decision."""
    if rewrite is not None and fmt != SERVE_FORMAT:
        raise ValueError(f"only a {SERVE_FORMAT} layout is rewritten (a private copy), not {fmt}")
    return _writing(
        export_path,
        fmt,
        archive_name or folder.name,
        progress,
        lambda *a: _pack_folder(folder, *a, rewrite=rewrite),
    )


def pack_or_build(item: ModelFolder | HandlerSpec, export_path: Path, fmt: str = EXPORT_FORMAT) -> Path:
    """A layout's archive: a staged folder packed (an export's), or a spec built."""
    return pack(item, export_path, fmt) if isinstance(item, ModelFolder) else build(item, export_path, fmt)


def _writing(export_path: str | Path, fmt: str, name: str, progress: Progress | None, write: Callable) -> Path:
    """``write(export_path, name, fmt, report)`` under a clear error for an unknown format or a full disk."""
    if fmt not in FORMATS:
        raise BuildError(f"Unknown archive format {fmt!r}.", f"use one of {', '.join(FORMATS)}.")
    report = progress or (lambda step, frac: None)
    export_path = Path(export_path).expanduser()
    ensure_writable(export_path)
    final = export_path / (name if fmt == SERVE_FORMAT else f"{name}.mar")
    try:
        write(export_path, name, fmt, report)
    except OSError as err:
        raise disk_error(final, err) from None
    report("done", 1.0)
    return final


def _pack_folder(
    folder: ModelFolder, export_path: Path, name: str, fmt: str, report: Progress, rewrite: Rewrite | None = None
) -> None:
    if fmt == SERVE_FORMAT:  # laid out in a hidden sibling, renamed into place: never a half-written folder
        with partial_sibling(export_path / name) as partial:
            report("laying out model directory", 0.5)
            laid = folder.copied(partial / name)  # private copies: a served folder never changes
            _pack(rewrite(laid) if rewrite else laid, partial, name, fmt)
            replace_tree(partial / name, export_path / name)
        return
    report(f"packing {fmt} archive", 0.6)
    _pack(folder, export_path, name, fmt)


def _build(spec: HandlerSpec, export_path: Path, name: str, fmt: str, report: Progress) -> None:
    if fmt == SERVE_FORMAT:  # staged in place (private copies, written once) in a hidden sibling, renamed into place
        with partial_sibling(export_path / name) as partial:
            report("staging model directory", 0.5)
            _pack(ModelFolder.stage(spec, partial / name), partial, name, fmt)
            replace_tree(partial / name, export_path / name)
        return
    with tempfile.TemporaryDirectory(prefix="msnb-stage-") as tmp:
        report("staging model directory", 0.4)
        _pack_folder(ModelFolder.stage(spec, Path(tmp) / "model", temporary=True), export_path, name, fmt, report)


def _pack(folder: ModelFolder, export_path: Path, archive_name: str, fmt: str) -> None:
    config = ModelArchiverConfig(
        model_name=folder.name,
        handler=f"{HANDLER_MODULE}.py",
        version=folder.version,
        serialized_file=folder.checkpoint,
        model_file=MODEL_FILE if (folder.path / MODEL_FILE).exists() else None,
        requirements_file=folder.requirements_file,
        config_file=CONFIG,
        export_path=str(export_path),
        archive_format=FORMATS[fmt].archiver,
        force=True,
    )
    manifest = ModelExportUtils.generate_manifest_json(config)
    staged = str(folder.path)
    if fmt == SERVE_FORMAT:  # laid out in place: the archiver only writes MAR-INF/MANIFEST.json
        ModelExportUtils.archive(str(export_path), archive_name, staged, manifest, FORMATS[fmt].archiver)
        return
    # The archiver names its output after the name it is given: pack in a hidden folder of this build's own beside
    # it and rename, so a failed build never leaves a half-written .mar and two builds of one name never share a file.
    with partial_sibling(export_path / f"{archive_name}.mar") as partial:
        ModelExportUtils.archive(str(partial), archive_name, staged, manifest, FORMATS[fmt].archiver)
        os.replace(partial / f"{archive_name}.mar", export_path / f"{archive_name}.mar")


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
