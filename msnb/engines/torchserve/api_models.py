"""What /v1 and /mcp ask of a TorchServe: its served models' API cards (read from the model store) and their answers,
a streaming answer as the pieces the handler sent (one HTTP chunk of TorchServe's chunked answer each)."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msnb.engines.chunks import ChunkReader
from msnb.engines.torchserve.client import TorchServeClient
from msnb.engines.torchserve.upstream import Connections, Response
from msnb.errors import ServerError
from msnb.templates.msnb_api_mcp import read_card
from msnb.templates.msnb_api_openai import ApiError, upstream_error
from msnb.templates.msnb_cancel import CANCEL_HEADER, mark, new_id
from msnb.templates.msnb_names import API_CARD

JSON_TYPE = "application/json"


class Upstream:
    """One streamed prediction on TorchServe: ``pieces`` yields each str piece as its HTTP chunk arrives; the
    handler's final error line (or JSON chunks where text was expected) raises ApiError. Closed before its end,
    it tells the worker to stop the generator (msnb_cancel, when the server gives a ``cancel_dir``)."""

    def __init__(self, resp: Response, stream_id: str = "", cancel_dir: Path | None = None):
        self.resp, self.stream_id, self.cancel_dir = resp, stream_id, cancel_dir
        self.reader = ChunkReader(resp.header("Content-Type"))
        self.finished = False

    def pieces(self) -> Iterator[str]:
        if self.reader.jsonl:
            raise ApiError(400, "The model streams JSON values, not text: /v1 needs a generator that yields str "
                           "pieces. Hint: make postprocess return a str per step.", param="model")  # fmt: skip
        for data in self.resp.chunks():
            yield from self.reader.feed(data)
        yield from self.reader.close()
        self.finished = True
        if self.reader.error is not None:
            raise upstream_error(500, self.reader.error)

    def close(self) -> None:
        if not self.finished:
            mark(self.cancel_dir, self.stream_id)
        self.resp.close()


class TorchServeModels:
    """The served models of the TorchServe ``client()`` answers for, their cards cached by store entry."""

    def __init__(self, client: Callable[[], TorchServeClient], store_root: Path, cancel_dir: Path | None = None):
        self.client, self.store_root, self.cancel_dir = client, Path(store_root), cancel_dir
        self._upstream: Connections | None = None  # to the inference API (msnb.engines.torchserve.upstream)
        self._cards: dict[str, dict] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """A model was registered or removed: read the cards again."""
        with self._lock:
            self._cards.clear()

    def card(self, name: str) -> dict | None:
        """The card of ``name``'s default version; None when TorchServe serves no such model."""
        with self._lock:
            if name in self._cards:
                return self._cards[name]
        try:
            status = self.client().status(name)
        except ServerError:
            return None
        found = read_card(self._card_text(status.url), name)
        with self._lock:
            self._cards[name] = found
        return found

    def cards(self) -> dict[str, dict]:
        names = sorted({m.name for m in self.client().models()})
        return {name: card for name in names if (card := self.card(name)) is not None}

    def _card_text(self, url: str) -> bytes | None:
        entry = self.store_root / url
        try:
            if entry.is_dir():
                return (entry / API_CARD).read_bytes() if (entry / API_CARD).is_file() else None
            with zipfile.ZipFile(entry) as archive:
                return archive.read(API_CARD) if API_CARD in archive.namelist() else None
        except (OSError, zipfile.BadZipFile, ValueError):
            return None  # not in this store (a url elsewhere): the default card

    def open(self, name: str, body: bytes) -> Upstream:
        """POST the request body to /predictions/NAME, streamed; an error answer raises ApiError in OpenAI's shape."""
        client, stream_id = self.client(), new_id()
        if self._upstream is None:
            self._upstream = Connections(client.inference_url)
        headers = {"Content-Type": JSON_TYPE, CANCEL_HEADER: stream_id, **client.keys.header("inference")}
        resp = self._upstream.post(f"/predictions/{name}", body, headers, client.predict_timeout(name, None))
        if resp.status != 200:
            try:
                raise upstream_error(resp.status, resp.decoded())
            finally:
                resp.close()
        return Upstream(resp, stream_id, self.cancel_dir)

    def predict(self, name: str, sample: Any, streams: bool) -> Any:
        """One prediction (an MCP tool call): the answer; a streaming model's joined text pieces (a JSON-lines
        stream: the list of its values)."""
        client = self.client()
        if not streams:
            return client.predict(name, sample)
        chunks = list(client.predict_stream(name, sample))
        return "".join(chunks) if all(isinstance(c, str) for c in chunks) else chunks


def as_json(value: Any) -> bytes:
    return json.dumps(value).encode()
