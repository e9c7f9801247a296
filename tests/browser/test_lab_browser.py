"""JupyterLab itself in headless Chromium: Run All on quickstart.ipynb, and the widget and magics sharing one state."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from helpers import poll
from lab import CHROMIUM, chromium_page, lab_server, open_notebook, run_all, run_cell, scratch_env

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
pytestmark = [pytest.mark.browser, pytest.mark.server, pytest.mark.timeout(900)]


@pytest.fixture
def lab(tmp_path):
    if not Path(CHROMIUM).exists():
        (pytest.fail if os.environ.get("CI") == "true" else pytest.skip)(f"{CHROMIUM} not found")
    playwright = pytest.importorskip("playwright.sync_api")
    root = tmp_path / "nb"
    root.mkdir()
    shutil.copy(QUICKSTART, root / "quickstart.ipynb")
    nbformat.write(_loop_notebook(), root / "loop.ipynb")
    env = scratch_env(Path(os.environ.get("TMPDIR", "/tmp")) / f"lab-{tmp_path.name}"[-40:])
    with lab_server(root, env) as (url, token), playwright.sync_playwright() as pw, chromium_page(pw) as page:
        yield page, url, token
    assert poll(lambda: not _ours(root) and not _ours(Path(env["HOME"])), 60, interval=0.5), "a process survived"


def _loop_notebook():
    """quickstart's setup and handler cells, then the widget, a serve and a stop by magic, an edit the widget serves,
    and another the magics serve."""
    cells = nbformat.read(QUICKSTART, 4).cells
    setup = [c.source for c in cells if c.cell_type == "code"][:5]  # imports, MLP, training, load_ext, handler
    edited = setup[4].replace('return {"label"', 'return {"edited": True, "label"')
    again = setup[4].replace('return {"label"', 'return {"edited": "again", "label"')
    sources = setup + ["%ms_widget quickstart", "%ms_serve quickstart", "%ms_stop", edited, again]
    sources += ["%ms_serve quickstart", "answer = %ms_predict quickstart\nprint('answer', answer)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _shot(page, name: str) -> None:
    folder = Path(os.environ.get("MSNB_ARTIFACTS", ROOT / "artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"lab-{name}.png"), full_page=True)


def _ours(folder: Path) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(str(folder) in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _record(name: str, seconds: float) -> None:
    folder = Path(os.environ.get("MSNB_ARTIFACTS", ROOT / "artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "lab-figures.json"
    figures = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(figures | {name: round(seconds, 2)}, indent=1))


def test_run_all_on_quickstart_shows_every_output_and_no_traceback(lab):
    page, url, token = lab
    open_notebook(page, url, token, "quickstart.ipynb")
    _shot(page, "1-opened")
    began = time.monotonic()
    outputs = run_all(page, timeout=300)
    _record("run_all_quickstart_s", time.monotonic() - began)
    _shot(page, "2-run-all")
    text = "\n".join(outputs)
    assert "Handler 'quickstart' v1.0 captured" in text and "prediction: {" in text
    assert "ready: quickstart v1.0 (digest" in text and "Traceback" not in text, text


def test_the_widget_and_the_magics_share_one_state(lab):
    page, url, token = lab
    open_notebook(page, url, token, "loop.ipynb")
    for i in range(5):
        assert "Traceback" not in run_cell(page, i, timeout=120)
    run_cell(page, 5, timeout=60)
    predict = page.locator(".msnb-predict")
    predict.wait_for(timeout=30_000)
    assert predict.is_disabled()
    _shot(page, "3-widget")
    assert "ready: quickstart v1.0" in run_cell(page, 6, timeout=300)  # %ms_serve
    assert poll(lambda: predict.is_enabled(), 30), "the widget did not see the magic's serve"
    assert "serving quickstart v1.0" in page.locator(".msnb-status").inner_text()
    _shot(page, "4-served-by-magic")
    run_cell(page, 7, timeout=120)  # %ms_stop
    assert poll(lambda: predict.is_disabled(), 30), "the widget did not see the magic's stop"
    assert "no local TorchServe running" in page.locator(".msnb-status").inner_text()
    _shot(page, "5-stopped-by-magic")
    began = time.monotonic()
    page.locator(".msnb-serve").click()
    assert poll(lambda: predict.is_enabled(), 300, interval=0.2), page.locator(".msnb-result").inner_text()
    _record("widget_serve_click_to_predict_enabled_s", time.monotonic() - began)
    predict.click()
    assert poll(lambda: '"label"' in page.locator(".msnb-result").inner_text(), 60)
    _shot(page, "6-widget-predict")
    run_cell(page, 8, timeout=120)  # the handler cell edited and run again: the widget serves it as it now is
    before = page.locator(".msnb-result").inner_text()
    began = time.monotonic()
    page.locator(".msnb-serve").click()
    assert poll(lambda: page.locator(".msnb-result").inner_text() != before and predict.is_enabled(), 300, interval=0.2)
    served = page.locator(".msnb-result").inner_text()
    assert served.startswith("Serving quickstart v1.0 (digest") and "already serving" not in served, served
    assert "ran again: the form uses it" in page.locator(".msnb-log").inner_text()
    predict.click()
    assert poll(lambda: '"edited": true' in page.locator(".msnb-result").inner_text(), 60), served
    _record("widget_edit_serve_predict_s", time.monotonic() - began)
    _shot(page, "7-widget-serves-the-edit")
    began = time.monotonic()
    run_cell(page, 9, timeout=120)  # edited again, served by the magic this time
    assert "reloaded in the live worker" in run_cell(page, 10, timeout=300)  # a code-only edit
    answer = run_cell(page, 11, timeout=60)
    _record("edit_redeploy_predict_s", time.monotonic() - began)
    assert "'edited': 'again'" in answer and "Traceback" not in answer
    assert poll(lambda: "generation 3" in page.locator(".msnb-status").inner_text(), 30)
    _shot(page, "8-edited-redeployed")
