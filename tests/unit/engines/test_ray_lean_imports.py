"""What msnb's Ray processes leave out of their imports: jsonschema still imports, and what it checks still checks, but
the grammar module that took seconds in every Ray process is not built."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from msnb.engines.ray.nodes import SKIPPED_IMPORTS, write_lean

PROBE = """
import sys, jsonschema
print(sorted(set(sys.modules) & {names!r}))
jsonschema.validate({{"a": 1}}, {{"type": "object", "properties": {{"a": {{"type": "integer"}}}}}})
try:
    jsonschema.validate({{"a": "x"}}, {{"type": "object", "properties": {{"a": {{"type": "integer"}}}}}})
except jsonschema.ValidationError:
    print("refused")
"""


def probe(env: dict) -> list[str]:
    code = PROBE.format(names=set(SKIPPED_IMPORTS))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


def test_a_ray_process_imports_jsonschema_without_the_grammar_module_and_still_validates(tmp_path):
    installed = sorted(n for n in SKIPPED_IMPORTS if importlib.util.find_spec(n))
    plain = probe(dict(os.environ))
    assert plain[0] == str(installed) and plain[1] == "refused"  # what is installed, jsonschema imports
    lean = probe({**os.environ, "PYTHONPATH": str(write_lean(tmp_path))})
    assert lean[0] == "[]" and lean[1] == "refused"


DRIVER_PROBE = """
import sys
import msnb.engines.ray as ray_engine
ray_engine.require()
import jsonschema
print(type(sys.modules.get("rfc3987_syntax")).__name__)
checker = jsonschema.FormatChecker()
for iri in ("http://example.com/\\u00e4", "http://exa mple.com/<>"):
    try:
        jsonschema.validate(iri, {"type": "string", "format": "iri"}, format_checker=checker)
        print("valid")
    except jsonschema.ValidationError:
        print("refused")
print(type(sys.modules["rfc3987_syntax"]).__name__)
"""


def test_msnbs_own_process_imports_ray_without_building_the_grammar_and_still_checks_an_iri():
    if importlib.util.find_spec("rfc3987_syntax") is None or importlib.util.find_spec("ray") is None:
        pytest.skip("rfc3987_syntax or ray is not installed: nothing is deferred")
    done = subprocess.run([sys.executable, "-c", DRIVER_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # not imported by Ray's import; the first iri checked imports it, and checks as jsonschema always did
    assert done.stdout.split() == ["Deferred", "valid", "refused", "module"], done.stdout


def test_serves_client_waits_ask_the_controller_every_tenth_of_a_second_once_msnb_imported_ray():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    code = "import msnb.engines.ray as r; r.require(); from ray.serve._private import client; "
    code += "print(client.CLIENT_POLLING_INTERVAL_S == r.SERVE_POLL_S < 1)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"], done.stdout  # (Serve's own: once a second)
