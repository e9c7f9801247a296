"""``msnb export --ray``: model folders, the Serve adapter and a validated ``serve_config.yaml`` in one folder.

The models share replicas as `msnb serve --engine ray` packs them (msnb.engines.ray.packing): a replica set
application (the runtime's ray.multi_model) holds up to K model folders in each replica process; a model that needs
a process of its own (a GPU, a stream, sequences, sizes of its own, ``--own-replica``) gets an application of its own.
From the folder, ``serve run serve_config.yaml`` serves every handler on a local Ray; the same config is a KubeRay
``RayService``'s ``serveConfigV2`` (``rayservice.yaml`` beside it is an example). The model folders come from a call
the caller gives (``stage``: msnb's packaging lays them out, ``msnb.session.export``); this module writes the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from msnb.engines.ray import RAY_VERSION, ROUTER_APP, require
from msnb.engines.ray.image import DOCKERFILE, IMAGE, WORKDIR, dockerfile
from msnb.engines.ray.packing import workers
from msnb.engines.ray.sizing import Sizing, needs, needs_text
from msnb.errors import BuildError
from msnb.files import written_into
from msnb.templates import RAY_ROOMS, RUNTIME, copy_runtime, runtime_files
from msnb.templates.msnb_runtime.api import hosts
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES
from msnb.templates.msnb_runtime.ray.multi_model_routes import MAX_LOADED
from msnb.templates.msnb_runtime.ray.token_interceptor import KEY_VAR

SERVE_CONFIG, RAYSERVICE = "serve_config.yaml", "rayservice.yaml"
ADAPTER = f"{RUNTIME}.ray.app"  # the applications' module in the export (its builders: model, router)
SET_BUILDER = f"{RUNTIME}.ray.multi_model:models"  # a replica set's builder
DEFAULT_HOST, PUBLIC_HOST, DEFAULT_PORT = "127.0.0.1", "0.0.0.0", 8000
# The router's inference key on a cluster: this Kubernetes Secret, as the variable the adapter reads (runtime ray.token_interceptor).
KEY_SECRET = {"name": "msnb-inference-key", "key": "key"}


def adapter_files() -> tuple[tuple[Path, str], ...]:
    """(source, path in the export) of the runtime package's rooms that sit beside the exported model folders: the
    Ray applications, TorchServe's interfaces they keep, the protocols and the shared handler (``RAY_ROOMS``)."""
    return runtime_files(RAY_ROOMS)


def serve_config(
    models: dict[str, str],
    root: Path,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    sizing: Sizing | None = None,
) -> dict:
    """The model folders under ``root`` (``models``: name -> version) as Serve applications: those that share a
    replica as replica sets (``msnb-models-N``, the members listed in its args), the others one application each (no
    HTTP route of their own), each replica sized by ``sizing`` (a small CPU share by default: ``ray_sizing``), and the
    router at ``/``, told which set serves which model.

    The version is an argument (of the application, or of its member entry) so that a new export of a changed handler
    is a changed config: Serve rolls it out, a set reloads that member in place.
    The router answers only requests naming loopback (and, off loopback, the host names its ``allowed_hosts``
    argument lists), refuses bodies over TorchServe's default max_request_size and asks for an inference key, which it
    reads where it runs ($MSNB_INFERENCE_KEY, $MSNB_INFERENCE_KEY_FILE or a ``key_file`` argument; ``auth: false``
    turns the check off): the config itself holds no secret.
    """
    sizing = sizing or Sizing()
    sizing.check_names(list(models))
    packing, apps = sizing.packing(), []
    for name, version in models.items():
        if packing.own_replica(root / name, name, {}) is None:  # (its requirements: installed beside it, as alone)
            packing.place(name, {"app": name, "model_dir": name, "version": version}, workers(root / name))
            continue
        args = {"model_dir": name, "version": version, **sizing.args_for(name)}
        apps.append({"name": name, "route_prefix": None, "import_path": f"{ADAPTER}:model", "args": args})
    for rs in packing.sets.values():
        args = {"models": list(rs.members.values()), "name": rs.app, **sizing.args_for("")}
        if sizing.loaded_per_replica is not None:
            args[MAX_LOADED] = sizing.loaded_per_replica
        apps.append({"name": rs.app, "route_prefix": None, "import_path": SET_BUILDER, "args": args})
    router = {"name": ROUTER_APP, "route_prefix": "/", "import_path": f"{ADAPTER}:router", "args": router_args(host)}
    if packing.sets:
        router["args"]["sets"] = packing.routes()
    apps.append(router)
    return {"proxy_location": "EveryNode", "http_options": {"host": host, "port": port}, "applications": apps}


def router_args(host: str) -> dict:
    """The exported router's args: TorchServe's body limit, ``watch`` (a replica that cannot be placed is said) and
    its Host and Origin check (api.hosts: off loopback, the names listed in allowed_hosts)."""
    router = {"max_request_size": DEFAULT_MAX_BYTES, "watch": True, "host": host}
    if hosts.off_loopback(host):
        router[hosts.ARGS_KEY] = []
    return router


def model_names(config: dict) -> list[str]:
    """The models a serve_config.yaml serves, in its order: each model application's, each replica set's members."""
    names = []
    for app in config["applications"]:
        members = app["args"].get("models")
        if members is not None:
            names += [str(m["app"]) for m in members]
        elif "model_dir" in app["args"]:
            names.append(app["name"])
    return names


