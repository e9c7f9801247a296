"""Rules that keep answers and identities safe, checked with no server: strict JSON, valid versions, limits."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import MLP_MODEL, strict_loads

from msnb import options
from msnb.engines.models import encode
from msnb.engines.store import check_identity
from msnb.engines.torchserve import config as tsconfig
from msnb.errors import MsnbError, SpecError
from msnb.spec import spec_from_source
from msnb.trial import runner

RAW = MLP_MODEL + textwrap.dedent(
    """
    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return output.tolist()
    """
)


# ------------------------------------------------------------------ strict JSON
def test_an_overflowing_sample_fails_alone_with_a_hint_and_the_rest_of_the_batch_is_strict_json():
    spec = spec_from_source("raw", RAW)
    good, overflow = {"x": [1, 2, 3, 4]}, {"x": [1e39, 0, 0, 0]}  # 1e39 is inf in float32
    answers = runner.run_handler(spec, [good, overflow, good])
    assert [a.status for a in answers] == [200, 400, 200], "the input overflowed: the request is at fault"
    assert "NaN or Infinity" in answers[1].body["error"] and "overflow float32" in answers[1].body["hint"]
    for answer in answers:
        assert strict_loads(json.dumps(answer.body)) == answer.body


@pytest.mark.parametrize("payload", [float("nan"), {"x": [float("inf"), 1, 2, 3]}, [float("-inf")]])
def test_nan_and_infinity_are_refused_before_they_are_sent(payload):
    with pytest.raises(MsnbError, match="NaN or Infinity") as err:
        encode(payload)
    assert "Hint:" in str(err.value)
    with pytest.raises(MsnbError, match="NaN or Infinity"):  # %ms_test refuses them the same way
        runner.run_handler(spec_from_source("raw", RAW), [payload])


# ------------------------------------------------------------------ versions
BAD_VERSIONS = ["1/2", "1?x=y", "1#a", "", " ", "1.0 ", "../1", "%2F", "-1", ".1", "v 2"]
GOOD_VERSIONS = ["1.0", "2-beta", "v3_rc.1", "20261123"]


@pytest.mark.parametrize("version", BAD_VERSIONS)
def test_a_version_that_cannot_be_a_url_segment_is_refused_before_anything_is_built(version):
    with pytest.raises(SpecError, match="Model version") as err:
        spec_from_source("raw", RAW, version=version)
    assert "letters, digits" in str(err.value)
    with pytest.raises(MsnbError, match="Model version"):  # archives built elsewhere: refused at register
        check_identity("raw", version)


@pytest.mark.parametrize("version", BAD_VERSIONS[:3])
def test_the_handler_line_refuses_a_bad_version(version):
    args = options.parse_handler_line(f"raw --version '{version}'")
    with pytest.raises(SpecError, match="Model version"):
        spec_from_source("raw", RAW, version=args.version)


@pytest.mark.parametrize("version", GOOD_VERSIONS)
def test_ordinary_versions_are_accepted(version):
    assert spec_from_source("raw", RAW, version=version).version == version
    check_identity("raw", version)


# ------------------------------------------------------------------ limits
def test_size_limits_reach_config_properties(tmp_path):
    layout = tsconfig.Layout(tmp_path)
    tsconfig.write_config(
        layout, tsconfig.choose_ports(), auth=True, quiet_logs=True, limits=tsconfig.Limits(20_000_000, 30_000_000)
    )
    props = tsconfig.parse_properties(layout.config.read_text())
    assert props["max_request_size"] == "20000000" and props["max_response_size"] == "30000000"


@pytest.mark.parametrize("value", [0, -5, "10MB"])
def test_a_size_limit_must_be_a_positive_number_of_bytes(value):
    with pytest.raises(MsnbError, match="max_request_size"):
        tsconfig.Limits(value, None)
