"""A stream that msnb's front ended early (max_tokens, a stop string, a client that left), told to the TorchServe worker
that runs its generator, so that the generator stops instead of running to its end.

TorchServe 0.12 cannot cancel a request: its Java frontend drops the chunks of a closed connection, and the worker's
``send_intermediate_predict_response`` writes to the frontend, never to the client, so nothing in the worker fails.
msnb's local server therefore gives its workers a folder of its own (``$MSNB_CANCEL_DIR``, in the server's private
scratch, removed at stop); its front sends each stream's random id in the ``x-msnb-stream-id`` header and, when it ends
a stream early, writes an empty file named by that id there. Between two chunks the worker looks for its requests'
files (one ``stat`` each): a request whose file is there ends (the file is removed), and a generator that no request
reads any more is closed (handler.stream.pump). Anywhere else (no variable, no header: a plain TorchServe, Ray Serve,
which tells a replica itself) it finds nothing. Depends only on the standard library.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

CANCEL_DIR_VAR = "MSNB_CANCEL_DIR"  # set by msnb's local TorchServe for its workers
CANCEL_HEADER = "x-msnb-stream-id"  # a stream's id from msnb's front (not Ray's x-msnb-stream)
_ID = re.compile(r"^[0-9a-f]{32}$")


def new_id() -> str:
    """A stream's id: random, so that no other client can name (and end) another's stream."""
    return secrets.token_hex(16)


def mark(folder: Path | None, stream_id: str) -> None:
    """The front's side: the stream ``stream_id`` ended early (nothing when there is no folder)."""
    if folder is not None and _ID.match(stream_id):
        try:
            (Path(folder) / stream_id).touch()
        except OSError:
            pass  # the server is stopping (its scratch went): nothing runs to stop


class Cancels:
    """The worker's side, for one batch: which of its requests' streams the front ended (``ended``)."""

    def __init__(self, context: Any, indices: list[int] | range):
        folder = os.environ.get(CANCEL_DIR_VAR)
        self.paths: dict[int, str] = {}
        for idx in indices if folder else ():
            stream_id = str(_header(context, idx) or "")
            if _ID.match(stream_id):
                self.paths[idx] = os.path.join(folder, stream_id)

    def ended(self, indices: Any) -> set[int]:
        """The requests among ``indices`` whose streams the front ended (each file removed once seen)."""
        out = set()
        for idx in indices:
            path = self.paths.get(idx)
            if path is not None and os.path.exists(path):
                out.add(idx)
                del self.paths[idx]
                try:
                    os.remove(path)
                except OSError:
                    pass
        return out


def _header(context: Any, idx: int) -> Any:
    try:
        return context.get_request_header(idx, CANCEL_HEADER)
    except (AttributeError, IndexError, KeyError, TypeError):
        return None
