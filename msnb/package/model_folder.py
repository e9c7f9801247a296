"""The model folder: a staged TorchServe model directory (handler, shared runtime, files, model-config.yaml), the one
hand-off between the front half (capture, package) and the back half (trial, archive, engines, exports).

A build stages it once (``staged``); ``%ms_test`` runs that folder (through a copy made of links: what a test process
writes there, as a worker unpacking its extra files, never reaches it), ``%ms_build`` packs it (``archive.pack``), every
engine deploys it (laid out as private copies, its version and requirements told by ``relabel``: msnb.session.deployment)
and the exports lay it out. An archive that torch-model-archiver made (a .mar, a tgz, a
no-archive folder: not msnb's) enters at the same point: ``ModelFolder.open``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path

from msnb.engines.store import check_identity, safe_name
from msnb.errors import MsnbError, ServerError
from msnb.files import clone_tree, disk_error, link_or_copy, mirrored
from msnb.package import api_card, mar_checks, staging
from msnb.package.mar_requirements import read_lines, to_install
from msnb.package.render import HANDLER_MODULE, with_version
from msnb.spec import HandlerSpec
from msnb.templates.msnb_runtime.handler.names import MANIFEST, REQUIREMENTS

ARCHIVE_HINT = mar_checks.ARCHIVE_HINT
checkpoint_name = staging.checkpoint_name  # the serializedFile's name for a spec
STAGED_PREFIX = "msnb-folder-"  # a staged folder's temporary directory in $TMPDIR
_LOCK = threading.Lock()
_STAGED: dict[str, ModelFolder] = {}  # name -> its latest generation's folder


@dataclass(frozen=True)
class ModelFolder:
    """A model directory as TorchServe unpacks one: where it is, the model's name and version, where it came from."""

    path: Path
    name: str
    version: str
    spec: HandlerSpec | None = None  # what msnb staged it from (None: an archive made elsewhere)
    source: Path | None = None  # the archive it was opened from
    requirements: tuple[str, ...] = ()  # an opened archive's requirements this environment lacks
    generation: str = ""  # what makes a test of it stale (``generation``)
    lease: _Lease | None = field(default=None, compare=False, repr=False)  # keeps a staged temporary folder

    @classmethod
    def stage(cls, spec: HandlerSpec, path: Path, *, temporary: bool = False) -> ModelFolder:
        """``spec`` written into ``path`` exactly as TorchServe will unpack it (the manifest is written when packed).

        Checkpoint and extra files are private copies (a copy-on-write clone where the filesystem has them): a
        model dir that is served never changes when the notebook re-saves its files. A ``temporary`` folder (packed
        into a zip, which copies them, or tested) links them instead.
        """
        staging.write(spec, Path(path), temporary=temporary)
        return cls(Path(path), spec.name, spec.version, spec=spec, generation=generation(spec))

    @classmethod
    def open(
        cls, path: Path, store: Path, taken: set[str] = frozenset(), check_requirements: bool = True
    ) -> ModelFolder:
        """``path`` unpacked (or copied) into ``store``/NAME-VERSION and checked (its requirements against this
        environment unless ``check_requirements`` is False); a ServerError with a Hint otherwise, and then nothing of
        it is left in ``store``."""
        store.mkdir(parents=True, exist_ok=True)
        incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=store))
        try:
            root = mar_checks.unpacked(Path(path), incoming)
            model = mar_checks.manifest(path, root)["model"]
            name, version = model["modelName"], str(model.get("modelVersion") or "1.0")
            check_identity(name, version)
            if name in taken:
                raise ServerError(
                    f"{path}: another archive already has the model name {name!r}.",
                    "each archive needs its own model name: rebuild one with torch-model-archiver --model-name OTHER.",
                )
            mar_checks.check_files(path, root, model)
            requirements = to_install(path, root, model.get("requirementsFile")) if check_requirements else ()
            folder = store / safe_name(name, version)
            shutil.rmtree(folder, ignore_errors=True)
            root.rename(folder)
            return cls(folder, name, version, source=Path(path), requirements=requirements)
        finally:
            shutil.rmtree(incoming, ignore_errors=True)

    @property
    def checkpoint(self) -> str | None:
        """The serialized file's name (the manifest's serializedFile), when the folder has one."""
        name = staging.checkpoint_name(self.spec) if self.spec is not None else None
        return name if name is not None and (self.path / name).exists() else None

    @property
    def requirements_file(self) -> str | None:
        return REQUIREMENTS if (self.path / REQUIREMENTS).is_file() else None

    def declared_requirements(self) -> list[str]:
        """The requirement lines its manifest's requirementsFile names (none named: none)."""
        named = (json.loads((self.path / MANIFEST).read_text()).get("model") or {}).get("requirementsFile")
        return read_lines(self.source or self.path, self.path, named) if named else []

    def copied(self, dest: Path) -> ModelFolder:
        """This folder at ``dest`` made of private copies (clones where the filesystem has them): what is served
        there never changes when the notebook re-saves a file, and may be rewritten (``relabel``)."""
        clone_tree(self.path, Path(dest))
        return replace(self, path=Path(dest))

    def linked(self, dest: Path) -> ModelFolder:
        """This folder at ``dest`` made of links to its files (a hard link where it can, else a symlink)."""
        for source, place in mirrored(self.path, dest):
            link_or_copy(source, place, symlink_ok=True)
        return replace(self, path=Path(dest))


