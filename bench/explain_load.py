"""Benchmark 10, predictions under explanation load: prediction latency alone, then with 20 Integrated Gradients
clients on the same worker (the explanation budget refuses those over its share with 503 + Retry-After)."""

from __future__ import annotations

import http.client
import json
import time

from bench import models
from bench.harness import ClientThreads, Settings, msnb_engine, percentile, stop_engine, summary
from msnb.engines.torchserve import LocalServer
from msnb.session.deployment import deploy

NAME = "explainload"
EXPLAIN_CLIENTS = 20
PREDICT_CLIENTS = 2
ALONE, LOADED = "predictions alone", f"with {EXPLAIN_CLIENTS} explanation clients"


class Clients(ClientThreads):
    """Threads POSTing one path in a loop until stopped; each answer logged as (status, seconds). A 503 with
    Retry-After makes that client wait as asked (what a well-behaved client does), not a measured request."""

    def __init__(self, server: LocalServer, path: str, clients: int):
        key = json.loads(server.layout.key_file.read_text())["inference"]["key"]
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        self.port, self.path = int(server.inference_url.rsplit(":", 1)[1]), path
        super().__init__(clients)
        self.body = json.dumps(models.SAMPLE).encode()

    def _loop(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self.stopping.is_set():
            start = time.perf_counter()
            conn.request("POST", self.path, self.body, self.headers)
            response = conn.getresponse()
            response.read()
            self.log.append((response.status, time.perf_counter() - start))
            retry = response.getheader("Retry-After")
            if response.status == 503 and retry:
                self.stopping.wait(float(retry))
        conn.close()


def run(settings: Settings) -> dict:
    work = settings.workdir / "explain_load"
    work.mkdir(parents=True, exist_ok=True)
    checkpoint = models.save_mlp_checkpoint(models.SMALL, work / "model.pt")
    seconds = settings.size(20, 6, 1)
    runs: dict[str, list[dict]] = {ALONE: [], LOADED: []}
    explained: list = []
    server = msnb_engine("torchserve", work, settings).start()
    try:
        deploy(server, models.mlp_spec(NAME, models.SMALL, checkpoint), batch_size=1)
        _measure(server, 2)  # warm-up, and one explanation (Captum's import) before anything is measured
        server.explain(NAME, models.SAMPLE)
        for _ in range(settings.reps):
            runs[ALONE].append(_measure(server, seconds))
            with Clients(server, f"/explanations/{NAME}", EXPLAIN_CLIENTS) as explainers:
                runs[LOADED].append(_measure(server, seconds))
            explained += explainers.log
    finally:
        stop_engine(server, settings)
    return report(runs, explained)


def _measure(server: LocalServer, seconds: float) -> dict:
    with Clients(server, f"/predictions/{NAME}", PREDICT_CLIENTS) as predictors:
        predictors.stopping.wait(seconds)
    latencies = [s for status, s in predictors.log if status == 200]
    failed = len(predictors.log) - len(latencies)
    return {"p50 ms": percentile(latencies, 0.5) * 1000, "p99 ms": percentile(latencies, 0.99) * 1000, "failed": failed}


def report(runs: dict[str, list[dict]], explained: list) -> dict:
    rows = {name: {m: summary([r[m] for r in rs]) for m in ("p50 ms", "p99 ms")} for name, rs in runs.items()}
    ratio = rows[LOADED]["p99 ms"]["median"] / rows[ALONE]["p99 ms"]["median"]
    answered = sum(1 for status, _ in explained if status == 200)
    refused = sum(1 for status, _ in explained if status == 503)
    failed = sum(r["failed"] for rs in runs.values() for r in rs)
    return {
        "title": f"10. Predictions under explanation load ({EXPLAIN_CLIENTS} Integrated Gradients clients, one worker)",
        "unit": "ms",
        "rows": rows,
        "ratios": {"prediction p99 under load / alone": ratio},
        "targets": [
            {
                "target": "prediction p99 under explanation load <= 2x alone",
                "value": f"{ratio:.2f}x",
                "met": ratio <= 2.0,
            }
        ],
        "notes": f"Small MLP, batch size 1, one worker, {PREDICT_CLIENTS} prediction clients in a loop, measured "
        f"alone and while {EXPLAIN_CLIENTS} clients ask /explanations (Integrated Gradients, 50 steps) in a loop, "
        "waiting as a 503's Retry-After says. The shared handler paces explanations to at most 25 % of the worker's time "
        f"(msnb_runtime.handler.explain_budget); explanations over it are answered 503 at once. Explanations answered: {answered}, refused "
        f"(503 + Retry-After): {refused}; failed predictions: {failed}. Before the budget: p50 9 -> 118 ms, "
        "p99 32 -> 629 ms.",
    }
