"""`msnb export --ray`: a folder that `serve run serve_config.yaml` serves, validated by Ray's own schema."""

from __future__ import annotations

import sys

import pytest
import yaml
from helpers import handler, run, standard

from msnb.engines.ray import INSTALL_HINT
from msnb.templates.msnb_serving import DEFAULT_MAX_BYTES


def test_export_ray_writes_model_folders_the_adapter_and_a_serve_config(tmp_path, capsys):
    pytest.importorskip("ray.serve")
    from ray.serve.schema import ServeDeploySchema

    nb = standard(tmp_path / "nb", handler("first"), handler("second", "--version 2.1 --batch-size 4"))
    code, out, err = run(capsys, "export", nb, "--ray", tmp_path / "ray")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "ray").iterdir())
    assert names == [
        "first",
        "msnb_api_embeddings.py",  # OpenAI's /v1 and MCP's /mcp, answered by the router
        "msnb_api_mcp.py",
        "msnb_api_openai.py",
        "msnb_api_responses.py",
        "msnb_api_v1.py",
        "msnb_api_wire.py",
        "msnb_names.py",
        "msnb_ray.py",
        "msnb_ray_api.py",
        "msnb_ray_context.py",
        "msnb_ray_guard.py",
        "msnb_ray_http.py",  # a prediction's way through a door, bodies and answers
        "msnb_ray_load.py",
        "msnb_ray_sequence.py",
        "msnb_ray_stream.py",
        "msnb_ray_timeout.py",  # responseTimeout
        "msnb_serving.py",  # TorchServe's defaults, as the shared handler reads them
        "rayservice.yaml",
        "second",
        "serve_config.yaml",
    ]
    assert "serve run serve_config.yaml" in out
    for name in ("first", "second"):  # the engine-neutral model folder, as TorchServe registers it
        folder = tmp_path / "ray" / name
        assert {"handler_model.py", "msnb_handler.py", "model.pt", "model-config.yaml", "msnb_api.json"} <= {
            p.name for p in folder.iterdir()
        }
        assert (folder / "MAR-INF" / "MANIFEST.json").is_file() and not (folder / "msnb_ray.py").exists()
    config = yaml.safe_load((tmp_path / "ray" / "serve_config.yaml").read_text())
    ServeDeploySchema.model_validate(config)
    assert config["http_options"]["host"] == "127.0.0.1"
    apps = {app["name"]: app for app in config["applications"]}
    assert (
        apps["second"]["args"] == {"model_dir": "second", "version": "2.1"} and apps["second"]["route_prefix"] is None
    )
    assert apps["msnb-router"]["route_prefix"] == "/"
    # the router asks for a key read on the cluster (no secret in the config) and refuses TorchServe's large bodies
    assert apps["msnb-router"]["args"] == {"max_request_size": DEFAULT_MAX_BYTES}
    service = yaml.safe_load((tmp_path / "ray" / "rayservice.yaml").read_text())
    assert service["kind"] == "RayService"
    cluster = service["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token"}  # Ray's own token authentication, by the operator
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        env = group["template"]["spec"]["containers"][0]["env"]
        assert {"name": "MSNB_INFERENCE_KEY", "valueFrom": {"secretKeyRef": {"name": "msnb-inference-key",
                                                                             "key": "key"}}} in env  # fmt: skip
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
    assert apps["echo"]["args"] == {"model_dir": "echo", "version": "1.0"}
    assert apps["other"]["args"] == {"model_dir": "other", "version": "2.0"}
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
