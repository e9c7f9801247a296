"""Both engines implement the one ``Engine`` protocol the session, the widget and the CLI call."""

from __future__ import annotations

import inspect

import pytest
from standin.engine import StandIn

from msnb.engines.protocol import Engine
from msnb.engines.ray.engine import LocalRay
from msnb.engines.torchserve import LocalServer

MEMBERS = sorted(
    {n for n in vars(Engine) if not n.startswith("_")} | set(inspect.get_annotations(Engine)),
)


@pytest.mark.parametrize(
    "make", [lambda d: LocalServer(d), lambda d: LocalRay(), lambda d: StandIn()], ids=["torchserve", "ray", "standin"]
)
@pytest.mark.parametrize("member", MEMBERS)
def test_every_engine_has_every_member_of_the_protocol(make, member, tmp_path):
    assert member in dir(make(tmp_path))  # (a property such as client may refuse before the start)


def test_the_protocol_names_what_the_session_calls():
    assert {"redeploy", "free_version", "model_log", "progress_detail", "key_file", "versions"} <= set(MEMBERS)
    assert {"metrics", "inference_url", "management_url", "metrics_url", "openai_base_url", "mcp_url"} <= set(MEMBERS)


# TorchServe's metrics API (a handler metric labelled ModelName) and the Ray metrics replicas export (prefixed ray_,
# lowercased, tagged model_name; one series per replica).
TS_TEXT = """# HELP MsnbBatchFallback_total x
# TYPE MsnbBatchFallback_total counter
MsnbBatchFallback_total{ModelName="a",Level="Model",Hostname="h"} 2.0
MsnbBatchFallback_total{ModelName="b",Level="Model",Hostname="h"} 1.0
"""
RAY_TEXT = """# HELP ray_msnbbatchfallback_total x
# TYPE ray_msnbbatchfallback_total counter
ray_msnbbatchfallback_total{model_name="a",replica="r1"} 3.0
ray_msnbbatchfallback_total{model_name="a",replica="r2"} 1.0
ray_msnbbatchsize{model_name="a",replica="r1"} 4.0
"""


def test_each_engine_s_metrics_read_as_one_record_per_model():
    from msnb.engines.model_metrics import ModelMetrics, parse, per_model

    assert per_model(parse(TS_TEXT)) == {"a": ModelMetrics(fallbacks=2), "b": ModelMetrics(fallbacks=1)}
    assert per_model(parse(RAY_TEXT)) == {"a": ModelMetrics(fallbacks=4)}  # summed over the replicas


def test_a_status_line_counts_no_fallback_when_the_metrics_cannot_be_read_but_a_missing_member_fails():
    from msnb.engines.model_metrics import batch_fallbacks

    assert batch_fallbacks(LocalRay()) == {}  # Ray not running: nothing counted, no error

    class Unreadable(StandIn):
        def metrics(self):
            raise OSError("connection refused")

    assert batch_fallbacks(Unreadable()) == {}
    with pytest.raises(AttributeError):
        batch_fallbacks(object())  # an engine without metrics() is a bug, not zero fallbacks


def test_each_engine_says_its_kind_and_label():
    assert (LocalServer.kind, LocalServer.label) == ("torchserve", "TorchServe")
    assert (LocalRay.kind, LocalRay.label) == ("ray", "Ray Serve")


def test_an_unstarted_engine_is_an_engine(tmp_path):
    # Structurally, as Python 3.12's isinstance checks a protocol (inspect.getattr_static); 3.11's reads each member,
    # and an unstarted TorchServe's client refuses to be read (a ServerError that says to start it).
    for engine in (LocalServer(tmp_path), LocalRay()):
        missing = object()
        assert not [m for m in MEMBERS if inspect.getattr_static(engine, m, missing) is missing]
    assert isinstance(LocalRay(), Engine)


def test_the_registry_lists_each_engine_once_the_reference_first():
    from msnb.engines import registry

    assert registry.kinds()[:2] == ("torchserve", "ray")
    assert registry.reference().kind == "torchserve" and registry.counterpart("torchserve").kind == "ray"
    assert registry.get("torchserve").installed() and registry.get("torchserve").choice == "TorchServe"


def test_a_menu_names_an_engine_with_its_install_line_only_while_its_extra_is_missing():
    from dataclasses import replace

    from msnb.engines import registry
    from msnb.errors import MsnbError

    ray = registry.get("ray")
    assert ray.installed() and ray.choice == "Ray Serve"  # the test environment has the ray extra

    def missing():
        raise MsnbError("Ray Serve is not installed.", hint="pip install msnb[ray]")

    absent = replace(ray, require=missing)
    assert not absent.installed() and absent.choice == "Ray Serve (pip install msnb[ray])"


def test_an_unknown_engine_is_refused_with_the_engines_there_are():
    from msnb.engines import registry
    from msnb.errors import SpecError

    with pytest.raises(SpecError) as err:
        registry.get("triton")
    assert "Unknown engine 'triton'" in str(err.value) and "torchserve, ray" in err.value.render()
