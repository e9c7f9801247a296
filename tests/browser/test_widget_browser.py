"""The build widget in a real browser: Voila serves widget_demo.ipynb, headless Chromium clicks the whole loop."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest
from helpers import poll

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "widget_demo.ipynb"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
PAYLOAD = '{"x": [0.5, -1.0, 2.0, 0.1]}'
ACTION_MS = 180_000  # one action (build, server start + registration) on a slow 2-core machine: bounded, generous

pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.timeout(900)]


def _require_chromium() -> None:
    if CHROMIUM.exists():
        return
    reason = f"{CHROMIUM} not found. Hint: apt-get install -y --no-install-recommends chromium (bash scripts/dev.sh test does)."
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    return bool(poll(lambda: proc.poll() is not None or listening(), timeout)) and proc.poll() is None


def _scratch_env(scratch: Path, short_tmp: Path) -> dict[str, str]:
    """Jupyter's dirs in ``scratch``; TMPDIR short: TorchServe's worker sockets live there (AF_UNIX max 107 bytes)."""
    env = dict(os.environ, TMPDIR=str(short_tmp), JUPYTER_PLATFORM_DIRS="1")
    for var in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        (scratch / var.lower()).mkdir(parents=True, exist_ok=True)
        env[var] = str(scratch / var.lower())
    return env


def _ours(scratch: Path) -> list[psutil.Process]:
    """Processes whose command line names ``scratch`` (this test's dir, or the server's workdir in it)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(scratch) in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


@pytest.fixture
def short_tmp():
    path = Path(tempfile.mkdtemp(prefix="msnb-w-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def voila(tmp_path, short_tmp):
    """Voila on a free 127.0.0.1 port serving a copy of the demo notebook; yields (url, kernel TMPDIR, log)."""
    _require_chromium()
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(NOTEBOOK, app / NOTEBOOK.name)
    env, log = _scratch_env(tmp_path, short_tmp), tmp_path / "voila.log"
    for _ in range(3):  # a free port can be taken between the probe and Voila's bind
        port = _free_port()
        with open(log, "ab") as out:  # never a pipe: the kernel and Java inherit it
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "voila",
                    NOTEBOOK.name,
                    "--no-browser",
                    f"--port={port}",
                    "--Voila.ip=127.0.0.1",
                    "--Voila.port_retries=0",
                ],
                cwd=app,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if _wait_port(port, proc, 60):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail(f"Voila did not start:\n{log.read_text()[-3000:]}")
    try:
        yield f"http://127.0.0.1:{port}/", short_tmp, log
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        for leftover in _ours(tmp_path) + _ours(short_tmp):  # only processes under this test's own dirs
            leftover.kill()


@pytest.fixture
def page(voila, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1000, "height": 2200},
        )
        # Only Voila on loopback: Voila's page asks a CDN for fonts, and nothing may leave the machine.
        context.route(re.compile(r"^(?!https?://127\.0\.0\.1[:/]).*"), lambda route: route.abort())
        try:
            yield context.new_page()
        finally:
            context.close()


