"""The stand-in engine's worker: one model folder loaded as a TorchServe worker loads it (TorchServe's own loader,
the folder as cwd and on ``sys.path``), answering one request per line of its stdin with one line on its stdout.

Run as ``python worker.py FOLDER NAME``; its log lines (the handler's) go to stderr, which the engine keeps as the
model's log. Depends on TorchServe's ``ts`` and msnb's shipped runtime only: TorchServe's loader, Context and wire
format (``msnb_ts_*``), as every engine other than TorchServe uses them.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
from pathlib import Path


def answer(entry, context, request: dict) -> dict:
    """One request through ``handle``: its status, content type and body (base64), as a TorchServe worker decodes and
    answers it (msnb_runtime.ts.wire)."""
    from msnb.templates.msnb_runtime.ts.context import set_requests
    from msnb.templates.msnb_runtime.ts.wire import decode_body, encode_answer, error_reply

    body, headers = base64.b64decode(request["body"]), request["headers"]
    set_requests(context, [headers])
    try:
        (out,) = entry([{"body": decode_body(body, headers.get("content-type", ""))}], context)
        processor = context.request_processor[0]
        status, sent, data = encode_answer(out, processor.get_response_status_code(), processor.get_response_headers())
    except Exception as err:  # TorchServe's answer to a handler that raises
        logging.exception("the handler failed")
        status, sent, data = error_reply(500, "InternalServerException", f"{err}")
    return {"status": status, "content_type": sent["content-type"], "body": base64.b64encode(data).decode()}


def main(folder: str, name: str) -> None:
    from msnb.templates.msnb_runtime.ts.model_loader import load_handler, read_folder
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
