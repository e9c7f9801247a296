"""The official clients of OpenAI's API and of MCP, as a user drives them against a served model (both engines)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from openai import OpenAI


def openai_client(base_url: str, key: str) -> OpenAI:
    return OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)


def streamed_text(client: OpenAI, model: str, prompt: str, **kwargs: Any) -> tuple[list[str], str | None]:
    """A streamed chat completion's delta contents (in order) and its finish_reason."""
    pieces, finish = [], None
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": prompt}], stream=True, **kwargs
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    return pieces, finish


def concurrently(calls: dict[str, Any]) -> dict[str, Any]:
    """Each call run in its own thread at once: name -> its result."""
    got: dict[str, Any] = {}
    threads = [threading.Thread(target=lambda k=k, f=f: got.update({k: f()})) for k, f in calls.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return got


def mcp_tools(url: str, key: str, calls: list[tuple[str, dict]], mode: str = "initialize") -> tuple[list, list]:
    """MCP's list_tools, then call_tool for each (name, arguments), with the official client: after ``initialize()``
    (the handshake era) or ``discover()`` (the stateless revision); the session's protocol version checked."""

    async def run() -> tuple[list, list]:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (
                read,
                write,
                *_,
            ),
        ):
            async with ClientSession(read, write) as session:
                await (session.discover() if mode == "discover" else session.initialize())
                assert (session.protocol_version == "2026-07-28") == (mode == "discover")
                tools = (await session.list_tools()).tools
                return tools, [await session.call_tool(name, args) for name, args in calls]

    return asyncio.run(run())


def streamed_response(client: OpenAI, model: str, given: Any, **kwargs: Any) -> tuple[list[str], list[str], Any]:
    """A streamed Responses request: its text deltas, every event's type (in order), the final response."""
    deltas, kinds, final = [], [], None
    for event in client.responses.create(model=model, input=given, stream=True, **kwargs):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        if event.type in ("response.completed", "response.incomplete", "response.failed"):
            final = event.response
    return deltas, kinds, final


def failure_text(call: Any) -> str:
    """What ``call()`` raised, every exception of an exception group (the mcp client's task group) joined."""
    try:
        call()
    except BaseException as err:  # the text of whatever the client raised is the subject
        found, out = [err], []
        while found:
            one = found.pop()
            found.extend(getattr(one, "exceptions", ()))
            out.append(str(one))
        return "\n".join(out)
    return ""
