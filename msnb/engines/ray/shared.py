"""A local Ray that is up before it is asked: `msnb ray up|down|status`, started once and used by every notebook.

``up`` starts an owner process (``python -m msnb.engines.ray.shared``, a session of its own: it outlives the shell
or kernel that asked) that runs a ``LocalRay`` (loopback, Ray's token auth, the inference key, msnb's front) and
writes the state file. A kernel's ``%ms_serve --engine ray``, ``msnb serve --engine ray`` and ``msnb compare`` then
attach to it (``attached``): a ``SharedRay`` deploys its models there with an inference key of its own (its models'
replicas ask for it, so no other user's key opens them) and lists them under its pid; the owner takes a dead user's
models off (``reap``) and keeps the standing replica set, whose running replica every user's models load into
(msnb.engines.ray.shared_sets). Ray's start is paid once per machine, not once per notebook, and a replica's
start once per shared Ray, not once per user.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from msnb.engines.ray import ENGINE, require
from msnb.engines.ray.engine import _LIVE, KEY_FILE, LocalRay, default_made
from msnb.engines.ray.nodes import quiet_serve_log, refuse_taken
from msnb.engines.ray.shared_sets import SHARED_SET, SharedSets, StandingSet, route_users, sets_of, shared_members
from msnb.errors import ServerError
from msnb.files import state_dir, write_atomic

STATE_NAME = "ray-shared.json"
LOG_NAME = "ray-shared.log"  # what the owner says (its start, its errors)
LOCK_NAME = "ray-shared.lock"  # held while one `up` starts the owner: a second one waits, then finds its Ray
USERS = (
    "users"  # <root>/users/<pid>.json: the applications each attached process serves; <root>/users/<pid>/: its files
)
UP_WAIT_S = 600.0  # Ray's start on a loaded two-core machine: minutes
DOWN_WAIT_S = 120.0
WATCH_S = 0.2  # how often the owner reads its users' files: one gone, a change of the standing set or the routes
OWNER_MODULE = "msnb.engines.ray.shared"
UP_HINT = "start it with `msnb ray up` (in a notebook: `%ms_ray up`; it stays up until `msnb ray down`)."


@dataclass(frozen=True)
class SharedState:
    """What the state file says of the shared Ray: its owner, its temp root, the GCS address and the front's URL."""

    owner: int
    root: str
    address: str
    inference_url: str
    http_port: int


def state_file() -> Path:
    return state_dir() / STATE_NAME


def read_state() -> tuple[SharedState | None, str]:
    """The shared Ray's state when its owner runs; else None and why (nothing up, or a stale file, removed)."""
    path = state_file()
    try:
        state = SharedState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None, "no shared Ray is up"
    except (ValueError, TypeError):
        path.unlink(missing_ok=True)
        return None, f"the state file {path} was unreadable: removed"
    if not _is_owner(state.owner):
        path.unlink(missing_ok=True)
        return None, f"a stale state file {path} (its owner, pid {state.owner}, is gone): removed"
    return state, ""


