"""A user's own model-config.yaml (``--config-file``, torch-model-archiver's name): read, checked, merged.

The file wins. Its frontend keys set the handler's options (``batchSize: 8`` is ``--batch-size 8``, whatever the
option line says), so msnb's test, register call and config agree; every other key (``handler:``,
``sequenceBatching``, ``maxSequenceJobQueueSize``, ``jobQueueSize``, ``useVenv``, ...) is written as it is and
reaches ``context.model_yaml_config`` as on plain TorchServe. msnb adds only the keys the file lacks, and merges its
own ``system.extraFiles`` (the archives it unpacks) into the file's ``system`` section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from msnb.errors import OptionError

# model-config key -> the HandlerSpec option it sets.
OPTION_KEYS = {
    "batchSize": "batch_size",
    "maxBatchDelay": "max_batch_delay",
    "responseTimeout": "response_timeout",
    "minWorkers": "workers",
}
HINT = "give a YAML mapping of model-config keys, e.g. `batchSize: 4` and a `handler:` section"


def read(path: Path) -> dict[str, Any]:
    """The file's mapping; a missing file, bad YAML or a non-mapping is an OptionError naming the file (and line)."""
    if not path.is_file():
        raise OptionError(f"--config-file: {str(path)!r} does not exist.", HINT + ".")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise OptionError(f"--config-file {path.name}:{where}: not YAML ({problem}).", HINT + ".") from None
    except (OSError, UnicodeDecodeError) as err:
        raise OptionError(f"--config-file {path.name}: cannot be read ({err}).", HINT + ".") from None
    if not isinstance(loaded, dict):
        raise OptionError(
            f"--config-file {path.name}: holds a {type(loaded).__name__}, not a mapping of model-config keys.",
            HINT + ".",
        )
    return loaded


def options_from(config: dict[str, Any]) -> dict[str, Any]:
    """The handler options the file sets (it wins over the option line)."""
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
