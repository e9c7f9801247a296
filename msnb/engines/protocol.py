"""``Engine``: what the session, the widget and the CLI ask of a serving engine; TorchServe and Ray Serve implement it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from msnb.engines.models import ModelStatus
from msnb.engines.store import ModelStore
from msnb.errors import MsnbError

if TYPE_CHECKING:  # an annotation only: `msnb --help` imports the engines' declarations, not their clients
    from msnb.engines.inference_api import InferenceClient
    from msnb.engines.model_metrics import ModelMetrics
    from msnb.engines.ts_properties import TsConfig


@runtime_checkable
class Engine(Protocol):
    """A local engine this process starts, deploys model folders to, asks, and stops.

    ``kind`` is the engine's name in the registry (``msnb.engines.registry``), ``label`` the name a person reads.
    """

    kind: str
    label: str
    store: ModelStore  # the folder deploys are built into
    python: str | None  # the interpreter that serves (its packages are what a model need not bring); None: this one

    def start(self) -> Engine: ...

    def stop(self) -> None: ...

    @property
    def running(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        """The serving process: a new pid is a new server (what it served is gone)."""

    @property
    def inference_url(self) -> str:
        """TorchServe's inference API (``/predictions/NAME``, ``/ping``): ``http://HOST:PORT``."""

    @property
    def management_url(self) -> str | None:
        """TorchServe's management API of this engine itself; None: it has none of its own (Ray: the start
        options' ``StartOptions.management_url``, where taken)."""

    @property
    def metrics_url(self) -> str | None:
        """TorchServe's metrics API (``/metrics``) of this engine itself; None: none of its own."""

    @property
    def client(self) -> InferenceClient:
        """The HTTP client of the running engine: TorchServe's inference URLs (a reload request goes through it)."""

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: OpenAI's API over the models that stream or embed (the inference key as
        API key)."""

    @property
    def mcp_url(self) -> str:
        """MCP's streamable HTTP endpoint (``.../mcp``): every served model is a tool."""

    @property
    def log_dir(self) -> Path: ...

    @property
    def workdir(self) -> Path | None: ...

    @property
    def key_file(self) -> Path | None:
        """The file holding the inference key clients must send; None when requests need no key."""

    def free_version(self, name: str, version: str) -> str:
        """``version``, or a fresh ``version-rN`` when ``name`` already serves it."""

    def redeploy(self, path: str | Path, **params: Any) -> ModelStatus:
        """Serve the model folder (or archive) at ``path`` as its model's version, replacing the old one."""

    def model_env(self, name: str, values: dict[str, str]) -> None:
        """Give the workers (replicas) ``name`` starts from now on these variables, and no other model's (``--env``)."""

    def deploy_many(self, models: list[tuple[Path, dict]]) -> Iterator[tuple[str, Any]]:
        """Serve several model folders (or archives), each with its register parameters, side by side where the
        engine can: yields ``(name, ModelStatus)`` for each that serves and ``(name, MsnbError)`` for each that does
        not (the others still serve)."""

    def unregister(self, name: str, version: str | None = None) -> None:
        """Stop serving ``name``'s ``version`` (None: every version)."""

    def status(self, name: str, version: str | None = None) -> ModelStatus:
        """What ``name`` (its default version, or ``version``) serves now: TorchServe's describe call."""

    def describe(self, name: str) -> tuple[int, bytes]:
        """TorchServe's describe call (``GET /models/NAME?customized=true``) as this engine answers it: its HTTP
        status and body, for a comparison with TorchServe's own."""

    def models(self) -> list[ModelStatus]: ...

    def versions(self, name: str) -> list[ModelStatus]: ...

    def predict(self, name: str, data: Any, **kwargs: Any) -> Any: ...

    def predict_stream(self, name: str, data: Any, **kwargs: Any) -> Iterator[Any]:
        """The pieces of ``name``'s answer as they come (a generator role's yields)."""

    def explain(self, name: str, data: Any, **kwargs: Any) -> Any: ...

    def model_log(self, name: str, lines: int = 40) -> list[str]:
        """The newest lines the workers (replicas) of ``name`` wrote."""

    def log_tail(self, lines: int = 40) -> str: ...

    def metrics(self) -> dict[str, ModelMetrics]:
        """Model name -> what its workers (replicas) counted (``msnb.engines.model_metrics``); {} when nothing is
        counted. Raises the engine's error (or the HTTP client's) when its metrics cannot be read."""

    def progress_detail(self, name: str) -> Callable[[], str]:
        """While ``name`` loads: a call that says what its worker does now (for the progress bar)."""


