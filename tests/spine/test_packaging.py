"""The project installs as a wheel that carries templates/, and environment.yml states pyproject's pins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_environment_yml_pins_agree_with_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert [p for p in pip if not p.startswith("-e")] == deps
    assert "python=3.11" in conda and "openjdk=17" in conda
    assert {"torch==2.13.0", "torchserve==0.12.0", "torch-model-archiver==0.12.0"} <= set(deps)


def test_wheel_ships_templates_and_builds_a_mar_outside_the_source_tree(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        check=True,
        cwd=tmp_path,
    )
    wheel = next(wheels.glob("msnb-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {"msnb/templates/msnb_handler.py", "msnb/templates/handler_model.py.tmpl"} <= set(names)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)], check=True
    )
    script = textwrap.dedent("""
        import msnb, zipfile
        from msnb.spec import spec_from_source
        from msnb.archive import build
        import msnb.torchserve, msnb.widget.fields
        from msnb.demo import quickstart_notebook
        assert msnb.__file__.startswith(SITE), msnb.__file__
        assert str(quickstart_notebook()).startswith(SITE) and quickstart_notebook().is_file()
        src = "import torch\\ndef init_function():\\n    return torch.nn.Linear(2, 1)\\n"
        mar = build(spec_from_source("wheeltest", src), "out")
        print(sorted(zipfile.ZipFile(mar).namelist()))
    """).replace("SITE", repr(str(site)))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", script], cwd=outside, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "'msnb_handler.py'" in done.stdout and "'handler_model.py'" in done.stdout