def _is_owner(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and OWNER_MODULE in " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def up(port: int | None = None, timeout_s: float = UP_WAIT_S, waiting=lambda: None) -> tuple[SharedState, bool]:
    """The shared Ray, started unless it is up; ``(state, started_now)``. One start at a time: an ``up`` that finds
    another one starting it calls ``waiting()``, waits for it and returns its Ray. A port taken is refused before Ray
    starts."""
    state, _ = read_state()
    if state is not None:
        return state, False
    with _one_at_a_time(timeout_s, waiting):
        state, _ = read_state()  # started by the `up` this one waited for
        if state is not None:
            return state, False
        return _start(port, timeout_s), True


@contextlib.contextmanager
def _one_at_a_time(timeout_s: float, waiting=lambda: None):
    """Hold the lock beside the state file (an flock: a process that dies lets it go) while a start is under way."""
    path = state_file().with_name(LOCK_NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        _take(lock, path, timeout_s, waiting)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _take(lock, path: Path, timeout_s: float, waiting) -> None:
    deadline = time.monotonic() + timeout_s
    for attempt in itertools.count():
        try:
            return fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ServerError(
                    f"Another `msnb ray up` held {path} for {timeout_s:.0f} s.",
                    "end that `msnb ray up` (or `msnb ray down`), then try again.",
                ) from None
            if attempt == 0:
                waiting()
            time.sleep(0.2)


def _start(port: int | None, timeout_s: float) -> SharedState:
    """Start the owner and wait for its state file (the lock held)."""
    if port is not None:
        refuse_taken(port, "`msnb ray up --port P`")
    path = state_file()
    flags = ["--state", str(path), *(["--port", str(port)] if port else [])]
    with open(path.with_name(LOG_NAME), "ab") as log:
        owner = subprocess.Popen(
            [sys.executable, "-m", OWNER_MODULE, *flags],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while owner.poll() is None and time.monotonic() < deadline:
        state, _ = read_state()
        if state is not None and state.owner == owner.pid:
            return state
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        owner.terminate()
    raise ServerError(f"The shared Ray did not start: {_log_tail(path)}", f"read {path.with_name(LOG_NAME)}.")


def down(timeout_s: float = DOWN_WAIT_S) -> str:
    """Stop the shared Ray (its owner stops Serve, Ray, the front and deletes its files); what happened, in words."""
    with _one_at_a_time(UP_WAIT_S):  # a start under way ends first: it is then stopped, not left behind
        state, why = read_state()
    if state is None:
        return why
    owner = psutil.Process(state.owner)
    owner.terminate()
    try:
        owner.wait(timeout_s)
    except psutil.TimeoutExpired:
        owner.kill()  # its watchdog stops what Ray started and deletes the temp root
    state_file().unlink(missing_ok=True)
    return f"the shared Ray (owner pid {state.owner}) is down"


def status() -> str:
    """What the shared Ray serves, for whom, and what it costs at rest (its processes and their memory)."""
    state, why = read_state()
    if state is None:
        return f"{why}; {UP_HINT}"
    tree = [psutil.Process(state.owner), *psutil.Process(state.owner).children(recursive=True)]
    rss = sum(_rss(p) for p in tree) / 2**20
    lines = [f"shared Ray up: owner pid {state.owner}, {state.inference_url}, {len(tree)} processes, {rss:.0f} MiB RSS"]
    for pid, apps in sorted(users(Path(state.root)).items()):
        lines.append(f"  pid {pid}: {', '.join(apps) or 'no models'}")
    if len(lines) == 1:
        return "\n".join([*lines, "  no models served"])
    if standing := shared_members(Path(state.root) / USERS):
        lines.append(f"  in the standing replica set ({SHARED_SET}): {', '.join(standing)}")
    return "\n".join(lines)


def _rss(proc: psutil.Process) -> int:
    try:
        return proc.memory_info().rss
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0


def users(root: Path) -> dict[int, list[str]]:
    """Each attached process's pid and the applications it serves."""
    found = {}
    for path in (root / USERS).glob("*.json"):
        with contextlib.suppress(ValueError, OSError):
            found[int(path.stem)] = json.loads(path.read_text())
    return found


# Set by `up` in this process (`%ms_ray up` in a kernel): from then on its Ray engine is the shared Ray, started
# again when it went down, never one of its own. Cleared by `down`.
_CHOSEN = threading.Event()


def attached(max_request_size: int | None = None, **packing: Any) -> SharedRay | None:
    """A SharedRay on the shared Ray when it is up (not connected yet: ``start`` attaches), else None; started first
    when this process chose it (``up``) and it went down since (``packing``: LocalRay's)."""
    state = _chosen_state()
    return SharedRay(state, max_request_size, **packing) if state is not None else None


def _chosen_state() -> SharedState | None:
    state, _ = read_state()
    return up()[0] if state is None and _CHOSEN.is_set() else state


def command(action: str, port: int | None = None, say=print) -> None:
    """`msnb ray ACTION` and `%ms_ray ACTION` (up, down, status): do it and ``say`` what happened, line by line."""
    if action == "status":
        return say(status())
    if action == "down":
        _CHOSEN.clear()
        if isinstance(own := default_made(), SharedRay):
            own.stop()  # this process's models off and disconnected first (a notebook's `%ms_ray down`)
        return say(down())
    require()  # Ray missing: said here, before a process is started
    say("starting the shared Ray (loopback, Ray token auth on) ...")
    waiting = lambda: say("another `msnb ray up` is starting it: waiting for that one")  # noqa: E731
    state, started = up(port, waiting=waiting)
    _CHOSEN.set()
    say(f"shared Ray {'up' if started else 'already up'}: {state.inference_url} (owner pid {state.owner})")
    say("`%ms_serve NAME --engine ray` and `msnb serve --engine ray` now serve on it; `msnb ray down` stops it.")
    own = default_made()
    if own is not None and not isinstance(own, SharedRay):
        say(
            "This process made a Ray engine of its own before: its `%ms_serve --engine ray` keeps serving there; "
            "restart the kernel to serve on the shared Ray."
        )


def key_hint(root: str | Path) -> str:
    """What a refused key on the shared Ray is told: each process's models open with that process's own key."""
    return (
        "on the shared Ray (msnb ray up) each notebook or command's models open with its own inference key: "
        f"`server.key_file` in that notebook (%ms_status shows it), {root}/{USERS}/PID/{KEY_FILE} for process PID; "
        f"the shared Ray's own key, {root}/{KEY_FILE}, opens every model"
    )


class SharedOwner(LocalRay):
    """The shared Ray's own engine, run by its owner process: a refused key is told where each user's key is."""

    def key_hint(self) -> str | None:
        return key_hint(self.root)


class SharedRay(LocalRay):
    """This process's models on the shared Ray, with a key of their own; ``stop`` takes them off, not the Ray."""

    kind, label = ENGINE.kind, f"{ENGINE.label} (shared: msnb ray up)"

    def key_hint(self) -> str | None:
        return key_hint(self.shared.root)

    def __init__(self, state: SharedState, max_request_size: int | None = None, **packing: Any):
        from msnb.engines.ray.packing import SET_PREFIX

        super().__init__(state.http_port, max_request_size=max_request_size, **packing)
        # the standing set first, then sets of its own (named by its pid), all routed by the owner's router
        # (msnb.engines.ray.shared_sets)
        self.sets = SharedSets(self, self.sets.packing, self.sets.failure)
        self.sets.packing.prefix = f"{SET_PREFIX}{os.getpid()}-"
        self.shared, self._attached = state, False

    def start(self) -> SharedRay:
        from msnb.engines.auth import Keys, write_key_file
        from msnb.engines.inference_api import InferenceClient
        from msnb.engines.ray.nodes import use_token
        from msnb.engines.store import STORE_DIR, ModelStore

        with self._lock:
            if self.running:
                return self
            if self._attached:
                self.stop()  # attached to a shared Ray that went down since: let go of it first
            state, why = read_state()  # read again: it may have gone down, or been started anew, meanwhile
            if state is None and _CHOSEN.is_set():
                state, _ = up()  # this process chose the shared Ray (`%ms_ray up`): started again
            if state is None:
                raise ServerError(f"The shared Ray is not up: {why}.", UP_HINT)
            self.shared, self.http_port = state, state.http_port
            require()  # msnb's Ray environment set before Ray is imported
            import ray

            use_token(Path(self.shared.root))
            quiet_serve_log()
            ray.init(address=self.shared.address, log_to_driver=False, logging_level="WARNING")
            self.root = Path(self.shared.root) / USERS / str(os.getpid())
            self.root.mkdir(parents=True, exist_ok=True)
            write_key_file(self.key_file)  # this process's own inference key: its models' replicas ask for it
            self.store, self._router_up, self._attached = ModelStore(self.root / STORE_DIR), True, True
            self.client = InferenceClient(self.inference_url, keys=Keys(self.key_file, None))
            self._write_apps()
            _LIVE.add(self)  # its models taken off at interpreter exit too
            return self

    def stop(self) -> None:
        """Take this process's models off the shared Ray and disconnect; the Ray stays up."""
        import ray
        from ray import serve

        from msnb.engines.ray.nodes import use_token

        with self._lock:
            _LIVE.discard(self)
            if not self._attached:
                return
            own_sets = [app for app, rs in self.sets.packing.sets.items() if not rs.shared]  # (the standing set stays)
            for name in [*self._folders, *own_sets] if _is_owner(self.shared.owner) else ():
                with contextlib.suppress(Exception):  # the shared Ray may go down meanwhile (a packed name: no-op)
                    serve.delete(name)
            ray.shutdown()
            use_token(None)
            (self.root.parent / f"{self.root.name}.json").unlink(missing_ok=True)
            shutil.rmtree(self.root, ignore_errors=True)
            self._attached, self.root, self.client = False, None, None
            self._folders.clear()
            self.sets.packing.clear()

    @property
    def running(self) -> bool:
        return self._attached and _is_owner(self.shared.owner)

    @property
    def pid(self) -> int | None:
        return self.shared.owner if self._attached else None

    @property
    def log_dir(self) -> Path:
        return Path(self.shared.root) / "ray" / "session_latest" / "logs"

    def redeploy(self, path: str | Path, **params: Any):
        """As LocalRay's; a model not served yet goes where deploy_many places it (a replica set, by packing's rule:
        `%ms_serve --engine ray` packs on the shared Ray)."""
        from msnb.engines.store import read_manifest

        name = read_manifest(Path(path))[0]
        self._claim([name])
        app = params.get("app") or name
        if app in self._folders:
            return super().redeploy(path, **params)
        outcome = dict(self.deploy_many([(Path(path), {"app": app})])).get(app)
        if isinstance(outcome, ServerError):
            raise outcome
        return outcome

    register = redeploy

    def deploy_many(self, models: list[tuple[Path, dict]], timeout_s: float | None = None):
        from msnb.engines.store import read_manifest

        self._claim([read_manifest(folder)[0] for folder, _ in models])
        yield from super().deploy_many(models, *([timeout_s] if timeout_s else []))

    def _claim(self, names: list[str]) -> None:
        """Refuse a name another process serves on the shared Ray; list ours before they deploy (a kernel that dies
        while they start still has them taken off)."""
        others = {n: pid for pid, apps in users(Path(self.shared.root)).items() if pid != os.getpid() for n in apps}
        for name in names:
            if name in others:
                raise ServerError(
                    f"{name} is served on the shared Ray by another process (pid {others[name]}).",
                    "serve it under another name, or stop it there first.",
                )
        self._write_apps(names)

    def _write_apps(self, more: list[str] = ()) -> None:
        apps = sorted({*self._folders, *more})
        write_atomic(self.root.parent / f"{self.root.name}.json", json.dumps(apps))


def reap(root: Path) -> None:
    """Take the models of every user that is gone off Serve, and delete its files."""
    from ray import serve

    for pid, apps in users(root).items():
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            continue
        for name in [*apps, *sets_of(root / USERS, pid)]:
            with contextlib.suppress(Exception):
                serve.delete(name, _blocking=False)
        (root / USERS / f"{pid}.json").unlink(missing_ok=True)
        shutil.rmtree(root / USERS / str(pid), ignore_errors=True)


def own(state_path: Path, port: int | None) -> None:
    """The owner: start the Ray and the standing replica set, write the state file, take dead users' models off,
    deploy the live ones' standing-set members and route their replica sets until told to stop."""
    stop = threading.Event()
    _stop_on_signals(stop)
    engine = SharedOwner(port).start()
    _stop_on_signals(stop)  # again: Ray's core worker put a handler on SIGTERM that prints a stack trace first
    try:
        standing = StandingSet(engine)  # started now, with no members: its replica imports torch before a model comes
        standing.update(engine.root / USERS)
        state = SharedState(os.getpid(), str(engine.root), _gcs_address(), engine.inference_url, engine.http_port)
        write_atomic(state_path, json.dumps(asdict(state)))
        print(f"shared Ray up: {state}", flush=True)
        told = None
        while not stop.wait(WATCH_S):
            reap(engine.root)
            # the attached processes' standing-set members, and every set's route (msnb.engines.ray.shared_sets)
            standing.update(engine.root / USERS)
            told = route_users(engine, engine.root / USERS, told)
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError):
            if json.loads(state_path.read_text()).get("owner") == os.getpid():
                state_path.unlink()
        engine.stop()


def _stop_on_signals(stop: threading.Event) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())


def _gcs_address() -> str:
    import ray

    return ray.get_runtime_context().gcs_address


def _log_tail(state_path: Path) -> str:
    with contextlib.suppress(OSError):
        return path_tail(state_path.with_name(LOG_NAME))
    return "no log"


def path_tail(path: Path, chars: int = 1500) -> str:
    return path.read_text(errors="replace")[-chars:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {OWNER_MODULE}")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    own(args.state, args.port)


if __name__ == "__main__":
    main()

__all__ = ["KEY_FILE", "SharedRay", "SharedState", "attached", "down", "status", "up"]
