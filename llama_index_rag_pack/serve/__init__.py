"""``rag-pack serve``: the pack behind an OpenAI-compatible HTTP API, an MCP server and a small
web page, API keys mapped to tenants (needs the ``serve`` extra: starlette, uvicorn, mcp)."""
