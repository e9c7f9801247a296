"""What /v1 and /mcp ask of a TorchServe: its served models' API cards (read from the model store) and an MCP tool
call's whole answer (a streaming answer as the pieces the handler sent). The completions' own way to TorchServe is the
ingress's (msnb.engines.upstream.ChunkedUpstream)."""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msnb.engines.torchserve.client import TorchServeClient
from msnb.errors import ServerError
from msnb.templates.msnb_runtime.api.mcp import read_card
from msnb.templates.msnb_runtime.handler.names import API_CARD


class TorchServeModels:
    """The served models of the TorchServe ``client()`` answers for, their cards cached by store entry."""

    def __init__(self, client: Callable[[], TorchServeClient], store_root: Path, cancel_dir: Path | None = None):
        self.client, self.store_root, self.cancel_dir = client, Path(store_root), cancel_dir
        self._cards: dict[str, dict] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """A model was registered or removed: read the cards again."""
        with self._lock:
            self._cards.clear()

    def cached(self, name: str) -> dict | None:
        """``name``'s card when it was read before (no call to TorchServe), else None."""
        return self._cards.get(name)

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

    def streaming(self) -> list[str]:
        """The served models that stream (what chat, completions and responses serve), by name."""
        return [name for name, card in self.cards().items() if card.get("streams")]

    def _card_text(self, url: str) -> bytes | None:
        entry = self.store_root / url
        try:
            if entry.is_dir():
                return (entry / API_CARD).read_bytes() if (entry / API_CARD).is_file() else None
            with zipfile.ZipFile(entry) as archive:
                return archive.read(API_CARD) if API_CARD in archive.namelist() else None
        except (OSError, zipfile.BadZipFile, ValueError):
            return None  # not in this store (a url elsewhere): the default card

    def predict(self, name: str, sample: Any, streams: bool) -> Any:
        """One prediction (an MCP tool call): the answer; a streaming model's joined text pieces (a JSON-lines
        stream: the list of its values)."""
        client = self.client()
        if not streams:
            return client.predict(name, sample)
        chunks = list(client.predict_stream(name, sample))
        return "".join(chunks) if all(isinstance(c, str) for c in chunks) else chunks
