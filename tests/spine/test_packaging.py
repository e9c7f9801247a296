"""The project installs as a wheel that carries templates/; pyproject.toml declares ranges, constraints.txt pins
the dev environment inside them, and environment.yml states the same pins."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import yaml
from helpers import build_wheel
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def constraints() -> dict[str, Version]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    return {canonicalize_name(r.name): Version(str(r.specifier).removeprefix("==")) for r in pins}


def test_constraints_pin_every_requirement_inside_its_declared_range():
    pins = constraints()
    extras = [req for group in PROJECT["optional-dependencies"].values() for req in group]
    for req in map(Requirement, PROJECT["dependencies"] + extras):
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} is outside {req}"
    assert str(pins["torch"]) == "2.13.0"  # the CPU wheel on the CI machines is 2.13.0+cpu, which == matches


def test_environment_yml_pins_agree_with_constraints():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [Requirement(p) for p in next(d["pip"] for d in env["dependencies"] if isinstance(d, dict)) if p[0] != "-"]
    pins = constraints()
    assert [canonicalize_name(r.name) for r in pip] == [
        canonicalize_name(Requirement(d).name) for d in PROJECT["dependencies"]
    ]
    assert all(str(r.specifier) == f"=={pins[canonicalize_name(r.name)]}" for r in pip), pip
    assert "python=3.11" in conda and "openjdk=17" in conda


def test_wheel_ships_templates_and_builds_a_mar_outside_the_source_tree(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = build_wheel(wheels)
    names = zipfile.ZipFile(wheel).namelist()
    assert {"msnb/templates/msnb_runtime/handler/handler.py", "msnb/templates/handler_model.py.tmpl"} <= set(names)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)], check=True
    )
    script = textwrap.dedent("""
        import msnb, zipfile
        from msnb.spec import spec_from_source
        from msnb.package.archive import build
        import msnb.engines.torchserve, msnb.ui.widget.fields
        from msnb.cli.demo import quickstart_notebook
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
    assert "'msnb_runtime/handler/handler.py'" in done.stdout and "'handler_model.py'" in done.stdout
