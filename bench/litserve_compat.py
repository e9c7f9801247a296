"""LitServe 0.2.19 beside the `mcp` package (the test extra's official MCP client): LitServe turns its MCP server on
when `mcp` is installed (`litserve.server._MCP_AVAILABLE`) but imports its parts only when `fastmcp` is, so every
server start fails with "NameError: name 'MCPServer' is not defined". The anchors serve no MCP: it is turned off."""

from __future__ import annotations


def without_mcp() -> None:
    """Call before ``LitServer.run``."""
    import litserve.server

    litserve.server._MCP_AVAILABLE = False
