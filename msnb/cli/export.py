"""`msnb export`: a notebook's handlers become archives in OUTDIR and/or a KServe TorchServe layout."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from msnb.capture import named_files
from msnb.capture.kernel_values import human
from msnb.capture.notebook import Captured, load_handlers
from msnb.cli.execute import DEFAULT_TIMEOUT_S, executed_specs, saved_by_msnb, select
from msnb.engines.ray import require as require_ray
from msnb.engines.torchserve.config import (
    KSERVE_CONFIG_DIR,
    KSERVE_MODEL_STORE,
    KSERVE_MOUNT,
    KSERVE_STORE_DIR,
    Limits,
    kserve_properties,
    render_properties,
)
from msnb.errors import BuildError, MsnbError, OptionError
from msnb.files import DISK_ERRNOS, disk_error, link_or_copy, move_into
from msnb.package import archive, formats
from msnb.package.import_check import check_imports
from msnb.spec import HandlerSpec
from msnb.templates.msnb_serving import FRONTEND_KEYS
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

    @property
    def ok(self) -> bool:
        return not self.failed


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
    execute: bool = False,
    timeout: int = DEFAULT_TIMEOUT_S,
    ray: str | Path | None = None,
    ray_host: str | None = None,
    allow_files: Iterable[str | Path] = (),
) -> Report:
    """Capture the notebook's handlers (from the file, or with ``execute`` from a fresh kernel run with ``timeout``
    s per cell) and write one archive each; a failing handler is reported and skipped.

    ``check`` runs each handler on its ``--example`` first; without it no user code runs and ``check_imports``
    refuses imports the archive would not satisfy. ``kserve`` (DIR/model-store + DIR/config with ``limits``) and
    ``ray`` (msnb.package.ray_layout, HTTP on ``ray_host``) are written only when every handler succeeded.
    """
    _refuse_early(fmt, kserve, ray)
    targets = [Path(t) for t in (outdir, kserve, ray) if t is not None]
    created: list[Path] = []
    report = Report()
    try:
        created += [t for t in targets if archive.ensure_writable(t)]
        with ExitStack() as stack:
            items = _captured(notebook, handlers, overrides, (execute, timeout, allow_files), stack)
            specs = _checked(items, check, report)
            _write(specs, outdir, kserve, fmt, report, limits)
            if ray is not None and specs and not report.failed:
                _write_ray_into(specs, Path(ray), ray_host, report)
    finally:
        for folder in created:  # nothing written there: leave no empty folder behind
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return report


def _refuse_early(fmt: str, kserve, ray) -> None:
    """What export refuses before it reads the notebook or writes anything."""
    if ray is not None:
        require_ray()
    if fmt not in formats.FORMATS:
        raise BuildError(f"Unknown format {fmt!r}.", f"use one of {', '.join(formats.FORMATS)}.")
    if kserve is not None and fmt == formats.SERVE_FORMAT:
        raise BuildError("--kserve needs archives, not --format no-archive.", "use --format mar (or zip-store).")


def _captured(notebook, handlers, overrides, how: tuple, stack: ExitStack) -> list[Captured]:
    """Each handler captured from the file, or (``execute``) from a fresh kernel that ran the notebook; ``how`` is
    (execute, timeout, allow_files)."""
    execute, timeout, allow_files = how
    if not execute:
        return _own_files_only(load_handlers(notebook, handlers, overrides), notebook, allow_files)
    specs = select(stack.enter_context(executed_specs(notebook, timeout)), handlers, notebook)
    items = [Captured(None, spec=s.replace(**overrides) if overrides else s) for s in specs]
    handoff = [folder for s in specs if (folder := saved_by_msnb(s)) is not None]  # live checkpoints msnb saved
    return _own_files_only(items, notebook, [*allow_files, *handoff])


def _own_files_only(items: list[Captured], notebook, allow_files: Iterable) -> list[Captured]:
    """Each item, or its refusal when its notebook names a file outside its folder and the ``allow_files`` ones (or
    one holding a secret): ``named_files``."""
    allowed, kept = [Path(a) for a in allow_files], []
    for item in items:
        line = item.cell.line if item.cell else None
        error = named_files.refusal(item.spec, line, Path(notebook), allowed) if item.spec else None
        kept.append(item if error is None else Captured(item.cell, spec=item.spec, error=error))
    return kept


def _write(specs: list[HandlerSpec], outdir, kserve, fmt: str, report: Report, limits: Limits | None) -> None:
    if outdir is not None:
        _write_all(specs, Path(outdir), fmt, report)
    if kserve is not None and specs and not report.failed:
        _write_kserve_into(specs, Path(kserve), fmt, report, also_listed=outdir is None, limits=limits)


def _write_kserve_into(
    specs: list[HandlerSpec], root: Path, fmt: str, report: Report, also_listed: bool, limits: Limits | None
) -> None:
    try:
        built = {e.spec.name: e.path for e in report.exported}
        report.kserve = write_kserve(specs, root, fmt, built=built, limits=limits)
    except MsnbError as err:
        report.failed["--kserve"] = err
        return
    report.warnings += [f"{s.name}: {KSERVE_BATCH_NOTE.format(n=s.batch_size)}" for s in specs if s.batch_size > 1]
    report.warnings += [f"{s.name}: {v2_note(s.example)}" for s in specs if not is_tensor(s.example)]
    if also_listed:
        report.exported += [Exported(s, root / KSERVE_STORE_DIR / f"{s.name}.mar") for s in specs]


def _write_ray_into(specs: list[HandlerSpec], root: Path, host: str | None, report: Report) -> None:
    from msnb.package.ray_layout import DEFAULT_HOST, write_ray

    try:
        report.ray = write_ray(specs, root, host or DEFAULT_HOST)
    except MsnbError as err:
        report.failed["--ray"] = err


def _checked(items: list[Captured], check: bool, report: Report) -> list[HandlerSpec]:
    specs = []
    for item in items:
        if item.error is not None:
            report.failed[item.name] = item.error
            continue
        try:
            if check:
                report.checked[item.name] = run_check(item.spec)
            else:
                check_imports(item.spec)
            specs.append(item.spec)
        except MsnbError as err:
            report.failed[item.name] = err
    return specs


def _write_all(specs: list[HandlerSpec], outdir: Path, fmt: str, report: Report) -> None:
    for spec in specs:
        try:
            report.exported.append(Exported(spec, write_archive(spec, outdir, fmt)))
        except MsnbError as err:
            report.failed[spec.name] = err


def run_check(spec: HandlerSpec):
    """Load the handler in-process and answer its example (or only load it when it has none)."""
    if spec.example is None:
        runner.validate(spec)
        return None
    return runner.predict_in_process(spec, [spec.example])[0]


def write_archive(spec: HandlerSpec, outdir: Path, fmt: str) -> Path:
    """Build in a hidden staging folder inside ``outdir``, then move the result into place.

    A failure (or Ctrl-C) removes the staging folder, so OUTDIR never holds a partial archive.
    """
    staging = Path(tempfile.mkdtemp(prefix=f".msnb-{spec.name}-", dir=outdir))
    try:
        return move_into(archive.build(spec, staging, fmt=fmt), outdir)
    except OSError as err:
        raise _write_error(outdir, err) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_kserve(
    specs: list[HandlerSpec],
    root: Path,
    fmt: str = formats.EXPORT_FORMAT,
    built: dict[str, Path] | None = None,
    limits: Limits | None = None,
) -> Path:
    """KServe's TorchServe layout: ROOT/model-store/<name>.mar and ROOT/config/config.properties.

    Everything is built in a hidden staging folder first and moved into place only when all
    archives built, so a failure leaves ROOT as it was. An archive already ``built`` (name -> .mar,
    the -o copy) is linked (or copied), not built again.
    """
    _refuse_streaming(specs)
    root.mkdir(parents=True, exist_ok=True)
    for sub in (KSERVE_STORE_DIR, KSERVE_CONFIG_DIR):
        if (root / sub).exists() and not (root / sub).is_dir():
            raise _write_error(root, NotADirectoryError(f"{sub} is a file, not a folder"))
    staging = Path(tempfile.mkdtemp(prefix=".msnb-kserve-", dir=root))
    try:
        archives = [
            _reuse(built[spec.name], staging) if spec.name in (built or {}) else archive.build(spec, staging, fmt=fmt)
            for spec in specs
        ]
        (staging / "config.properties").write_text(kserve_config(specs, limits=limits))
        (root / KSERVE_STORE_DIR).mkdir(exist_ok=True)
        (root / KSERVE_CONFIG_DIR).mkdir(exist_ok=True)
        for path in archives:
            move_into(path, root / KSERVE_STORE_DIR)
        move_into(staging / "config.properties", root / KSERVE_CONFIG_DIR)
        return root
    except OSError as err:
        raise _write_error(root, err) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refuse_streaming(specs: list[HandlerSpec]) -> None:
    """KServe's v1 and v2 protocols answer a request with one JSON document (``predictions`` / ``outputs``), which
    TorchServe's KServe envelopes build from the handler's whole return value: no stream can travel in them."""
    streaming = [
        f"{s.name} ({' and '.join(s.streaming)} yield{'s' if len(s.streaming) == 1 else ''})"
        for s in specs
        if s.streaming
    ]
    if streaming:
        raise BuildError(
            f"--kserve cannot carry streamed answers: {', '.join(streaming)}. KServe's v1/v2 protocols answer each "
            "request with one JSON document (predictions / outputs), built from the handler's whole answer.",
            "serve a streaming handler on TorchServe's own inference API (msnb export -o DIR, then msnb serve DIR) or "
            "on Ray Serve (--ray); for KServe, export a variant whose inference and postprocess return instead of "
            "yield.",
        )


# KServe's envelopes (kserve for v1, kservev2 for v2) in TorchServe 0.12 read only the first request of a
# batch and answer it alone: a batch of two requests fails both with 503 "number of batch response
# mismatched" (measured). A KServe request batches its own instances; across requests batchSize must be 1.
KSERVE_BATCH_NOTE = (
    "--batch-size {n} is set to 1 in the KServe config: TorchServe's KServe envelopes answer only "
    "the first request of a batch (503 for all of them otherwise). The instances of one "
    "KServe request still share one forward pass."
)


def is_tensor(example: Any) -> bool:
    """True when ``example`` can be sent as one KServe v2 tensor: a number or a regular nested list of them
    (None, no example, counts as fine: there is nothing to warn about)."""
    if example is None:
        return True
    if isinstance(example, str) or not isinstance(example, (bool, int, float, list)):
        return False
    try:
        torch.tensor(example)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return False
    return True


def v2_note(example: Any) -> str:
    """What to send over KServe v2 for an --example that is not a tensor (the shared handler decodes it)."""
    kind = {dict: "object", list: "array", str: "string"}.get(type(example), type(example).__name__)
    text = json.dumps(example if isinstance(example, str) else json.dumps(example))
    shown = text if len(text) <= 60 else text[:56] + '..."'
    return (
        f"its --example (a JSON {kind}) is not a tensor, which KServe v2 (protocolVersion: v2) sends. Send it "
        f'as a BYTES input holding its JSON text: {{"inputs": [{{"name": "input-0", "shape": [1], "datatype": '
        f'"BYTES", "data": [{shown}]}}]}}; the shared handler decodes it. v1 takes it as it is.'
    )


def _reuse(path: Path, staging: Path) -> Path:
    link_or_copy(path, staging / path.name)
    return staging / path.name


def _write_error(folder: Path, err: OSError) -> BuildError:
    if err.errno in DISK_ERRNOS:  # full disk, read-only, no permission: free space or choose another folder
        return disk_error(folder, err)
    return BuildError(
        f"Cannot write into {str(folder.resolve())!r}: {err}.",
        "check what is already there (a file where a folder goes, or the reverse) and its permissions.",
    )


def kserve_config(specs: list[HandlerSpec], model_store: str = KSERVE_MODEL_STORE, limits: Limits | None = None) -> str:
    """config.properties for KServe's TorchServe runtime (see ``kserve_properties``); every batchSize is 1
    (see KSERVE_BATCH_NOTE)."""
    models = {
        spec.name: {spec.version: {"defaultVersion": True, "marName": f"{spec.name}.mar", **_snapshot(spec)}}
        for spec in specs
    }
    where = f"{KSERVE_MOUNT}/{KSERVE_CONFIG_DIR}/"
    header = f"# Written by `msnb export --kserve`: KServe's TorchServe runtime reads it from {where}.\n" + SECRETS_NOTE
    return render_properties(kserve_properties(models, model_store, limits), header)


def _snapshot(spec: HandlerSpec) -> dict:
    cfg = spec.model_config()
    return {k: cfg[k] for k in FRONTEND_KEYS if k != "deviceType"} | {"batchSize": 1}


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


# Where a served model's key comes from on KServe: never this folder (msnb refuses secrets in archives; docs/hardening.md).
SECRETS_NOTE = (
    '# A handler reads a key from its environment (os.environ["OPENAI_API_KEY"]); on KServe it comes from a Kubernetes\n'
    "# Secret: the InferenceService's spec.predictor.model.env: [{name: OPENAI_API_KEY, valueFrom: {secretKeyRef:\n"
    "# {name: SECRET, key: KEY}}}]. Never put it in this folder.\n"
)
__all__ = ["Captured", "Exported", "Report", "export_notebook", "format_table", "kserve_config", "write_kserve"]


def is_archive(path: Path) -> bool:
    """Whether ``path`` names an archive (or a folder of them), not a notebook."""
    return path.is_dir() or path.name.endswith((".mar", ".tar.gz", ".tgz"))


def export_archives(find, paths: list[str], ray: str | None, host: str | None, kserve_python: str | None = None) -> int:
    """`msnb export A.mar B.mar --ray OUT` (and/or `--kserve-python OUT`): archives torch-model-archiver made as a Ray
    Serve application, or as KServe's Python model server's folder (``find``: `msnb serve`'s archive finder). Returns
    the exit code."""
    if not (ray or kserve_python) or not all(is_archive(Path(p)) for p in paths):
        raise OptionError(
            "msnb export takes one notebook, or archives with --ray OUT or --kserve-python OUT.",
            "export a notebook: `msnb export nb.ipynb -o store/`; archives: `msnb export A.mar B.mar --ray OUT`.",
        )
    if ray:
        from msnb.package.ray_layout import DEFAULT_HOST, write_ray_archives

        out = write_ray_archives(find(paths), Path(ray), host or DEFAULT_HOST)
        print(f"Ray Serve folder: {out.resolve()} (from there: serve run serve_config.yaml)")
    if kserve_python:
        from msnb.package.kserve_python_layout import PREDICTOR, write_kserve_python

        out = write_kserve_python(find(paths), Path(kserve_python))
        print(f"KServe Python server folder: {out.resolve()} (from there: python {PREDICTOR})")
    return 0
