"""The `msnb` terminal command: export a notebook's handlers, serve archives, send a prediction."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from msnb.cli import ray_cmd, serve_state, shadow
from msnb.cli.execute import ALL as EXECUTE_ALL
from msnb.cli.execute import DEFAULT_TIMEOUT_S as EXECUTE_TIMEOUT_S
from msnb.cli.execute import NEEDED as EXECUTE_NEEDED
from msnb.cli.export_options import add_layout_options, sizing_of
from msnb.cli.serve_archives import replica_set_arguments, torchserve_arguments
from msnb.engines import registry
from msnb.engines.env_vars import ENV_HELP
from msnb.engines.kserve import KSERVE_STORE_DIR
from msnb.engines.models import LIMIT_OPTIONS, Limits
from msnb.errors import MsnbError, OptionError, shown
from msnb.options import ALLOW_FLAG, REQUEST_ARGUMENTS
from msnb.package.formats import DEFAULT_EXPORT, EXPORT_FORMAT, FORMATS
from msnb.templates.msnb_runtime.handler.serving import DEFAULT_MAX_BYTES

OK, FAILED, USAGE = 0, 1, 2
EPILOG = """exit codes: 0 success, 1 a handler failed (the others are still reported) or the notebook has
no %%ms_handler cell, 2 usage error (bad options, unreadable notebook, unknown --handler, OUTDIR not writable).
Errors go to stderr as `error: ...` followed by a `Hint: ...` line."""
EXPORT_HELP = """Read NOTEBOOK with nbformat WITHOUT running it, capture every %%ms_handler cell (the option
line is parsed exactly as the magic parses it; definitions come from the code cells above the handler
cell, the latest one winning, as a fresh "Run All" would have them; cells below never count), and write
one archive per handler into OUTDIR. Relative paths in the options (--checkpoint, --requirements,
--extra-files, --example @file) resolve against the notebook's folder, not the current directory.
Names bound at run time (a vocabulary built by a loop, a literal changed later) are refused there; with
--execute the cells the handler cells need (those binding the values, names and files they use, never one
that serves, predicts or stops) first run in notebook order in a fresh kernel (its folder as the cwd), and
its handlers are exported as that kernel captured them, runtime values snapshotted as data; it says which
cells ran. --execute all runs every cell."""
SERVE_HELP = """Start a private TorchServe (or with --engine ray a local Ray Serve) on 127.0.0.1 (free ports, token auth on), register every archive
found in PATH (a .mar, a no-archive model folder, a model store folder of .mar files, or a
`msnb export --kserve` folder) and serve in the foreground until Ctrl-C. An archive that does not load is
reported (with its worker log lines) and the others are served; the exit code is 1 only when none loads. While it runs, its URL,
key file, folder and models are written to its own state file (default $MSNB_STATE_DIR/servers/PID.json, else
~/.cache/msnb/servers/PID.json; --state never overwrites another live server's file), which is where
`msnb predict` finds them: several `msnb serve` can run side by side."""
PREDICT_HELP = """POST one input to /predictions/NAME and print the answer. Without --url it uses a running
`msnb serve` (its state file): the only one, the one started in the current folder (or a folder above it), or
the one --server picks; it says on stderr which server answered. With --url it sends the inference key read
from --token-file (TorchServe's key_file.json), or no token when none is given."""


def main(argv: list[str] | None = None) -> int:
    """Run the `msnb` command; returns the exit code (0 ok, 1 a handler failed, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, a bad option 2
        return int(exc.code or 0)
    from IPython.core.error import UsageError  # after parsing: `msnb --help` imports no IPython

    from msnb.capture.notebook import NoHandlerError, NotebookError

    try:
        return args.run(args)
    except NoHandlerError as err:
        return _fail(err, FAILED)
    except (NotebookError, OptionError, UsageError) as err:
        return _fail(err, USAGE)
    except MsnbError as err:
        return _fail(err, USAGE if getattr(args, "usage_errors", False) else FAILED)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="msnb",
        description="Notebook cells become TorchServe model archives.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{export,serve,predict,compare}")
    _add_export(sub)
    _add_serve(sub)
    _add_predict(sub)
    _add_compare(sub)
    ray_cmd.add(sub, _add_command)
    shadow.add(sub, _add_command, lambda paths: find_archives(paths))
    return parser


def _add_command(sub, name: str, summary: str, description: str) -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    return sub.add_parser(name, help=summary, description=description, epilog=EPILOG, formatter_class=raw)


def _add_export(sub) -> None:
    exp = _add_command(sub, "export", "notebook -> .mar files (runs the notebook only with --execute)", EXPORT_HELP)
    exp.add_argument(
        "notebook",
        nargs="+",
        metavar="NOTEBOOK | ARCHIVE...",
        help="the .ipynb file; or, with --ray / --kserve-python, archives torch-model-archiver made (.mar, tgz, "
        "folders, stores)",
    )
    exp.add_argument("--handler", action="append", metavar="NAME", help="export only this handler (repeatable)")
    exp.add_argument(
        "-o", "--outdir", help=f"folder for the archives (default: {DEFAULT_EXPORT}, or none with --kserve)"
    )
    exp.add_argument(
        "--format",
        default=EXPORT_FORMAT,
        choices=list(FORMATS),
        help="; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()),
    )
    exp.add_argument(
        "--check",
        action="store_true",
        help="run each handler in a test process on its --example before writing anything (without it, no user code runs)",
    )
    exp.add_argument(
        ALLOW_FLAG,
        action="append",
        default=[],
        metavar="DIR",
        help="a folder outside the notebook's own that its --checkpoint / --extra-files / requirements / @example "
        "files may come from (repeatable; without it such a file is refused)",
    )
    add_layout_options(exp)
    replica_set_arguments(exp.add_argument_group("Models sharing a replica (with --ray)"))
    _add_execute(exp)
    _limit_arguments(exp, "in the --kserve config")
    exp.set_defaults(run=_export)


def _add_execute(exp: argparse.ArgumentParser) -> None:
    """`--execute [all]`: capture from a fresh kernel that ran the cells the handlers need (or all), not from the file."""
    exp.add_argument(
        "--execute",
        nargs="?",
        const=EXECUTE_NEEDED,
        default=False,
        type=_execute_cells,
        metavar="all",
        help="run the cells the handler cells need (every cell with `--execute all`) in a fresh kernel first and "
        "export the handlers it captured (runtime values such as a vocabulary built by a loop travel as data)",
    )
    exp.add_argument(
        "--timeout",
        type=int,
        default=EXECUTE_TIMEOUT_S,
        metavar="SECONDS",
        help=f"with --execute: the longest one cell may run (default {EXECUTE_TIMEOUT_S})",
    )


def _execute_cells(text: str) -> str:
    """`--execute`'s value: only `all` (argparse passes the bare option's own value through here too)."""
    if text not in (EXECUTE_ALL, EXECUTE_NEEDED):
        raise argparse.ArgumentTypeError(
            f"takes no value but `all`, got {text!r}. Hint: put the notebook first: `msnb export nb.ipynb --execute`."
        )
    return text


def _add_serve(sub) -> None:
    srv = _add_command(sub, "serve", "serve archives on a local TorchServe until Ctrl-C", SERVE_HELP)
    srv.add_argument("paths", nargs="*", metavar="PATH", help=".mar, model folder, model store or KServe folder")
    srv.add_argument("--state", type=Path, help="where to write the server's URL and key file (default: its own)")
    srv.add_argument("--env", action="append", default=[], metavar="VAR", help=ENV_HELP.replace("this", "the shell's"))
    srv.add_argument(
        "--engine",
        choices=registry.kinds(),
        default=registry.reference().kind,
        help="torchserve (default), or ray: the same archives loaded by TorchServe's worker code on a local Ray Serve "
        '(needs pip install "msnb[ray]")',
    )
    srv.add_argument(
        "--envelope", metavar="NAME", help="TorchServe's service_envelope (e.g. kserve, kservev2), on either engine"
    )
    _limit_arguments(srv, "of the server")
    torchserve_arguments(srv.add_argument_group("TorchServe's start options (with --engine ray)"))
    replica_set_arguments(srv.add_argument_group("Models sharing a replica (with --engine ray)"))
    srv.set_defaults(run=_serve)


def _add_predict(sub) -> None:
    pre = _add_command(sub, "predict", "send one input to a served model", PREDICT_HELP)
    pre.add_argument("name", help="model name (/predictions/NAME)")
    given = pre.add_mutually_exclusive_group(required=True)
    for flag, declared in REQUEST_ARGUMENTS.items():
        (given if flag in ("--data", "--data-binary") else pre).add_argument(flag, **declared)
    pre.add_argument("--version", help="model version (default: the default version)")
    pre.add_argument(
        "--url", help="inference URL, e.g. http://127.0.0.1:8080 (default: from `msnb serve`'s state file)"
    )
    pre.add_argument("--token-file", type=Path, help="TorchServe's key_file.json, used with --url")
    pre.add_argument("--state", type=Path, help="the state file `msnb serve` wrote")
    pre.add_argument("--server", metavar="PID|FOLDER", help="which running `msnb serve` answers (when several run)")
    pre.add_argument("--stream", action="store_true", help="print a streamed answer's chunks as they arrive")
    pre.set_defaults(run=_predict)


def _add_compare(sub) -> None:
    from msnb.engines.compare import __doc__ as requests_help

    cmp = _add_command(sub, "compare", "the same requests to TorchServe and Ray Serve, answers compared", requests_help)
    cmp.add_argument("paths", nargs="+", metavar="PATH", help=".mar, model folder or model store")
    cmp.add_argument("--data", metavar="@FILE", help="the requests: a JSON Lines file")
    cmp.add_argument("--data-dir", metavar="DIR", type=Path, help="one JSON Lines file per model: DIR/NAME.jsonl")
    cmp.add_argument("--strict", action="store_true", help="fail on the differences docs/ray-design.md documents too")
    cmp.add_argument("--junit-xml", metavar="FILE", type=Path, help="write the result as JUnit XML (for CI)")
    cmp.add_argument("--json", metavar="FILE", type=Path, help="write the result as JSON")
    cmp.add_argument("--envelope", metavar="NAME", help="TorchServe's service_envelope on the Ray side")
    cmp.set_defaults(run=_compare)


def _compare(args: argparse.Namespace) -> int:
    from msnb.cli.compare import Check, request_files, run_compare

    check = Check(args.data, args.data_dir, args.strict, args.junit_xml, args.json, args.envelope)
    args.usage_errors = True
    archives = find_archives(args.paths)
    request_files(archives, check)  # bad request files are refused before anything starts (a usage error)
    args.usage_errors = False
    return run_compare(archives, check)


def _limit_arguments(parser: argparse.ArgumentParser, where: str) -> None:
    for key in LIMIT_OPTIONS:
        what = key.split("_")[1]
        parser.add_argument(
            "--" + key.replace("_", "-"),
            type=int,
            metavar="BYTES",
            help=f"largest {what} body {where} (TorchServe's default: {DEFAULT_MAX_BYTES}, 6.5 MB)",
        )


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(args.max_request_size, args.max_response_size)


def _export(args: argparse.Namespace) -> int:
    from msnb.cli.execute import ExecuteError
    from msnb.cli.export import export_archives, export_notebook, format_table, is_archive

    args.usage_errors = True  # an export error before any handler ran is about the command line
    if len(args.notebook) > 1 or is_archive(Path(args.notebook[0])):
        args.usage_errors = False  # a refused archive is not a command-line error
        return export_archives(
            find_archives, args.notebook, args.ray, args.ray_host, args.kserve_python, args.ray_port, sizing_of(args)
        )
    if args.kserve_python:
        raise OptionError(
            "--kserve-python takes archives torch-model-archiver made, not a notebook.",
            "build the archives first (`msnb export nb.ipynb -o store/`), then `msnb export store/ --kserve-python OUT`.",
        )
    args.notebook = args.notebook[0]
    try:
        report = export_notebook(args.notebook, **_notebook_export_options(args))
    except ExecuteError as err:  # the notebook itself failed, not the command line
        return _fail(err, FAILED)
    _print_export(report, format_table(report))
    _print_layouts(report, args)
    for name, err in report.failed.items():
        print(shown(f"error: {name}: {err.render()}", lines=True), file=sys.stderr)
    return OK if report.ok else FAILED


def _notebook_export_options(args: argparse.Namespace) -> dict:
    """``export_notebook``'s arguments from the command line, the notebook's path excepted."""
    return {
        "outdir": args.outdir if args.outdir or args.kserve or args.ray else DEFAULT_EXPORT,
        "handlers": args.handler,
        "fmt": args.format,
        "check": args.check,
        "kserve": args.kserve,
        "limits": _limits(args),
        "execute": args.execute,
        "timeout": args.timeout,
        "ray": args.ray,
        "ray_host": args.ray_host,
        "ray_port": args.ray_port,
        "ray_sizing": sizing_of(args),
        "allow_files": args.allow_files,
    }


def _print_export(report, table: str) -> None:
    """Which cells --execute ran, each exported handler's warnings and check answer, the table, then the export's own
    warnings."""
    if report.executed:
        print(f"execute: {report.executed}")
    for item in report.exported:
        for warning in (*(m.warning() for m in item.spec.near_misses), *item.spec.warnings):  # a misspelt role first
            print(shown(f"warning: {item.spec.name}: {warning}", lines=True), file=sys.stderr)
        if item.spec.name in report.checked:
            print(f"check: {item.spec.name} answered {json.dumps(report.checked[item.spec.name], default=repr)}")
    print(shown(table, lines=True))
    for warning in report.warnings:
        print(shown(f"warning: {warning}", lines=True), file=sys.stderr)


def _print_layouts(report, args: argparse.Namespace) -> None:
    """Where the KServe and Ray Serve layouts went, or why they were not written."""
    if report.kserve is not None:
        print(
            f"KServe layout: {report.kserve.resolve()} (set the InferenceService's storageUri to where you upload it)"
        )
    elif args.kserve:
        print("KServe layout not written: every handler must export for it.", file=sys.stderr)
    if report.ray is not None:
        from msnb.cli.export import print_ray_folder

        print_ray_folder(report.ray)
    elif args.ray:
        print("Ray Serve folder not written: every handler must export for it.", file=sys.stderr)


def _serve(args: argparse.Namespace) -> int:
    from msnb.cli.serve import serve

    return serve(args, find_archives(args.paths), lambda engine: _wait(engine))  # (_wait looked up at each call)


def _predict(args: argparse.Namespace) -> int:
    from msnb.engines.raw_request import request_options
    from msnb.options import parse_data

    args.usage_errors = False
    data = request_options(args.data, args.data_binary, args.content_type, args.header, Path.cwd())
    if data is None:
        data = parse_data(args.data, None, Path.cwd(), option="--data")
    answer = send(
        args.name,
        data,
        version=args.version,
        url=args.url,
        token_file=args.token_file,
        state=args.state,
        server=args.server,
        stream=args.stream,
    )
    if args.stream:
        from msnb.engines.chunks import print_chunks

        print_chunks(answer)
        return OK
    if isinstance(answer, (bytes, bytearray)):
        sys.stdout.buffer.write(bytes(answer))
    else:
        print(json.dumps(answer, indent=2) if not isinstance(answer, str) else answer)
    return OK


def find_archives(paths: list[str]) -> list[Path]:
    """The archives to serve: .mar files, no-archive model folders, and the .mar files of store/KServe folders."""
    found = []
    for raw in paths:
        path = Path(raw)
        store = path / KSERVE_STORE_DIR if (path / KSERVE_STORE_DIR).is_dir() else path
        if path.is_file() or (path / "MAR-INF").is_dir():
            found.append(path)
        elif store.is_dir() and sorted(store.glob("*.mar")):
            found += sorted(store.glob("*.mar"))
        else:
            raise OptionError(
                f"{raw}: no .mar file, model folder or model store there.",
                "give a .mar, a folder of .mar files, or a `msnb export --kserve` folder.",
            )
    return found


def send(name: str, data, *, version=None, url=None, token_file=None, state=None, server=None, stream=False):
    """POST ``data`` to /predictions/NAME on a running `msnb serve` (or ``url``) and return the answer (``stream``:
    an iterator over its chunks as they arrive)."""
    connect = registry.reference().connect  # TorchServe's inference API, which every engine answers

    if url is None:  # a `msnb serve` server: its keys may be renewed on its management port
        record = _server(state, server)
        print(f"answered by {record.describe()}", file=sys.stderr, flush=True)
        management = record.management_url or None  # none on Ray Serve: its key is never renewed
        client = connect(record.inference_url, Path(record.key_file), management)
    else:  # a server given by --url: its key is used as given, never renewed
        client = connect(url, token_file)
    if stream:
        return _streamed(client, client.predict_stream(name, data, version=version))
    try:
        return client.predict(name, data, version=version)
    finally:
        client.close()


def _streamed(client, chunks):
    """The chunks, then the client closed (when they end, fail or are no longer read)."""
    try:
        yield from chunks
    finally:
        client.close()


def _server(state: Path | None, pick: str | None) -> serve_state.ServerRecord:
    """The `msnb serve` a prediction goes to: the one in ``state``, else chosen among the running ones."""
    if state is None:
        return serve_state.choose(serve_state.running(), Path.cwd(), pick)
    record = serve_state.read(state)
    if record is None:
        raise MsnbError(f"No `msnb serve` is running (no live server in {state}).", serve_state.START_HINT)
    return record


def _wait(server) -> bool:
    """Block until Ctrl-C or SIGTERM (True) or until TorchServe dies (False). Both signals get a handler of their
    own: a shell starts a background job (`msnb serve store &`) with SIGINT ignored, and Python then keeps ignoring
    it, so `kill -INT` would not stop the server."""
    import signal
    import threading

    done = threading.Event()
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: done.set())
    while server.running and not done.wait(1.0):
        pass
    return done.is_set()


def _fail(err: Exception, code: int) -> int:
    text = err.render() if isinstance(err, MsnbError) else str(err)
    usage = isinstance(err, OptionError) or not isinstance(err, MsnbError)  # or IPython's UsageError (argparse's)
    if usage and "Hint:" not in text:
        text += "\nHint: see `msnb --help`."
    print(shown(f"error: {text}", lines=True), file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
