"""msnb's runtime: what a TorchServe worker, a Ray Serve replica or KServe runs beside a model folder's code.

Copied whole or by room into every model folder and export, and imported there as the top-level ``msnb_runtime``
(never msnb: a plain TorchServe has no msnb); msnb's own process imports it as ``msnb.templates.msnb_runtime``.
Its modules import each other relatively, so whichever name the package has, a module's neighbours are its own
(Ray pickles the notebook's classes by module name: a stray top-level copy must never be picked). Its rooms:

- ``handler`` — the shared batching/device handler every ``.mar`` carries, and what it needs;
- ``ts`` — TorchServe's interfaces where no TorchServe runs: its Context, its model loader, its wire format and its
  frontend's checks;
- ``api`` — the protocols both engines answer: OpenAI's API, MCP;
- ``ray`` — Ray Serve's applications: the model replicas and the ingress (router) in front of them;
- ``kserve`` — KServe's Python model server over TorchServe model folders;
- ``dev`` — the local server's dev reload (never in an archive).
"""
