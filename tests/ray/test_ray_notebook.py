"""`%ms_serve NAME --engine ray` in a real IPython shell and a real Jupyter kernel: serve, predict, edit,
redeploy, stop, and a killed kernel leaving no process behind."""

from __future__ import annotations

import io
import logging
import re
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest
from helpers import mlp_class, notebook_answer, poll, processes_naming
from IPython.utils.capture import capture_output

from msnb.engines.ray import INSTALL_HINT
from msnb.errors import MsnbError

NET_CELL = "import torch\n" + mlp_class("RNet")
HANDLER = textwrap.dedent(
    """
    import torch

    def init_function(hidden=8):
        torch.manual_seed(0)
        return RNet(hidden)

    def preprocess(sample):
        return torch.tensor(sample["x"], dtype=torch.float32)

    def postprocess(output):
        return {"label": int(output.argmax())}
    """
)
LINE = """rmlp --example '{"x": [1, 2, 3, 4]}'"""


def truth(handler_source: str, x: list[float]) -> dict:
    """The notebook's own answer: its cells run here as plain Python (no msnb), then plain torch on RNet and the
    handler cell's own postprocess."""
    namespace: dict = {}
    exec(NET_CELL + handler_source, namespace)
    return notebook_answer(namespace["init_function"]().eval(), x, namespace["postprocess"], batched=False)


def cell(shell, source: str):
    return cell_printing(shell, source)[0]


def cell_printing(shell, source: str) -> tuple:
    """The cell's result and what it printed (its stdout and stderr, as the notebook shows them)."""
    with capture_output() as cap:
        result = shell.run_cell(source, store_history=True)
    assert result.success, f"{result.error_in_exec or result.error_before_exec}\n{cap.stdout}{cap.stderr}"
    return result.result, cap.stdout + cap.stderr


def other_ports(text: str, port: int) -> set[str]:
    """The loopback URLs in ``text`` whose port is not ``port``."""
    return {url for url in re.findall(r"127\.0\.0\.1:\d+", text) if url != f"127.0.0.1:{port}"}


@pytest.fixture
def serve_log():
    """What Ray Serve's logger prints in this process: its own handler writes to the stream it found when Serve was
    imported (in a kernel, the cell's output; in a test, pytest's capture), so a handler of the same logger reads it."""
    logger, text = logging.getLogger("ray.serve"), io.StringIO()
    handler = logging.StreamHandler(text)
    logger.addHandler(handler)
    yield text
    logger.removeHandler(handler)


def test_serve_predict_edit_redeploy_and_stop_on_ray_from_the_notebook(ip, last_ray_session, serve_log):
    cell(ip, NET_CELL)
    cell(ip, f"%%ms_handler {LINE}\n{HANDLER}")
    server, printed = cell_printing(ip, "%ms_serve rmlp --engine ray")
    root, port = server.root, server.http_port
    printed += serve_log.getvalue()
    assert "is ready at" not in printed and not other_ports(printed, port), printed  # Serve's proxy port: not shown
    assert cell(ip, "%ms_predict rmlp") == truth(HANDLER, [1, 2, 3, 4])
    assert cell(ip, "%ms_status")["server"]["engine"] == "ray"
    edited = HANDLER.replace('{"label": int(output.argmax())}', '{"label": int(output.argmax()), "edited": True}')
    cell(ip, f"%%ms_handler {LINE}\n{edited}")
    printed = cell_printing(ip, "%ms_serve rmlp")[1] + serve_log.getvalue()  # a rolling update
    assert "is ready at" not in printed and not other_ports(printed, port), printed
    answer = cell(ip, "%ms_predict rmlp")
    assert answer == truth(edited, [1, 2, 3, 4]) and answer["edited"] is True
    assert last_ray_session.logs("rmlp")  # the replicas' own log lines
    stopped = cell_printing(ip, "%ms_stop")[1] + serve_log.getvalue()
    assert "raylet" not in stopped and "failed" not in stopped.lower(), stopped  # a clean stop says nothing alarming
    assert poll(lambda: not processes_naming(root), 60, "every Ray process to end")
    assert not root.exists()


def test_a_load_error_on_ray_comes_back_with_its_hint_within_one_try(ip, ray_session):
    cell(ip, NET_CELL)
    broken = HANDLER.replace("torch.manual_seed(0)", "raise RuntimeError('weights are missing')")
    cell(ip, f"%%ms_handler rbroken\n{broken}")
    with pytest.raises(MsnbError) as info:
        ray_session.serve("rbroken", engine="ray")
    text = info.value.render()
    assert "weights are missing" in text and "Hint:" in text


def test_a_taken_port_is_refused_naming_the_port_and_the_option(ip, session):
    import socket

    cell(ip, NET_CELL)
    cell(ip, f"%%ms_handler {LINE}\n{HANDLER}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MsnbError, match=f"Port {port} on 127.0.0.1 is already in use") as info:
            session.serve("rmlp", engine="ray", port=port)
    assert "--port" in info.value.hint


def test_engine_ray_without_the_extra_names_it(ip, session, monkeypatch):
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)
    cell(ip, NET_CELL)
    cell(ip, f"%%ms_handler {LINE}\n{HANDLER}")
    with pytest.raises(MsnbError) as info:
        session.serve("rmlp", engine="ray")
    assert info.value.hint == INSTALL_HINT


def test_a_killed_kernel_leaves_no_ray_process_and_no_temp_dir(tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "kernel"))  # the kernel tier's notebook runner
    from nbrun import execute_notebook, stream_texts

    nb = nbformat.v4.new_notebook()
    sources = (
        "%load_ext msnb\nimport msnb",
        NET_CELL,
        f"%%ms_handler {LINE}\n{HANDLER}",
        "server = msnb.serve('rmlp', engine='ray')\nprint('ray root:', server.root)",
        "%ms_predict rmlp",
    )
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    (tmp_path / "ray.ipynb").write_text(nbformat.writes(nb))
    done = execute_notebook(
        tmp_path / "ray.ipynb",
        tmp_path / "run",
        timeout=300,
        shutdown="immediate",
        tmpdir=Path(tempfile.mkdtemp(prefix="msnb-nb-")),
    )
    lines = [line for text in stream_texts(done) for line in text.splitlines() if line.startswith("ray root:")]
    root = Path(lines[0].split(":", 1)[1].strip())
    poll(lambda: not processes_naming(root) and not root.exists(), 90, f"{root} and its Ray processes to go")
