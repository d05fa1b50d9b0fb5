"""The pack as a Model Context Protocol server (the official ``mcp`` SDK): tools ``search`` and
``ask``, over stdio (``rag-pack serve mcp``) or streamable HTTP at ``/mcp`` of ``rag-pack serve
http``.

Over HTTP the caller's API key (``Authorization: Bearer``) picks its tenant, as for the OpenAI
endpoints; over stdio the process belongs to whoever started it, and ``tenant`` is the
``--tenant`` it was started with. Every failure is a tool error the agent can read (a bad
filter, an unknown mode, Milvus or the LLM down): the server goes on.
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

from llama_index_rag_pack.serve.api_errors import api_error_from
from llama_index_rag_pack.serve.keys import AccessDenied, bearer_token
from llama_index_rag_pack.serve.passages import answer_sources, passage_json, usage_json
from llama_index_rag_pack.serve.service import MAX_TOP_K, ChatRequest, PackService

__all__ = ["INSTRUCTIONS", "Answer", "Passage", "SearchResult", "build_mcp_server"]

INSTRUCTIONS = (
    "Searches and answers from the documents indexed in one rag-pack collection. Use `search` "
    "to get the passages that match a query (with ids, scores and metadata), and `ask` for a "
    "short answer whose numbered citations [n] point at the passages it returns as sources. "
    "`mode` picks the retrieval strategy (leave it out for the collection's default)."
)

Query = Annotated[str, Field(description="What to look for, in any language.", min_length=1)]
Mode = Annotated[
    str | None,
    Field(
        description="Retrieval mode: hybrid_convex, vector, bm25, fusion, hyde, rewrite, raptor, "
        "... (the ones this collection serves; leave out for its default)."
    ),
]
Filter = Annotated[
    str | None,
    Field(
        description="A Milvus filter expression on the passages' metadata, e.g. year >= 2020 "
        'and lang == "en" (leave out for none).'
    ),
]


class Passage(BaseModel):
    """A retrieved passage."""

    id: str = Field(description="The passage's id in the collection.")
    position: int = Field(description="Its rank, from 1.")
    score: float | None = Field(description="The retrieval score (higher is better).")
    text: str = Field(description="The passage's text.")
    metadata: dict[str, Any] = Field(description="Its metadata (title, url, file, ...).")


class SearchResult(BaseModel):
    """The passages found for a query."""

    mode: str = Field(description="The retrieval mode used.")
    passages: list[Passage]


class Source(Passage):
    """A passage the answer was written from."""

    number: int | None = Field(description="Its citation number [n] in the answer, if cited.")
    cited: bool = Field(description="Whether the answer cites it.")
    evidence: list[dict[str, Any]] = Field(
        description="Per answer sentence leaning on it: the sentence, and start/end of the "
        "supporting span in text."
    )


class Answer(BaseModel):
    """A cited answer."""

    mode: str = Field(description="The retrieval mode used.")
    answer: str = Field(description="The answer, with numbered citations [n] and references.")
    sources: list[Source] = Field(description="The passages shown to the LLM, cited or not.")
    usage: dict[str, Any] = Field(
        description="The LLM tokens the answer spent: prompt_tokens, completion_tokens, "
        "total_tokens, llm_calls, and counted (true where the LLM reported none)."
    )


def _tool_error(error: BaseException) -> ToolError:
    if isinstance(error, AccessDenied):
        return ToolError(f"Access denied ({error.status}): {error.message}")
    api = api_error_from(error)
    return ToolError(f"{api.message} ({api.status} {api.code})")


class _Tools:
    """The tools' work over one service."""

    def __init__(self, service: PackService, stdio_tenant: str | None) -> None:
        self.service, self.stdio_tenant = service, stdio_tenant

    async def scope(self, ctx: Context | None, model: str | None) -> tuple[str, str | None]:
        """The mode, and the tenant of the call (from its HTTP key, or ``--tenant``)."""
        headers = None
        try:
            headers = ctx.headers if ctx is not None else None
        except ValueError:  # no request context (called directly)
            headers = None
        await self.service.pack()
        if headers is not None:
            tenant = self.service.tenant_for(bearer_token(headers.get("authorization")))
        else:  # stdio: the tenant it was started with (a collection with tenants needs one)
            tenant = self.stdio_tenant
        return await self.service.check_mode(model), tenant

    async def search(self, ctx: Context | None, **kw: Any) -> SearchResult:
        try:
            mode, tenant = await self.scope(ctx, kw["mode"])
            nodes = await self.service.retrieve(
                kw["query"], mode=mode, top_k=kw["top_k"], filters=kw["filter"], tenant=tenant
            )
        except Exception as e:
            raise _tool_error(e) from None
        passages = [Passage(**passage_json(n, i)) for i, n in enumerate(nodes, 1)]
        return SearchResult(mode=mode, passages=passages)

    async def ask(self, ctx: Context | None, **kw: Any) -> Answer:
        try:
            mode, tenant = await self.scope(ctx, kw["mode"])
            request = ChatRequest(
                question=kw["question"], history=(), mode=mode, filters=kw["filter"], tenant=tenant
            )
            response = await self.service.chat(request)
        except Exception as e:
            raise _tool_error(e) from None
        sources = [Source(**s) for s in answer_sources(response)]
        answer = str(response.response or "")
        return Answer(mode=mode, answer=answer, sources=sources, usage=usage_json(response))


def build_mcp_server(service: PackService, *, stdio_tenant: str | None = None) -> MCPServer:
    """The MCP server of ``service`` (tools ``search`` and ``ask``)."""
    server: MCPServer = MCPServer(name="rag-pack", instructions=INSTRUCTIONS, log_level="WARNING")
    tools = _Tools(service, stdio_tenant)

    @server.tool(
        name="search",
        description="Find the passages of the indexed documents that best match a query. "
        "Returns them ranked, with ids, scores, text and metadata.",
    )
    async def search(
        query: Query,
        mode: Mode = None,
        top_k: Annotated[
            int, Field(description="How many passages to return.", ge=1, le=MAX_TOP_K)
        ] = 5,
        filter: Filter = None,  # noqa: A002 - the name agents read
        ctx: Context | None = None,
    ) -> SearchResult:
        return await tools.search(ctx, query=query, mode=mode, top_k=top_k, filter=filter)

    @server.tool(
        name="ask",
        description="Answer a question from the indexed documents. The answer cites its "
        "passages as [n]; `sources` lists every passage it was written from, with the "
        "sentence that supports it.",
    )
    async def ask(
        question: Annotated[str, Field(description="The question.", min_length=1)],
        mode: Mode = None,
        filter: Filter = None,  # noqa: A002
        ctx: Context | None = None,
    ) -> Answer:
        return await tools.ask(ctx, question=question, mode=mode, filter=filter)

    return server
