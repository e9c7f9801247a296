"""Variables a served model reads from its environment (``%ms_serve NAME --env VAR``): taken from the kernel's (or the
shell's) environment when the model is served, given to that model's workers or replicas only, never written to the
model folder, the archive, the model store or a log.

TorchServe has no per-model environment (every worker inherits the frontend's), so a local server keeps each model's
variables in one file of its own, mode 0600, in a folder of its private work dir outside the model store
(``write`` / ``remove``); the runtime in the model's folder (templates/msnb_runtime/handler/env.py) reads it in that model's workers
before the user's code runs. On Ray Serve each replica of the model sets them in its own process before the folder
loads (a constructor argument: a ``runtime_env``'s env_vars would be written, values included, to Ray's
runtime_env_agent.log). The servers themselves start without the kernel's credential-looking variables
(``without_credentials``): a model gets one only when named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from msnb.errors import OptionError
from msnb.templates import RUNTIME
from msnb.templates.msnb_runtime.handler import env
from msnb.templates.msnb_runtime.handler.env import ENV_DIR_VAR

__all__ = ["ENV_DIR", "ENV_DIR_VAR", "ENV_HELP", "remove", "resolve", "without_credentials", "write"]

ENV_DIR = "model_env"  # a server's models' variables (--env): one 0600 file each, in its workdir, outside the store
ENV_HELP = (
    "a variable of this environment the model's workers (replicas) get, and no other model's: its value is never "
    "written to the model folder, the archive or a log (repeatable; e.g. --env OPENAI_API_KEY)"
)
# A variable that holds a credential by its name: one of its parts (split at "_") is, or ends with, one of these words.
CREDENTIAL_PART = re.compile(r"(KEY|TOKEN|SECRET|SECRETS|PASSWORD|PASSWD|CREDENTIALS?)$")
KEPT = frozenset({"PWD", "OLDPWD"})  # the shell's working folders, not passwords


def resolve(names: Iterable[str], model: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The values of ``names`` in ``environ`` (default: this process's); a name that is not a variable name, or is
    not set, is refused with a hint."""
    environ = os.environ if environ is None else environ
    names = list(dict.fromkeys(names))
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
    if bad:
        raise OptionError(
            f"--env {bad[0]!r} is not an environment variable's name.",
            "give the variable's name, e.g. --env OPENAI_API_KEY (its value is read from the environment, never "
            "typed on the command line).",
        )
    missing = [n for n in names if n not in environ]
    if missing:
        listed = ", ".join(missing)
        raise OptionError(
            f"--env {listed}: {'it is' if len(missing) == 1 else 'they are'} not set in this process's environment, "
            f"so {model!r} cannot be given {'it' if len(missing) == 1 else 'them'}.",
            f"set it where the notebook runs (`%env {missing[0]}=...` in a cell, or export {missing[0]}=... in the "
            "shell that starts Jupyter / `msnb serve`), then serve again.",
        )
    return {n: environ[n] for n in names}


def credential(name: str) -> bool:
    """True for a variable whose name says it holds a credential (OPENAI_API_KEY, HF_TOKEN, PGPASSWORD)."""
    return name not in KEPT and any(CREDENTIAL_PART.search(part) for part in name.upper().split("_") if part)


def without_credentials(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` less its credential-looking variables: what a server process starts with."""
    return {k: v for k, v in environ.items() if not credential(k)}


def write(folder: Path, model: str, values: Mapping[str, str]) -> None:
    """Keep ``model``'s variables in ``folder/<model>.json`` (mode 0600, the folder 0700); no values: no file."""
    if not values:
        remove(folder, model)
        return
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    target, partial = folder / f"{model}.json", folder / f".{model}.json.partial"
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(dict(values), out)
    os.replace(partial, target)


def remove(folder: Path, model: str | None = None) -> None:
    """Forget ``model``'s variables (every model's, and the folder, when None)."""
    if model is not None:
        (folder / f"{model}.json").unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)


# The runtime module that reads them, in every model folder msnb writes (and its flat name in archives that msnb
# wrote before the runtime became one package: they still read the same file).
RUNTIME_FILES = (f"{RUNTIME}/handler/{Path(env.__file__).name}", "msnb_env.py")


def give(server: object, path: Path, values: Mapping[str, str]) -> None:
    """Before ``path`` (a .mar or model folder) is registered on ``server``: give its model ``values``. An archive
    without msnb's runtime (not built by msnb, or by an older one) cannot take them: refused with a hint."""
    from msnb.engines.store import read_manifest

    if not values:
        return
    if path.is_dir():
        carries = any((path / name).is_file() for name in RUNTIME_FILES)
    else:
        with zipfile.ZipFile(path) as zf:
            carries = bool(set(RUNTIME_FILES) & set(zf.namelist()))
    if not carries:
        raise OptionError(
            f"{path.name} has no msnb runtime ({RUNTIME_FILES[0]}), so its workers cannot be given --env variables.",
            "export it again with this msnb (`msnb export`), or start TorchServe yourself with the variable set: "
            "then every model of that server gets it.",
        )
    server.model_env(read_manifest(path)[0], dict(values))
