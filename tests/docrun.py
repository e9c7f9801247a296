"""Run a docs page as a reader would: its examples in order, from an empty folder, in one real Jupyter kernel.

The page is the source of truth; nothing here adds setup. How a page marks its blocks (docs/testing.md):

- a ```` ```python ```` block is a notebook cell, run in order in one kernel (``%load_ext msnb`` is on the page);
- a block titled with a file name (```` ```python title="mypkg/__init__.py" ````, ```` ```yaml title="model-config.yaml"
  ````) is a file the reader saves: it is written into the folder before the cells after it run;
- a ```` ```text title="Output" ```` block right after a cell (or a shell block) is what that cell prints: the run
  must print it (doctest's rules: ``...`` stands for any text, runs of spaces and newlines compare equal);
  ```` ```text title="Error" ```` says the cell fails, and with that text;
- on a shell page, each ```` ```bash ```` block runs in ``bash -euo pipefail`` in the same folder, in order, as in
  one terminal: what a block exports is in the next block's environment (a file block is written there too);
- a page that starts a cluster (``ray start``, ``ray stop``: machine-wide commands) runs in a machine of its own
  (``run_shell_page(..., isolated=True)``): Linux namespaces with their own processes and loopback, so its commands
  run exactly as written and end with the run;
- blocks inside a folded admonition (``??? example "Setup"``, indented) count like any other;
- any other block (``text``, ``yaml``, a python block titled ``excerpt: ...``) is shown, not run.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

DOCS = Path(__file__).resolve().parents[1] / "docs"
CELL_TIMEOUT_S = 120  # a Ray start on a busy 2-core machine; nbclient stalls now and then (FACTS.md)
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>[^`]*)$")
_TITLE = re.compile(r'title="(?P<title>[^"]*)"')
_FILE_NAME = re.compile(r"^[\w.-]+(/[\w.-]+)*\.\w+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CHECKER = doctest.OutputChecker()
_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass
class Block:
    kind: str  # "cell", "file", "shell", "output", "error", "shown"
    text: str
    title: str = ""
    line: int = 0  # where the block starts on the page (1-based)
    expect: Block | None = None  # the Output/Error block that follows a cell or a shell block


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks in order, each with its kind; an Output/Error block is attached to the block before."""
    found: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or not opening["info"].strip():
            i += 1
            continue
        indent, info = opening["indent"], opening["info"].strip()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```" and lines[j].startswith(indent))
        text = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        block = _classify(info, text, i + 1)
        if block.kind in ("output", "error") and found and found[-1].kind in ("cell", "shell"):
            found[-1].expect = block
        found.append(block)
        i = end + 1
    return found


def _classify(info: str, text: str, line: int) -> Block:
    language = info.split()[0].lstrip("{.").rstrip("}")
    titled = _TITLE.search(info)
    title = titled["title"] if titled else ""
    if language == "python" and not title:
        return Block("cell", text, line=line)
    if _FILE_NAME.match(title):
        return Block("file", text, title, line)
    if language in ("bash", "console", "shell", "sh"):
        return Block("shell", text, title, line)
    if language == "text" and title in ("Output", "Error"):
        return Block(title.lower(), text, title, line)
    return Block("shown", text, title, line)


def matches(expected: str, got: str) -> bool:
    return _CHECKER.check_output(expected, got, _FLAGS)


def cell_text(cell: nbformat.NotebookNode) -> str:
    """What a reader sees under a cell: its printed streams, the text of its displays and results, its error."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif out.output_type == "error":
            parts.append(_ANSI.sub("", "\n".join(out.get("traceback", [])) or f"{out.ename}: {out.evalue}"))
    return "\n".join(parts)


def run_python_page(page: Path, workdir: Path, cell_timeout: int = CELL_TIMEOUT_S) -> list[str]:
    """Run ``page``'s cells in order in one kernel in ``workdir``; returns the problems found (empty: the page runs).
    The executed notebook is kept beside as ``executed-PAGE.ipynb``, to read what each cell showed."""
    problems: list[str] = []
    page_blocks = [b for b in blocks(page) if b.kind in ("cell", "file")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(b.text.rstrip("\n")) for b in page_blocks])
    client = NotebookClient(
        nb, kernel_name="python3", timeout=cell_timeout, resources={"metadata": {"path": str(workdir)}}
    )
    try:
        with client.setup_kernel(env=scratch_env(workdir)):
            for index, (block, cell) in enumerate(zip(page_blocks, nb.cells, strict=True)):
                if block.kind == "file":
                    (workdir / block.title).parent.mkdir(parents=True, exist_ok=True)
                    (workdir / block.title).write_text(block.text)
                    continue
                failed = None
                try:
                    client.execute_cell(cell, index)
                except (CellExecutionError, CellTimeoutError) as err:
                    failed = f"{type(err).__name__}: {err}"
                problems += _judge(page, block, cell_text(cell), failed)
                if failed and not (block.expect and block.expect.kind == "error"):
                    break  # a reader stops at the first cell that fails
    finally:
        nbformat.write(nb, workdir / f"executed-{page.stem}.ipynb")
    return problems


def scratch_env(workdir: Path) -> dict[str, str]:
    """The reader's environment: this Python's bin first on PATH; HOME and IPYTHONDIR in a scratch folder beside
    ``workdir`` (Jupyter and msnb write there). TMPDIR stays the run's: a worker socket path must stay short."""
    scratch = workdir.parent / f"{workdir.name}-home"
    scratch.mkdir(exist_ok=True)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return dict(os.environ, HOME=str(scratch), IPYTHONDIR=str(scratch / ".ipython"), PATH=path)


def run_shell_page(page: Path, workdir: Path, isolated: bool = False, block_timeout: int = CELL_TIMEOUT_S * 2):
    """Run ``page``'s bash blocks in order in ``workdir``, each in ``bash -euo pipefail``, with this Python's bin first.

    Each block runs in a session of its own with a TMPDIR of its own (TorchServe keeps one pid file per TMPDIR);
    whatever a block left running (a server it started in the background) is ended with it, as a closed terminal
    would end it. ``isolated``: the page runs in namespaces of its own (``_isolated``)."""
    if isolated:
        return _isolated(page, workdir, block_timeout)
    return _run_blocks(page, workdir, block_timeout, keep_running=False)


def _run_blocks(page: Path, workdir: Path, block_timeout: int, keep_running: bool) -> list[str]:
    """The blocks of ``page`` in order; ``keep_running``: what a block started (``ray start``'s nodes) outlives it."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="msnbdoc-") as tmp:
        env = dict(scratch_env(workdir), TMPDIR=tmp)
        for block in blocks(page):
            if block.kind == "file":
                (workdir / block.title).parent.mkdir(parents=True, exist_ok=True)
                (workdir / block.title).write_text(block.text)
            if block.kind != "shell":
                continue
            out, failed, env = _run_block(block, workdir, env, block_timeout, keep_running)
            problems += _judge(page, block, out, failed)
            if failed and not (block.expect and block.expect.kind == "error"):
                break
    return problems


def _run_block(block: Block, workdir: Path, env: dict, timeout: int, keep_running: bool):
    """Run one block; returns its output, the failure (None: it ran) and the environment it leaves for the next.
    Its output goes to a file, not a pipe: a daemon it started (``ray start``'s) may hold the pipe open for ever."""
    carried, output = Path(env["TMPDIR"]) / "environment", Path(env["TMPDIR"]) / "output"
    script = f"trap 'env -0 > {carried}' EXIT\n{block.text}"
    with open(output, "w") as sink:
        done = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=workdir,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        done.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_session(done)
        return output.read_text(), f"still running after {timeout} s\n{output.read_text()[-3000:]}", env
    finally:
        if not keep_running:
            _end_session(done)
    out = output.read_text()
    failed = f"exit {done.returncode}\n{out[-3000:]}" if done.returncode else None
    if carried.exists():
        pairs = [item.split("=", 1) for item in carried.read_text().split("\0") if "=" in item]
        env = {**dict(pairs), "TMPDIR": env["TMPDIR"]}
    return out, failed, env


def _isolated(page: Path, workdir: Path, block_timeout: int) -> list[str]:
    """Run the page in Linux namespaces of its own (``unshare``: processes, network, mounts, as an unprivileged user's
    root): ``ray stop`` sees only the page's processes, ports 6379/8000/8265 are the page's own loopback's, and every
    process the page started ends with it. The namespace's first process is a shell that runs this module as a
    script and reaps what is left to it, as a machine's init does: ``ray stop`` waits for every Ray process to be
    gone, and one that had exited but was never reaped (a zombie of a ``ray start`` that returned) kept it waiting
    out its whole 16 s grace period."""
    command = [
        "unshare",
        "--user",
        "--map-root-user",
        "--pid",
        "--fork",
        "--net",
        "--mount-proc",
        "--kill-child",
        "bash",
        "-c",
        '"$0" "$@"; exit $?',  # (not exec'd: bash stays the first process, reaping the orphans it is handed)
        sys.executable,
        __file__,
        str(page),
        str(workdir),
        str(block_timeout),
    ]
    scratch = Path(tempfile.mkdtemp(prefix="msnbdocns-", dir="/tmp"))  # short: Ray's socket paths hold 107 bytes
    for folder in ("r", "t"):
        (scratch / folder).mkdir()
    # A reader's terminal: none of the Ray settings this test process holds (msnb sets its own when it imports Ray);
    # Ray's temp root (a reader's Ray uses /tmp/ray, which the host's other Rays may use) and TMPDIR the run's own,
    # removed with it even when the run is killed.
    env = {k: v for k, v in scratch_env(workdir).items() if not k.startswith("RAY_")}
    env |= {"RAY_TMPDIR": str(scratch / "r"), "TMPDIR": str(scratch / "t")}
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = run.communicate()
    finally:  # SIGKILL to unshare: its child, the namespace's first process, gets SIGKILL too, and every process in it
        run.kill()
        run.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    if run.returncode:
        return [f"{page.name}: the isolated run failed (exit {run.returncode}):\n{err[-3000:]}"]
    return json.loads(out.splitlines()[-1])


def can_isolate() -> bool:
    """Whether this machine lets an unprivileged run make its own namespaces (``_isolated``)."""
    probe = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--net", "--mount-proc", "true"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _end_session(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


def _judge(page: Path, block: Block, got: str, failed: str | None) -> list[str]:
    where = f"{page.name}, the block on line {block.line}"
    expect = block.expect
    if failed and not (expect and expect.kind == "error"):
        return [f"{where} fails as written:\n{failed}"]
    if not failed and expect and expect.kind == "error":
        return [f"{where} should fail (the page shows an Error after it) but ran:\n{got}"]
    if expect and not matches(expect.text, got):
        return [f"{where} printed something else than the page shows:\n--- page\n{expect.text}--- run\n{got}"]
    return []


def left_running(bound_s: float = 60) -> list[str]:
    """The processes of this PID namespace still running besides this one and the shell that runs it (zombies aside),
    once those ending have ended or ``bound_s`` has passed: what a page that ends with ``ray stop`` left behind."""
    deadline, ours = time.monotonic() + bound_s, {os.getpid(), os.getppid()}
    while True:
        left = []
        for pid in (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) not in ours):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
            except (OSError, IndexError):  # gone meanwhile
                continue
            if state != "Z":
                left.append(f"{pid} {command}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def not_rays_own(root: Path) -> list[str]:
    """What lies under Ray's temp root that Ray's own run did not put there: anything beside its ``ray`` folder, and
    an environment a requirement would have made there (Ray's ``runtime_env`` pip, uv, conda or virtualenv)."""
    found = [str(p) for p in root.iterdir() if p.name != "ray"]
    for kind in ("pip", "uv", "conda", "virtualenv"):
        found += [str(p) for p in root.glob(f"ray/session_*/runtime_resources/{kind}/*")]
    return found


def _after(page: Path) -> list[str]:
    """The page ran to its end, its last block stopping what it started: no process of it runs, and Ray's temp root
    holds Ray's own files only."""
    left, foreign = left_running(), not_rays_own(Path(os.environ["RAY_TMPDIR"]))
    problems = [f"{page.name} ran, and left {len(left)} process(es) running:\n" + "\n".join(left)] if left else []
    return problems + ([f"{page.name} left under Ray's temp root:\n" + "\n".join(foreign)] if foreign else [])


if __name__ == "__main__":  # inside the namespaces of ``_isolated``: their loopback up, then the page's blocks
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    _page, _workdir, _timeout = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    _problems = _run_blocks(_page, _workdir, _timeout, keep_running=True)
    print(json.dumps(_problems or _after(_page)))
