"""A TorchServe user's config.properties and `torchserve --start` options, read as TorchServe reads them: its keys and
defaults kept, the command line over the file, and every key msnb cannot honour on Ray refused with a Hint naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run

from msnb.engines.ray import ts_start
from msnb.engines.ray.management import Management
from msnb.engines.ts_properties import DEFAULTS, check_addresses, parse, read
from msnb.errors import ServerError

USERS_FILE = r"""# a team's file, as TorchServe's docs write them
inference_address=http://127.0.0.1:8085
management_address = http://localhost:8086
metrics_address: http://127.0.0.1:8087
number_of_netty_threads=4
job_queue_size=10
model_store=$$MSNB_TEST_STORE$$
load_models=all
default_workers_per_model=2
enable_model_api=true
models={\
  "klass": {"1.0": {"marName": "klass.mar", "minWorkers": 3, "batchSize": 4}}\
}
"""


def written(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.properties"
    path.write_text(text)
    return path


def test_a_teams_config_file_is_read_as_torchserve_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MSNB_TEST_STORE", str(tmp_path / "store"))
    config = read(written(tmp_path, USERS_FILE))
    assert config.address("inference_address") == ("127.0.0.1", 8085)
    assert config.address("management_address") == ("localhost", 8086)
    assert config.address("metrics_address") == ("127.0.0.1", 8087)
    assert config.model_store == tmp_path / "store"  # $$VAR$$ replaced, as TorchServe does
    assert config.text("load_models") == "all" and config.number("default_workers_per_model") == 2
    assert config.per_model() == {"klass": {"1.0": {"marName": "klass.mar", "minWorkers": 3, "batchSize": 4}}}
    assert config.flag("enable_model_api") and config.auth  # token authorisation stays on unless the file says so
    assert config.number("max_request_size") == int(DEFAULTS["max_request_size"]) == 6553500  # TorchServe's default
    check_addresses(config, ts_start.ADDRESSES)


def test_the_command_line_wins_over_the_file_as_on_torchserve(tmp_path):
    config = read(written(tmp_path, "load_models=a.mar\nmodel_store=/elsewhere\n")).with_overrides(
        model_store=tmp_path, load_models=["x=a.mar", "b.mar"], disable_token_authorization=True, enable_model_api=None
    )
    assert config.model_store == tmp_path and not config.auth and not config.flag("enable_model_api")
    assert list(ts_start.startup_models(config)) == [("x", "a.mar"), (None, "b.mar")]


def test_load_models_all_takes_every_archive_of_the_store(tmp_path):
    for name in ("b.mar", "a.mar", "notes.txt"):
        (tmp_path / name).write_text("")
    (tmp_path / "folder" / "MAR-INF").mkdir(parents=True)
    config = read(None).with_overrides(model_store=tmp_path, load_models=["all"])
    assert list(ts_start.startup_models(config)) == [(None, "a.mar"), (None, "b.mar"), (None, "folder")]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("certificate_file=/etc/cert.pem", "certificate_file is a TorchServe setting msnb cannot honour"),
        ("grpc_inference_port=7070", "grpc_inference_port is a TorchServe setting msnb cannot honour"),
        ("inference_adress=http://127.0.0.1:1", "inference_adress is a TorchServe setting msnb cannot honour"),
        ("model_store=$$MSNB_UNSET_VARIABLE$$", "names the environment variable MSNB_UNSET_VARIABLE"),
    ],
)
def test_a_key_msnb_cannot_honour_is_refused_at_start_with_a_hint_naming_it(tmp_path, line, said):
    with pytest.raises(ServerError) as err:
        read(written(tmp_path, line + "\n"))
    assert said in str(err.value) and "Hint:" in str(err.value)


@pytest.mark.parametrize(
    ("line", "said", "key"),
    [
        (
            "inference_address=http://0.0.0.0:8080\ndisable_token_authorization=true",
            "inference_address binds 0.0.0.0 while token authorisation is off",
            "inference_address",
        ),
        (
            "management_address=http://10.1.2.3:8081\ndisable_token_authorization=true",
            "management_address binds 10.1.2.3 while token authorisation is off",
            "management_address",
        ),
        ("management_address=https://127.0.0.1:8443", "is not an http://HOST:PORT address", "management_address"),
        ("max_response_size=100", "max_response_size cannot be honoured on Ray", "max_response_size"),
        ("default_workers_per_model=two", "default_workers_per_model=two is not a whole number", ""),
        ("models={not json", "models= is not JSON", "models"),
    ],
)
def test_a_value_msnb_cannot_honour_is_refused_before_ray_starts(tmp_path, line, said, key):
    config = read(written(tmp_path, line + "\n"))
    with pytest.raises(ServerError) as err:
        ts_start.engine_for(config)
        config.number("default_workers_per_model")
        config.per_model()
    assert said in str(err.value) and "Hint:" in str(err.value) and key in str(err.value)


def test_addresses_off_loopback_are_honoured_while_the_key_is_on(tmp_path):
    lines = "inference_address=http://0.0.0.0:8085\nmanagement_address=http://0.0.0.0:8086\n"
    engine = ts_start.engine_for(read(written(tmp_path, lines)))  # not started: where it will listen
    assert (engine.host, engine.http_port) == ("0.0.0.0", 8085)
    assert engine.inference_url == "http://127.0.0.1:8085"  # a client here reaches every interface on loopback


def test_serve_refuses_an_address_off_loopback_without_the_key_naming_the_key(tmp_path, capsys):
    config = written(tmp_path, "inference_address=http://0.0.0.0:8085\n")
    code, out, err = run(capsys, "serve", "--engine", "ray", "--ts-config", config, "--disable-token-auth")
    assert code == 1 and "inference_address binds 0.0.0.0 while token authorisation is off" in err, (out, err)
    assert "Hint: turn the key back on (drop --disable-token-auth" in err and "(the key: inference_address)" in err


def test_torchserves_start_options_are_refused_on_the_torchserve_engine(tmp_path, capsys):
    code, _, err = run(capsys, "serve", "--model-store", tmp_path, "--models", "all")
    assert code == 2 and "TorchServe's start options are for --engine ray" in err and "Hint:" in err


def test_serve_without_anything_to_serve_says_what_to_give(capsys):
    code, _, err = run(capsys, "serve", "--engine", "ray")
    assert code == 2 and "needs a PATH" in err and "Hint:" in err


def test_parse_follows_javas_properties_format():
    text = "! comment\n# comment\n\nkey1 = a=b\nkey2:c\nkey3 d e\nlong=x\\\n    y\n"
    assert parse(text) == {"key1": "a=b", "key2": "c", "key3": "d e", "long": "xy"}


def test_a_management_call_without_the_key_is_refused_as_torchserve_refuses_it():
    api = Management(registry=None, model_api=True, key="secret")
    status, body = api.answer("GET", "/models", {}, "Bearer wrong")
    assert status == 400 and body["type"] == "InvalidKeyException"  # TorchServe's status (test_ray_management)
    assert api.answer("GET", "/nothing", {}, "Bearer secret")[0] == 404
    assert api.answer("PATCH", "/models", {}, "Bearer secret")[0] == 405


RAY_TEXT = """# TYPE ray_serve_deployment_request_counter_total counter
ray_serve_deployment_request_counter_total{application="named",deployment="MsnbModel",replica="a",route="/"} 2.0
ray_serve_deployment_request_counter_total{application="named",deployment="MsnbModel",replica="b",route="/"} 3.0
ray_serve_deployment_request_counter_total{application="msnb-router",deployment="MsnbRouter",replica="c",route="/"} 9.0
# TYPE ray_serve_deployment_processing_latency_ms histogram
ray_serve_deployment_processing_latency_ms_sum{application="named",deployment="MsnbModel",replica="a",route="/"} 1.5
ray_serve_deployment_processing_latency_ms_count{application="named",deployment="MsnbModel",replica="a",route="/"} 2.0
# TYPE ray_scaledrequests counter
ray_scaledrequests_total{model_name="named"} 4.0
"""


def test_ray_s_request_metrics_read_under_torchserve_s_prometheus_names():
    from prometheus_client.parser import text_string_to_metric_families

    from msnb.engines.ray.metrics import translate

    samples = {
        s.name: (s.labels, s.value)
        for family in text_string_to_metric_families(translate(RAY_TEXT, {"named": ("named", "1.0")}, "host"))
        for s in family.samples
    }
    labels = {"model_name": "named", "model_version": "1.0", "hostname": "host"}
    assert samples["ts_inference_requests_total"] == (labels, 5.0)  # both replicas; the router's requests not
    assert samples["ts_inference_latency_microseconds_total"] == (labels, 1500.0)  # (the parser's name of a counter)
    assert samples["scaledrequests_total"] == (labels, 4.0)  # the handler's own context.metrics
    assert not [
        name for name in samples if name.startswith("ts_queue_latency_microseconds")
    ]  # declared, no samples: Ray keeps no queue time


def test_msnb_serves_own_body_limit_option_wins_over_the_file_on_ray(tmp_path):
    import argparse

    from msnb.cli.serve_archives import ts_options

    args = argparse.Namespace(
        engine="ray",
        paths=[],
        ts_config=written(tmp_path, "max_request_size=100\n"),
        models=None,
        model_store=None,
        disable_token_authorization=None,
        enable_model_api=None,
        max_request_size=2048,
    )
    assert ts_options(args).number("max_request_size") == 2048
    args.max_request_size = None
    assert ts_options(args).number("max_request_size") == 100


def test_a_models_settings_come_from_the_call_then_models_json_then_its_model_config_then_the_defaults(tmp_path):
    from msnb.engines.ray.model_registry import Registry
    from msnb.engines.ray.ts_params import register_request

    folder = tmp_path / "klass"
    (folder / "MAR-INF").mkdir(parents=True)
    (folder / "MAR-INF" / "MANIFEST.json").write_text('{"model": {"modelName": "klass", "modelVersion": "1.0"}}')
    (folder / "model-config.yaml").write_text("batchSize: 4\nresponseTimeout: 30\n")
    per_model = 'models={"klass": {"1.0": {"minWorkers": 3, "maxBatchDelay": 7}}}\n'
    config = read(written(tmp_path, "default_workers_per_model=2\ndefault_response_timeout=60\n" + per_model))
    registry = Registry(engine=None, config=config, opener=None)
    assert registry._settings(folder, "klass", "1.0", None) == {"minWorkers": 3, "maxWorkers": 3, "maxBatchDelay": 7}
    given = register_request({"initial_workers": "1", "batch_size": "8", "max_batch_delay": "j"}, b"", "", 2)
    assert registry._settings(folder, "klass", "1.0", given) == {
        "minWorkers": 1,
        "maxWorkers": 1,
        "maxBatchDelay": 7,
        "batchSize": 8,
    }
    # as TorchServe's createModel: a batch size given as it is, the archive's responseTimeout over the one given
    odd = register_request({"initial_workers": "0", "batch_size": "0", "response_timeout": "77"}, b"", "", 2)
    expected = {"minWorkers": 0, "maxWorkers": 0, "maxBatchDelay": 7, "batchSize": 0}
    assert registry._settings(folder, "klass", "1.0", odd) == expected
    (folder / "model-config.yaml").write_text("minWorkers: 1\n")  # its own workers win over the default ...
    assert registry._settings(folder, "other", "1.0", None) == {"responseTimeout": 60}  # ... and the file's timeout
