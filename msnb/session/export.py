"""`msnb export`'s pipeline over captured handlers: each one's model folder staged once, checked (its example run in a
test process, or its imports read without running it), packed into OUTDIR; the KServe and Ray Serve layouts are laid
out from the same folders (``msnb.engines.kserve``; Ray's through the registry, ``EngineKind.layout``), and archives
torch-model-archiver made laid out for Ray Serve or KServe's Python server."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from msnb.capture.notebook import Captured
from msnb.engines import registry
from msnb.engines.kserve import KSERVE_STORE_DIR
from msnb.engines.kserve import layout as kserve_layout
from msnb.engines.models import Limits
from msnb.errors import MsnbError
from msnb.files import link_or_copy, move_into, write_error
from msnb.package import archive, formats
from msnb.package.import_check import check_imports
from msnb.package.model_folder import ModelFolder, Packable, open_all, spec_of
from msnb.spec import HandlerSpec
from msnb.trial import runner


@dataclass(frozen=True)
class Exported:
    """One archive written: the table row `msnb export` prints."""

    spec: HandlerSpec
    path: Path

    @property
    def size(self) -> int:
        if self.path.is_dir():
            return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        return self.path.stat().st_size


@dataclass
class Report:
    """What an export did: archives written, handlers that failed (name -> error), the KServe dir."""

    exported: list[Exported] = field(default_factory=list)
    failed: dict[str, MsnbError] = field(default_factory=dict)
    kserve: Path | None = None
    ray: Path | None = None  # the `--ray` folder, when written
    checked: dict = field(default_factory=dict)  # name -> the example's answer when --check ran it
    warnings: list[str] = field(default_factory=list)  # about the export as a whole (e.g. the KServe config)
    executed: str | None = None  # with --execute: which cells ran in the fresh kernel, in words

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True)
class Targets:
    """Where an export writes: OUTDIR (-o), the KServe root (with its ``limits``), the Ray Serve folder (HTTP on
    ``ray_host``); None: not written."""

    outdir: Path | None = None
    kserve: Path | None = None
    ray: Path | None = None
    limits: Limits | None = None
    ray_host: str | None = None
    ray_port: int | None = None
    ray_sizing: object = None  # what each replica asks for (the Ray layout's ``sizing``)


def export(items: list[Captured], targets: Targets, fmt: str, check: bool) -> Report:
    """Stage, check and pack each captured handler (a failing one is reported and skipped); the KServe and Ray
    layouts are written only when every handler succeeded."""
    report = Report()
    folders = _checked(items, check, report)
    if targets.outdir is not None:
        _write_all(folders, targets.outdir, fmt, report)
    if targets.kserve is not None and folders and not report.failed:
        _write_kserve_into(
            folders, targets.kserve, fmt, report, also_listed=targets.outdir is None, limits=targets.limits
        )
    if targets.ray is not None and folders and not report.failed:
        _write_ray_into(folders, targets, report)
    return report


def _checked(items: list[Captured], check: bool, report: Report) -> list[ModelFolder]:
    """Each handler's staged model folder, run on its example (``check``) or with its imports read."""
    folders = []
    for item in items:
        if item.error is not None:
            report.failed[item.name] = item.error
            continue
        try:
            if not check:
                check_imports(item.spec)
            folder = runner.folder_of(item.spec)
            if check:
                report.checked[item.name] = run_check(folder)
            folders.append(folder)
        except MsnbError as err:
            report.failed[item.name] = err
    return folders


def run_check(folder: Packable):
    """Load the handler in its test process and answer its example (or only load it when it has none)."""
    example = spec_of(folder).example
    if example is None:
        runner.validate(folder)
        return None
    return runner.predict_in_process(folder, [example])[0]


def _write_all(folders: list[ModelFolder], outdir: Path, fmt: str, report: Report) -> None:
    for folder in folders:
        try:
            report.exported.append(Exported(folder.spec, write_archive(folder, outdir, fmt)))
        except MsnbError as err:
            report.failed[folder.name] = err


