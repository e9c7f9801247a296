"""TorchServe's config.properties read as TorchServe reads it: its keys, its defaults, and which of them an engine
other than TorchServe honours (a key it cannot honour is refused with a Hint, never ignored)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from msnb.errors import ServerError
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES, DEFAULT_RESPONSE_TIMEOUT_S

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
WILDCARD_HOSTS = ("0.0.0.0", "::")  # every interface of the machine
# TorchServe 0.12's defaults (ConfigManager.java) for the keys an engine honours; address ports as TorchServe's.
DEFAULTS: dict[str, str] = {
    "inference_address": "http://127.0.0.1:8080",
    "management_address": "http://127.0.0.1:8081",
    "metrics_address": "http://127.0.0.1:8082",
    "model_store": "",
    "load_models": "",
    "default_workers_per_model": "0",  # 0: as many as the machine has CPUs (TorchServe's getDefaultWorkers)
    "max_request_size": str(DEFAULT_MAX_BYTES),
    "max_response_size": str(DEFAULT_MAX_BYTES),
    "default_response_timeout": str(DEFAULT_RESPONSE_TIMEOUT_S),
    "disable_token_authorization": "false",
    "enable_model_api": "false",
    "install_py_dep_per_model": "false",
    "models": "",
    # msnb's own (TorchServe ignores it): the host names a door off loopback answers besides loopback's (api.hosts)
    "allowed_hosts": "",
    "metrics_mode": "log",  # log: /metrics answers nothing (TorchServe 0.12's default); prometheus: the metrics
}
# The keys `torchserve --start` sets from its own options (--model-store, --disable-token-auth, --enable-model-api)
START_KEYS = ("model_store", "disable_token_authorization", "enable_model_api")
# Keys that tune TorchServe's Java frontend only (threads, buffers, its own logging): nothing to honour elsewhere.
NO_EFFECT = frozenset(
    {
        "number_of_netty_threads",
        "netty_client_threads",
        "job_queue_size",
        "async_logging",
        "vmargs",
        "prefer_direct_buffer",
        "use_native_io",
        "io_ratio",
        "initial_worker_port",
        "initial_distribution_port",
        "number_of_gpu",
        "metric_time_interval",
        "default_startup_timeout",
        "unregister_model_timeout",
        "enable_envvars_config",
        "model_server_home",
        "tsConfigFile",
    }
)
_ENV_VALUE = re.compile(r"\$\$([^$]+[^$])\$\$")  # TorchServe's $$VAR$$: the variable's value, or an error


@dataclass(frozen=True)
class TsConfig:
    """A config.properties as TorchServe reads it (``values``: every key, TorchServe's default where the file says
    none), with the command line's overrides applied (``with_overrides``)."""

    values: dict[str, str] = field(default_factory=lambda: dict(DEFAULTS))
    source: Path | None = None

    def text(self, key: str) -> str:
        return self.values[key]

    def number(self, key: str) -> int:
        try:
            return int(self.values[key])
        except ValueError:
            raise _refusal(self, key, f"{key}={self.values[key]} is not a whole number", "write a number.") from None

    def flag(self, key: str) -> bool:
        return self.values[key].strip().lower() == "true"  # Java's Boolean.parseBoolean

    def address(self, key: str) -> tuple[str, int]:
        """``(host, port)`` of an ``http://HOST:PORT`` address key."""
        parts = urlsplit(self.values[key])
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            hint = "write it as http://127.0.0.1:PORT (https needs TorchServe's certificate keys, not honoured here)."
            raise _refusal(self, key, f"{key}={self.values[key]} is not an http://HOST:PORT address", hint)
        return parts.hostname, parts.port

    @property
    def auth(self) -> bool:
        return not self.flag("disable_token_authorization")

    @property
    def model_store(self) -> Path | None:
        return Path(self.values["model_store"]).expanduser() if self.values["model_store"] else None

    def per_model(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``models={...}``: model name -> version -> its settings (marName, minWorkers, batchSize, ...)."""
        raw = self.values["models"].strip()
        try:
            found = json.loads(raw) if raw else {}
        except ValueError as err:
            raise _refusal(
                self,
                "models",
                f"models= is not JSON ({err})",
                "write it as TorchServe documents it: "
                'models={"NAME": {"1.0": {"marName": "NAME.mar", "minWorkers": 1}}}.',
            ) from None
        if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
            raise _refusal(self, "models", "models= is not a JSON object of models", "map each name to its versions.")
        return found

    def with_overrides(self, **given: Any) -> TsConfig:
        """The command line over the file, as ``torchserve --start`` applies it (a None leaves the file's value)."""
        values = dict(self.values)
        for key, value in given.items():
            if value is not None:
                values[key] = ",".join(value) if isinstance(value, (list, tuple)) else str(value).lower()
        if given.get("model_store") is not None:
            values["model_store"] = str(given["model_store"])
        return replace(self, values=values)


def read(path: Path | None) -> TsConfig:
    """``path`` (None: TorchServe's defaults) read as TorchServe's ConfigManager reads it: Java properties, each
    ``$$VAR$$`` replaced by the variable's value; a key that cannot be honoured is a ServerError naming it."""
    if path is None:
        return TsConfig()
    source = Path(path)
    try:
        found = parse(source.read_text())
    except OSError as err:
        raise ServerError(f"Cannot read {source}: {err.strerror}.", "give --ts-config an existing file.") from None
    config = TsConfig({**DEFAULTS, **{k: _resolved(source, k, v) for k, v in found.items()}}, source)
    for key in found:
        if key not in DEFAULTS and key not in NO_EFFECT:
            raise _refusal(
                config,
                key,
                f"{key} is a TorchServe setting msnb cannot honour on this engine",
                "remove the line, or serve with TorchServe itself (docs: ray-management.md#settings).",
            )
    return config


def parse(text: str) -> dict[str, str]:
    """Java's properties format: ``key=value`` (or ``key: value``, ``key value``), ``#``/``!`` comments, a line
    ending in a backslash continued on the next one (its leading blanks dropped)."""
    found, pending = {}, ""
    for raw in text.splitlines():
        line = pending + (raw.lstrip() if pending else raw.strip())
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending = line[:-1]
            continue
        pending = ""
        key, _, value = _split(line)
        found[key] = value
    if pending:
        key, _, value = _split(pending)
        found[key] = value
    return found


def _split(line: str) -> tuple[str, str, str]:
    match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
    return (match.group(1), "=", match.group(2).strip()) if match else (line.strip(), "", "")


def _resolved(source: Path, key: str, value: str) -> str:
    def variable(match: re.Match) -> str:
        name = match.group(1)
        if name not in os.environ:  # TorchServe: "Invalid Environment Variable NAME"
            raise ServerError(
                f"{source}: {key} names the environment variable {name}, which is not set.",
                f"set {name} before starting, or write the value itself.",
            )
        return os.environ[name]

    return _ENV_VALUE.sub(variable, value)


def _refusal(config: TsConfig, key: str, what: str, hint: str) -> ServerError:
    where = f"{config.source}: " if config.source else ""
    return ServerError(f"{where}{what}.", f"{hint} (the key: {key})")


def check_addresses(config: TsConfig, keys: tuple[str, ...]) -> None:
    """Every address in ``keys`` read; one off loopback only while token authorisation is on: the file asks for
    other machines to reach it, and then every call but TorchServe's ``/metrics`` needs the key, as on TorchServe."""
    for key in keys:
        host, _ = config.address(key)
        if host not in LOOPBACK_HOSTS and not config.auth:
            raise _refusal(
                config,
                key,
                f"{key} binds {host} while token authorisation is off "
                "(disable_token_authorization=true): any machine that reaches it could call it",
                "turn the key back on (drop --disable-token-auth and disable_token_authorization), or write 127.0.0.1.",
            )


def client_host(host: str) -> str:
    """The host a client on this machine reaches an address bound to ``host`` at (a wildcard: loopback)."""
    return LOOPBACK_HOSTS[0] if host in WILDCARD_HOSTS else host


__all__ = ["DEFAULTS", "NO_EFFECT", "TsConfig", "check_addresses", "client_host", "parse", "read"]
