"""The MCP server through the official ``mcp`` client: over streamable HTTP at ``/mcp`` of the
HTTP server (scripted LLM, keys and tenants), and over stdio from ``rag-pack serve mcp`` (a real
subprocess with the offline defaults: bundled embedding model and local LLM).

Tools ``search`` and ``ask``: schemas an agent can read, passages and cited answers as
structured content, failures as tool errors after which the server still answers.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from serve_support import TENANTS

from llama_index_rag_pack import RagPack

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


async def _session_call(url: str, key: str | None, calls: list[tuple[str, dict[str, Any]]]) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = await session.list_tools()
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return tools, results


async def test_the_tools_over_http(serve: Any, facts_pack: RagPack) -> None:
    url = serve(facts_pack)
    tools, (found, answered, bad_filter, bad_mode, found_again) = await _session_call(
        url,
        None,
        [
            ("search", {"query": "What does the aardvark eat?", "mode": "vector", "top_k": 2}),
            ("ask", {"question": "What is the capital of Andorra?"}),
            ("search", {"query": "x", "filter": "true) or (true"}),
            ("ask", {"question": "x", "mode": "no-such-mode"}),
            ("search", {"query": "abacus beads", "filter": 'title == "Abacus"'}),
        ],
    )
    schemas = {t.name: t for t in tools.tools}
    assert set(schemas) == {"search", "ask"}
    for tool in schemas.values():
        assert tool.description and "ctx" not in tool.input_schema["properties"]
        for prop in tool.input_schema["properties"].values():
            assert prop.get("description")
    assert schemas["search"].input_schema["required"] == ["query"]

    assert not found.is_error
    passages = found.structured_content["passages"]
    assert len(passages) == 2 and "termites" in passages[0]["text"]
    assert passages[0]["metadata"]["title"] == "Aardvark" and passages[0]["id"]

    assert not answered.is_error
    answer = answered.structured_content
    assert "Andorra la Vella" in answer["answer"] and "[1]" in answer["answer"]
    cited = [s for s in answer["sources"] if s["cited"]]
    assert cited and "Andorra la Vella" in cited[0]["text"]
    assert answer["usage"]["llm_calls"] == 1 and answer["usage"]["total_tokens"] > 0

    assert bad_filter.is_error and "Bad filter" in bad_filter.content[0].text
    assert bad_mode.is_error and "no-such-mode" in bad_mode.content[0].text
    assert not found_again.is_error  # the server goes on after errors
    titles = {p["metadata"]["title"] for p in found_again.structured_content["passages"]}
    assert titles == {"Abacus"}


async def test_keys_and_tenants_over_http(serve: Any, tenant_pack: RagPack) -> None:
    url = serve(tenant_pack, keys=("key-acme=acme", "key-plain"))
    async with httpx2.AsyncClient() as http:
        refused = await http.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_api_key"
    _, (plain,) = await _session_call(url, "key-plain", [("search", {"query": "vault"})])
    assert plain.is_error and "403" in plain.content[0].text
    _, (found, asked) = await _session_call(
        url,
        "key-acme",
        [
            ("search", {"query": "WALRUS vault code of globex", "top_k": 6}),
            ("ask", {"question": "What is the vault code of globex filed under?"}),
        ],
    )
    texts = [p["text"] for p in found.structured_content["passages"]]
    texts += [asked.structured_content["answer"]]
    texts += [s["text"] for s in asked.structured_content["sources"]]
    assert texts and not any(TENANTS["globex"] in t for t in texts)
    assert any(TENANTS["acme"] in t for t in texts)


@pytest.mark.integration
async def test_rag_pack_serve_mcp_over_stdio_with_the_offline_defaults(
    tmp_path: Path, copy_of_indexed: Any
) -> None:
    uri = copy_of_indexed(tmp_path)  # indexed by `rag-pack index` in its own process
    rag_pack = shutil.which("rag-pack") or str(Path(sys.executable).parent / "rag-pack")
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "RAG_PACK_DATA_DIR": os.environ["RAG_PACK_DATA_DIR"],
    }
    server = StdioServerParameters(
        command=rag_pack,
        args=["--uri", uri, "--collection", "facts", "serve", "mcp"],
        env=env,
        cwd=str(tmp_path),
    )
    async with (
        stdio_client(server) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        found = await session.call_tool("search", {"query": "What does the aardvark eat?"})
        asked = await session.call_tool("ask", {"question": "What does the aardvark eat?"})
        wrong = await session.call_tool("search", {"query": ""})
        again = await session.call_tool("search", {"query": "Buzz Aldrin", "top_k": 1})
    assert not found.is_error
    assert "termites" in found.structured_content["passages"][0]["text"]
    assert not asked.is_error
    answer = asked.structured_content
    assert "termites" in answer["answer"]  # the bundled model's answers quote the passage
    assert any(s["cited"] and "termites" in s["text"] for s in answer["sources"])
    assert wrong.is_error
    assert again.structured_content["passages"][0]["metadata"]["file_path"].endswith(
        "Apollo 11.txt"
    )


async def test_llama_index_mcp_tools_call_the_server(serve: Any, facts_pack: RagPack) -> None:
    """LlamaIndex's own MCP client (``llama-index-tools-mcp``) turns the server's tools into
    ``FunctionTool``s an agent can call."""
    mcp_tools = pytest.importorskip("llama_index.tools.mcp")
    url = serve(facts_pack, keys=("agent-key",))
    client = mcp_tools.BasicMCPClient(f"{url}/mcp", headers={"Authorization": "Bearer agent-key"})
    tools = {t.metadata.name: t for t in await mcp_tools.McpToolSpec(client).to_tool_list_async()}
    assert set(tools) == {"search", "ask"}
    assert "passages" in tools["search"].metadata.description.lower()
    found = await tools["search"].acall(query="What does the aardvark eat?", top_k=1)
    assert "termites" in str(found)
    asked = await tools["ask"].acall(question="What is the capital of Andorra?")
    assert "Andorra la Vella" in str(asked) and not found.is_error
