"""`python -m msnb.cli.demo [NOTEBOOK]`: export a notebook's handler without running it, serve it, ask it, stop.

Without NOTEBOOK it uses the quickstart notebook shipped in the package (``msnb.examples``), so it works
from an installed wheel as from a checkout.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from msnb.capture.notebook import handler_cells, load_handlers, read_notebook
from msnb.errors import MsnbError
from msnb.options import parse_handler_line
from msnb.package.formats import EXPORT_FORMAT
from msnb.session.export import write_archive


@contextmanager
def step(title: str):
    """Print a step, run it, print how long it took."""
    print(f"-> {title} ...", flush=True)
    start = time.perf_counter()
    yield
    print(f"   done in {time.perf_counter() - start:.2f} s", flush=True)


def checkpoint_overrides(notebook: Path) -> dict:
    """Use the notebook's checkpoint when it exists; else (the notebook was never run) serve untrained weights.

    The demo never executes the notebook, so when the file the training cell writes is missing it
    drops --checkpoint and the handler serves init_function's freshly initialised model instead.
    """
    cell = handler_cells(read_notebook(notebook), notebook.name)[0]
    checkpoint = parse_handler_line(cell.line).checkpoint
    if checkpoint and not (notebook.parent / checkpoint).is_file():
        print(
            f"   note: {notebook.parent / checkpoint} does not exist (run the notebook to train and save it); "
            "serving the freshly initialised model instead",
            flush=True,
        )
        return {"checkpoint": None}
    return {}


def quickstart_notebook() -> Path:
    """The quickstart notebook that ships with msnb (notebooks/ in a checkout)."""
    return Path(str(resources.files("msnb.examples").joinpath("quickstart.ipynb")))


def run(notebook: Path | None = None) -> dict:
    """The whole demo (the first handler of ``notebook``, default the quickstart); returns the prediction."""
    notebook = Path(notebook) if notebook else quickstart_notebook()
    from msnb.engines import registry
    from msnb.engines.protocol import ServeOptions

    with tempfile.TemporaryDirectory(prefix="msnb-demo-") as tmp:
        with step(f"capturing the %%ms_handler cell of {notebook.name} (the notebook is not executed)"):
            first = handler_cells(read_notebook(notebook), notebook.name)[0].name
            (item,) = load_handlers(notebook, [first], checkpoint_overrides(notebook))
            if item.error is not None:
                raise item.error
            spec = item.spec
            print(
                f"   roles: {', '.join(spec.roles)}; pulled in: "
                f"{', '.join(n for b in spec.pulled_in for n in b.names) or 'nothing'}"
            )
        with step("building the .mar"):
            mar = write_archive(spec, Path(tmp), EXPORT_FORMAT)
            print(f"   {mar} ({mar.stat().st_size / 1024:.1f} KB)")
        server = registry.reference().command(ServeOptions())  # its own temporary workdir, removed by stop()
        try:
            with step("starting a local TorchServe on 127.0.0.1"):
                server.start()
                print(f"   {server.inference_url}")
            with step(f"registering {spec.name} (waits for a ready worker)"):
                server.redeploy(mar)
            with step(f"predicting {json.dumps(spec.example)}"):
                answer = server.predict(spec.name, spec.example)
                print(f"   prediction: {json.dumps(answer, sort_keys=True)}")
        finally:
            with step("stopping the server"):
                server.stop()
    return answer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        run(Path(args[0]) if args else None)
    except MsnbError as err:
        print(f"error: {err.render()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
