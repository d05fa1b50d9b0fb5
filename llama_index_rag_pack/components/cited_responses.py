"""Responses of :class:`~llama_index_rag_pack.components.cited_query_engine.CitedQueryEngine`, and
how they are built from an answer with ``[N](id=M)`` markers.

:class:`CitedResponseBuilder` runs one
:class:`~llama_index_rag_pack.core.references.ReferenceManager` per answer: over a whole answer
(:meth:`~CitedResponseBuilder.build`) or over the LLM's token stream, rewriting the markers while
the answer streams (:meth:`~CitedResponseBuilder.stream`, :meth:`~CitedResponseBuilder.astream`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.schema import NodeWithScore

from llama_index_rag_pack.core.citations import Citation
from llama_index_rag_pack.core.quotes import QuoteCheck
from llama_index_rag_pack.core.reference_styles import ReferenceStyle
from llama_index_rag_pack.core.references import ReferenceManager

__all__ = [
    "CitedAsyncStreamingResponse",
    "CitedResponse",
    "CitedResponseBuilder",
    "CitedStreamingResponse",
    "as_streaming_response",
]


@dataclass
class CitedResponse(Response):
    """A ``Response`` whose ``source_nodes`` are the cited chunks only.

    Attributes:
        response: The rewritten answer followed by the reference list (what to show).
        answer: The rewritten answer alone.
        references: The reference list alone (in the engine's style).
        citations: Structured citations (number, source id, title, url, cited chunks).
        raw_answer: The LLM's text before rewriting.
        quotes: In ``quotes`` mode, the verdict on every quote (verified or flagged).
        context_nodes: Every chunk the LLM was shown, in id order (cited or not).
    """

    answer: str = ""
    references: str = ""
    citations: list[Citation] = field(default_factory=list)
    raw_answer: str = ""
    quotes: list[QuoteCheck] = field(default_factory=list)
    context_nodes: list[NodeWithScore] = field(default_factory=list)


@dataclass
class CitedStreamingResponse(StreamingResponse):
    """Streams the rewritten answer, then the reference list.

    ``source_nodes``, ``citations`` and ``metadata`` are filled in place when the stream ends
    (before the reference list is yielded).
    """

    citations: list[Citation] = field(default_factory=list)
    quotes: list[QuoteCheck] = field(default_factory=list)
    context_nodes: list[NodeWithScore] = field(default_factory=list)


@dataclass
class CitedAsyncStreamingResponse(AsyncStreamingResponse):
    """Async :class:`CitedStreamingResponse` (``async for t in r.async_response_gen()``)."""

    citations: list[Citation] = field(default_factory=list)
    quotes: list[QuoteCheck] = field(default_factory=list)
    context_nodes: list[NodeWithScore] = field(default_factory=list)


class CitedResponseBuilder:
    """Rewrites the markers of an answer into a cited response, whole or streamed.

    Args:
        mode: The engine's citation mode, recorded in ``metadata["mode"]``.
        style: Reference style name or object (validated here).
        source_id: Which chunks share a number (metadata key or callable; validated here).

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> nodes = [NodeWithScore(node=TextNode(text="Hi.", metadata={"url": "a.html"}))]
        >>> builder = CitedResponseBuilder("markers", style="text")
        >>> print(builder.build(nodes, "Hi [7](id=1).", "Hi [7](id=1).").answer)
        Hi [1].
    """

    def __init__(
        self,
        mode: str,
        style: str | ReferenceStyle | None = "markdown",
        source_id: str | Callable[[Any], Any] | None = None,
    ) -> None:
        ReferenceManager([], style=style, source_id=source_id)  # fails early on a bad argument
        self.mode = mode
        self._style = style
        self._source_id = source_id

    def manager(self, nodes: Sequence[NodeWithScore]) -> ReferenceManager:
        """A fresh manager for one answer over ``nodes``."""
        return ReferenceManager(nodes, style=self._style, source_id=self._source_id)

    def metadata(
        self, manager: ReferenceManager, raw: str, nodes: Sequence[NodeWithScore]
    ) -> dict[str, Any]:
        """The response metadata once ``manager`` has rewritten the whole answer."""
        return {
            "mode": self.mode,
            "citations": [c.to_dict() for c in manager.citations],
            "dropped_ids": manager.dropped_ids,
            "raw_answer": raw,
            "context_size": len(nodes),
        }

    def build(
        self,
        nodes: Sequence[NodeWithScore],
        marked: str,
        raw: str,
        quotes: list[QuoteCheck] | None = None,
    ) -> CitedResponse:
        """The response for a whole answer ``marked`` (``raw``: the LLM's own text)."""
        manager = self.manager(nodes)
        answer = manager.feed(marked) + manager.finish(references=False)
        references = manager.format_references()
        metadata = self.metadata(manager, raw, nodes)
        if quotes is not None:
            metadata["quotes"] = [q.to_dict() for q in quotes]
        return CitedResponse(
            response=answer + references,
            source_nodes=list(manager.cited_nodes),
            metadata=metadata,
            answer=answer,
            references=references,
            citations=manager.citations,
            raw_answer=raw,
            quotes=list(quotes or []),
            context_nodes=list(nodes),
        )

    def stream(self, tokens: Iterable[Any], nodes: list[NodeWithScore]) -> CitedStreamingResponse:
        """A response that rewrites the LLM's ``tokens`` while they stream."""
        manager = self.manager(nodes)
        response = CitedStreamingResponse(
            response_gen=iter(()), source_nodes=[], metadata={}, context_nodes=list(nodes)
        )

        def gen() -> Generator[str, None, None]:
            raw: list[str] = []
            for token in tokens:
                raw.append(token or "")
                out = manager.feed(token)
                if out:
                    yield out
            tail = self._finish_stream(response, manager, "".join(raw), nodes)
            if tail:
                yield tail

        response.response_gen = gen()
        return response

    def astream(
        self, tokens: AsyncIterable[Any], nodes: list[NodeWithScore]
    ) -> CitedAsyncStreamingResponse:
        """Async :meth:`stream`."""
        manager = self.manager(nodes)
        response = CitedAsyncStreamingResponse(
            response_gen=_empty_agen(), source_nodes=[], metadata={}, context_nodes=list(nodes)
        )

        async def agen() -> AsyncGenerator[str, None]:
            raw: list[str] = []
            async for token in tokens:
                raw.append(token or "")
                out = manager.feed(token)
                if out:
                    yield out
            tail = self._finish_stream(response, manager, "".join(raw), nodes)
            if tail:
                yield tail

        response.response_gen = agen()
        return response

    def _finish_stream(
        self, target: Any, manager: ReferenceManager, raw: str, nodes: Sequence[NodeWithScore]
    ) -> str:
        tail = manager.finish()
        target.source_nodes[:] = manager.cited_nodes
        target.citations[:] = manager.citations
        target.metadata.update(self.metadata(manager, raw, nodes))
        return tail


def as_streaming_response(response: CitedResponse, *, asynchronous: bool) -> Any:
    """A finished answer as a (one-chunk) streaming response, for the modes that need the whole
    answer before citing it."""
    text = response.response or ""
    fields = {
        "source_nodes": response.source_nodes,
        "metadata": response.metadata,
        "citations": response.citations,
        "quotes": response.quotes,
        "context_nodes": response.context_nodes,
    }
    if asynchronous:

        async def agen() -> AsyncGenerator[str, None]:
            if text:
                yield text

        return CitedAsyncStreamingResponse(response_gen=agen(), **fields)

    def gen() -> Generator[str, None, None]:
        if text:
            yield text

    return CitedStreamingResponse(response_gen=gen(), **fields)


async def _empty_agen() -> AsyncGenerator[str, None]:
    return
    yield  # pragma: no cover - makes this an async generator
