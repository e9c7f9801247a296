"""The IPython magics (%%ms_handler, %ms_test/build/serve/predict/explain/compare/stop/status/logs/ray/widget): thin
over session (and the shared Ray's commands)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from msnb import options
from msnb.capture.magic_lines import msnb_lines
from msnb.engines import registry
from msnb.engines.chunks import print_chunks
from msnb.engines.compare import table
from msnb.engines.env_vars import ENV_HELP
from msnb.engines.raw_request import request_options
from msnb.errors import MsnbError, OptionError
from msnb.options import REQUEST_ARGUMENTS
from msnb.package.formats import DEFAULT_EXPORT, DEV_FORMAT, EXPORT_FORMAT, FORMATS
from msnb.session.compare import compare_cell
from msnb.session.core import current, warm_up
from msnb.spec import HandlerSpec, Origin
from msnb.ui import display as views
from msnb.ui import help as magic_help
from msnb.ui.attributions import Explanation


def show_error(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> list[str]:
    """IPython's handler for an MsnbError raised in a cell (a magic, or the Python API): the cell fails (Run All
    stops, nbclient raises CellExecutionError) and shows only the message, its ``Hint:`` and the details
    (worker log lines), never a traceback through msnb."""
    lines = views.ErrorView(value).text().splitlines()
    shell._showtraceback(etype, value, lines)  # ipykernel sends these lines as the cell's error output
    return lines


class MagicOptionError(OptionError, UsageError):
    """An OptionError raised by a magic: IPython's UsageError too, as IPython's own magics raise for a bad option."""


def _usage_errors(magic: Callable) -> Callable:
    """``magic`` raising its OptionErrors as MagicOptionErrors (msnb.errors stays free of IPython)."""

    @functools.wraps(magic)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return magic(*args, **kwargs)
        except OptionError as err:
            if isinstance(err, UsageError):
                raise
            raise MagicOptionError(err.message, err.hint, err.details) from err

    return run


def _handler_options(func: Callable) -> Callable:
    """Give the cell magic msnb.options' parser and help text (so ``%%ms_handler?`` shows every option)."""
    func.parser = options.handler_magic().parser
    func.has_arguments = True
    func.__doc__ = magic_help.handler_help()
    return func


def _request_arguments(*flags: str) -> Callable:
    """IPython magic arguments for the named request options (their one declaration: ``REQUEST_ARGUMENTS``)."""

    def add(func: Callable) -> Callable:
        for flag in reversed(flags):
            func = argument(flag, **REQUEST_ARGUMENTS[flag])(func)
        return func

    return add


def _progress(label: str) -> Callable[[str, float], None]:
    """A progress callback that updates one display in place (a bar in notebooks, a line in a terminal).

    The bar appears with the first step, so a mistake found before any work (an unknown name) shows no bar.
    """
    handle = None

    def report(step: str, fraction: float) -> None:
        nonlocal handle
        view = views.ProgressView(label, step, fraction)
        if handle is None:
            handle = display(view, display_id=True) or False
            if handle is False:  # no display system (plain Python): a line per step
                print(view.text())
        elif handle is False:
            print(view.text())
        else:
            handle.update(view)

    return report


