"""`python -m bench.kserve_answers [OUT.md]`: what a KServe client gets from an exported quickstart, and its metrics.

Exports notebooks/quickstart.ipynb with `--kserve`, serves the layout as KServe's runtime does (its
config.properties, TS_SERVICE_ENVELOPE=kserve / kservev2, token auth off; addresses on loopback), posts
good, bad, empty and malformed requests to TorchServe's own /v1 and /v2 paths (what KServe's wrapper
forwards to), sends 100 more, and scrapes the metrics port. Writes the answers as a Markdown note.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import requests

from msnb.cli.demo import checkpoint_overrides
from msnb.cli.export import export_notebook
from msnb.engines.kserve import KSERVE_CONFIG_DIR, KSERVE_STORE_DIR
from msnb.engines.torchserve import LocalServer
from msnb.engines.torchserve.config import parse_properties
from msnb.templates.msnb_runtime.handler.metrics import BATCHES_METRIC, WINDOW_METRICS

WINDOW = (
    "Msnb* values are the handler's latest report: the means of the batches of a 1 s window, reported by the "
    "first batch after the window closed (so the earlier bad requests may be part of it)."
)
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
GOOD = {"x": [0.5, -1.0, 2.0, 0.1]}
V1 = {
    "good": {"instances": [GOOD]},
    "one bad instance": {"instances": [{"y": 1}]},
    "bad beside good": {"instances": [{"x": [1, 2]}, GOOD]},
    "empty": {"instances": []},
    "no instances": {"data": [GOOD]},
}
V2 = {
    "FP32 tensor (this preprocess wants {x: [...]}: refused)": {
        "inputs": [{"name": "in0", "shape": [4], "datatype": "FP32", "data": GOOD["x"]}]
    },
    "good: BYTES holding the JSON sample": {
        "inputs": [{"name": "in0", "shape": [1], "datatype": "BYTES", "data": [json.dumps(GOOD)]}]
    },
    "bad input": {"inputs": [{"name": "in0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]},
    "empty": {"inputs": []},
}


def serve(kserve: Path, workdir: Path, envelope: str) -> LocalServer:
    props = parse_properties((kserve / KSERVE_CONFIG_DIR / "config.properties").read_text())
    props.pop("model_store")
    env = {"TS_SERVICE_ENVELOPE": envelope}
    return LocalServer(workdir, auth=False, properties=props, env=env, model_store=kserve / KSERVE_STORE_DIR)


def wait_ready(server: LocalServer, name: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not any(m.ready for m in server.client.versions(name)):
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} never got a ready worker:\n{server.log_tail(40)}")
        time.sleep(0.2)


def exchange(url: str, bodies: dict) -> list[str]:
    rows = []
    for what, body in bodies.items():
        resp = requests.post(url, json=body, timeout=60)
        shown = (
            json.dumps(resp.json())
            if resp.headers.get("content-type", "").startswith("application/json")
            else resp.text
        )
        rows.append(f"**{what}** `{json.dumps(body)}` → {resp.status_code}\n\n```json\n{shown}\n```\n")
    return rows


def scrape(server: LocalServer, url: str, body: dict, n: int = 100) -> list[str]:
    for _ in range(n):
        requests.post(url, json=body, timeout=60).raise_for_status()
    time.sleep(1)  # the frontend parses the worker's metric lines asynchronously
    text = requests.get(f"{server.metrics_url}/metrics", timeout=10).text
    wanted = (*WINDOW_METRICS, BATCHES_METRIC, "ts_inference_requests_total")
    return [line for line in text.splitlines() if line.startswith(wanted)]


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="msnb-kserve-note-") as tmp:
        root = Path(tmp)
        report = export_notebook(NOTEBOOK, None, kserve=root / "ks", overrides=checkpoint_overrides(NOTEBOOK))
        assert report.ok, report.failed
        lines = ["# KServe answers and metrics (measured)\n", f"`python -m bench.kserve_answers` on {time.ctime()}.\n"]
        lines += [f"Export warning: {w}\n" for w in report.warnings]
        for envelope, path, bodies in (
            ("kserve", "/v1/models/quickstart:predict", V1),
            ("kservev2", "/v2/models/quickstart/infer", V2),
        ):
            with serve(root / "ks", root / envelope, envelope) as server:
                wait_ready(server, "quickstart")
                url = server.inference_url + path
                lines.append(f"\n## {envelope} (`POST {path}`)\n")
                lines += exchange(url, bodies)
                good = next(body for what, body in bodies.items() if what.startswith("good"))
                metrics = scrape(server, url, good)
                lines.append(
                    f"\n### `GET /metrics` after 100 more requests\n\n{WINDOW}\n\n```\n"
                    + "\n".join(metrics)
                    + "\n```\n"
                )
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("KSERVE.md"))