@runtime_checkable
class StartOptions(Protocol):
    """TorchServe's start options (config.properties) taken by an engine that is not TorchServe: its management and
    metrics addresses, its ``load_models`` registered, ``stop`` ending both addresses."""

    @property
    def management_url(self) -> str: ...

    @property
    def metrics_url(self) -> str: ...

    def register(self, path: str) -> ModelStatus:
        """Register the archive at ``path`` as TorchServe registers one it starts with."""

    def load_models(self, report: Callable[[str, MsnbError], None]) -> list[str]:
        """Register every model ``load_models`` names (each failure ``report``ed); the names that serve."""

    def stop(self) -> None: ...

    @property
    def hosts_note(self) -> str:
        """What its addresses off loopback answer (``allowed_hosts``), to say at start; "" on loopback."""


class OpenedArchive(Protocol):
    """An archive opened into a model folder (``msnb.package.model_folder.ModelFolder.open``): what an engine that
    opens archives reads of it."""

    name: str
    path: Path
    source: Path | None
    requirements: tuple[str, ...]  # what it needs that the serving environment lacks


# (archive, model store, names taken) -> the archive opened into the store, or an MsnbError raised
OpenArchive = Callable[[Path, Path, set[str]], OpenedArchive]
# (archive or model name, its error): said to the user, and the others go on
Report = Callable[[Path | str, MsnbError], None]


class Layout(Protocol):
    """An engine's export layout (`msnb export --ray DIR`): a folder its cluster serves as it is. What the folder
    carries of msnb's packaging (the model folders) the caller lays out through ``stage``."""

    def write(
        self,
        outdir: Path,
        stage: Callable[[Path], dict[str, str]],
        host: str | None = None,
        port: int | None = None,
        sizing: Any = None,
    ) -> Path:
        """OUTDIR written: ``stage(staging)`` lays the model folders out and returns name -> version; HTTP on
        ``host``:``port`` (None: the layout's defaults), each replica sized by ``sizing`` (``sizing(...)``'s)."""

    def sizing(
        self,
        cpus: list[str] | None,
        gpus: list[str] | None,
        memory: list[str] | None,
        models_per_replica: int | None = None,
        own_replica: list[str] | None = None,
        loaded_per_replica: int | None = None,
    ) -> Any:
        """What each replica asks for, from ``--num-cpus``, ``--num-gpus`` and ``--memory`` (``[NAME=]N`` each), and
        which models share one (``--models-per-replica``, ``--own-replica``, ``--loaded-per-replica``)."""

    def summary(self, outdir: Path) -> str:
        """What the written folder needs of its cluster and the steps that run it (printed by `msnb export`)."""


def local_url(host: str, port: int | str | None) -> str:
    """Where a client on this machine reaches an engine's address bound to ``host:port`` (a wildcard: loopback)."""
    from msnb.engines.ts_properties import client_host

    return f"http://{client_host(host)}:{port}"


def openai_url(ingress: str | None) -> str:
    """OpenAI's API under the ingress at ``ingress`` (``""``: no ingress runs)."""
    return f"{ingress}/v1" if ingress else ""