def _artifacts() -> Path:
    path = Path(os.environ.get("MSNB_ARTIFACTS", ROOT / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _snap(page, state: str) -> None:
    """A picture of the widget in ``state`` (idle, error, serving, predict, stopped) for a person to look at."""
    page.locator(".msnb-widget").screenshot(path=str(_artifacts() / f"widget-{state}.png"))


def _fill(page, field: str, text: str) -> None:
    page.locator(f".msnb-field-{field} input, .msnb-field-{field} textarea").fill(text)


def _click_and_wait(page, action: str, expect: str, *, while_running: str | None = None) -> str:
    """Click a button, wait until the result area says ``expect`` and the buttons are back; return the result.

    ``while_running``: a progress step that must show while every button is disabled (the page is live).
    """
    page.locator(f".msnb-{action}").click()
    if while_running:
        page.wait_for_function(
            "s => [...document.querySelectorAll('.msnb-widget button')].every(b => b.disabled)"
            " && document.querySelector('.msnb-step').innerText.includes(s)",
            arg=while_running,
            timeout=ACTION_MS,
        )
    page.locator(".msnb-result", has_text=expect).wait_for(timeout=ACTION_MS)
    page.wait_for_function("!document.querySelector('.msnb-test').disabled", timeout=ACTION_MS)
    # a streamed answer's chunks show under "· receiving" until the whole answer (and its latency) replaces them: the
    # two reach the page as separate widget updates, in either order
    page.wait_for_function(
        "!document.querySelector('.msnb-result').innerText.includes(' · receiving')", timeout=ACTION_MS
    )
    return page.locator(".msnb-result").inner_text()


def test_the_whole_loop_from_the_widget_in_chromium(voila, page):
    url, kernel_tmp, log = voila
    try:
        page.goto(url, wait_until="domcontentloaded", timeout=120_000)
        page.locator(".msnb-widget").wait_for(timeout=180_000)  # Voila runs the notebook first
        assert page.locator(".msnb-predict").is_disabled()  # nothing served yet
        _snap(page, "idle")

        _fill(page, "batch_size", "0")  # a bad field: explained, nothing runs
        page.locator(".msnb-build").click()
        page.locator(".msnb-error-batch_size", has_text="must be >= 1").wait_for(timeout=30_000)
        _snap(page, "error")

        _fill(page, "batch_size", "2")
        _fill(page, "max_batch_delay", "20")
        _fill(page, "version", "2.0")
        _fill(page, "payload", PAYLOAD)
        local = _click_and_wait(page, "test", '"label"')
        assert '"score"' in local and local.startswith("Test · test process, no server · ")
        built = _click_and_wait(page, "build", "Built ")
        assert "widget_mlp.mar" in built
        _click_and_wait(page, "serve", "Serving widget_mlp v2.0 (digest ", while_running="starting TorchServe (Java)")
        status = page.locator(".msnb-status").inner_text()
        assert "serving widget_mlp v2.0 (digest " in status
        workdir = Path(re.search(r"workdir (\S+?)\)", status).group(1))
        assert kernel_tmp in workdir.parents and _ours(workdir)  # the Java server runs under the kernel's TMPDIR
        _snap(page, "serving")

        served = _click_and_wait(page, "predict", '"label"')
        assert served.startswith("Predict · served widget_mlp v2.0 (digest ")  # told apart from Test, with its latency
        assert re.match(r"Predict · .* · \d+(\.\d)? m?s\n", served), served
        assert _answer(served) == _answer(local)  # TorchServe answers what the in-process test did
        _snap(page, "predict")
        _fill(page, "payload", '{"x": "oops"}')  # the worker's traceback names the notebook's cell, not a temp file
        failed = _click_and_wait(page, "predict", "Hint:")
        logged = page.locator(".msnb-log").inner_text()
        assert logged.count("invalid data type") == 1, logged  # the exception said once
        assert "handler_model.py" not in failed + logged and re.search(
            r"(cell In\[\d+\]|handler cell), line 8, in preprocess", logged
        )
        _snap(page, "predict-error")

        _click_and_wait(page, "stop", "Server stopped.")
        assert _gone(workdir, timeout=60), [p.info for p in _ours(workdir)]
        assert page.locator(".msnb-predict").is_disabled()
        _snap(page, "stopped")
    except Exception:
        page.screenshot(path=str(_artifacts() / "widget-failure.png"), full_page=True)
        print(log.read_text()[-5000:])
        raise


def _answer(result: str) -> str:
    """A result's answer, without its first line (which action, and how long it took)."""
    return result.split("\n", 1)[1]


def _gone(workdir: Path, timeout: float) -> bool:
    return bool(poll(lambda: not _ours(workdir), timeout, interval=0.5))
