"""The error table of docs/openai-mcp.md, walked against a served engine: each row's request sent as a client sends
it, its answer held to the row's status and to every `token` of its answer column; no answer holds a traceback or a
server path. Both engines' tests walk the same table with the same models (FLAKY, a streaming model and one that
does not stream)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import requests

DOC = Path(__file__).resolve().parents[1] / "docs" / "openai-mcp.md"
MODERN = "2026-07-28"
OVERSIZED = "x" * 7_000_000  # over both engines' default max_request_size (TorchServe's 6.5 MB)
FLAKY = '''
"""Streams one piece, then fails (a generator that breaks midway)."""
import torch

def init_function():
    return torch.nn.Identity()

def preprocess(request):
    return torch.tensor([1])

def inference(model, batch):
    yield batch
    raise ValueError("the generator broke after its first piece")

def postprocess(step):
    return "x"
'''
EMBED = """
\"\"\"Embeds a text: a linear map of its characters' counts.\"\"\"
import torch

def init_function():
    torch.manual_seed(0)
    return torch.nn.Linear(128, 8)

def preprocess(text):
    counts = torch.zeros(128)
    for c in text:
        counts[min(ord(c), 127)] += 1
    return counts

def postprocess(vector):
    return vector.tolist()
"""


def embedding(text: str) -> list[float]:
    """EMBED's answer computed here in plain torch: the truth of /v1/embeddings."""
    import torch

    torch.manual_seed(0)
    model, counts = torch.nn.Linear(128, 8), torch.zeros(128)
    for c in text:
        counts[min(ord(c), 127)] += 1
    with torch.no_grad():
        return model(counts).tolist()


def table() -> list[tuple[str, str, int, list[str]]]:
    """The rows of the error table: (case, route, status, the answer's `tokens`)."""
    text = DOC.read_text()
    start = text.index("<!-- errors -->")
    rows = []
    for line in text[start : text.index("<!-- /errors -->")].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[2].isdigit():
            rows.append((cells[0], cells[1].strip("`"), int(cells[2]), re.findall(r"`([^`]+)`", cells[3])))
    return rows


class Walker:
    """The requests of the table's cases against one engine: ``base`` its root URL, ``models`` the names of its
    streaming, non-streaming and failing (FLAKY) models; the unknown ones are named `nope`."""

    def __init__(self, base: str, key: str, models: dict[str, str]):
        self.base, self.key, self.models = base.rstrip("/"), key, models
        self.cases: dict[str, Callable[[], requests.Response]] = {**self.v1_cases(), **self.mcp_cases()}

    def v1_cases(self) -> dict[str, Callable[[], requests.Response]]:
        function = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}
        return {
            "no key": lambda: self.post("/v1/chat/completions", self.chat("streams"), key=None),
            "an unknown model": lambda: self.post("/v1/chat/completions", {**self.chat("streams"), "model": "nope"}),
            "an unknown embedding model": lambda: self.post("/v1/embeddings", {"model": "nope", "input": "the cat"}),
            "a model that does not stream": lambda: self.post("/v1/responses", self.respond("whole")),
            "`n` over 1": lambda: self.post("/v1/chat/completions", {**self.chat("streams"), "n": 2}),
            "tools asked of a model": lambda: self.post(
                "/v1/responses", {**self.respond("streams"), "tools": [{"type": "web_search"}]}
            ),
            "function calling asked of a model": lambda: self.post(
                "/v1/chat/completions", {**self.chat("streams"), "tools": [function]}
            ),
            "`previous_response_id`": lambda: self.post(
                "/v1/responses", {**self.respond("streams"), "previous_response_id": "resp_1"}
            ),
            "an oversized body": lambda: self.post("/v1/chat/completions", {**self.chat("streams"), "pad": OVERSIZED}),
            "a model failing mid-stream (chat)": lambda: self.post(
                "/v1/chat/completions", {**self.chat("fails"), "stream": True}
            ),
            "a model failing mid-stream (responses)": lambda: self.post(
                "/v1/responses", {**self.respond("fails"), "stream": True}
            ),
        }

    def mcp_cases(self) -> dict[str, Callable[[], requests.Response]]:
        opening = {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        return {
            "a wrong key": lambda: self.post("/mcp", rpc("tools/list"), key="wrong"),
            "an unknown MCP method": lambda: self.mcp("prompts/list"),
            "an unknown MCP method after initialize": lambda: self.post("/mcp", rpc("prompts/list")),
            "an unknown MCP revision": lambda: self.mcp("server/discover", version="2099-01-01"),
            "an unknown revision proposed at initialize": lambda: self.post("/mcp", rpc("initialize", opening)),
            "an unknown tool": lambda: self.mcp("tools/call", {"name": "nope", "arguments": {}}),
            "a tool argument of the wrong type": lambda: self.mcp(
                "tools/call", {"name": self.models["streams"], "arguments": {"prompt": 3}}
            ),
            "a failing tool call": lambda: self.mcp(
                "tools/call", {"name": self.models["fails"], "arguments": {"prompt": "x"}}
            ),
            "an oversized MCP body": lambda: self.post("/mcp", rpc("tools/list", {"pad": OVERSIZED})),
        }

    def chat(self, which: str) -> dict:
        return {"model": self.models[which], "messages": [{"role": "user", "content": "the cat"}]}

    def respond(self, which: str) -> dict:
        return {"model": self.models[which], "input": "the cat"}

    def post(self, path: str, body: dict, key: str | None = "", headers: dict | None = None) -> requests.Response:
        sent = {
            **({"Authorization": f"Bearer {self.key if key == '' else key}"} if key is not None else {}),
            **(headers or {}),
        }
        return requests.post(self.base + path, json=body, headers=sent, timeout=120)

    def mcp(self, method: str, params: dict | None = None, version: str = MODERN) -> requests.Response:
        """A stateless request as the official client sends it: the envelope in _meta, the MCP headers."""
        meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
        headers = {"MCP-Protocol-Version": version, "Mcp-Method": method}
        return self.post("/mcp", rpc(method, {**(params or {}), "_meta": meta}), headers=headers)

    def walk(self) -> list[str]:
        """Every row of the table sent; the rows whose answer differs from the table, each with what came."""
        rows, wrong = table(), []
        assert sorted(r[0] for r in rows) == sorted(self.cases), "the table and the walker name the same cases"
        for case, route, status, tokens in rows:
            answer = self.cases[case]()
            text = "\n".join(f"{k}: {v}" for k, v in answer.headers.items()) + "\n" + answer.text
            missing = [t for t in tokens if t.lower() not in text.lower()]
            leaked = [w for w in ("Traceback", "/tmp/", '.py"', "handler_model") if w in answer.text]
            if answer.url.split(self.base, 1)[-1] != route or answer.status_code != status or missing or leaked:
                wrong.append(f"{case}: {answer.status_code}, missing {missing}, leaked {leaked}: {text[-600:]}")
        return wrong


def rpc(method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params is not None else {})}
