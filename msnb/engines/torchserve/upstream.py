"""The front's way to TorchServe's inference API, lean on a stream's first chunk: one kept-alive ``http.client``
connection per front thread (a client's connection), each request sent in one write, and a chunked answer read one
HTTP chunk at a time as each arrives (TorchServe sends each intermediate response, one piece, as one chunk).

``requests`` cost the front several milliseconds of a stream's first chunk on a loaded machine (time stamps from
the front to the worker and back, docs/openai-mcp.md#measured): preparing the request, its hooks and cookies, and
urllib3's response around the socket. Nothing here is TorchServe's: the key and the paths come from the caller.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from msnb.errors import ServerError

MAX_LINE = 65536  # a chunk-size or trailer line longer than this is not HTTP
GONE = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine)


class Connections:
    """Kept-alive connections to one HTTP server, one per calling thread."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._local = threading.local()

    def post(self, path: str, body: bytes, headers: dict[str, str], timeout: float) -> Response:
        """POST ``body``; the answer as soon as its status line and headers are in. A kept connection the server
        closed meanwhile is opened again once; a server that is not there is a ServerError."""
        for attempt in (1, 2):
            conn = getattr(self._local, "conn", None)
            reused = conn is not None
            if conn is None:
                conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            conn.timeout = timeout
            try:
                if conn.sock is None:
                    conn.connect()
                    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn.sock.settimeout(timeout)
                conn.request("POST", path, body, headers)  # headers and a bytes body in one write
                return Response(self, conn, conn.getresponse())
            except GONE as err:
                self.drop(conn)
                if not reused or attempt == 2:
                    raise ServerError(f"TorchServe did not answer: {type(err).__name__}: {err}",
                                      "is the server running? server.start() (or %ms_serve) starts it.") from None  # fmt: skip
        raise AssertionError("unreachable")

    def drop(self, conn: http.client.HTTPConnection) -> None:
        """Close ``conn`` (an answer left unread on it: the server sees the client go)."""
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None


class Response:
    """One answer: its status and headers, ``body`` (whole) or ``chunks`` (as they arrive), ``close``."""

    def __init__(self, owner: Connections, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.owner, self.conn, self.resp = owner, conn, resp
        self.status = resp.status
        self.read_all = False

    def header(self, name: str) -> str | None:
        return self.resp.getheader(name)

    def body(self) -> bytes:
        data = self.resp.read()
        self.read_all = True
        return data

    def decoded(self) -> Any:
        """The body as JSON when it parses, else as text."""
        data = self.body()
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    def chunks(self) -> Iterator[bytes]:
        """Each HTTP chunk whole, as it arrives (a body that is not chunked: all of it at once)."""
        if not self.resp.chunked:
            yield self.body()
            return
        fp = self.resp.fp
        while True:
            size = int(fp.readline(MAX_LINE).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                break
            data = fp.read(size)
            fp.readline(MAX_LINE)  # the chunk's CRLF
            if len(data) < size:
                raise http.client.IncompleteRead(data, size - len(data))
            yield data
        while fp.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):  # trailers
            pass
        self.read_all = True

    def close(self) -> None:
        """Done with the answer: its connection is kept when it was read to its end, else closed."""
        if self.read_all:
            self.resp.close()
        else:
            self.owner.drop(self.conn)
