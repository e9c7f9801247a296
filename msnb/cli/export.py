"""`msnb export`: a notebook's handlers captured (from the file, or from a fresh kernel that ran it) and handed to
the export pipeline (``msnb.session.export``: archives in OUTDIR, a KServe or a Ray Serve layout); the result table."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path

from msnb.capture import named_files
from msnb.capture.kernel_values import human
from msnb.capture.notebook import Captured, load_handlers
from msnb.cli.execute import ALL, DEFAULT_TIMEOUT_S, NEEDED, executed_specs, saved_by_msnb, select
from msnb.engines import registry
from msnb.engines.models import Limits
from msnb.errors import BuildError, OptionError
from msnb.package import archive, formats
from msnb.session.export import Report, Targets, export

__all__ = [
    "Report",
    "export_archives",
    "export_notebook",
    "format_table",
    "is_archive",
    "print_ray_folder",
]


def export_notebook(
    notebook: str | Path,
    outdir: str | Path | None = formats.DEFAULT_EXPORT,
    *,
    handlers: Iterable[str] | None = None,
    fmt: str = formats.EXPORT_FORMAT,
    check: bool = False,
    kserve: str | Path | None = None,
    overrides: dict | None = None,
    limits: Limits | None = None,
    execute: bool | str = False,
    timeout: int = DEFAULT_TIMEOUT_S,
    ray: str | Path | None = None,
    ray_host: str | None = None,
    ray_port: int | None = None,
    ray_sizing=None,
    allow_files: Iterable[str | Path] = (),
) -> Report:
    """Capture the notebook's handlers (from the file, or with ``execute`` from a fresh kernel that ran the cells they
    need, ``"all"``: every cell, ``timeout`` s per cell) and write one archive each; a failing one is reported.
    ``check`` runs each handler on its ``--example`` first; without it no user code runs (``check_imports``).
    ``kserve`` (DIR/model-store + DIR/config with ``limits``) and ``ray`` (the registry's Ray layout, HTTP on
    ``ray_host``:``ray_port``, replicas sized by ``ray_sizing``) are written only when every handler succeeded."""
    _refuse_early(fmt, kserve, ray)
    targets = [Path(t) for t in (outdir, kserve, ray) if t is not None]
    created: list[Path] = []
    try:
        created += [t for t in targets if archive.ensure_writable(t)]
        with ExitStack() as stack:
            items, ran = _captured(notebook, handlers, overrides, (execute, timeout, allow_files), stack)
            paths = (None if t is None else Path(t) for t in (outdir, kserve, ray))
            where = Targets(*paths, limits, ray_host, ray_port, ray_sizing)
            report = export(items, where, fmt, check)
        report.executed = ran
    finally:
        for folder in created:  # nothing written there: leave no empty folder behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return report


def _refuse_early(fmt: str, kserve, ray) -> None:
    """What export refuses before it reads the notebook or writes anything."""
    if ray is not None:
        registry.ray_serve().require()
    if fmt not in formats.FORMATS:
        raise BuildError(f"Unknown format {fmt!r}.", f"use one of {', '.join(formats.FORMATS)}.")
    if kserve is not None and fmt == formats.SERVE_FORMAT:
        raise BuildError("--kserve needs archives, not --format no-archive.", "use --format mar (or zip-store).")


def _captured(notebook, handlers, overrides, how: tuple, stack: ExitStack) -> tuple[list[Captured], str | None]:
    """Each handler captured from the file, or (``execute``) from a fresh kernel that ran the notebook's cells they
    need (``execute="all"``: every cell), and which cells ran, in words; ``how`` is (execute, timeout, allow_files)."""
    execute, timeout, allow_files = how
    if not execute:
        return _own_files_only(load_handlers(notebook, handlers, overrides), notebook, allow_files), None
    cells = ALL if execute == ALL else NEEDED
    kernel_specs, ran = stack.enter_context(executed_specs(notebook, timeout, cells, handlers))
    specs = select(kernel_specs, handlers, notebook)
    items = [Captured(None, spec=s.replace(**overrides) if overrides else s) for s in specs]
    handoff = [folder for s in specs if (folder := saved_by_msnb(s)) is not None]  # live checkpoints msnb saved
    return _own_files_only(items, notebook, [*allow_files, *handoff]), ran


def _own_files_only(items: list[Captured], notebook, allow_files: Iterable) -> list[Captured]:
    """Each item, or its refusal when its notebook names a file outside its folder and the ``allow_files`` ones (or
    one holding a secret): ``named_files``."""
    allowed, kept = [Path(a) for a in allow_files], []
    for item in items:
        line = item.cell.line if item.cell else None
        error = named_files.refusal(item.spec, line, Path(notebook), allowed) if item.spec else None
        kept.append(item if error is None else Captured(item.cell, spec=item.spec, error=error))
    return kept


def format_table(report: Report) -> str:
    """The result table: name, version, file, size, handler (roles or own entry), pulled-in definitions, bundled
    local modules."""
    rows = [("name", "version", "file", "size", "handler", "pulled in", "bundled")]
    for item in report.exported:
        pulled = ", ".join(f"{', '.join(b.names) or 'code'} ({b.origin.short})" for b in item.spec.pulled_in)
        rows.append(
            (
                item.spec.name,
                item.spec.version,
                str(item.path),
                human(item.size),
                item.spec.handled_by,
                pulled or "-",
                ", ".join(item.spec.bundled) or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines) if report.exported else "no archive written"


def is_archive(path: Path) -> bool:
    """Whether ``path`` names an archive (or a folder of them), not a notebook."""
    return path.is_dir() or path.name.endswith((".mar", ".tar.gz", ".tgz"))


def export_archives(
    find,
    paths: list[str],
    ray: str | None,
    host: str | None,
    kserve_python: str | None = None,
    port: int | None = None,
    sizing=None,
) -> int:
    """`msnb export A.mar B.mar --ray OUT` (and/or `--kserve-python OUT`): archives torch-model-archiver made as a Ray
    Serve application (HTTP on ``host``:``port``, replicas sized by ``sizing``), or as KServe's Python model server's
    folder (``find``: `msnb serve`'s archive finder). Returns the exit code."""
    if not (ray or kserve_python) or not all(is_archive(Path(p)) for p in paths):
        raise OptionError(
            "msnb export takes one notebook, or archives with --ray OUT or --kserve-python OUT.",
            "export a notebook: `msnb export nb.ipynb -o store/`; archives: `msnb export A.mar B.mar --ray OUT`.",
        )
    if ray:
        from msnb.session.export import write_ray_archives

        print_ray_folder(write_ray_archives(find(paths), Path(ray), host, port, sizing))
    if kserve_python:
        from msnb.engines.kserve.python_layout import PREDICTOR
        from msnb.session.export import write_kserve_python

        out = write_kserve_python(find(paths), Path(kserve_python))
        print(f"KServe Python server folder: {out.resolve()} (from there: python {PREDICTOR})")
    return 0


def print_ray_folder(out: Path) -> None:
    """Where the Ray Serve folder went, what it needs of a cluster and the steps that run it (key included)."""
    print(f"Ray Serve folder: {out.resolve()}")
    print(registry.ray_serve().layout().summary(out.resolve()))
