"""The `msnb` terminal command: export a notebook's handlers, serve archives, send a prediction."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from IPython.core.error import UsageError

from msnb.archive import DEFAULT_EXPORT, EXPORT_FORMAT, FORMATS
from msnb.errors import MsnbError, OptionError, ServerError
from msnb.files import write_atomic
from msnb.torchserve.config import DEFAULT_MAX_BYTES, LIMIT_OPTIONS, Limits

OK, FAILED, USAGE = 0, 1, 2
EPILOG = """exit codes: 0 success, 1 a handler failed (the others are still reported) or the notebook has
no %%ms_handler cell, 2 usage error (bad options, unreadable notebook, unknown --handler, OUTDIR not writable).
Errors go to stderr as `error: ...` followed by a `Hint: ...` line."""
EXPORT_HELP = """Read NOTEBOOK with nbformat WITHOUT running it, capture every %%ms_handler cell (the option
line is parsed exactly as the magic parses it; definitions come from the code cells above the handler
cell, the latest one winning, as a fresh "Run All" would have them; cells below never count), and write
one archive per handler into OUTDIR. Relative paths in the options (--checkpoint, --requirements,
--extra-files, --example @file) resolve against the notebook's folder, not the current directory."""
SERVE_HELP = """Start a private TorchServe on 127.0.0.1 (free ports, token auth on), register every archive
found in PATH (a .mar, a no-archive model folder, a model store folder of .mar files, or a
`msnb export --kserve` folder) and serve in the foreground until Ctrl-C. An archive that does not load is
reported (with its worker log lines) and the others are served; the exit code is 1 only when none loads. While it runs, its URL and
key file are written to STATE (default $MSNB_STATE_DIR/serve.json, else ~/.cache/msnb/serve.json),
which is where `msnb predict` finds them."""
PREDICT_HELP = """POST one input to /predictions/NAME and print the answer. Without --url it uses the
server `msnb serve` is running (its state file); with --url it sends the inference key read from
--token-file (TorchServe's key_file.json), or no token when none is given."""


