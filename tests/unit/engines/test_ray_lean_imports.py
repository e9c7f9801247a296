"""What msnb's Ray processes leave out of their imports: jsonschema still imports, and what it checks still checks, but
the grammar module that took seconds in every Ray process is not built."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

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
