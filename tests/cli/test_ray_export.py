"""`msnb export --ray`: a folder that `serve run serve_config.yaml` serves, validated by Ray's own schema."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest
import yaml
from helpers import handler, run, standard

from msnb.engines.ray import INSTALL_HINT
from msnb.engines.ray.engine import REPLICA_CPUS
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES


def test_export_ray_writes_model_folders_the_adapter_and_a_serve_config(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    from ray.serve.schema import ServeDeploySchema

    nb = standard(tmp_path / "nb", handler("first"), handler("second", "--version 2.1 --batch-size 4"))
    code, out, err = run(capsys, "export", nb, "--ray", tmp_path / "ray")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "ray").iterdir())
    assert names == [
        "Dockerfile",  # the image rayservice.yaml runs
        "first",
        "msnb_runtime",  # the runtime package: the Ray applications and what they keep of TorchServe
        "rayservice.yaml",
        "second",
        "serve_config.yaml",
    ]
    runtime = tmp_path / "ray" / "msnb_runtime"
    rooms = sorted(p.name for p in runtime.iterdir() if p.is_dir())
    assert rooms == ["api", "handler", "ray", "ts"]  # no kserve, no dev reload
    assert sorted(p.name for p in (runtime / "api").glob("*.py")) == [
        "__init__.py",
        "embeddings.py",  # OpenAI's /v1 and MCP's /mcp, answered by the router
        "hosts.py",  # the Host and Origin check of its door
        "mcp.py",
        "openai.py",
        "responses.py",
        "v1.py",
        "wire.py",
    ]
    assert sorted(p.name for p in (runtime / "ray").glob("*.py")) == [
        "__init__.py",
        "api.py",
        "app.py",  # the model and router applications' builders (serve_config's import_path)
        "deployment.py",  # TorchServe's model-config as Serve deployment options
        "ingress.py",  # a prediction's way through an ingress (the router's, a replica's own)
        "isolation.py",  # each packed model's own modules, cwd and sys.path in a shared replica
        "management.py",  # the management API's read calls (list, describe) on the router
        "multi_model.py",  # a replica holding several model folders (packing)
        "multi_model_routes.py",  # which packed replica set answers which model
        "replica.py",  # what a replica gives a handler in place of a worker: GPU id, metrics, log lines
        "residency.py",  # which of a set's models stay loaded in a replica (least recently used evicted)
        "runtime_env.py",  # what the application asks of its cluster, checked when it is built
        "sequences.py",
        "streaming.py",
        "timeout.py",  # responseTimeout
        "token_interceptor.py",
    ]
    assert sorted(p.name for p in (runtime / "ts").glob("*.py")) == [
        "__init__.py",
        "checks.py",  # TorchServe's frontend checks: the inference key, the body limit
        "context.py",  # TorchServe's Context
        "model_loader.py",  # a model folder loaded as a TorchServe worker loads it
        "wire.py",  # TorchServe's wire format: bodies, answers, errors, predict responses
    ]
    assert {"names.py", "serving.py", "handler.py"} <= {p.name for p in (runtime / "handler").glob("*.py")}
    assert "serve run serve_config.yaml" in out
    for name in ("first", "second"):  # the engine-neutral model folder, as TorchServe registers it
        folder = tmp_path / "ray" / name
        assert {"handler_model.py", "msnb_runtime", "model.pt", "model-config.yaml", "msnb_api.json"} <= {
            p.name for p in folder.iterdir()
        }
        assert (folder / "msnb_runtime" / "handler" / "handler.py").is_file()
        assert (folder / "MAR-INF" / "MANIFEST.json").is_file() and not (folder / "msnb_runtime" / "ray").exists()
    config = yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())
    ServeDeploySchema.model_validate(config)
    assert config["http_options"]["host"] == "127.0.0.1"
    apps = {app["name"]: app for app in config["applications"]}
    assert list(apps) == ["msnb-models-1", "msnb-router"]  # both share one replica set (packing by default)
    members = [
        {"app": "first", "model_dir": "first", "version": "1.0"},
        {"app": "second", "model_dir": "second", "version": "2.1"},
    ]
    assert apps["msnb-models-1"] == {
        "name": "msnb-models-1",
        "route_prefix": None,
        "import_path": "msnb_runtime.ray.multi_model:models",
        "args": {"models": members, "name": "msnb-models-1", "num_cpus": REPLICA_CPUS},
    }
    assert apps["msnb-router"]["route_prefix"] == "/"
    # the router asks for a key read on the cluster (no secret in the config) and refuses TorchServe's large bodies
    assert apps["msnb-router"]["args"] == {
        "max_request_size": DEFAULT_MAX_BYTES,
        "watch": True,
        "host": "127.0.0.1",
        "sets": {"first": "msnb-models-1", "second": "msnb-models-1"},  # which set serves each model
    }
    service = yaml.safe_load((tmp_path / "ray" / "rayservice.yaml").read_text())
    assert service["kind"] == "RayService"
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}  # Ray's own token authentication, by the operator
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        env = group["template"]["spec"]["containers"][0]["env"]
        assert {
            "name": "MSNB_INFERENCE_KEY",
            "valueFrom": {"secretKeyRef": {"name": "msnb-inference-key", "key": "key"}},
        } in env
    assert yaml.safe_load(service["spec"]["serveConfigV2"])["applications"] == config["applications"]


def test_export_ray_host_option_binds_all_interfaces(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    nb = standard(tmp_path / "nb")
    code, _, err = run(capsys, "export", nb, "--ray", tmp_path / "ray", "--ray-host", "0.0.0.0")
    assert code == 0, err
    config = yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())
    assert config["http_options"]["host"] == "0.0.0.0"


def test_export_ray_without_the_extra_names_it_and_writes_nothing(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError, as without the extra
    nb = standard(tmp_path / "nb")
    code, _, err = run(capsys, "export", nb, "--ray", tmp_path / "ray")
    assert code == 2 and INSTALL_HINT in err and 'pip install "msnb[ray]"' in err
    assert not (tmp_path / "ray").exists()


def test_export_ray_from_archives_torch_model_archiver_made(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    from helpers import ECHO, build_mar
    from ts_archives import as_tgz

    echo = build_mar(tmp_path / "echo", "echo", ECHO, requirements=["lru-dict"])
    other = as_tgz(build_mar(tmp_path / "other", "other", ECHO, version="2.0"), "other", tmp_path)
    code, out, err = run(capsys, "export", echo, other, "--ray", tmp_path / "ray")
    assert code == 0, err
    config = yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())
    apps = {a["name"]: a for a in config["applications"]}
    assert apps["msnb-models-1"]["args"] == {
        "models": [
            {"app": "echo", "model_dir": "echo", "version": "1.0"},
            {"app": "other", "model_dir": "other", "version": "2.0"},
        ],
        "name": "msnb-models-1",
        "num_cpus": REPLICA_CPUS,
    }
    assert apps["msnb-router"]["route_prefix"] == "/" and config["http_options"]["host"] == "127.0.0.1"
    assert (tmp_path / "ray" / "echo" / "echo_handler.py").read_text() == ECHO  # the archive's files, unchanged
    assert (tmp_path / "ray" / "echo" / "echo_requirements.txt").read_text() == "lru-dict\n"
    service = yaml.safe_load((tmp_path / "ray" / "rayservice.yaml").read_text())
    env = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["valueFrom"]["secretKeyRef"] == {"name": "msnb-inference-key", "key": "key"}
    assert service["spec"]["rayClusterConfig"]["authOptions"] == {"mode": "token"}

    code, _, err = run(capsys, "export", echo, echo, "--ray", tmp_path / "twice")
    assert code == 1 and "another archive already has the model name 'echo'" in err and "Hint:" in err
    assert not (tmp_path / "twice").exists() or not any((tmp_path / "twice").iterdir())
    code, _, err = run(capsys, "export", echo, "-o", tmp_path / "store")
    assert code == 2 and "archives with --ray OUT" in err


def test_export_ray_sizes_each_model_and_prints_what_the_application_needs_and_the_steps_with_the_key(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    nb = standard(tmp_path / "nb", handler("first", "--workers 2"), handler("second"), handler("third"))
    code, out, err = run(
        capsys,
        "export",
        nb,
        "--ray",
        tmp_path / "ray",
        "--ray-port",
        "8123",
        "--num-cpus",
        "0.25",
        "--num-cpus",
        "second=1",
        "--num-gpus",
        "third=0.5",
        "--memory",
        "first=512Mi",
    )
    assert code == 0, err
    apps = {
        a["name"]: a["args"]
        for a in yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())["applications"]
    }
    assert apps["first"] == {"model_dir": "first", "version": "1.0", "num_cpus": 0.25, "memory": 512 * 1024**2}
    assert apps["second"] == {"model_dir": "second", "version": "1.0", "num_cpus": 1.0}
    assert apps["third"] == {"model_dir": "third", "version": "1.0", "num_cpus": 0.25, "num_gpus": 0.5}
    assert (
        "The application needs 1.75 CPU, 1 GiB memory, 0.5 GPU in all (first 2 x 0.25 CPU, 0.5 GiB memory; second 1 x "
        "1 CPU; third 1 x 0.25 CPU, 0.5 GPU; the router 0 CPU)." in out
    )
    assert 'export MSNB_INFERENCE_KEY="$(python' in out and "\n  serve run serve_config.yaml\n" in out
    service = yaml.safe_load((tmp_path / "ray" / "rayservice.yaml").read_text())
    container = service["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    ref = next(e for e in container["env"] if e["name"] == "MSNB_INFERENCE_KEY")["valueFrom"]["secretKeyRef"]
    # the printed Secret is the one the manifest gives the router, and the manifest is applied from the folder
    assert f"kubectl create secret generic {ref['name']} --from-literal={ref['key']}=" in out
    assert "\n  kubectl apply -f rayservice.yaml\n" in out
    assert "http://127.0.0.1:8123/predictions/first" in out


def test_export_ray_packs_models_as_msnb_serve_does_and_prints_each_set_with_its_members(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    from helpers import ECHO, build_mar

    config = tmp_path / "model-config.yaml"
    config.write_text("minWorkers: 2\nmaxWorkers: 2\n")
    mars = [build_mar(tmp_path / n, n, ECHO) for n in ("a", "b", "c", "d")]
    mars.append(build_mar(tmp_path / "two", "two", ECHO, extra_args=("--config-file", str(config))))
    streams = "def handle(data, context):\n    context.send_intermediate_predict_response\n    return data\n"
    mars.append(build_mar(tmp_path / "s", "s", streams))
    code, out, err = run(
        capsys,
        "export",
        *mars,
        "--ray",
        tmp_path / "ray",
        "--models-per-replica",
        "2",
        "--loaded-per-replica",
        "1",
        "--own-replica",
        "d",
    )
    assert code == 0, err
    written = yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())
    apps = {a["name"]: a["args"] for a in written["applications"]}
    # d by name and the streaming s alone; two sets of at most 2; "two" (2 workers) not with the 1-worker models
    assert list(apps) == ["d", "s", "msnb-models-1", "msnb-models-2", "msnb-models-3", "msnb-router"]
    assert [[m["app"] for m in apps[f"msnb-models-{n}"]["models"]] for n in (1, 2, 3)] == [["a", "b"], ["c"], ["two"]]
    assert {apps[f"msnb-models-{n}"]["max_num_models_per_replica"] for n in (1, 2, 3)} == {1}
    assert apps["msnb-router"]["sets"] == {
        "a": "msnb-models-1",
        "b": "msnb-models-1",
        "c": "msnb-models-2",
        "two": "msnb-models-3",
    }
    c = REPLICA_CPUS
    assert (
        f"The application needs {round(6 * c, 4):g} CPU in all (d 1 x {c:g} CPU; s 1 x {c:g} CPU; msnb-models-1 (a, b)"
        f" 1 x {c:g} CPU; msnb-models-2 (c) 1 x {c:g} CPU; msnb-models-3 (two) 2 x {c:g} CPU; the router 0 CPU)." in out
    )
    assert "http://127.0.0.1:8000/predictions/d" in out  # a model's name in the printed request, never a set's
    service = yaml.safe_load((tmp_path / "ray" / "rayservice.yaml").read_text())
    assert yaml.safe_load(service["spec"]["serveConfigV2"])["applications"] == written["applications"]

    code, out, err = run(capsys, "export", *mars[:3], "--ray", tmp_path / "alone", "--models-per-replica", "1")
    assert code == 0, err  # a replica per model, as before packing
    written = yaml.safe_load((tmp_path / "alone" / "serve_config.yaml").read_text())
    assert [a["name"] for a in written["applications"]] == ["a", "b", "c", "msnb-router"]
    assert "sets" not in written["applications"][-1]["args"]


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--num-cpus", "nope=1", "--num-cpus names nope, which this export does not hold"),
        ("--memory", "lots", "--memory 'lots' is not a size Ray can place"),
        ("--num-gpus", "echo=-1", "--num-gpus 'echo=-1' is not a size Ray can place"),
        ("--own-replica", "nope", "--own-replica names nope, which this export does not hold"),
        ("--models-per-replica", "0", "--models-per-replica 0 is not a number of models"),
        ("--loaded-per-replica", "-1", "--loaded-per-replica -1 is not a number of models"),
    ],
)
def test_export_ray_refuses_a_size_it_cannot_use_with_a_hint(tmp_path, capsys, option, value, says):
    pytest.importorskip("ray.serve")
    from helpers import ECHO, build_mar

    echo = build_mar(tmp_path / "echo", "echo", ECHO)
    code, _, err = run(capsys, "export", echo, "--ray", tmp_path / "ray", option, value)
    assert code != 0 and says in err and "Hint:" in err
    assert not (tmp_path / "ray").exists() or not any((tmp_path / "ray").iterdir())


def test_a_router_built_without_a_key_is_refused_with_a_hint_before_any_replica_starts(monkeypatch):
    pytest.importorskip("ray.serve")
    from msnb.templates.msnb_runtime.ray import app as ray_app
    from msnb.templates.msnb_runtime.ray.token_interceptor import KEY_FILE_VAR, KEY_VAR, KeyMissingError

    for var in (KEY_VAR, KEY_FILE_VAR):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(KeyMissingError, match=f"no inference key. Hint: give the router an inference key: .*{KEY_VAR}"):
        ray_app.router({"max_request_size": 10})
    monkeypatch.setenv(KEY_VAR, "k")
    assert ray_app.router({}) is not None


def test_what_no_node_can_hold_is_refused_with_what_was_asked_and_what_fits_is_not():
    from msnb.templates.msnb_runtime.ray.runtime_env import GIB, asked, refusal

    nodes = [{"CPU": 1.0, "memory": 4 * GIB}, {"CPU": 1.0, "memory": 4 * GIB, "msnb_head": 1.0}]
    assert refusal("a", asked({"num_cpus": 0.1}), 12, nodes) is None
    assert refusal("a", asked({"num_cpus": 1, "resources": {"msnb_head": 0.01}}), 1, nodes) is None
    assert refusal("a", asked({"num_cpus": 0.1, "num_gpus": 1}), 1, nodes) == (
        "A replica of a asks for 0.1 CPU, 1 GPU; no node of this cluster has that (the most one node has: 1 CPU, 0 GPU)."
    )
    assert "(the most one node has: 4 GiB memory)" in refusal("a", asked({"memory": 8 * GIB}), 1, nodes)
    assert refusal("a", asked({"num_cpus": 0.5}), 5, nodes) == (
        "The 5 replicas of a ask for 2.5 CPU in all; the whole cluster has 2 CPU."
    )


def test_requirements_the_node_satisfies_are_not_installed_again_nor_a_second_torch():
    from msnb.templates.msnb_runtime.ray.runtime_env import missing

    wanted = ["numpy", "torch==1.0.0", "msnb-absent-package-xyz==1.0", "numpy<1", "pyyaml>=5"]
    assert missing(wanted) == ["msnb-absent-package-xyz==1.0", "numpy<1"]


def test_model_config_workers_and_device_type_size_the_exported_replicas(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    from helpers import ECHO, build_mar

    config = tmp_path / "model-config.yaml"
    config.write_text(
        "minWorkers: 3\nmaxWorkers: 3\ndeviceType: gpu\n"
    )  # TorchServe's settings, as its docs write them
    gpu = build_mar(tmp_path / "gpu", "gpu", ECHO, extra_args=("--config-file", str(config)))
    code, out, err = run(capsys, "export", gpu, "--ray", tmp_path / "ray", "--num-gpus", "gpu=0.5")
    assert code == 0, err
    assert "The application needs 0.3 CPU, 1.5 GPU in all (gpu 3 x 0.1 CPU, 0.5 GPU; the router 0 CPU)." in out
    code, out, err = run(capsys, "export", gpu, "--ray", tmp_path / "default")
    assert code == 0, err
    assert "(gpu 3 x 0.1 CPU, 1 GPU; the router 0 CPU)" in out  # deviceType: gpu asks each replica for one GPU


def test_export_ray_writes_the_image_rayservice_runs_and_the_key_from_the_printed_secret(tmp_path, capsys):
    # What a RayService is checked for without Kubernetes (docs/ray.md, KubeRay): the manifest's parts that this
    # machine can hold against their sources; KubeRay itself and an image build need a cluster and a registry.
    pytest.importorskip("ray.serve")
    import ray
    from helpers import ECHO, build_mar

    needs = build_mar(tmp_path / "needs", "needs", ECHO, requirements=["lru-dict"])
    plain = build_mar(tmp_path / "plain", "plain", ECHO)
    code, out, err = run(capsys, "export", needs, plain, "--ray", tmp_path / "ray")
    assert code == 0, err
    service = yaml.safe_load((tmp_path / "ray" / "rayservice.yaml").read_text())
    config = yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())
    assert yaml.safe_load(service["spec"]["serveConfigV2"])["applications"] == config["applications"]
    assert service["spec"]["rayClusterConfig"]["rayVersion"] == ray.__version__
    cluster = service["spec"]["rayClusterConfig"]
    containers = [
        g["template"]["spec"]["containers"][0] for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    ]
    image, workdir = containers[0]["image"], containers[0]["workingDir"]
    assert all((c["image"], c["workingDir"]) == (image, workdir) for c in containers)
    lines = (tmp_path / "ray" / "Dockerfile").read_text().splitlines()
    steps = [line for line in lines if line and not line.startswith("#")]
    assert steps[0] == f"FROM rayproject/ray:{ray.__version__}-py311-cpu"
    torch, torchserve = (f"{n}=={metadata.version(n).split('+')[0]}" for n in ("torch", "torchserve"))
    assert f"pip install --no-cache-dir {torch} --index-url https://download.pytorch.org/whl/cpu" in steps[1]
    assert f"pip install --no-cache-dir {torchserve}" in steps[1]
    assert f"WORKDIR {workdir}" in steps and f"COPY --chown=ray:users . {workdir}" in steps
    installs = [step.split(" -r ")[1] for step in steps if " -r " in step]
    assert installs == [f"{workdir}/needs/needs_requirements.txt"]  # plain has none
    assert (tmp_path / "ray" / "needs" / "needs_requirements.txt").read_text() == "lru-dict\n"
    # the printed steps build the image the manifest names, and make the Secret its containers read the key from
    assert f"docker build -t {image} . && docker push {image}" in lines[0] and f"\n  docker build -t {image} ." in out
    for container in containers:
        ref = next(e for e in container["env"] if e["name"] == "MSNB_INFERENCE_KEY")["valueFrom"]["secretKeyRef"]
        assert (
            f'\n  kubectl create secret generic {ref["name"]} --from-literal={ref["key"]}="$MSNB_INFERENCE_KEY"\n'
            in out
        )