def write_archive(folder: Packable, outdir: Path, fmt: str) -> Path:
    """Pack in a hidden staging folder inside ``outdir``, then move the result into place.

    A failure (or Ctrl-C) removes the staging folder, so OUTDIR never holds a partial archive.
    """
    staging = Path(tempfile.mkdtemp(prefix=f".msnb-{folder.name}-", dir=outdir))
    try:
        return move_into(archive.pack_or_build(folder, staging, fmt), outdir)
    except OSError as err:
        raise write_error(outdir, err) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_kserve_into(
    folders: list[ModelFolder], root: Path, fmt: str, report: Report, also_listed: bool, limits: Limits | None
) -> None:
    try:
        built = {e.spec.name: e.path for e in report.exported}  # the -o copy, linked (or copied), not built again
        report.kserve = write_kserve(folders, root, fmt, built=built, limits=limits)
    except MsnbError as err:
        report.failed["--kserve"] = err
        return
    report.warnings += kserve_layout.warnings_for([f.spec for f in folders])
    if also_listed:
        report.exported += [Exported(f.spec, root / KSERVE_STORE_DIR / f"{f.name}.mar") for f in folders]


def write_kserve(
    items: list[Packable],
    root: Path,
    fmt: str = formats.EXPORT_FORMAT,
    built: dict[str, Path] | None = None,
    limits: Limits | None = None,
) -> Path:
    """KServe's TorchServe layout of ``items`` (``msnb.engines.kserve.layout``), each archive packed here (one already
    ``built``, name -> .mar, linked or copied)."""
    return kserve_layout.write_kserve([spec_of(i) for i in items], root, packer(items, fmt, built), limits=limits)


def packer(items: list[Packable], fmt: str, built: dict[str, Path] | None = None):
    """A layout's ``pack``: each item's archive written into the staging folder it is given (one already ``built``,
    name -> .mar, linked or copied there)."""

    def pack(staging: Path) -> list[Path]:
        done = built or {}
        return [
            _reuse(done[i.name], staging) if i.name in done else archive.pack_or_build(i, staging, fmt) for i in items
        ]

    return pack


def _reuse(path: Path, staging: Path) -> Path:
    link_or_copy(path, staging / path.name)
    return staging / path.name


def _write_ray_into(folders: list[ModelFolder], targets: Targets, report: Report) -> None:
    try:
        report.ray = write_ray(folders, targets.ray, targets.ray_host, targets.ray_port, targets.ray_sizing)
    except MsnbError as err:
        report.failed["--ray"] = err


def write_ray(items: list[Packable], outdir: Path, host=None, port=None, sizing=None) -> Path:
    """The Ray Serve folder of ``items`` (staged folders, or specs staged to be): the registry's Ray layout, each model
    folder laid out by ``archive.pack_or_build``."""

    def stage(staging: Path) -> dict[str, str]:
        for item in items:
            archive.pack_or_build(item, staging, formats.SERVE_FORMAT)
        return {i.name: i.version for i in items}

    return registry.ray_serve().layout().write(outdir, stage, host, port, sizing)


def write_ray_archives(paths: list[Path], outdir: Path, host=None, port=None, sizing=None) -> Path:
    """``msnb export A.mar B.mar --ray OUT``: archives torch-model-archiver made, each opened as ``msnb serve --engine
    ray`` opens it (checked, unpacked safely) into OUTDIR/<name>/; its requirements are installed where it runs (the
    application's ``runtime_env``), not checked against this environment."""

    def stage(staging: Path) -> dict[str, str]:
        return {f.name: f.version for f in open_all(paths, staging)}

    return registry.ray_serve().layout().write(outdir, stage, host, port, sizing)


def write_kserve_python(paths: list[Path], outdir: Path) -> Path:
    """``msnb export A.mar B.mar --kserve-python OUT``: each archive opened into OUT/<name>/, its own requirements
    beside the predictor's (``msnb.engines.kserve.python_layout``)."""
    from msnb.engines.kserve.python_layout import write_kserve_python as write

    return write(outdir, lambda staging: [line for f in open_all(paths, staging) for line in f.declared_requirements()])
