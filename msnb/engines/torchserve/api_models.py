"""What /v1 and /mcp ask of a TorchServe: its served models' API cards (read from the model store) and their answers,
a streaming answer as the pieces the handler sent (one HTTP chunk of TorchServe's chunked answer each)."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from msnb.engines.chunks import ChunkReader, is_stream
from msnb.engines.models import decode
from msnb.engines.torchserve.client import TorchServeClient
from msnb.errors import ServerError
from msnb.templates.msnb_api_mcp import read_card
from msnb.templates.msnb_api_openai import ApiError, upstream_error
from msnb.templates.msnb_names import API_CARD

JSON_TYPE = "application/json"


class Upstream:
    """One streamed prediction on TorchServe: ``pieces`` yields each str piece as its HTTP chunk arrives; the
    handler's final error line (or JSON chunks where text was expected) raises ApiError."""

    def __init__(self, resp: Any):
        self.resp = resp
        self.reader = ChunkReader(resp.headers.get("Content-Type"))

    def pieces(self) -> Iterator[str]:
        if self.reader.jsonl:
            raise ApiError(400, "The model streams JSON values, not text: /v1 needs a generator that yields str "
                           "pieces. Hint: make postprocess return a str per step.", param="model")  # fmt: skip
        for data in self.resp.raw.read_chunked(decode_content=False) if self.resp.raw.chunked else [self.resp.content]:
            yield from self.reader.feed(data)
        yield from self.reader.close()
        if self.reader.error is not None:
            raise upstream_error(500, self.reader.error)

    def close(self) -> None:
        self.resp.close()


class TorchServeModels:
    """The served models of the TorchServe ``client()`` answers for, their cards cached by store entry."""

    def __init__(self, client: Callable[[], TorchServeClient], store_root: Path):
        self.client, self.store_root = client, Path(store_root)
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
        client = self.client()
        resp = client.call("POST", f"{client.inference_url}/predictions/{name}", "inference", data=body,
                           headers={"Content-Type": JSON_TYPE}, timeout=client.predict_timeout(name, None),
                           stream=True)  # fmt: skip
        if resp.status_code != 200:
            with resp:
                raise upstream_error(resp.status_code, _decoded(resp))
        return Upstream(resp)

    def predict(self, name: str, sample: Any, streams: bool) -> Any:
        """One prediction (an MCP tool call): the answer; a streaming model's joined text pieces (a JSON-lines
        stream: the list of its values)."""
        client = self.client()
        if not streams:
            return client.predict(name, sample)
        chunks = list(client.predict_stream(name, sample))
        return "".join(chunks) if all(isinstance(c, str) for c in chunks) else chunks


def _decoded(resp: Any) -> Any:
    try:
        return decode(resp) if not is_stream(resp.headers.get("Content-Type")) else resp.text
    except (ValueError, ServerError):
        return resp.text


def as_json(value: Any) -> bytes:
    return json.dumps(value).encode()
