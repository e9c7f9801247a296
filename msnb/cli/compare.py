"""`msnb compare A.mar --data @requests.jsonl` (or `msnb compare STORE/ --data-dir REQUESTS/`): the archives served by
a plain TorchServe and by Ray Serve side by side, every request sent to both, a table of statuses and equal, a
documented difference or the first difference; JUnit XML and JSON for CI; exit 0 unless an undocumented difference
(any difference with ``strict``) was found or an archive did not serve on both."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from msnb.errors import MsnbError, OptionError


@dataclass(frozen=True)
class Check:
    """What the command line asked: one request file (``data``, ``@FILE``) or a folder of NAME.jsonl files
    (``data_dir``), ``strict`` (documented differences fail too), the JUnit XML and JSON files to write."""

    data: str | None = None
    data_dir: Path | None = None
    strict: bool = False
    junit: Path | None = None
    json: Path | None = None
    envelope: str | None = None


def run_compare(archives: list[Path], check: Check) -> int:
    """Start both servers, serve ``archives`` on each (as `msnb serve` serves them on each engine), send every request
    to both, print the table, write the CI files; the exit code."""
    from msnb.cli.serve import register_each
    from msnb.cli.serve_archives import deploy_archives
    from msnb.engines import compare, registry
    from msnb.engines.protocol import ServeOptions

    files = request_files(archives, check)  # refused before anything starts
    # the envelope on both sides: TorchServe's service_envelope, the Ray applications' envelope argument
    reference = registry.reference()
    server = reference.command(ServeOptions(envelope=check.envelope))
    ray = registry.counterpart(reference.kind).command(ServeOptions())  # the shared Ray (`msnb ray up`) when it is up
    try:
        print("starting TorchServe and Ray Serve (loopback, token auth on) ...", flush=True)
        server.start()
        on_torchserve = set(register_each(server, archives, {}))
        ray.start()
        both = sorted(on_torchserve & set(deploy_archives(ray, archives, check.envelope)))
        rows = compare.compare(server, ray, _requests(files, both))
    finally:
        ray.stop()
        server.stop()
    return _report(rows, both, sorted(set(files) - set(both)) if check.data_dir else [], check, len(archives))


def _report(rows: list, both: list[str], unserved: list[str], check: Check, total: int) -> int:
    from msnb.engines import compare, compare_report

    print(compare.table(rows))
    agreed = sum(diff is None for *_, diff in rows)
    known = len(rows) - agreed - len(compare.undocumented(rows))
    print(
        f"{agreed} of {len(rows)} requests answered alike, {known} with a documented difference; served on both: "
        f"{', '.join(both)}"
    )
    if check.data_dir is None and len(both) < total:
        unserved = ["(an archive)"] * (total - len(both))
    compare_report.write(rows, unserved, check.strict, check.junit, check.json)
    if not compare.undocumented(rows, check.strict) and not unserved and len(both) == total:
        return 0
    what = "differ" if compare.undocumented(rows, check.strict) else "did not all serve"
    print(f"error: the engines {what} (see the table above)", file=sys.stderr)
    print(
        "Hint: each row names the first difference; docs/ray-design.md lists where a Ray replica's worker differs "
        "from TorchServe's (those rows pass unless --strict).",
        file=sys.stderr,
    )
    return 1


def request_files(archives: list[Path], check: Check) -> dict[str, Path | None]:
    """Model name -> its request file: ``--data``'s one file for every model (key ""), or each model's NAME.jsonl
    in ``--data-dir`` (None: the model has none). A file of ``--data-dir`` naming a model the archives lack, or a
    line that is not a request, is an OptionError."""
    from msnb.engines import compare

    if (check.data is None) == (check.data_dir is None):
        raise OptionError("msnb compare takes --data @FILE or --data-dir DIR.", COMPARE_HINT)
    if check.data is not None:
        return {"": requests_file(check.data)}
    folder = Path(check.data_dir)
    if not folder.is_dir():
        raise OptionError(f"--data-dir {folder}: no folder there.", COMPARE_HINT)
    names = model_names(archives)
    for path in sorted(folder.glob("*.jsonl")):
        if path.stem not in names:
            raise OptionError(
                f"{path} names model {path.stem!r}, which the archives given lack (they hold: {', '.join(names)}).",
                "name each request file after a model the store holds (NAME.jsonl), or add that model's archive.",
            )
        compare.read_requests(path, [path.stem])
    return {name: (folder / f"{name}.jsonl" if (folder / f"{name}.jsonl").is_file() else None) for name in names}


def _requests(files: dict[str, Path | None], both: list[str]) -> list:
    from msnb.engines import compare

    if "" in files:  # one file for every model
        return compare.read_requests(files[""], both)
    return [r for name in both if files.get(name) for r in compare.read_requests(files[name], [name])]


def model_names(archives: list[Path]) -> list[str]:
    """Each archive's model name (its manifest's; a tgz's or an unreadable one's: its file name's stem)."""
    from msnb.engines.store import read_manifest

    names = []
    for path in archives:
        try:
            names.append(read_manifest(path)[0])
        except MsnbError:
            names.append(path.name.split(".")[0])
    return names


COMPARE_HINT = (
    "give one JSON Lines file for every model (--data @requests.jsonl), or a folder with one file per model "
    "named after it (--data-dir requests/, holding NAME.jsonl); see `msnb compare --help`"
)


def requests_file(data: str) -> Path:
    """The request file of ``--data @FILE``; refused before anything starts when it is not one."""
    path = Path(data[1:]) if data.startswith("@") else None
    if path is None or not path.is_file():
        raise OptionError(
            f"--data {data!r}: no request file there.",
            "give --data @requests.jsonl: one JSON request a line (see `msnb compare --help`).",
        )
    return path
