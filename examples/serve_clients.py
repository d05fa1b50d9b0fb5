"""The pack behind its server, asked by the clients people already use: the official `openai`
client (a streamed chat answer with its cited sources) and the official `mcp` client (the
`search` tool). The server is the one `rag-pack serve http` runs, here in this process on a free
port of 127.0.0.1, with an API key.

Needs the serve extra: pip install 'llama-index-rag-pack[serve]'
Run:  HF_HUB_OFFLINE=1 python examples/serve_clients.py [--real-llm]
"""

import asyncio
import socket
import threading
import time

import httpx2
import openai
import uvicorn
from _common import SAMPLE_DOCS, example_llm, parse_args
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.serve.app import create_app
from llama_index_rag_pack.serve.keys import KeyRing
from llama_index_rag_pack.serve.service import PackService

API_KEY = "example-key"


def start_server(pack: RagPack) -> tuple[str, uvicorn.Server]:
    """``create_app`` on uvicorn in a thread (``rag-pack serve http`` does the same)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    service = PackService(lambda: pack, keys=KeyRing.parse([API_KEY]))
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


async def mcp_search(url: str, query: str) -> list[dict]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("search", {"query": query, "top_k": 2})
    return result.structured_content["passages"]


def main() -> None:
    args = parse_args(__doc__)
    pack = RagPack(
        SAMPLE_DOCS,
        uri=f"{args.data_dir}/examples.db",
        collection_name="served",
        llm=example_llm(args),
        overwrite=True,
    )
    url, server = start_server(pack)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY)
    print("models:", ", ".join(m.id for m in client.models.list()))
    stream = client.chat.completions.create(
        model=pack.default_mode,
        messages=[{"role": "user", "content": "What is Milvus?"}],
        stream=True,
    )
    print("answer: ", end="")
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
        else:  # the last chunk: the passages the answer was written from
            sources = chunk.model_extra["sources"]
    print()
    for source in sources:
        if source["cited"]:
            print(f"cited [{source['number']}]: {source['metadata']['title']}")
    passages = asyncio.run(mcp_search(url, "sourdough bread"))
    print("mcp search:", ", ".join(p["metadata"]["title"] for p in passages))
    server.should_exit = True


if __name__ == "__main__":
    main()
