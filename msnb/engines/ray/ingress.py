"""The local Ray's front door: one loopback port that sends each prediction straight to a replica of its model.

Through Serve's HTTP proxy a prediction takes two Ray calls (proxy -> router -> model, the body fetched back from
the proxy): 86-90 req/s on two cores, below TorchServe. With Serve's direct ingress on
(``RAY_SERVE_ENABLE_DIRECT_INGRESS``, msnb.engines.ray.ENV) each application's ingress replica answers HTTP on a
loopback port of its own, and Serve's controller knows which ports serve which route prefix (its target groups, what
Ray's own HAProxy mode routes by; the router hands them out at ``TARGETS_PATH``). This front is that load balancer:
a process of its own (``python -m msnb.engines.ray.ingress`` on uvloop, its connections in msnb.engines.proxy;
no Ray in it: in a Ray actor its event loop fought Ray's threads for the GIL) that sends ``/predictions/NAME`` to
NAME's replicas (``msnb_runtime.ray.app.direct_route``) and every other path to the router's, longest route prefix
first, and to Serve's proxy while a route has no running replica. The replicas keep the ingress checks (their
``ingress_config``: the inference key, the body limit, the allowed hosts). It reads the routes every ``REFRESH_S``
and at once when its owner asks (``refresh``: a line on its stdin, answered by ``REFRESHED`` on its stdout, so that an
unregister returns after the front left the model's replicas); it exits when its owner's pipe closes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import select
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import uvloop

from msnb.engines import proxy
from msnb.engines.ray.nodes import LOOPBACK  # where the front listens unless told otherwise
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.api import hosts
from msnb.templates.msnb_runtime.api.openai import ROUTES as API_ROUTES
from msnb.templates.msnb_runtime.api.v1 import refused
from msnb.templates.msnb_runtime.ray.ingress import EXPLAIN, TARGETS_PATH, explained, model_route, own_api_path
from msnb.templates.msnb_runtime.ts.checks import read_key
from msnb.templates.msnb_runtime.ts.wire import error_reply

READY = "msnb-front-ready"  # the line the front prints once it listens
REFRESHED = "msnb-front-refreshed"  # the line it prints each time its owner asked it to read the routes again
REFRESH_S = 0.2  # how often the routes are read again: a stopping replica drains longer than this (ENV)
REFRESH_WAIT_S = 15  # how long an owner waits for a refresh it asked (then the front reads them within REFRESH_S)
_ASKING = threading.Lock()  # one refresh asked at a time (the registry's deploy threads, a caller's)
TRIES = 3  # a connection refused or dropped before an answer (a replica gone) is tried again on fresh routes


class Routes:
    """Serve's HTTP target groups as a table: route prefix -> replica URLs, longest prefix first."""

    def __init__(self, fallback: str):
        self.fallback = fallback  # Serve's HTTP proxy
        self.table: list[tuple[str, list[str]]] = []
        self.turns: dict[str, itertools.count] = {}  # per route: its replicas in turn

    def update(self, groups: dict[str, list[str]]) -> None:
        self.table = sorted(groups.items(), key=lambda item: len(item[0]), reverse=True)

    def serves(self, prefix: str) -> bool:
        """Whether route ``prefix`` has replicas of its own running."""
        return any(p == prefix and urls for p, urls in self.table)

    def pick(self, path: str) -> str:
        """A replica of the longest route prefix ``path`` lies under (in turn), else the proxy."""
        for prefix, urls in self.table:
            if urls and (prefix == "/" or path == prefix or path.startswith(prefix.rstrip("/") + "/")):
                return urls[next(self.turns.setdefault(prefix, itertools.count())) % len(urls)]
        return self.fallback


