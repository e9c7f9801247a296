"""Drive JupyterLab 4 in headless Chromium: a scratch Lab server, a page, Run All, one cell, outputs, cleanup."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from helpers import poll

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
ARGS += ["--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
# The toolbar says "idle" before a kernel exists: require a connected, idle kernel of the current panel.
JS_KERNEL_IDLE = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!(k && k.status === 'idle' && k.connectionStatus === 'connected'); }"""
JS_COUNTS = """() => Array.from(document.querySelectorAll('%s .jp-CodeCell')).map(c =>
  (c.querySelector('.jp-InputArea-prompt') || {}).textContent || '')""".replace("%s", PANEL)
JS_OUTPUTS = """() => Array.from(document.querySelectorAll('%s .jp-CodeCell')).map(c =>
  Array.from(c.querySelectorAll('.jp-OutputArea-output')).map(o => o.innerText.trim()).join('\\n'))""".replace(
    "%s", PANEL
)
JS_RUN_CELL = """(i) => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;
  nb.deselectAll(); window.jupyterapp.commands.execute('notebook:run-cell'); }"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scratch_env(base: Path) -> dict[str, str]:
    """Jupyter's dirs under ``base``; no news toast, no build check, no LSP or terminals (they spawn npm)."""
    env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1")
    for var in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        (base / var.lower()).mkdir(parents=True, exist_ok=True)
        env[var] = str(base / var.lower())
    cfg = base / "jupyter_config_dir"
    settings = cfg / "lab" / "user-settings" / "@jupyterlab"
    for ext, name, value in [
        ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False}),
        ("notebook-extension", "tracker", {"windowingMode": "none"}),  # every cell in the DOM
    ]:
        (settings / ext).mkdir(parents=True, exist_ok=True)
        (settings / ext / f"{name}.jupyterlab-settings").write_text(json.dumps(value))
    off = {"jupyter_lsp": False, "jupyter_server_terminals": False}
    (cfg / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"jpserver_extensions": off}}))
    (cfg / "labconfig").mkdir(exist_ok=True)
    (cfg / "labconfig" / "page_config.json").write_text(json.dumps({"buildCheck": False, "buildAvailable": False}))
    return env


@contextlib.contextmanager
def lab_server(root: Path, env: dict[str, str]):
    """JupyterLab on 127.0.0.1 serving ``root``; yields the base URL with its token; shuts down cleanly."""
    port, token = free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1"]
    cmd += [f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}"]
    cmd += [f"--ServerApp.root_dir={root}", "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True"]
    cmd += ["--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly"]
    if os.geteuid() == 0:
        cmd.append("--ServerApp.allow_root=True")
    log = (root.parent / "lab.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        up = poll(lambda: proc.poll() is not None or _status(url, token), 90, interval=0.2)
        assert up and proc.poll() is None, f"JupyterLab did not come up (exit {proc.poll()}):\n{_log_tail(root)}"
        yield url, token
    finally:
        with contextlib.suppress(OSError):
            _request(url, token, "/api/shutdown", "POST")  # stops the kernels, then the server exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session only
            proc.wait()
        log.close()


def _log_tail(root: Path) -> str:
    path = root.parent / "lab.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no lab.log)"


@contextlib.contextmanager
def chromium_page(pw, width: int = 1280, height: int = 1000):
    """A fresh headless Chromium page that may reach 127.0.0.1 only."""
    profile = tempfile.mkdtemp(prefix="msnb-chromium-")
    ctx = pw.chromium.launch_persistent_context(
        user_data_dir=profile,
        executable_path=CHROMIUM,
        headless=True,
        args=ARGS,
        viewport={"width": width, "height": height},
    )
    ctx.route("**/*", lambda r: r.continue_() if urlparse(r.request.url).hostname == "127.0.0.1" else r.abort())
    try:
        yield ctx.pages[0] if ctx.pages else ctx.new_page()
    finally:
        ctx.close()
        shutil.rmtree(profile, ignore_errors=True)


def open_notebook(page, url: str, token: str, name: str) -> None:
    page.goto(f"{url}/lab/tree/{name}?token={token}", wait_until="domcontentloaded", timeout=60_000)
    assert poll(lambda: page.evaluate(JS_KERNEL_IDLE), 120, interval=0.2), "the notebook's kernel never got idle"


def counts(page) -> list[int | None]:
    found = [re.fullmatch(r"\s*\[(\d+)\]:\s*", p) for p in page.evaluate(JS_COUNTS)]
    return [int(m.group(1)) if m else None for m in found]


def run_all(page, timeout: float) -> list[str]:
    """Run All; returns each code cell's output text once every cell has run and the kernel is idle."""
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    done = poll(
        lambda: all(c is not None for c in counts(page)) and page.evaluate(JS_KERNEL_IDLE), timeout, interval=0.2
    )
    assert done, f"Run All did not finish: {counts(page)}"
    return page.evaluate(JS_OUTPUTS)


def run_cell(page, index: int, timeout: float) -> str:
    """Run one code cell (by its index among all cells) and return its output text."""
    before = max(filter(None, counts(page)), default=0)
    page.evaluate(JS_RUN_CELL, index)

    def finished() -> bool:
        now = page.evaluate(JS_COUNTS)[_code_index(page, index)]
        m = re.fullmatch(r"\s*\[(\d+)\]:\s*", now)
        return bool(m and int(m.group(1)) > before and page.evaluate(JS_KERNEL_IDLE))

    assert poll(finished, timeout, interval=0.2), f"cell {index} did not finish"
    return page.evaluate(JS_OUTPUTS)[_code_index(page, index)]


def _code_index(page, index: int) -> int:
    kinds = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.type)")
    return sum(1 for k in kinds[:index] if k == "code")


def _status(url: str, token: str) -> bool:
    try:
        return _request(url, token, "/api/status") == 200
    except OSError:
        return False


def _request(url: str, token: str, path: str, method: str = "GET") -> int:
    req = urllib.request.Request(url + path, method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.status