def mcp_url(ingress: str | None) -> str:
    """MCP's streamable HTTP endpoint under the ingress at ``ingress`` (``""``: no ingress runs)."""
    return f"{ingress}/mcp" if ingress else ""


@dataclass(frozen=True)
class ServeOptions:
    """What `msnb serve` asks of the engine it starts: the body limits, TorchServe's ``service_envelope``,
    TorchServe's start options read as its config (``msnb.engines.ts_properties.TsConfig``, or None), and how many
    models share a replica (an engine that cannot share one refuses them)."""

    max_request_size: int | None = None
    max_response_size: int | None = None
    envelope: str | None = None
    ts: TsConfig | None = None
    models_per_replica: int | None = None  # Ray's replica sets: at most this many models share a replica
    own_replica: tuple[str, ...] = ()  # ... and these models get one of their own
    loaded_per_replica: int | None = None  # ... and at most this many stay loaded in one (the rest on demand)


@dataclass(frozen=True)
class EngineKind:
    """One engine as every surface offers it, declared by its own package (``ENGINE``) and listed in
    ``msnb.engines.registry``: nothing outside ``msnb/engines/`` needs to know an engine by its name.

    ``default(port)`` is the process-wide engine of the notebook surfaces (not necessarily started); ``running()``
    says whether it runs now without creating or starting it; ``require()`` raises an MsnbError naming ``extra``
    when the engine's packages are not installed."""

    kind: str  # what a caller passes: --engine KIND, engine=KIND
    label: str  # the name a person reads
    starting: str  # the progress line while it starts
    default: Callable[[int | None], Engine]
    running: Callable[[], bool]
    require: Callable[[], object]
    type_name: str  # its engine class, ``module.Class`` (a notebook shows no Out for it: its ready line said it)
    extra: str | None = None  # the pip extra it needs (None: msnb's own install serves on it)
    # `msnb serve --engine KIND`: the engine a terminal command starts (None: it serves from a notebook only)
    command: Callable[[ServeOptions], Engine] | None = None
    # how archives enter it when they are opened into model folders first and deployed side by side (Ray):
    # (engine, archives, open, report, envelope, env) -> (name, ModelStatus) of each that serves, each failure
    # ``report``ed; None: each archive is registered as it is (TorchServe takes a .mar)
    deploy_archives: Callable[..., Iterator[tuple[str, ModelStatus]]] | None = None
    # TorchServe's start options on this engine: (engine, TsConfig, opener) -> its management and metrics addresses;
    # None: not taken here
    start_options: Callable[[Engine, TsConfig, Callable], StartOptions] | None = None
    # its export layout (`msnb export --KIND DIR`), loaded when asked for; None: it exports none of its own
    layout: Callable[[], Layout] | None = None
    # `msnb KIND up|down|status`: (action, port, say) on the engine's shared local instance; None: it has none
    shared: Callable[[str, int | None, Callable[[str], None]], None] | None = None
    # a client of a server speaking this engine's APIs: (inference URL, key file or None, management URL or None: its
    # key is renewed there) -> its client; None: it has none of its own
    connect: Callable[[str, Path | None, str | None], InferenceClient] | None = None
    # the most models that share one replica process by default (``ServeOptions.models_per_replica``); None: none do
    models_per_replica: int | None = None

    @property
    def choice(self) -> str:
        """How a menu names it: with the install line while the extra it needs is not installed."""
        return (
            self.label if self.extra is None or self.installed() else f"{self.label} (pip install msnb[{self.extra}])"
        )

    def installed(self) -> bool:
        """Whether its packages are there (``require`` passes)."""
        try:
            self.require()
        except MsnbError:
            return False
        return True


__all__ = [
    "Engine",
    "EngineKind",
    "Layout",
    "OpenArchive",
    "OpenedArchive",
    "Report",
    "ServeOptions",
    "StartOptions",
    "local_url",
    "mcp_url",
    "openai_url",
]