Packable = HandlerSpec | ModelFolder  # a staged folder, or a spec whose folder is staged to pack it


def spec_of(item: Packable) -> HandlerSpec:
    return item.spec if isinstance(item, ModelFolder) else item


def open_all(paths: list[Path], into: Path) -> list[ModelFolder]:
    """Archives torch-model-archiver made, each opened as `msnb serve` opens it (checked, unpacked safely) into
    INTO/<name>/, for an export of them (``msnb export A.mar --ray`` or ``--kserve-python``): their requirements are
    installed where the export runs, not checked against this environment."""
    opened: list[ModelFolder] = []
    for path in paths:
        item = ModelFolder.open(path, into / ".opened", {o.name for o in opened}, check_requirements=False)
        item.path.rename(into / item.name)
        opened.append(replace(item, path=into / item.name))
    shutil.rmtree(into / ".opened", ignore_errors=True)
    return opened


def relabel(folder: ModelFolder, version: str, requirements: tuple[str, ...]) -> ModelFolder:
    """A private copy of a staged folder (its files are rewritten in place) as an engine serves it: as ``version``
    (the handler's provenance line, a card's description that names it; the manifest is written when it is laid out)
    and installing only ``requirements``, those of its own the server lacks. Nothing else of it changes: the engine
    serves the folder the test ran and the build packs."""
    spec = folder.spec
    if spec is None:
        raise ValueError(f"{folder.path} was not staged by msnb: it is served as it is")
    if version != folder.version:
        handler = folder.path / f"{HANDLER_MODULE}.py"
        handler.write_text(with_version(handler.read_text(), version))
        api_card.relabel(folder.path, folder.name, folder.version, version)
    if tuple(requirements) != spec.requirements:
        staging.write_requirements(spec, folder.path, tuple(requirements))
    return replace(folder, version=version, spec=spec.replace(version=version, requirements=tuple(requirements)))


def generation(spec: HandlerSpec) -> str:
    """What makes a staged folder stale: the spec's digest and the files it stages beside the checkpoint."""
    stamps = []
    for extra in spec.extra_files:
        try:
            st = Path(extra).stat()
            stamps.append(f"{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            stamps.append("missing")
    return spec.digest() + "|" + "|".join(stamps)


def staged(spec: HandlerSpec) -> ModelFolder:
    """The temporary folder of this very ``spec`` and generation of its files, staged once (anew when either
    changed): the folder a test runs and a build packs. An OSError (a full or read-only $TMPDIR) leaves nothing.

    Each generation is staged into a folder of its own, and an older one is removed only once nothing holds it: a
    thread that packs or tests one generation keeps it while another stages the next one of the same name."""
    key = generation(spec)
    with _LOCK:
        held = _STAGED.get(spec.name)
        if held is not None and held.spec is spec and held.generation == key and held.path.is_dir():
            return held
        lease = _Lease(Path(tempfile.mkdtemp(prefix=STAGED_PREFIX)))
        try:
            folder = ModelFolder.stage(spec, lease.root / "model", temporary=True)
        except BaseException:
            lease.release()
            raise
        _STAGED[spec.name] = folder = replace(folder, lease=lease)
        return folder


def staged_or(spec: HandlerSpec, error: type[MsnbError]) -> ModelFolder:
    """``staged(spec)``; a full or read-only $TMPDIR is ``error`` (the caller's kind), with the disk's hint."""
    try:
        return staged(spec)
    except OSError as err:
        raise disk_error(Path(tempfile.gettempdir()) / f"{STAGED_PREFIX}{spec.name}", err, error) from None


class _Lease:
    """A staged folder's temporary directory: removed when the last ModelFolder that holds it is gone (CPython frees
    it then), at exit, or by ``forget``."""

    def __init__(self, root: Path):
        self.root = root
        self.release = weakref.finalize(self, shutil.rmtree, root, ignore_errors=True)


def forget(name: str | None = None) -> None:
    """Remove the staged folder of ``name`` (every one by default)."""
    with _LOCK:
        for key in list(_STAGED) if name is None else [name]:
            held = _STAGED.pop(key, None)
            if held is not None and held.lease is not None:
                held.lease.release()
