"""Pack a model folder (``ModelFolder``) with torch-model-archiver's own API: a .mar, or a no-archive folder."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from model_archiver.model_archiver_config import ModelArchiverConfig
from model_archiver.model_packaging_utils import ModelExportUtils

from msnb.errors import BuildError
from msnb.files import clone_tree, disk_error, partial_sibling, replace_tree
from msnb.forms import MODEL_FILE
from msnb.package.formats import EXPORT_FORMAT, FORMATS, SERVE_FORMAT
from msnb.package.model_folder import ModelFolder
from msnb.package.render import HANDLER_MODULE
from msnb.spec import HandlerSpec
from msnb.templates.msnb_names import CONFIG

Progress = Callable[[str, float], None]


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
    return _packing(spec, export_path, fmt, archive_name or spec.name, progress)


def pack(
    folder: ModelFolder,
    export_path: str | Path,
    fmt: str = EXPORT_FORMAT,
    archive_name: str | None = None,
    *,
    progress: Progress | None = None,
) -> Path:
    """Pack the staged ``folder`` as ``<export_path>/<archive_name>.mar`` (or lay it out as a no-archive folder of
    private copies); runs no user code. Whether to run the folder first (``trial.runner.validate``) is the caller's
    decision."""
    return _packing(folder, export_path, fmt, archive_name or folder.name, progress)


def _packing(
    what: HandlerSpec | ModelFolder, export_path: str | Path, fmt: str, archive_name: str, progress: Progress | None
) -> Path:
    if fmt not in FORMATS:
        raise BuildError(f"Unknown archive format {fmt!r}.", f"use one of {', '.join(FORMATS)}.")
    report = progress or (lambda step, frac: None)
    export_path = Path(export_path).expanduser()
    ensure_writable(export_path)
    final = export_path / (archive_name if fmt == SERVE_FORMAT else f"{archive_name}.mar")
    try:
        if fmt == SERVE_FORMAT:
            _lay_out(what, export_path, archive_name, report)
        else:
            _zip(what, export_path, archive_name, fmt, report)
    except OSError as err:
        raise disk_error(final, err) from None
    report("done", 1.0)
    return final


def _lay_out(what: HandlerSpec | ModelFolder, export_path: Path, archive_name: str, report: Progress) -> None:
    """A no-archive folder, staged (or copied) in a hidden sibling and renamed into place: never a half-written one."""
    with partial_sibling(export_path / archive_name) as partial:
        report("staging model directory", 0.5)
        if isinstance(what, ModelFolder):
            clone_tree(what.path, partial / archive_name)  # private copies: a served folder never changes
            folder = ModelFolder(partial / archive_name, what.name, what.version, spec=what.spec)
        else:
            folder = ModelFolder.stage(what, partial / archive_name)
        _pack(folder, partial, archive_name, SERVE_FORMAT)
        replace_tree(partial / archive_name, export_path / archive_name)


def _zip(what: HandlerSpec | ModelFolder, export_path: Path, archive_name: str, fmt: str, report: Progress) -> None:
    if isinstance(what, ModelFolder):
        report(f"packing {fmt} archive", 0.6)
        _pack(what, export_path, archive_name, fmt)
        return
    with tempfile.TemporaryDirectory(prefix="msnb-stage-") as tmp:
        report("staging model directory", 0.4)
        folder = ModelFolder.stage(what, Path(tmp) / "model", temporary=True)
        report(f"packing {fmt} archive", 0.6)
        _pack(folder, export_path, archive_name, fmt)


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
    # The archiver names its output after the name it is given: pack under a hidden partial name in
    # the same folder and rename, so a failed build never leaves a half-written .mar behind.
    partial = f".{archive_name}.partial"
    try:
        ModelExportUtils.archive(str(export_path), partial, staged, manifest, FORMATS[fmt].archiver)
        os.replace(export_path / f"{partial}.mar", export_path / f"{archive_name}.mar")
    except BaseException:
        (export_path / f"{partial}.mar").unlink(missing_ok=True)
        raise


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