def main(argv: list[str] | None = None) -> int:
    """Run the `msnb` command; returns the exit code (0 ok, 1 a handler failed, 2 usage error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, a bad option 2
        return int(exc.code or 0)
    from msnb.notebook import NoHandlerError, NotebookError

    try:
        return args.run(args)
    except NoHandlerError as err:
        return _fail(err, FAILED)
    except (NotebookError, UsageError) as err:
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
    sub = parser.add_subparsers(dest="command", required=True, metavar="{export,serve,predict}")
    raw = argparse.RawDescriptionHelpFormatter
    exp = sub.add_parser(
        "export",
        help="notebook -> .mar files (never runs the notebook)",
        description=EXPORT_HELP,
        epilog=EPILOG,
        formatter_class=raw,
    )
    exp.add_argument("notebook", help="the .ipynb file")
    exp.add_argument("--handler", action="append", metavar="NAME", help="export only this handler (repeatable)")
    exp.add_argument("-o", "--outdir", help="folder for the archives (default: model_store, or none with --kserve)")
    exp.add_argument(
        "--format",
        default=EXPORT_FORMAT,
        choices=list(FORMATS),
        help="; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()),
    )
    exp.add_argument(
        "--check",
        action="store_true",
        help="run each handler in-process on its --example before writing anything (without it, no user code runs)",
    )
    exp.add_argument(
        "--kserve",
        metavar="DIR",
        help="also write KServe's TorchServe layout: "
        "DIR/model-store/<name>.mar and DIR/config/config.properties (storageUri points at DIR)",
    )
    exp.add_argument(
        "--ray",
        metavar="DIR",
        help="also write a Ray Serve folder: DIR/<name>/ model folders, the adapter and serve_config.yaml "
        '(`serve run serve_config.yaml` from DIR; KubeRay\'s serveConfigV2); needs pip install "msnb[ray]"',
    )
    exp.add_argument(
        "--ray-host",
        metavar="HOST",
        help="the address Ray Serve's HTTP proxy binds in serve_config.yaml (default 127.0.0.1; 0.0.0.0 for a "
        "cluster, behind an authenticating proxy: Serve's HTTP has no authentication)",
    )
    _limit_arguments(exp, "in the --kserve config")
    exp.set_defaults(run=_export)
    srv = sub.add_parser(
        "serve",
        help="serve archives on a local TorchServe until Ctrl-C",
        description=SERVE_HELP,
        epilog=EPILOG,
        formatter_class=raw,
    )
    srv.add_argument("paths", nargs="+", metavar="PATH", help=".mar, model folder, model store or KServe folder")
    srv.add_argument("--state", type=Path, help="where to write the server's URL and key file")
    _limit_arguments(srv, "of the server")
    srv.set_defaults(run=_serve)
    pre = sub.add_parser(
        "predict", help="send one input to a served model", description=PREDICT_HELP, epilog=EPILOG, formatter_class=raw
    )
    pre.add_argument("name", help="model name (/predictions/NAME)")
    pre.add_argument("--data", required=True, metavar="JSON|@FILE", help="inline JSON, or @file (JSON, else raw bytes)")
    pre.add_argument("--version", help="model version (default: the default version)")
    pre.add_argument(
        "--url", help="inference URL, e.g. http://127.0.0.1:8080 (default: from `msnb serve`'s state file)"
    )
    pre.add_argument("--token-file", type=Path, help="TorchServe's key_file.json, used with --url")
    pre.add_argument("--state", type=Path, help="the state file `msnb serve` wrote")
    pre.set_defaults(run=_predict)
    return parser


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
    from msnb.export import export_notebook, format_table

    args.usage_errors = True  # an export error before any handler ran is about the command line
    outdir = args.outdir if args.outdir or args.kserve or args.ray else DEFAULT_EXPORT
    report = export_notebook(
        args.notebook,
        outdir,
        handlers=args.handler,
        fmt=args.format,
        check=args.check,
        kserve=args.kserve,
        limits=_limits(args),
        ray=args.ray,
        ray_host=args.ray_host,
    )
    for item in report.exported:
        for warning in item.spec.warnings:
            print(f"warning: {item.spec.name}: {warning}", file=sys.stderr)
        if item.spec.name in report.checked:
            print(f"check: {item.spec.name} answered {json.dumps(report.checked[item.spec.name], default=repr)}")
    print(format_table(report))
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if report.kserve is not None:
        print(
            f"KServe layout: {report.kserve.resolve()} (set the InferenceService's storageUri to where you upload it)"
        )
    elif args.kserve:
        print("KServe layout not written: every handler must export for it.", file=sys.stderr)
    if report.ray is not None:
        print(f"Ray Serve folder: {report.ray.resolve()} (from there: serve run serve_config.yaml)")
    elif args.ray:
        print("Ray Serve folder not written: every handler must export for it.", file=sys.stderr)
    for name, err in report.failed.items():
        print(f"error: {name}: {err.render()}", file=sys.stderr)
    return OK if report.ok else FAILED


def _serve(args: argparse.Namespace) -> int:
    from msnb.torchserve import LocalServer

    archives = find_archives(args.paths)
    state = args.state or state_file()
    server = LocalServer(max_request_size=args.max_request_size, max_response_size=args.max_response_size)
    print(f"starting TorchServe (workdir {server.workdir}) ...", flush=True)
    server.start()
    try:
        _register_each(server, archives)
        _write_state(state, server)
        print(f"inference {server.inference_url}  management {server.management_url}  metrics {server.metrics_url}")
        print(f"token: Authorization: Bearer <inference key in {server.layout.key_file}>")
        print(f"try:   msnb predict NAME --data '<json>'   (state file {state})\nCtrl-C stops the server.", flush=True)
        if not _wait(server):
            raise ServerError(
                "TorchServe exited by itself.",
                "read its last log lines below; run `msnb serve` again.",
                details=server.log_tail(),
            )
    finally:
        state.unlink(missing_ok=True)
        server.stop()
        print("server stopped", flush=True)
    return OK


def _register_each(server, archives: list[Path]) -> None:
    """Register every archive that loads and report each that does not (with its worker log lines); only when
    none loads is it an error."""
    served = 0
    for path in archives:
        try:
            status = server.register(path)
        except MsnbError as err:
            print(f"error: {path}: {err.render()}", file=sys.stderr, flush=True)
            continue
        served += 1
        print(f"serving {status.name} {status.version}: POST {server.inference_url}/predictions/{status.name}")
    if not served:
        raise ServerError(
            f"None of the {len(archives)} archive(s) could be served (each error is above).",
            "fix the handler named in the worker log lines, export it again and rerun `msnb serve`.",
        )
    if served < len(archives):
        print(f"warning: serving {served} of {len(archives)} archives", file=sys.stderr, flush=True)


def _predict(args: argparse.Namespace) -> int:
    from msnb.options import parse_data

    args.usage_errors = False
    data = parse_data(args.data, None, Path.cwd(), option="--data")
    answer = send(args.name, data, version=args.version, url=args.url, token_file=args.token_file, state=args.state)
    if isinstance(answer, (bytes, bytearray)):
        sys.stdout.buffer.write(bytes(answer))
    else:
        print(json.dumps(answer, indent=2) if not isinstance(answer, str) else answer)
    return OK


def state_file() -> Path:
    """Where `msnb serve` tells `msnb predict` its URL and key file: $MSNB_STATE_DIR or ~/.cache/msnb."""
    return Path(os.environ.get("MSNB_STATE_DIR") or Path.home() / ".cache" / "msnb") / "serve.json"


def find_archives(paths: list[str]) -> list[Path]:
    """The archives to serve: .mar files, no-archive model folders, and the .mar files of store/KServe folders."""
    found = []
    for raw in paths:
        path = Path(raw)
        store = path / "model-store" if (path / "model-store").is_dir() else path
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


def send(name: str, data, *, version=None, url=None, token_file=None, state=None):
    """POST ``data`` to /predictions/NAME on the `msnb serve` server (or ``url``) and return the answer."""
    from msnb.torchserve import TorchServeClient
    from msnb.torchserve.auth import Keys

    if url is None:  # the `msnb serve` server: its keys may be renewed on its management port
        url, management, token_file = _read_state(state or state_file())
        client = TorchServeClient(url, management, keys=Keys(token_file, management))
    else:  # a server given by --url: its key is used as given, never renewed
        client = TorchServeClient.connect(url, token_file)
    try:
        return client.predict(name, data, version=version, timeout=120)
    finally:
        client.close()


def _write_state(path: Path, server) -> None:
    info = {
        "pid": os.getpid(),
        "inference_url": server.inference_url,
        "management_url": server.management_url,
        "key_file": str(server.layout.key_file),
    }
    write_atomic(path, json.dumps(info))


def _read_state(path: Path) -> tuple[str, str, Path]:
    try:
        info = json.loads(path.read_text())
        os.kill(info["pid"], 0)
    except (OSError, ValueError, KeyError):
        raise MsnbError(
            f"No `msnb serve` is running (no live server in {path}).",
            "start one with `msnb serve model_store/`, or give --url (and --token-file).",
        ) from None
    return info["inference_url"], info["management_url"], Path(info["key_file"])


def _wait(server) -> bool:
    """Block until Ctrl-C or SIGTERM (True) or until TorchServe dies (False)."""
    import signal
    import threading

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        while server.running and not done.wait(1.0):
            pass
    except KeyboardInterrupt:
        return True
    return done.is_set()


def _fail(err: Exception, code: int) -> int:
    text = err.render() if isinstance(err, MsnbError) else str(err)
    if isinstance(err, UsageError) and "Hint:" not in text:
        text += "\nHint: see `msnb --help`."
    print(f"error: {text}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