class Ingress:
    """``start`` listens on ``host:port`` and keeps the routes fresh; ``forward`` passes each request on."""

    def __init__(self, proxy_url: str, max_request_size: int, key: str, allowed: hosts.AllowedHosts | None = None):
        self.routes, self.limit, self.key, self.pool = Routes(proxy_url), max_request_size, key, proxy.Pool()
        self.allowed = allowed or hosts.AllowedHosts()  # the Host and Origin it answers (api.hosts)

    async def start(self, port: int, host: str = LOOPBACK) -> None:
        await self.refresh()
        self.server = await asyncio.get_running_loop().create_server(
            lambda: proxy.Client(self.forward, self.limit, refusal), host, port, reuse_address=True
        )
        self.poller = asyncio.ensure_future(self.poll())

    async def refresh(self) -> None:
        """The routes as the router reads them from Serve's controller (kept as they were when it does not answer)."""
        url = self.routes.pick(TARGETS_PATH) + TARGETS_PATH
        try:
            self.routes.update(await asyncio.to_thread(fetch, url, self.key))
        except (OSError, ValueError):  # the router (re)starting
            pass

    async def poll(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            await self.refresh()

    async def forward(self, request: proxy.Request, client: proxy.Client) -> None:
        """``request`` to a replica of its route and its answer to ``client``; a connection refused or ended before
        any of the answer (a replica gone) is tried again on fresh routes; an answer cut midway is cut for the
        client too."""
        path = request.path
        why = self.allowed.refusal(_header(request, b"host"), _header(request, b"origin"))
        if why is not None:  # another host, or a web page of another origin (DNS rebinding)
            reply = refused(path, 403, why) or error_reply(403, hosts.FORBIDDEN, hosts.hinted(why))
            return client.transport.write(proxy.answer(*reply))
        own = self.own_api(path, request.body)
        url = own.encode() if own else request.url
        for _ in range(TRIES):
            # a replica set's URL carries its route prefix as a path (msnb_ray_sets.set_targets): the path goes first
            base, _, prefix = self.routes.pick(own or path).partition("/-/")
            wire = request.wire(b"/-/" + prefix.encode() + url if prefix else url)
            try:
                upstream = await self.pool.take(base)
            except OSError:
                await self.refresh()
                continue
            if await upstream.exchange(wire, client, request.method == "HEAD"):
                return self.pool.give(base, upstream)
            upstream.transport.close()
            if upstream.got:
                return client.transport.close()
            await self.refresh()
        message = f"no replica answered {path} after {TRIES} tries"
        client.transport.write(proxy.answer(*error_reply(503, "ServiceUnavailableException", message)))

    def own_api(self, path: str, body: bytes) -> str | None:
        """A completion's path at a replica of the model it names (which answers OpenAI's API for it), an
        explanation's at its model's replica, or None: the router answers (a model without replicas of its own, a body
        that names none)."""
        name, path = (body_model(body), path) if path in API_ROUTES else (explained(path), EXPLAIN)
        return own_api_path(name, path) if isinstance(name, str) and self.routes.serves(model_route(name)) else None


def _header(request: proxy.Request, name: bytes) -> str | None:
    return request.header(name).decode("latin-1") or None


def body_model(body: bytes) -> object:
    """The ``model`` a completion's body names (None when it is not a JSON object)."""
    try:
        return json.loads(body).get("model")
    except (ValueError, AttributeError):
        return None


def refusal(status: int, kind: str, message: str, path: str) -> bytes:
    """A request a connection refuses (malformed, too large), in the shape of the protocol its path asks (/v1:
    OpenAI's, /mcp: JSON-RPC's, as TorchServe's front answers them), else TorchServe's; the connection closes."""
    return proxy.answer(*(refused(path, status, message) or error_reply(status, kind, message)), close=True)


def fetch(url: str, key: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


async def serve(args: argparse.Namespace) -> None:
    """Listen until the owner's pipe (stdin) closes: the owner stopped, or died; each line on it: the routes read
    again now, then ``REFRESHED`` printed."""
    allowed = hosts.for_address(args.host, args.allowed_hosts)
    front = Ingress(
        f"http://{LOOPBACK}:{args.proxy_port}", args.max_request_size, read_key(Path(args.key_file)), allowed
    )
    await front.start(args.port, args.host)
    print(READY, flush=True)
    loop, reader = asyncio.get_running_loop(), asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.readline():
        await front.refresh()
        print(REFRESHED, flush=True)
    front.server.close()


def spawn(
    port: int, proxy_port: int, max_request_size: int, key_file: Path, log: Path, timeout_s: float, host: str = LOOPBACK
) -> subprocess.Popen:
    """The front, listening on ``host:port`` when this returns; ``refresh`` has it read the routes now; closing its
    stdin (``stop``) ends it."""
    return ready(launch(port, proxy_port, max_request_size, key_file, log, host), port, log, timeout_s, host)


def launch(
    port: int,
    proxy_port: int,
    max_request_size: int,
    key_file: Path,
    log: Path,
    host: str = LOOPBACK,
    allowed_hosts: str = "",
) -> subprocess.Popen:
    """The front's process, started and not waited for (``ready`` waits): it starts while Ray's nodes do. ``host``:
    loopback unless config.properties' inference_address says otherwise (with the key on: the replicas ask it)."""
    flags = [
        "--port",
        port,
        "--proxy-port",
        proxy_port,
        "--max-request-size",
        max_request_size,
        "--key-file",
        key_file,
        "--host",
        host,
        "--allowed-hosts",
        allowed_hosts,
    ]
    with open(log, "ab") as errors:  # what it says when it fails (a port taken, a traceback)
        return subprocess.Popen(
            [sys.executable, "-m", "msnb.engines.ray.ingress", *map(str, flags)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,
        )  # Ctrl-C reaches the owner, which stops it


def ready(proc: subprocess.Popen, port: int, log: Path, timeout_s: float, host: str = LOOPBACK) -> subprocess.Popen:
    """``proc`` once it listens; a ServerError (the process stopped) when it says otherwise or not in time."""
    deadline, line = time.monotonic() + timeout_s, b""
    while not line and proc.poll() is None and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.1)[0]:
            line = proc.stdout.readline()
    if line.decode().strip() != READY:
        stop(proc)
        raise ServerError(
            f"The Ray engine's front did not start on {host}:{port}: {log.read_text()[-500:]}",
            f"choose another port, or read {log}.",
        )
    return proc


def refresh(proc: subprocess.Popen, timeout_s: float = REFRESH_WAIT_S) -> None:
    """The front (``ready``'s ``proc``) reads the routes again; returns once it has (or after ``timeout_s``, or at once
    when it stopped: there is nothing to wait for). One caller at a time: each line asked is one line answered."""
    with _ASKING:
        _ask(proc, timeout_s)


def _ask(proc: subprocess.Popen, timeout_s: float) -> None:
    try:
        proc.stdin.write(b"refresh\n")
        proc.stdin.flush()
    except (OSError, ValueError):  # it stopped (its pipe closed)
        return
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0 and select.select([proc.stdout], [], [], left)[0]:
        line = proc.stdout.readline()
        if not line or line.decode().strip() == REFRESHED:
            return


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    proc.stdout.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m msnb.engines.ray.ingress")
    for name in ("port", "proxy_port", "max_request_size"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, required=True)
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--host", default=LOOPBACK)
    parser.add_argument("--allowed-hosts", default="")
    try:
        uvloop.run(serve(parser.parse_args(argv)))
    except OSError as err:  # the port taken meanwhile
        sys.exit(f"{err}")


if __name__ == "__main__":
    main()
