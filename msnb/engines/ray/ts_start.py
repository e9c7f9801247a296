"""``torchserve --start`` on the local Ray: config.properties' inference address and limits given to the engine, the
management API on its own address, and the models ``load_models`` names registered from the model store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msnb.engines.models import ModelStatus
from msnb.engines.protocol import local_url
from msnb.engines.ray import metrics
from msnb.engines.ray.management import Management, serve
from msnb.engines.ray.model_registry import Registry
from msnb.engines.ts_properties import DEFAULTS, LOOPBACK_HOSTS, TsConfig, check_addresses
from msnb.errors import MsnbError, ServerError
from msnb.templates.msnb_runtime.api import hosts

if TYPE_CHECKING:
    from msnb.engines.ray.engine import LocalRay

ADDRESSES = ("inference_address", "management_address", "metrics_address")
ARCHIVE_SUFFIXES = (".mar", ".tar.gz", ".tgz", ".zip")


def engine_for(config: TsConfig, **packing: Any) -> LocalRay:
    """A LocalRay on config.properties' inference address, with its request size limit and token setting (``packing``:
    LocalRay's models_per_replica and own_replica)."""
    from msnb.engines.ray.engine import LocalRay

    check_addresses(config, ADDRESSES)
    if config.number("max_response_size") != int(DEFAULTS["max_response_size"]):
        raise ServerError(
            f"{config.source}: max_response_size cannot be honoured on Ray (its answers have no limit).",
            "remove the line (the key: max_response_size).",
        )
    prometheus(config)
    host, port = config.address("inference_address")
    engine = LocalRay(port, max_request_size=config.number("max_request_size"), host=host, **packing)
    engine.auth, engine.allowed_hosts = config.auth, config.text("allowed_hosts")
    return engine


class TorchServeApi:
    """The management API of a started ``engine`` on ``config``'s management address (``stop`` ends it)."""

    def __init__(self, engine: LocalRay, config: TsConfig, opener: Callable):
        self.config = config
        self.registry = Registry(engine, config, opener)
        key = _management_key(engine.key_file) if config.auth else None
        api = Management(self.registry, config.flag("enable_model_api"), key)
        allowed = config.text("allowed_hosts")
        self.server = serve(api, *config.address("management_address"), allowed)
        try:
            self.metrics = metrics.serve(
                engine.metrics_port, self.registry.apps, prometheus(config), *config.address("metrics_address"), allowed
            )
        except BaseException:
            self.server.shutdown()
            self.server.server_close()
            raise

    @property
    def hosts_note(self) -> str:
        """What `msnb serve` says at start of the addresses off loopback: the host names they answer (api.hosts)."""
        off = sorted({self.config.address(k)[0] for k in ADDRESSES} - set(LOOPBACK_HOSTS))
        if not off:
            return ""
        allowed = hosts.for_address(off[0] if len(off) == 1 else "0.0.0.0", self.config.text("allowed_hosts"))
        return (
            f"{', '.join(off)}: requests must name {allowed.listing()} (Host and Origin; more with "
            "allowed_hosts=NAME,... or --allowed-host NAME, * for any)"
        )

    @property
    def management_url(self) -> str:
        return _url(self.config, "management_address")

    def register(self, path: str) -> ModelStatus:
        """Register the archive at ``path`` as TorchServe registers an archive it starts with."""
        return self.registry.register(path, at_startup=True)

    def load_models(self, report: Callable[[str, MsnbError], None]) -> list[str]:
        """Register every model ``load_models`` names, as TorchServe does at start (each failure ``report``ed)."""
        served = []
        for name, url in startup_models(self.config):
            try:
                served.append(self.registry.register(url, name, at_startup=True).name)
            except MsnbError as err:
                report(url, err)
        return served

    @property
    def metrics_url(self) -> str:
        return _url(self.config, "metrics_address")

    def stop(self) -> None:
        for server in (self.server, self.metrics):
            server.shutdown()
            server.server_close()


def prometheus(config: TsConfig) -> bool:
    """Whether the metrics address answers (``metrics_mode=prometheus``) or answers nothing (``log``, as TorchServe)."""
    mode = config.text("metrics_mode")
    if mode not in ("log", "prometheus"):
        raise ServerError(
            f"{config.source}: metrics_mode={mode} cannot be honoured on Ray.",
            "write metrics_mode=prometheus (or log) (the key: metrics_mode).",
        )
    return mode == "prometheus"


def startup_models(config: TsConfig) -> Iterator[tuple[str | None, str]]:
    """``load_models``' entries as (name or None, file in the store): ``all``, ``NAME=FILE`` or ``FILE``."""
    entries = [e.strip() for e in config.text("load_models").split(",") if e.strip()]
    store = config.model_store
    if entries and store is None:
        raise ServerError(
            "load_models names models but no model store is set.",
            "give --model-store DIR (or model_store= in config.properties).",
        )
    if entries and not store.is_dir():
        raise ServerError(f"The model store {store} is not a folder.", "give --model-store an existing folder.")
    for entry in entries:
        if entry == "all":
            yield from ((None, p.name) for p in sorted(store.iterdir()) if _archive(p))
        else:
            name, _, url = entry.rpartition("=")
            yield name or None, url


def _archive(path: Path) -> bool:
    return path.name.endswith(ARCHIVE_SUFFIXES) or (path / "MAR-INF").is_dir()


def _url(config: TsConfig, key: str) -> str:
    """Where a client on this machine reaches address ``key`` (bound where the file says)."""
    return local_url(*config.address(key))


def _management_key(key_file: Path) -> str:
    return json.loads(Path(key_file).read_text())["management"]["key"]


__all__ = ["TorchServeApi", "engine_for", "startup_models"]
