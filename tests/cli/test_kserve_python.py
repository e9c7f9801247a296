"""`msnb export A.mar --kserve-python OUT` served by KServe's own Python model server — the real `kserve` package, in
an environment of its own made from OUT/requirements.txt (KServe's pins collide with msnb's) — answering KServe's v1
and v2 protocols exactly as TorchServe's KServe runtime does: a plain TorchServe with the kserve (v1) or kservev2 (v2)
service_envelope serving the same archive."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
import torch
import ts_archives
from helpers import run

from msnb.engines.torchserve import LocalServer

pytestmark = [pytest.mark.server, pytest.mark.one_python]
# One handler for both protocols: v1 rows are the request's instances ({"x": [...]}), v2 rows its inputs ({"name",
# "shape", "datatype", "data"}), as TorchServe's KServe envelopes hand them over.
LINEAR = textwrap.dedent("""
    import torch

    model = None

    def handle(data, context):
        global model
        if data is None:
            torch.manual_seed(0)
            model = torch.nn.Linear(2, 1)
            return None
        rows = torch.tensor([row["x"] if "x" in row else row["data"] for row in data], dtype=torch.float32)
        return [[round(v, 5) for v in out.tolist()] for out in model(rows)]
""")
V1 = {"instances": [{"x": [1.0, 2.0]}, {"x": [0.5, -3.0]}]}
V2 = {"id": "r1", "inputs": [{"name": "input-0", "shape": [2], "datatype": "FP32", "data": [1.0, 2.0]}]}
REQUESTS = [  # (protocol, path, body): the same URLs on TorchServe's KServe runtime and on KServe's server
    ("kserve", "/v1/models/linear:predict", V1),
    ("kserve", "/v1/models/linear:explain", {"instances": [{"x": [4.0, 0.0]}]}),
    ("kservev2", "/v2/models/linear/infer", V2),
]
# Run inside a network namespace of its own (KServe binds its REST port to 0.0.0.0 unconditionally): the predictor
# from OUT, each request once it is ready, the answers printed as JSON.
DRIVER = textwrap.dedent("""
    import json, subprocess, sys, time, urllib.error, urllib.request
    out, requests = sys.argv[1], json.loads(sys.argv[2])
    server = subprocess.Popen([sys.executable, "kserve_predictor.py", "--http_port", "8080", "--enable_grpc", "false"],
                              cwd=out)
    def call(path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:8080" + path, data=data,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if call("/v1/models/linear")[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit("the predictor did not start")
            time.sleep(0.5)
        print(json.dumps([call(path, body) for path, body in requests]))
    finally:
        server.terminate()
        server.wait(30)
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(the archive torch-model-archiver made, the export folder to write)."""
    root = tmp_path_factory.mktemp("kserve-python")
    handler = root / "linear" / "linear_handler.py"
    handler.parent.mkdir()
    handler.write_text(LINEAR)
    subprocess.run(
        ts_archives.archiver(root / "linear", "linear", str(handler)),
        check=True,
        capture_output=True,
        timeout=180,
        env=ts_archives._env(root / "linear"),
    )
    return root / "linear" / "linear.mar", root / "out"


def kserve_python(requirements: Path) -> Path:
    """An environment of its own with ``requirements`` (OUT/requirements.txt) installed by pip, as the predictor's user
    makes it. It is layered on this test environment (a ``.pth`` file puts this environment's site-packages after its
    own): torch and TorchServe, pinned to this environment's versions, are found installed (a second 1.4 GB copy of
    torch took minutes of CI); pip installs
    KServe and every package whose version KServe pins otherwise, which then shadows this environment's. That the
    predictor needs nothing the file does not name is checked on its imports
    (``test_the_predictor_imports_only_what_its_requirements_name``). Created once per distinct file and kept beside
    pip's cache (a half-built one, without its stamp, is made again), so a later run on the machine reuses it."""
    text = requirements.read_text()
    key = hashlib.sha256(f"{sys.version_info[:2]}{sys.prefix}{text}".encode()).hexdigest()[:12]
    cache = Path(os.environ.get("PIP_CACHE_DIR") or Path.home() / ".cache" / "pip").expanduser()
    root = cache.parent / f"msnb-kserve-python-{key}"
    python, stamp = root / "bin" / "python", root / "msnb-installed"
    if not stamp.is_file():
        shutil.rmtree(root, ignore_errors=True)
        venv.EnvBuilder(with_pip=True).create(root)
        own = next(root.glob("lib/python*/site-packages"))
        (own / "msnb-test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        done = subprocess.run(
            [python, "-m", "pip", "install", "-q", "-r", requirements], capture_output=True, text=True, timeout=1500
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        stamp.write_text(text)
    return python


def without_nulls(value):
    """KServe's v2 JSON writes unset members (``parameters``) as null; TorchServe's leaves them out."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return [without_nulls(v) for v in value] if isinstance(value, list) else value


@pytest.mark.timeout(1500)
def test_an_archive_exported_for_kserves_python_server_answers_v1_and_v2_as_torchserves_kserve_runtime(
    exported, capsys, tmp_path
):
    mar, out = exported
    code, said, err = run(capsys, "export", mar, "--kserve-python", out)
    assert code == 0, err
    assert "python kserve_predictor.py" in said
    assert {p.name for p in out.iterdir()} == {
        "linear",
        "kserve_predictor.py",
        "msnb_runtime",  # the runtime package's kserve room and the handler names it reads
        "requirements.txt",
    }
    assert sorted(p.name for p in (out / "msnb_runtime").iterdir() if p.is_dir()) == ["handler", "kserve"]
    requirements = (out / "requirements.txt").read_text().splitlines()
    assert {"kserve==0.21.0", "torch==2.13.0", "torchserve==0.12.0"} <= set(requirements)
    python = kserve_python(out / "requirements.txt")

    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    asked = json.dumps([[path, body] for _, path, body in REQUESTS])
    done = subprocess.run(
        [shutil.which("unshare"), "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', python, driver, out, asked],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    on_kserve = without_nulls(json.loads(done.stdout.strip().splitlines()[-1]))

    truth = []
    for envelope in ("kserve", "kservev2"):
        with LocalServer(tmp_path / envelope, properties={"service_envelope": envelope}) as torchserve:
            torchserve.register(mar)
            for protocol, path, body in REQUESTS:
                if protocol == envelope:
                    resp = torchserve.client.call("POST", f"{torchserve.inference_url}{path}", "inference", json=body)
                    truth.append([resp.status_code, resp.json()])
    order = [i for envelope in ("kserve", "kservev2") for i, r in enumerate(REQUESTS) if r[0] == envelope]
    on_kserve = [on_kserve[i] for i in order]
    assert on_kserve == truth
    torch.manual_seed(0)  # the handler's own computation: plain torch on the same seed and input
    linear = torch.nn.Linear(2, 1)
    expected = [[round(v, 5) for v in linear(torch.tensor(i["x"])).tolist()] for i in V1["instances"]]
    assert on_kserve[0] == [200, {"predictions": expected}]


def test_a_notebook_or_a_corrupt_archive_is_refused_with_a_hint_and_nothing_is_written(exported, capsys, tmp_path):
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text("{}")
    code, _, err = run(capsys, "export", notebook, "--kserve-python", tmp_path / "out")
    assert code != 0 and "--kserve-python takes archives" in err and "Hint:" in err
    corrupt = ts_archives.truncated(exported[0], tmp_path / "corrupt.mar")
    code, _, err = run(capsys, "export", corrupt, "--kserve-python", tmp_path / "out")
    assert code != 0 and "not a readable model archive" in err and "Hint:" in err
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_the_predictor_imports_only_what_its_requirements_name():
    """What the predictor imports beyond the standard library is what OUT/requirements.txt installs: KServe and
    TorchServe (``ts``); torch comes with both."""
    import ast
    from importlib import resources

    root = resources.files("msnb.templates")
    entry, room = root / "kserve_predictor.py", root / "msnb_runtime" / "kserve" / "predictor.py"
    names: set[str] = set()
    for tree in (ast.parse(entry.read_text()), ast.parse(room.read_text())):
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    # the runtime package it sits beside (its relative imports: the shared handler's names)
    tops = {name.split(".")[0] for name in names} - set(sys.stdlib_module_names) - {"__future__", "msnb_runtime"}
    assert tops == {"kserve", "ts"}
