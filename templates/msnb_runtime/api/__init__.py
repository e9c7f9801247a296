"""The protocols every engine answers beside TorchServe's: OpenAI's API (/v1) and MCP (/mcp)."""
