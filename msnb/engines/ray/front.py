"""The local Ray's front door: one loopback port that sends each prediction straight to a replica of its model.

Through Serve's HTTP proxy a prediction takes two Ray calls (proxy -> router -> model, the body fetched back from
the proxy): 86-90 req/s on two cores, below TorchServe. With Serve's direct ingress on
(``RAY_SERVE_ENABLE_DIRECT_INGRESS``, msnb.engines.ray.ENV) each application's ingress replica answers HTTP on a
loopback port of its own, and Serve's controller knows which ports serve which route prefix (its target groups, what
Ray's own HAProxy mode routes by; the router hands them out at ``TARGETS_PATH``). This front is that load balancer:
a process of its own (``python -m msnb.engines.ray.front``, aiohttp, no Ray in it: in a Ray actor its event loop
fought Ray's threads for the GIL) that sends ``/predictions/NAME`` to NAME's replicas (``msnb_ray.direct_route``)
and every other path to the router's, longest route prefix first, and to Serve's proxy while a route has no running
replica. The replicas keep the doors (the inference key, the body limit). It exits when its owner's pipe closes.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import select
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

from msnb.errors import ServerError
from msnb.templates.msnb_api_openai import ROUTES as API_ROUTES
from msnb.templates.msnb_ray_guard import read_key, too_large
from msnb.templates.msnb_ray_http import TARGETS_PATH, error_reply, model_route, own_api_path

READY = "msnb-front-ready"  # the line the front prints once it listens
REFRESH_S = 0.2  # how often the routes are read again: a stopping replica drains longer than this (ENV)
TRIES = 3  # a connection refused or dropped before an answer (a replica gone) is tried again on fresh routes
# Per connection, never passed on (RFC 9110 7.6.1), and what aiohttp writes itself.
HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host",
       "content-length", "date", "server"}  # fmt: skip


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


class Front:
    """``start`` binds ``127.0.0.1:port`` and keeps the routes fresh; ``forward`` passes each request on."""

    def __init__(self, proxy_url: str, max_request_size: int, key: str):
        self.routes, self.limit, self.auth = Routes(proxy_url), max_request_size, {"Authorization": f"Bearer {key}"}

    async def start(self, port: int) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None)
        self.session = aiohttp.ClientSession(
            connector=connector, auto_decompress=False, timeout=aiohttp.ClientTimeout()
        )
        await self.refresh()
        app = web.Application(client_max_size=self.limit + 1)
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", port, reuse_address=True).start()
        self.poller = asyncio.ensure_future(self.poll())

    async def refresh(self) -> None:
        """The routes as the router reads them from Serve's controller (kept as they were when it does not answer)."""
        try:
            url = self.routes.pick(TARGETS_PATH) + TARGETS_PATH
            async with self.session.get(url, headers=self.auth, timeout=aiohttp.ClientTimeout(total=10)) as answer:
                if answer.status == 200:
                    self.routes.update(await answer.json())
        except (TimeoutError, aiohttp.ClientError):  # the router (re)starting
            pass

    async def poll(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_S)
            await self.refresh()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        body = await self.body(request)
        if isinstance(body, web.Response):
            return body
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        path = self.own_api(request.path, body) or request.path_qs
        for attempt in range(1, TRIES + 1):
            try:
                upstream = await self.session.request(request.method, self.routes.pick(path) + path, data=body,
                                                      headers=headers, allow_redirects=False)  # fmt: skip
            except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as err:
                if attempt == TRIES:
                    return answer(*error_reply(503, "ServiceUnavailableException", f"{type(err).__name__}: {err}"))
                await self.refresh()
                continue
            return await relay(request, upstream)
        raise AssertionError("unreachable")

    def own_api(self, path: str, body: bytes) -> str | None:
        """A completion's path at a replica of the model it names (which answers OpenAI's API for it), or None: the
        router answers (a model without replicas of its own, a body that names none)."""
        if path not in API_ROUTES:
            return None
        try:
            name = json.loads(body).get("model")
        except (ValueError, AttributeError):
            return None
        return own_api_path(name, path) if isinstance(name, str) and self.routes.serves(model_route(name)) else None

    async def body(self, request: web.Request) -> bytes | web.Response:
        """The request body, or TorchServe's 413 once it is over max_request_size (the replicas check it too)."""
        refusal = too_large(request.content_length or 0, self.limit)
        if refusal is None:
            try:
                return await request.read()
            except web.HTTPRequestEntityTooLarge:
                refusal = too_large(self.limit + 1, self.limit)
        return answer(*error_reply(*refusal))


async def relay(request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """The replica's answer passed on: whole, or chunk by chunk as it comes when it is streamed (each HTTP chunk as it
    is, as TorchServe sends each piece: clients read the pieces by them). A stream the replica cut (no closing chunk)
    is cut here too: the error closes the client's connection."""
    async with upstream:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP}
        if upstream.headers.get("transfer-encoding", "").lower() != "chunked":
            return web.Response(body=await upstream.read(), status=upstream.status, headers=headers)
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        piece = b""
        async for data, chunk_ends in upstream.content.iter_chunks():  # each of the replica's chunks as one chunk
            piece += data
            if chunk_ends and piece:
                await response.write(piece)
                piece = b""
        await response.write_eof()
        return response


def answer(status: int, headers: dict, body: bytes) -> web.Response:
    return web.Response(body=body, status=status, headers=headers)


async def serve(args: argparse.Namespace) -> None:
    """Listen until the owner's pipe (stdin) closes: the owner stopped, or died."""
    front = Front(f"http://127.0.0.1:{args.proxy_port}", args.max_request_size, read_key(Path(args.key_file)))
    await front.start(args.port)
    print(READY, flush=True)
    loop, reader = asyncio.get_running_loop(), asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()
    await front.runner.cleanup()
    await front.session.close()


def spawn(port: int, proxy_port: int, max_request_size: int, key_file: Path, log: Path, timeout_s: float):
    """The front, listening on ``127.0.0.1:port`` when this returns; closing its stdin (``stop``) ends it."""
    flags = ["--port", port, "--proxy-port", proxy_port, "--max-request-size", max_request_size, "--key-file", key_file]
    with open(log, "ab") as errors:  # what it says when it fails, and aiohttp's logged errors
        proc = subprocess.Popen([sys.executable, "-m", "msnb.engines.ray.front", *map(str, flags)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                                start_new_session=True)  # fmt: skip  # Ctrl-C reaches the owner, which stops it
    deadline, line = time.monotonic() + timeout_s, b""
    while not line and proc.poll() is None and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.1)[0]:
            line = proc.stdout.readline()
    proc.stdout.close()
    if line.decode().strip() != READY:
        stop(proc)
        raise ServerError(f"The Ray engine's front did not start on 127.0.0.1:{port}: {log.read_text()[-500:]}",
                          f"choose another port, or read {log}.")  # fmt: skip
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m msnb.engines.ray.front")
    for name in ("port", "proxy_port", "max_request_size"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, required=True)
    parser.add_argument("--key-file", required=True)
    try:
        uvloop.run(serve(parser.parse_args(argv)))
    except OSError as err:  # the port taken meanwhile
        sys.exit(f"{err}")


if __name__ == "__main__":
    main()
