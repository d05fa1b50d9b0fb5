"""Responses of :class:`~llama_index_rag_pack.citations.cited_query_engine.CitedQueryEngine`, and
how they are built from an answer with ``[N](id=M)`` markers.

:class:`CitedResponseBuilder` runs one
:class:`~llama_index_rag_pack.citations.references.ReferenceManager` per answer: over a whole answer
(:meth:`~CitedResponseBuilder.build`) or over the LLM's token stream, rewriting the markers while
the answer streams (:meth:`~CitedResponseBuilder.stream`, :meth:`~CitedResponseBuilder.astream`).
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Sequence,
)
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.schema import NodeWithScore

from llama_index_rag_pack.citations.attribution import SentenceOrigin
from llama_index_rag_pack.citations.citation_attribution import Attribution
from llama_index_rag_pack.citations.cited_sources import Citation
from llama_index_rag_pack.citations.quotes import QuoteCheck
from llama_index_rag_pack.citations.reference_styles import ReferenceStyle
from llama_index_rag_pack.citations.references import ReferenceManager

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
        note: The note between answer and references (in the style) when citations were
            attributed by code or a sentence is supported by no passage, else ``""``.
        attribution: Per answer sentence, where its citations come from and the passage sentence
            supporting it (``None`` without an attributor).
    """

    answer: str = ""
    references: str = ""
    citations: list[Citation] = field(default_factory=list)
    raw_answer: str = ""
    quotes: list[QuoteCheck] = field(default_factory=list)
    context_nodes: list[NodeWithScore] = field(default_factory=list)
    note: str = ""
    attribution: Attribution | None = None


@dataclass
class CitedStreamingResponse(StreamingResponse):
    """Streams the rewritten answer, then the reference list.

    ``source_nodes``, ``citations``, ``metadata`` and ``attribution`` are filled in place when
    the stream ends (before the note and the reference list are yielded), and so is ``answer``:
    the rewritten answer as streamed, without the note and the references. Citations attributed by
    code cannot be put back into text already shown: they appear in the reference list, the note
    says so, and ``attribution`` maps them to the sentences.
    """

    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    quotes: list[QuoteCheck] = field(default_factory=list)
    context_nodes: list[NodeWithScore] = field(default_factory=list)
    attribution: Attribution | None = None


