"""TorchServe's serving settings as both sides of an archive name them: model-config.yaml's keys, TorchServe's
defaults, a user's own model-config.yaml (``--config-file``, torch-model-archiver's name) read and msnb's keys
merged under it.

The file wins. Its frontend keys set the handler's options (``batchSize: 8`` is ``--batch-size 8``, whatever the
option line says), so msnb's test, register call and config agree; every other key (``handler:``,
``sequenceBatching``, ``maxSequenceJobQueueSize``, ``jobQueueSize``, ``useVenv``, ...) is written as it is and
reaches ``context.model_yaml_config`` as on plain TorchServe. msnb adds only the keys the file lacks, and merges its
own ``system.extraFiles`` (the archives it unpacks) into the file's ``system`` section.

msnb imports it as ``msnb.templates.msnb_serving``; the shipped runtime, inside a model folder, by its bare name. It
imports only the standard library (and PyYAML, which TorchServe needs, when a file is read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DEFAULT_RESPONSE_TIMEOUT_S = 120  # TorchServe's default responseTimeout (seconds per batch)
DEFAULT_MAX_BYTES = 6553500  # TorchServe's default max_request_size and max_response_size (6.5 MB)

# model-config key -> the HandlerSpec option it sets.
OPTION_KEYS = {
    "batchSize": "batch_size",
    "maxBatchDelay": "max_batch_delay",
    "responseTimeout": "response_timeout",
    "minWorkers": "workers",
}


def options_from(config: dict[str, Any]) -> dict[str, Any]:
    """The handler options a user's model-config.yaml sets (it wins over the option line)."""
    out = {dest: config[key] for key, dest in OPTION_KEYS.items() if isinstance(config.get(key), int)}
    device = str(config.get("deviceType", "")).lower()
    if device in ("cpu", "gpu"):
        out["device"] = device
    return out


def merged(own: dict[str, Any], users: dict[str, Any]) -> dict[str, Any]:
    """msnb's model-config under the user's: the user's keys win, ``system`` sections are merged."""
    out = {**own, **users}
    if isinstance(own.get("system"), dict) or isinstance(users.get("system"), dict):
        out["system"] = {**(own.get("system") or {}), **(users.get("system") or {})}
    return out


HINT = "give a YAML mapping of model-config keys, e.g. `batchSize: 4` and a `handler:` section"


class ConfigFileError(ValueError):
    """A user's model-config.yaml that cannot be used: the message names the file (msnb adds ``HINT``)."""


def read_user_file(path: Path) -> dict[str, Any]:
    """A user's own model-config.yaml (``--config-file``): its mapping; a missing file, bad YAML or a non-mapping
    raises ConfigFileError naming the file (and line)."""
    import yaml

    if not path.is_file():
        raise ConfigFileError(f"--config-file: {str(path)!r} does not exist.")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigFileError(f"--config-file {path.name}:{where}: not YAML ({problem}).") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigFileError(f"--config-file {path.name}: cannot be read ({err}).") from None
    if not isinstance(loaded, dict):
        raise ConfigFileError(
            f"--config-file {path.name}: holds a {type(loaded).__name__}, not a mapping of model-config keys."
        )
    return loaded