@magics_class
class MsnbMagics(Magics):
    """``%load_ext msnb`` registers these; each calls one ``msnb.session.Session`` method."""

    @cell_magic
    @_usage_errors
    @_handler_options
    def ms_handler(self, line: str, cell: str) -> HandlerSpec:
        args = _parse_handler_line(line)
        if not self._run_cell(cell, line):  # the cell's own traceback is already shown
            raise MsnbError(
                f"Handler {args.name!r} was not captured: its cell failed (see the error above).",
                "fix the cell and run it again.",
            )
        config = options.handler_config(args, self.shell.user_ns, Path.cwd())
        pool, origin = self._executed_cells(cell)
        # runtime values are snapshotted from the namespace (and checked again for staleness); the spec is shown
        # as a summary by the HandlerSpec formatter
        return current().capture(args.name, cell, pool, origin, self.shell.user_ns, Path.cwd(), **config)

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the handler's name (from its %%ms_handler line)")
    @_request_arguments(*REQUEST_ARGUMENTS)
    @argument("--explain", action="store_true", help="explain the input (as /explanations does) instead of predicting")
    @argument(
        "--describe",
        action="store_true",
        help="the handler's customized metadata (describe_handle), as GET /models/NAME?customized=true shows it",
    )
    def ms_test(self, line: str) -> Any:
        """%ms_test NAME [--data ... | --data-binary @file --content-type T --header K:V] [--explain | --describe]:
        run the generated handler in its own test process (no server); returns its answer (a streamed answer:
        its chunks; --describe: its customizedMetadata)."""
        args = parse_argstring(self.ms_test, line)
        if args.describe:
            if args.data is not None or args.data_binary is not None or args.header or args.explain:
                raise OptionError(
                    "%ms_test --describe sends no input: it takes neither --data (--data-binary, --header) nor --explain.",
                    f"run `%ms_test {args.name} --describe` alone (TorchServe's describe job has no body).",
                )
            return current().describe(args.name)
        data = self._request(args)
        samples = None if data is None else [data]
        answer = current().test(args.name, samples, explain=args.explain)[0]
        _say_near_misses(args.name)
        return Explanation(answer) if args.explain else answer

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the handler's name")
    @argument(
        "--export-path",
        dest="export_path",
        default=DEFAULT_EXPORT,
        help="folder for the .mar (default: %(default)s)",
    )
    @argument(
        "--format",
        dest="fmt",
        choices=list(FORMATS),
        default=EXPORT_FORMAT,
        help="; ".join(f"{f.name}: {f.help}" for f in FORMATS.values()),
    )
    @argument("--dev", action="store_true", help=f"shorthand for --format {DEV_FORMAT}")
    def ms_build(self, line: str) -> Path:
        """%ms_build NAME [--export-path DIR] [--format F | --dev]: validate the handler and pack its archive."""
        args = parse_argstring(self.ms_build, line)
        report = _progress(f"Building {args.name}")
        fmt = DEV_FORMAT if args.dev else args.fmt
        path = current().build(args.name, args.export_path, fmt=fmt, progress=report)
        report(f"built {path}", 1.0)
        return path

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the handler's name")
    @argument(
        "--engine", help=f"{' or '.join(registry.kinds())} (default {registry.reference().kind}): where it serves"
    )
    @argument("--port", type=int, help="Ray Serve's HTTP port on 127.0.0.1 (default: a free one)")
    @argument("--env", action="append", default=[], metavar="VAR", help=ENV_HELP)
    def ms_serve(self, line: str) -> Any:
        """%ms_serve NAME [--engine ray] [--env VAR ...]: start (or reuse) the notebook's local TorchServe (or Ray
        Serve) and (re)deploy the handler; returns the server."""
        args = parse_argstring(self.ms_serve, line)
        report, started = _progress(f"Serving {args.name}"), time.perf_counter()
        server = current().serve(args.name, progress=report, engine=args.engine, port=args.port, env=args.env)
        served = current().served[args.name]
        reloaded = current().reloads.note(args.name)
        where = f"{server.inference_url}/predictions/{args.name}"
        report(f"ready: {served.line()}{reloaded} at {where} (took {views.took(time.perf_counter() - started)})", 1.0)
        _say_near_misses(args.name)
        return server  # shown by its ready line above, not as an Out (see load_ipython_extension)

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the served model's name")
    @_request_arguments(*REQUEST_ARGUMENTS)
    @argument("--version", help="a model version (default: the served one)")
    @argument("--stream", action="store_true", help="print the answer's chunks as they arrive; returns their list")
    def ms_predict(self, line: str) -> Any:
        """%ms_predict NAME [--data ...] [--data-binary @file --content-type T --header K:V] [--version V] [--stream]:
        ask the local server; returns the answer (with --stream: prints each chunk as it arrives and returns the list
        of chunks)."""
        args = parse_argstring(self.ms_predict, line)
        data = self._request(args)  # None: the handler's --example
        started = time.perf_counter()
        if args.stream:
            answer = views.Printed(
                print_chunks(current().predict_stream(args.name, data, version=args.version, warn=False))
            )
        else:
            answer = current().predict(args.name, data, version=args.version, warn=False)
        display(views.Note(f"{args.name} answered in {views.took(time.perf_counter() - started)}"))
        stale = current().stale(args.name)
        if stale and args.version is None:
            display(views.WarningView(stale))
        return answer

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the served model's name")
    @_request_arguments(*REQUEST_ARGUMENTS)
    @argument("--version", help="a model version (default: the served one)")
    def ms_explain(self, line: str) -> Explanation:
        """%ms_explain NAME [--data ...] [--data-binary @file --content-type T --header K:V] [--version V]: ask the
        local server's /explanations; shows the attributions as bars (``.answer`` holds the data). Without an
        ``explain`` role: Integrated Gradients."""
        args = parse_argstring(self.ms_explain, line)
        data = self._request(args)  # None: the handler's --example
        return Explanation(current().explain(args.name, data, version=args.version))

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the handler's name")
    @argument(
        "--data",
        help="one body (JSON or a variable), or @requests.jsonl (`msnb compare`'s request file); "
        "default: the handler's --example",
    )
    def ms_compare(self, line: str) -> views.View:
        """%ms_compare NAME [--data JSON | --data @requests.jsonl]: serve the handler on TorchServe and on Ray Serve
        side by side, send each request to both and show the table; the cell fails when any answer differs."""
        args = parse_argstring(self.ms_compare, line)
        rows = compare_cell(current(), args.name, args.data, self.shell.user_ns)
        return views.View(f"TorchServe and Ray Serve answered all {len(rows)} requests alike", pre=table(rows))

    @line_magic
    @_usage_errors
    def ms_stop(self, line: str = "") -> views.View:
        """%ms_stop: stop the notebook's local server and test processes; says what it stopped."""
        return views.View(current().stop())

    @line_magic
    @_usage_errors
    def ms_status(self, line: str = "") -> views.Status:
        """%ms_status: handlers defined, archives built, the server and its models (a dict)."""
        return views.Status(current().status())

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the served model's name")
    @argument("-n", "--lines", type=int, default=40, help="how many of the newest lines (default: %(default)s)")
    def ms_logs(self, line: str) -> views.LogView:
        """%ms_logs NAME [-n LINES]: the newest lines NAME's TorchServe workers wrote (model_log.log)."""
        args = parse_argstring(self.ms_logs, line)
        return views.LogView(args.name, current().logs(args.name, args.lines))

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument(
        "action",
        choices=("up", "down", "status"),
        help="up: start the shared Ray (or find it up); down: stop "
        "it; status: what it serves, for whom, and its processes and memory",
    )
    @argument("--port", type=int, help="up: its inference port on 127.0.0.1 (default: a free one)")
    def ms_ray(self, line: str) -> None:
        """%ms_ray up|down|status [--port P]: the shared local Ray of `msnb ray`, from the notebook. After `%ms_ray
        up`, `%ms_serve NAME --engine ray` serves on it (starting it again if it went down), never on a Ray of the
        kernel's own."""
        args = parse_argstring(self.ms_ray, line)
        registry.ray_serve().shared(args.action, args.port, print)  # (the ray extra: imported when asked for)

    @line_magic
    @_usage_errors
    @magic_arguments()
    @argument("name", help="the handler's name")
    def ms_widget(self, line: str) -> Any:
        """%ms_widget NAME: a form with Build / Test / Serve / Predict buttons over the same steps."""
        args = parse_argstring(self.ms_widget, line)
        from msnb.ui.widget import BuildWidget

        return BuildWidget(args.name)

    # ------------------------------------------------------------ helpers
    def _run_cell(self, cell: str, line: str = "") -> bool:
        """Run the cell for real (namespace, tracebacks as usual); True when it succeeded."""
        outer = self.shell.displayhook.exec_result
        try:
            # the magic line as a comment keeps line numbers as the user sees the cell (line 1 is %%ms_handler)
            return self.shell.run_cell(f"# %%ms_handler {line}\n{cell}").success
        finally:  # a nested run_cell clears the displayhook's result: this cell's Out would be lost
            self.shell.displayhook.exec_result = outer

    def _executed_cells(self, cell: str) -> tuple[list[tuple[str, str]], str]:
        """The kernel's other executed cells in execution order, and this (handler) cell's origin label."""
        history = self.shell.history_manager.input_hist_raw
        now = self.shell.execution_count  # this cell's index while it runs with history on
        if now >= len(history) and history and cell.strip() and history[-1].rstrip().endswith(cell.rstrip()):
            now = len(history) - 1  # IPython 9 has stored the running cell last, its count already the next one
        pool = [(Origin(f"cell In[{i}]", cell=i), src) for i, src in enumerate(history) if 0 < i != now and src.strip()]
        return pool, Origin(f"cell In[{now}]", cell=now) if now < len(history) else Origin("handler cell")

    def _request(self, args: Any) -> Any:
        """--data (JSON, @file or a variable), or a request as a client sends it: --data-binary, --content-type
        and --header (with --data as its JSON body); None without any (the handler's --example)."""
        raw = request_options(args.data, args.data_binary, args.content_type, args.header, Path.cwd())
        if raw is not None:
            return raw
        return self._data(args.data) if args.data is not None else None

    def _data(self, text: str) -> Any:
        return options.parse_data(text, self.shell.user_ns, Path.cwd())


