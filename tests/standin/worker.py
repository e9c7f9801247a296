"""The stand-in engine's worker: one model folder loaded as a TorchServe worker loads it (TorchServe's own loader,
the folder as cwd and on ``sys.path``), answering one request per line of its stdin with one line on its stdout.

Run as ``python worker.py FOLDER NAME``; its log lines (the handler's) go to stderr, which the engine keeps as the
model's log. Depends on TorchServe's ``ts`` and msnb's shipped runtime only.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from pathlib import Path


def decode(body: bytes, content_type: str):
    """A request body as a TorchServe worker hands it to ``handle``: JSON decoded, text as str, else bytes."""
    if content_type.startswith("application/json"):
        try:
            return json.loads(body)
        except ValueError:
            return body
    return body.decode() if content_type.startswith("text") else body


def encode(answer) -> tuple[str, bytes]:
    if isinstance(answer, (bytes, bytearray)):
        return "application/octet-stream", bytes(answer)
    if isinstance(answer, str):
        return "text/plain; charset=utf-8", answer.encode()
    return "application/json", json.dumps(answer).encode()


def answer(entry, context, request: dict) -> dict:
    """One request through ``handle``: its status, content type and body (base64)."""
    from msnb.templates.msnb_ray_context import set_requests

    body, headers = base64.b64decode(request["body"]), request["headers"]
    set_requests(context, [headers])
    try:
        (out,) = entry([{"body": decode(body, headers.get("content-type", ""))}], context)
        status = context.request_processor[0].get_response_status_code()
        ctype, data = encode(out)
    except Exception as err:  # TorchServe's answer to a handler that raises
        logging.exception("the handler failed")
        status, ctype = 500, "application/json"
        data = json.dumps({"code": 500, "type": "InternalServerException", "message": f"{err}"}).encode()
    return {"status": status, "content_type": ctype, "body": base64.b64encode(data).decode()}


def main(folder: str, name: str) -> None:
    from msnb.templates.msnb_ray_load import load_handler, read_folder
    from msnb.trial.worker import _metrics_cache

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    os.chdir(folder)
    sys.path.insert(0, folder)
    manifest, config = read_folder(Path(folder))
    entry, context = load_handler(Path(folder), name, manifest["model"]["handler"], config, None, _metrics_cache())
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        print(json.dumps(answer(entry, context, json.loads(line))), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