@dataclass
class CitedAsyncStreamingResponse(AsyncStreamingResponse):
    """Async :class:`CitedStreamingResponse` (``async for t in r.async_response_gen()``)."""

    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    quotes: list[QuoteCheck] = field(default_factory=list)
    context_nodes: list[NodeWithScore] = field(default_factory=list)
    attribution: Attribution | None = None


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
        self,
        manager: ReferenceManager,
        raw: str,
        nodes: Sequence[NodeWithScore],
        attribution: Attribution | None = None,
    ) -> dict[str, Any]:
        """The response metadata once ``manager`` has rewritten the whole answer.

        ``citation_origin`` is ``model``, ``attributed``, ``mixed`` or ``none``; each citation
        carries its own ``origin``; ``attribution`` has the per-sentence verdicts.
        """
        _mark_origins(manager.citations, attribution)
        metadata = {
            "mode": self.mode,
            "citations": [c.to_dict() for c in manager.citations],
            "dropped_ids": manager.dropped_ids,
            "raw_answer": raw,
            "context_size": len(nodes),
        }
        if attribution is not None:
            metadata["citation_origin"] = attribution.origin
            metadata["attribution"] = attribution.to_dict()
        else:
            metadata["citation_origin"] = "model" if manager.citations else "none"
        return metadata

    def note(self, manager: ReferenceManager, attribution: Attribution | None) -> str:
        """The attribution note in the manager's style (``""`` when there is none)."""
        if attribution is None:
            return ""
        return manager.style.format_note(attribution.note)

    def build(
        self,
        nodes: Sequence[NodeWithScore],
        marked: str,
        raw: str,
        quotes: list[QuoteCheck] | None = None,
        attribution: Attribution | None = None,
    ) -> CitedResponse:
        """The response for a whole answer ``marked`` (``raw``: the LLM's own text); with
        ``attribution`` (computed on ``marked``), its markers on the sentences the LLM left
        uncited are rendered too."""
        if attribution is not None:
            marked = attribution.marked
        manager = self.manager(nodes)
        answer = manager.feed(marked) + manager.finish(references=False)
        references = manager.format_references()
        metadata = self.metadata(manager, raw, nodes, attribution)
        metadata["marked_answer"] = marked
        if quotes is not None:
            metadata["quotes"] = [q.to_dict() for q in quotes]
        note = self.note(manager, attribution)
        return CitedResponse(
            response=answer + note + references,
            source_nodes=list(manager.cited_nodes),
            metadata=metadata,
            answer=answer,
            references=references,
            citations=manager.citations,
            raw_answer=raw,
            quotes=list(quotes or []),
            context_nodes=list(nodes),
            note=note,
            attribution=attribution,
        )

    def stream(
        self,
        tokens: Iterable[Any],
        nodes: list[NodeWithScore],
        attribute: Callable[[str], Attribution] | None = None,
    ) -> CitedStreamingResponse:
        """A response that rewrites the LLM's ``tokens`` while they stream; ``attribute(raw)``
        runs on the whole answer once it has streamed."""
        manager = self.manager(nodes)
        response = CitedStreamingResponse(
            response_gen=iter(()), source_nodes=[], metadata={}, context_nodes=list(nodes)
        )

        def gen() -> Generator[str, None, None]:
            raw: list[str] = []
            for token in tokens:
                if out := _rewritten(token, manager, response, raw):
                    yield out
            text = "".join(raw)
            attribution = attribute(text) if attribute is not None else None
            if tail := self._finish_stream(response, manager, text, nodes, attribution):
                yield tail

        response.response_gen = gen()
        return response

    def astream(
        self,
        tokens: AsyncIterable[Any],
        nodes: list[NodeWithScore],
        attribute: Callable[[str], Awaitable[Attribution]] | None = None,
    ) -> CitedAsyncStreamingResponse:
        """Async :meth:`stream` (``attribute`` is awaited)."""
        manager = self.manager(nodes)
        response = CitedAsyncStreamingResponse(
            response_gen=_empty_agen(), source_nodes=[], metadata={}, context_nodes=list(nodes)
        )

        async def agen() -> AsyncGenerator[str, None]:
            raw: list[str] = []
            async for token in tokens:
                if out := _rewritten(token, manager, response, raw):
                    yield out
            text = "".join(raw)
            attribution = await attribute(text) if attribute is not None else None
            if tail := self._finish_stream(response, manager, text, nodes, attribution):
                yield tail

        response.response_gen = agen()
        return response

    def _finish_stream(
        self,
        target: Any,
        manager: ReferenceManager,
        raw: str,
        nodes: Sequence[NodeWithScore],
        attribution: Attribution | None,
    ) -> str:
        tail = manager.finish(references=False)
        target.answer += tail
        if attribution is not None:
            for verdict in attribution.verdicts:
                if verdict.origin is SentenceOrigin.ATTRIBUTED:
                    manager.cite(verdict.positions)
        target.source_nodes[:] = manager.cited_nodes
        target.citations[:] = manager.citations
        target.metadata.update(self.metadata(manager, raw, nodes, attribution))
        target.metadata["marked_answer"] = raw
        target.attribution = attribution
        return tail + self.note(manager, attribution) + manager.format_references()


def _rewritten(token: Any, manager: ReferenceManager, response: Any, raw: list[str]) -> str:
    """One streamed ``token`` through the manager: its text kept in ``raw``, what the manager
    lets out added to ``response.answer`` and returned."""
    raw.append(_text(token))
    out = manager.feed(token)
    response.answer += out
    return out


def _text(token: Any) -> str:
    """The text of a streamed token (str, None, or a LlamaIndex response with ``delta``)."""
    if token is None:
        return ""
    if isinstance(token, str):
        return token
    delta = getattr(token, "delta", None)
    return delta if isinstance(delta, str) else str(token)


def _mark_origins(citations: Sequence[Citation], attribution: Attribution | None) -> None:
    """Set each citation's ``origin`` from the sentences that cite it."""
    if attribution is None:
        return
    model = attribution.positions(SentenceOrigin.MODEL)
    attributed = attribution.positions(SentenceOrigin.ATTRIBUTED)
    for c in citations:
        by_model = any(p in model for p in c.positions)
        by_code = any(p in attributed for p in c.positions)
        c.origin = "both" if by_model and by_code else "attributed" if by_code else "model"


def as_streaming_response(response: CitedResponse, *, asynchronous: bool) -> Any:
    """A finished answer as a (one-chunk) streaming response, for the modes that need the whole
    answer before citing it."""
    text = response.response or ""
    fields = {
        "answer": response.answer,
        "source_nodes": response.source_nodes,
        "metadata": response.metadata,
        "citations": response.citations,
        "quotes": response.quotes,
        "context_nodes": response.context_nodes,
        "attribution": response.attribution,
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
