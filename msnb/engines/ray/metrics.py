"""TorchServe's metrics address on the local Ray: Ray Serve's request metrics, read from the node's metrics port,
written under TorchServe's Prometheus names (``ts_inference_requests_total``, ``ts_inference_latency_microseconds``,
``ts_queue_latency_microseconds``) with its labels, and the handlers' own ``context.metrics`` beside them.

As on TorchServe, ``metrics_mode=log`` (its default) answers ``/metrics`` with nothing; ``prometheus`` with the
metrics. Ray keeps no queue time per model: ``ts_queue_latency_microseconds`` is declared and has no samples.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from prometheus_client.parser import text_string_to_metric_families

from msnb.templates.msnb_runtime.api import hosts
from msnb.templates.msnb_runtime.handler.metrics import SIZE_DIMENSION

TS_LABELS = ("model_name", "model_version", "hostname")
KEPT_LABELS = (SIZE_DIMENSION,)  # a handler metric's own dimensions kept beside them (Ray's own labels are not)
# Ray Serve's replica metric (its Prometheus sample) -> TorchServe's counter, and the factor to its unit.
FROM_RAY = {
    "ray_serve_deployment_request_counter_total": ("ts_inference_requests_total", 1.0),
    "ray_serve_deployment_processing_latency_ms_sum": ("ts_inference_latency_microseconds", 1000.0),
    # a replica set's members' own counts (the runtime's ray.multi_model_routes): Serve's count the set's application
    "ray_msnb_set_requests_total": ("ts_inference_requests_total", 1.0),
    "ray_msnb_set_latency_ms_total": ("ts_inference_latency_microseconds", 1000.0),
}
DECLARED = ("ts_inference_requests_total", "ts_inference_latency_microseconds", "ts_queue_latency_microseconds")
HELP = {
    "ts_inference_requests_total": "Total number of inference requests.",
    "ts_inference_latency_microseconds": "Cumulative inference duration in microseconds",
    "ts_queue_latency_microseconds": "Cumulative queue duration in microseconds",
}


def translate(ray_text: str, apps: dict[str, tuple[str, str]], hostname: str) -> str:
    """Ray's Prometheus text as TorchServe's: its request counters per model version (``apps``: the serving
    applications' model names and versions), then each handler metric (``ray_NAME{model_name=...}``) as ``NAME``."""
    totals: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    own: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    for family in text_string_to_metric_families(ray_text):
        for sample in family.samples:
            # the model's application, else (a replica set's member: the set's application) the model_name tag
            app = next(
                (a for a in (sample.labels.get("application"), sample.labels.get("model_name")) if a in apps), ""
            )
            if not app:
                continue
            labels = (*apps[app], hostname)
            if sample.name in FROM_RAY:
                name, factor = FROM_RAY[sample.name]
                totals[name][labels] += sample.value * factor
            elif not sample.name.startswith("ray_serve_") and "model_name" in sample.labels:
                kept = tuple((k, sample.labels[k]) for k in KEPT_LABELS if k in sample.labels)
                values = own[sample.name.removeprefix("ray_")]
                if family.type == "counter" or sample.name.endswith("_total"):  # each replica counts its own: summed
                    values[(*labels, *kept)] += sample.value
                else:
                    values[(*labels, *kept)] = sample.value
    return "".join(_family(name, "counter", totals.get(name, {})) for name in DECLARED) + "".join(
        _family(name, "gauge", values) for name, values in sorted(own.items())
    )


def _family(name: str, kind: str, values: dict[tuple, float]) -> str:
    lines = [f"# HELP {name} {HELP.get(name, name)}", f"# TYPE {name} {kind}"]
    for labels, value in sorted(values.items()):
        named = [*zip(TS_LABELS, labels), *labels[len(TS_LABELS) :]]  # TorchServe's labels, then the kept ones
        shown = ",".join(f'{k}="{v}"' for k, v in named)
        lines.append(f"{name}{{{shown}}} {value!r}")
    return "\n".join(lines) + "\n"


def nodes_metrics(apps: dict[str, tuple[str, str]]) -> dict[str, list[tuple[dict, float]]]:
    """Every live node's metrics in TorchServe's names (``translate``), parsed: sample name -> [(labels, value)]."""
    import ray

    from msnb.engines.model_metrics import parse

    samples: dict[str, list[tuple[dict, float]]] = {}
    for node in ray.nodes():
        if node.get("Alive") and node.get("MetricsExportPort"):
            text = translate(ray_metrics(node["MetricsExportPort"]), apps, socket.gethostname())
            for name, rows in parse(text).items():
                samples.setdefault(name, []).extend(rows)
    return samples


def ray_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return answer.read().decode()


def only(text: str, names: list[str]) -> str:
    """The families of a scrape TorchServe's ``name[]`` parameters name (a counter by its sample's name too, as
    ``ts_inference_requests_total``); all of them when none is named."""
    if not names:
        return text
    kept = []
    for block in text.split("# HELP ")[1:]:
        family = block.split(" ", 1)[0]
        if family in names or f"{family}_total" in names or family.removesuffix("_total") in names:
            kept.append("# HELP " + block)
    return "".join(kept)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # TorchServe's metrics address answers any method
        path, _, query = self.path.partition("?")
        refusal = hosts.refused(self.server.allowed, {k.lower(): v for k, v in self.headers.items()})
        if refusal:
            body = {"code": refusal[0], "type": refusal[1], "message": refusal[2]}
            return self._send(refusal[0], "application/json", json.dumps(body).encode())
        if path != "/metrics":
            self.send_error(404)
            return
        data = only(self.server.scrape(), parse_qs(query).get("name[]", [])).encode()
        self._send(200, "text/plain; version=0.0.4; charset=utf-8", data)

    def _send(self, status: int, content_type: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    scrape: Callable[[], str]
    allowed: hosts.AllowedHosts


def serve(
    ray_port: int,
    apps: Callable[[], dict[str, tuple[str, str]]],
    prometheus: bool,
    host: str,
    port: int,
    allowed: str = "",
) -> _Server:
    """TorchServe's metrics address on ``host:port`` (``.shutdown()`` ends it): each scrape reads Ray's metrics
    port ``ray_port`` and the serving applications' ``apps()`` (model name and version)."""
    server = _Server((host, port), _Handler)
    server.allowed = hosts.for_address(host, allowed)
    hostname = socket.gethostname()
    server.scrape = (lambda: translate(ray_metrics(ray_port), apps(), hostname)) if prometheus else (lambda: "")
    threading.Thread(target=server.serve_forever, name="msnb-metrics", daemon=True).start()
    return server


__all__ = ["serve", "translate"]
