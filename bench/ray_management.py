"""Benchmark: TorchServe's management API on the Ray engine beside a plain TorchServe: register an archive from the
model store to its first answer, scale it from one worker to two until both serve, and make a second version the
default (`PUT /models/NAME/2.0/set-default`), through each engine's own management address (`POST
/models?url=...&synchronous=true`, `PUT /models/NAME?min_worker=2&synchronous=true`), the two engines' rounds
interleaved."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from pathlib import Path

import requests

from bench.harness import Settings, inference_headers, interleave, msnb_engine, stop_engine, summary
from bench.ray_archives import SAMPLE, OneRun, build

NAME = "tiny"
SECOND = f"{NAME}_v2.mar"  # the same model at version 2.0, in the same store
WHAT = ("register to first answer", "scale 1 -> 2 workers, both serving", "set-default to the second version")


class Managed:
    """A started engine of ``kind`` and its management address (TorchServe's own; msnb's on Ray), the archive
    ``mar`` in its model store."""

    def __init__(self, kind: str, mar: Path, work: Path, settings: Settings):
        self.engine, self.settings, self.api = msnb_engine(kind, work, settings).start(), settings, None
        if kind == "ray":
            self.url = self._ray_api(mar, work)
        else:
            self.engine.store.root.mkdir(parents=True, exist_ok=True)
            shutil.copy(mar, self.engine.store.root / mar.name)
            shutil.copy(mar.parent / SECOND, self.engine.store.root / SECOND)
            self.url = self.engine.management_url
        keys = json.loads(Path(self.engine.key_file).read_text())
        self.headers = {"Authorization": f"Bearer {keys['management']['key']}"}

    def _ray_api(self, mar: Path, work: Path) -> str:
        from msnb.cli.serve_archives import opener
        from msnb.engines.ray.nodes import free_port
        from msnb.engines.ray.ts_start import TorchServeApi
        from msnb.engines.ts_properties import read

        config = read(None).with_overrides(
            model_store=mar.parent,
            enable_model_api=True,
            default_workers_per_model=1,
            inference_address=self.engine.inference_url,
            management_address=f"http://127.0.0.1:{free_port()}",
            metrics_address=f"http://127.0.0.1:{free_port()}",
        )
        self.api = TorchServeApi(self.engine, config, opener(config))
        return self.api.management_url

    def call(self, method: str, path: str, **params: str) -> None:
        resp = requests.request(method, self.url + path, params=params, headers=self.headers, timeout=600)
        if resp.status_code != 200:
            raise RuntimeError(f"{method} {path}: {resp.status_code} {resp.text[:300]}")

    def register_to_first_answer(self) -> float:
        start = time.perf_counter()
        self.call("POST", "/models", url=f"{NAME}.mar", initial_workers="1", synchronous="true")
        url = f"{self.engine.inference_url}/predictions/{NAME}"
        while requests.post(url, json=SAMPLE, headers=inference_headers(self.engine), timeout=120).status_code != 200:
            time.sleep(0.05)
        return time.perf_counter() - start

    def scale_up(self) -> float:
        start = time.perf_counter()
        self.call("PUT", f"/models/{NAME}", min_worker="2", max_worker="2", synchronous="true")
        return time.perf_counter() - start

    def set_default(self) -> float:
        """The second version registered, then the time until set-default answers (Ray: once the default's
        application serves it)."""
        self.call("POST", "/models", url=SECOND, initial_workers="1", synchronous="true")
        start = time.perf_counter()
        self.call("PUT", f"/models/{NAME}/2.0/set-default")
        return time.perf_counter() - start

    def round(self) -> tuple[float, float, float]:
        try:
            return self.register_to_first_answer(), self.scale_up(), self.set_default()
        finally:
            for version in ("1.0", "2.0"):  # the default last, as TorchServe requires
                with contextlib.suppress(RuntimeError):
                    self.call("DELETE", f"/models/{NAME}/{version}")

    def stop(self) -> None:
        if self.api is not None:
            self.api.stop()
        stop_engine(self.engine, self.settings)


def run(settings: Settings) -> dict:
    work = settings.workdir / "ray_management"
    mar = build(work, NAME)
    shutil.copy(build(work / "v2", NAME, "2.0"), mar.parent / SECOND)
    engines: dict[str, Managed] = {}
    try:
        for kind in ("torchserve", "ray"):
            engines[kind] = Managed(kind, mar, work, settings)
        rounds = interleave({kind: engine.round for kind, engine in engines.items()}, settings.reps)
    finally:
        for engine in engines.values():
            with contextlib.suppress(Exception):
                engine.stop()
    return report(rounds, settings)


def report(rounds: dict[str, list[tuple[float, ...]]], settings: Settings) -> dict:
    rows = {}
    for kind, values in rounds.items():
        for i, what in enumerate(WHAT):
            rows[f"{what}: {kind} s"] = summary([v[i] for v in values])
    med = {k: v["median"] for k, v in rows.items()}
    ratios = {f"Ray / TorchServe: {what}": med[f"{what}: ray s"] / med[f"{what}: torchserve s"] for what in WHAT}
    return {
        "title": "TorchServe's management API on Ray Serve beside plain TorchServe",
        "unit": "s",
        "rows": rows,
        "ratios": ratios,
        "notes": f"{settings.mode}{settings.reps} interleaved round(s) each on a machine shared with other test runs; "
        "a tiny-MLP archive made by torch-model-archiver, registered from the model store through each engine's "
        "management address (synchronous), answered once, scaled to two workers (synchronous), a version 2.0 "
        "registered beside it and made the default, both versions unregistered.",
    }


def main() -> None:
    """`python -m bench.ray_management`: one quick interleaved run, printed."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="msnb-bench-") as tmp:
        print(json.dumps(run(OneRun(quick=True, workdir=Path(tmp))), indent=2))


if __name__ == "__main__":
    main()
