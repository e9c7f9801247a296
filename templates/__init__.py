"""The runtime shipped in every archive: what a TorchServe worker (or a Ray Serve replica) runs beside the user's code.

Not templates in the Jinja sense: real, importable, tested Python, copied as files into model folders and exports.
It lives at the top of the source tree (``templates/``) and is installed as the ``msnb.templates`` package
(pyproject.toml's ``package-dir``), so a wheel carries it. Its files, by name:

- ``msnb_*.py`` — TorchServe's worker side: the shared batching/device handler every model folder and ``.mar``
  carries (``shared_handler_files()`` is their one list), with the ``handler_model.py`` templates (``*.py.tmpl``);
- ``msnb_ts_*.py`` — TorchServe's interfaces where no TorchServe runs, shared by every other engine: its Context, its
  folder loader, its wire format and its frontend's checks;
- ``msnb_ray*.py`` — Ray Serve's replica and router, copied beside exported model folders;
- ``msnb_api_*.py`` — the protocols (OpenAI's API, MCP), answered by both engines' fronts;
- ``dev_reload.py`` (the local server's dev entry) and ``kserve_predictor.py`` (KServe's Python server).

One import idiom for a module's neighbours: ``if __package__:`` the relative import, ``else:`` the top-level one.
Imported as ``msnb.templates.X`` (msnb's own process: the notebook, the CLI) a module takes its neighbours by
package, never by trying the top-level name first: Ray pickles the notebook's classes by module name, so a stray
top-level copy (an exported folder on ``sys.path``) must never be picked. In a model folder or an exported folder the
modules are top-level and import each other by their bare names, never msnb: a plain TorchServe has no msnb.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SHARED_PREFIX = "msnb_"  # every module of the shared handler is named msnb_*.py
# What engines other than TorchServe run (msnb_ts_*.py: TorchServe's interfaces; msnb_ray*.py: Ray's replica and
# router) and the protocols the engines answer (msnb_api*.py: OpenAI, MCP) sit beside the model folders they serve,
# not inside an archive.
ENGINE_ADAPTER_PREFIX = ("msnb_ray", "msnb_api", "msnb_ts_")
DEV_ENTRY = "dev_reload.py"  # the local server's dev entry (msnb.session.reload), never in an archive


def shared_handler_files() -> tuple[Path, ...]:
    """The shared handler modules every archive carries (this package's msnb_*.py), sorted by name."""
    root = resources.files(__name__)
    found = (Path(str(p)) for p in root.iterdir() if _is_shared(p.name))
    return tuple(sorted(found))


def _is_shared(name: str) -> bool:
    return name.startswith(SHARED_PREFIX) and name.endswith(".py") and not name.startswith(ENGINE_ADAPTER_PREFIX)