def validate(config: dict) -> None:
    """Check ``config`` with Ray's own schema (``ServeDeploySchema``); a refusal is a BuildError."""
    require()
    from ray.serve.schema import ServeDeploySchema

    try:
        ServeDeploySchema.model_validate(config)  # pydantic 2, as ray[serve] 2.60 requires
    except Exception as err:
        raise BuildError(f"The Serve config does not validate: {err}", "report this as an msnb bug.") from None


def rayservice(config: dict, name: str = "msnb") -> dict:
    """An example KubeRay RayService running ``config`` (serveConfigV2) from an image holding the folder."""
    v2 = {k: v for k, v in config.items() if k != "http_options"}
    head = {"rayStartParams": {"dashboard-host": "0.0.0.0"}, "template": {"spec": {"containers": [_container()]}}}
    workers = [
        {
            "groupName": "workers",
            "replicas": 1,
            "minReplicas": 1,
            "maxReplicas": 4,
            "rayStartParams": {},
            "template": {"spec": {"containers": [_container()]}},
        }
    ]
    # authOptions (KubeRay >= 1.5.1): the operator makes a token Secret and sets RAY_AUTH_MODE/RAY_AUTH_TOKEN on
    # every Ray container, so Ray's gRPC, dashboard and agents refuse callers without it.
    spec = {
        "serveConfigV2": yaml.safe_dump(v2, sort_keys=False),
        "rayClusterConfig": {
            "rayVersion": RAY_VERSION,
            "authOptions": {"mode": "token"},
            "headGroupSpec": head,
            "workerGroupSpecs": workers,
        },
    }
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": name}, "spec": spec}


def _container() -> dict:
    # The exported folder is the image's working directory (its Dockerfile, ray_image; docs/ray.md: or a zip URI).
    key = {"name": KEY_VAR, "valueFrom": {"secretKeyRef": KEY_SECRET}}  # the router's inference key
    return {
        "name": "ray",
        "image": IMAGE,
        "workingDir": WORKDIR,
        "env": [key],
        "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
    }


def write(
    outdir: Path,
    stage: Callable[[Path], dict[str, str]],
    host: str | None = None,
    port: int | None = None,
    sizing: Sizing | None = None,
) -> Path:
    """Write OUTDIR/<name>/ (``stage(staging)`` lays the model folders out there and returns name -> version), the
    adapter, serve_config.yaml (HTTP on ``host``:``port``, default 127.0.0.1:8000) and rayservice.yaml.

    Built in a hidden staging folder inside OUTDIR and moved into place only when everything built."""
    require()
    with written_into(outdir, ".msnb-ray-") as staging:
        config = serve_config(stage(staging), staging, host or DEFAULT_HOST, port or DEFAULT_PORT, sizing)
        validate(config)
        copy_runtime(staging, RAY_ROOMS)
        (staging / SERVE_CONFIG).write_text(
            _header("serve run " + SERVE_CONFIG) + yaml.safe_dump(config, sort_keys=False)
        )
        (staging / RAYSERVICE).write_text(
            _header("kubectl apply -f " + RAYSERVICE) + yaml.safe_dump(rayservice(config), sort_keys=False)
        )
        (staging / DOCKERFILE).write_text(dockerfile(staging))
    return outdir


# The Layout's ``sizing``: what each replica asks for and which models share one, from the command line's values.
sizing = Sizing.parse


def _header(command: str) -> str:
    return f"# Written by `msnb export --ray`; from this folder: {command}\n" + SECRETS_NOTE


# Where a served model's key comes from on Ray: never the exported folder (msnb refuses secrets in archives).
SECRETS_NOTE = (
    '# A handler reads a key from its environment (os.environ["OPENAI_API_KEY"]); never put it in this folder. On\n'
    "# Kubernetes give it from a Secret (rayservice.yaml: the containers' env, valueFrom.secretKeyRef). Ray's\n"
    "# runtime_env env_vars (serve_config.yaml: applications[NAME].runtime_env) reach one application only, but Ray\n"
    "# writes their values to runtime_env_agent.log.\n"
)


def summary(outdir: Path) -> str:
    """What the exported application needs of its cluster and the steps that run it, key included (printed by
    ``msnb export --ray``; docs/ray.md shows the same steps)."""
    config = yaml.safe_load((outdir / SERVE_CONFIG).read_text())
    http = config["http_options"]
    return RUN_STEPS.format(
        needs=needs_text(needs(outdir, config)),
        out=outdir,
        var=KEY_VAR,
        host=http["host"],
        port=http["port"],
        image=IMAGE,
        secret=KEY_SECRET["name"],
        secret_key=KEY_SECRET["key"],
        config=SERVE_CONFIG,
        rayservice=RAYSERVICE,
        name=next(iter(model_names(config)), "NAME"),
    )


# The router reads its key where it runs: a Ray that `serve run` starts inherits the shell's variable; a running
# cluster's replicas inherit their node's environment (as `ray start` had it), never the `serve run` shell's.
RUN_STEPS = """{needs}
Run it (the router asks every request for the inference key in ${var}, read where it runs):
  export {var}="$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
  cd {out}
  serve run {config}
On a running cluster, start its nodes with {var} in their environment (`{var}=... ray start ...`), then:
  RAY_ADDRESS=HEAD:6379 serve run {config}
On Kubernetes (KubeRay), an image of this folder (its Dockerfile) and the key from a Secret (rayservice.yaml gives it to every Ray container):
  docker build -t {image} . && docker push {image}
  kubectl create secret generic {secret} --from-literal={secret_key}="${var}"
  kubectl apply -f {rayservice}
Ask it:
  curl -H "Authorization: Bearer ${var}" http://{host}:{port}/predictions/{name} -T input.json"""