def _say_near_misses(name: str) -> None:
    """Beside an answer: what a misspelt role changed in it ("no postprocess role: this is the model's raw output")."""
    for miss in current().get(name).near_misses:
        display(views.WarningView(miss.beside_answer()))


def _parse_handler_line(line: str):
    try:
        return options.parse_handler_line(line)
    except UsageError as err:
        usage = magic_help.handler_usage()
        raise OptionError(f"%%ms_handler: {err}", "`%%ms_handler?` lists every option.", details=usage) from None


def load_ipython_extension(ip: Any) -> None:
    """``%load_ext msnb``: register the magics, make an MsnbError fail its cell (see ``show_error``) and show a
    HandlerSpec as its summary."""
    ip.register_magics(MsnbMagics)
    ip.set_custom_exc((MsnbError,), show_error)
    if msnb_lines not in ip.input_transformers_cleanup:  # `%ms_serve x  # note`, comments above `%%ms_handler`
        ip.input_transformers_cleanup.append(msnb_lines)
    warm_up()  # the test processes' fork server imports torch meanwhile
    names = lambda: current().specs  # noqa: E731 - read at completion time
    for magic in ("ms_handler", "ms_test", "ms_build", "ms_serve", "ms_predict", "ms_logs", "ms_widget"):
        method = getattr(MsnbMagics, magic)
        prefix = "%%" if magic == "ms_handler" else "%"
        ip.set_hook("complete_command", magic_help.completer(names, magic_help.flags(method)), str_key=prefix + magic)
    formatters = ip.display_formatter.formatters
    for kind in registry.kinds():
        # `%ms_serve` returns its server for `server = %ms_serve NAME`; its ready line said it: no Out repeats it
        module, _, engine = registry.get(kind).type_name.rpartition(".")
        ip.display_formatter.ipython_display_formatter.for_type_by_name(module, engine, lambda server: None)
    formatters["text/plain"].for_type(HandlerSpec, lambda spec, p, cycle: p.text(views.SpecSummary(spec).text()))
    formatters["text/html"].for_type(HandlerSpec, lambda spec: views.SpecSummary(spec)._repr_html_())
