"""``CitedQueryEngine``: answers whose citations are renumbered by code, not by the LLM.

Three ways to get citations (``mode``):

* ``markers`` (default): the context chunks are shown with ids, the LLM writes ``[N](id=M)``
  after each claim, and :class:`~llama_index_rag_pack.core.references.ReferenceManager`
  rewrites the markers while the answer streams.
* ``quotes``: the LLM returns ``{answer, citations: [{source_id, quote}]}`` (function calling when
  the model supports it, a JSON prompt otherwise); every quote is verified against its source
  (exact → whitespace-normalised → fuzzy) and unverifiable ones are flagged, never cited.
* ``annotate``: the LLM answers first, then a second call maps each answer sentence to the
  documents supporting it (post-generation annotation).

The response's ``source_nodes`` are only the cited chunks; ``citations`` holds the structured list.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_rag_pack.components.settings import resolve_llm
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.quotes import (
    DEFAULT_FUZZY_THRESHOLD,
    QuoteCheck,
    parse_quoted_answer,
    verify_quote,
)
from llama_index_rag_pack.core.references import Citation, ReferenceManager, ReferenceStyle

logger = logging.getLogger(__name__)

DEFAULT_CITATION_QA_PROMPT = PromptTemplate(
    "Answer the question using only the documents below. After each claim, cite the document "
    'it comes from as [N](id=ID), where ID is the document id (e.g. "The Space Needle is in '
    'Seattle [1](id=3)."). Cite only documents that state the claim. If the documents do not '
    "contain the answer, say that you don't know.\n\n"
    "{context_str}\n\n"
    "Question: {query_str}\n"
    "Answer: "
)

DEFAULT_QUOTES_PROMPT = PromptTemplate(
    "Answer the question using only the documents below, and justify the answer with VERBATIM "
    "quotes copied from them, each with the id of its document.\n\n"
    "{context_str}\n\n"
    "Question: {query_str}\n\n"
    'Reply with JSON only, in this form: {"answer": "...", "citations": '
    '[{"source_id": 1, "quote": "exact words from document 1"}]}\n'
)

DEFAULT_ANNOTATE_ANSWER_PROMPT = PromptTemplate(
    "Answer the question using only the documents below. If they do not contain the answer, "
    "say that you don't know.\n\n"
    "{context_str}\n\n"
    "Question: {query_str}\n"
    "Answer: "
)

DEFAULT_ANNOTATE_PROMPT = PromptTemplate(
    "Here are documents and an answer split into numbered sentences. For each sentence, list the "
    "ids of the documents that state it, one line per sentence, like:\n"
    "S1: 2, 3\nS2: none\n\n"
    "{context_str}\n\n"
    "Answer sentences:\n{sentences_str}\n\n"
    "Sources:\n"
)


class CitationMode(str, Enum):
    """How :class:`CitedQueryEngine` obtains citations."""

    MARKERS = "markers"
    QUOTES = "quotes"
    ANNOTATE = "annotate"

    @classmethod
    def parse(cls, value: str | CitationMode) -> CitationMode:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ConfigurationError(
                f"Unknown citation mode {value!r}; valid modes: {valid}."
            ) from None


class Quote(BaseModel):
    """A verbatim quote that justifies the answer."""

    source_id: int = Field(description="The id of the document the quote is copied from.")
    quote: str = Field(description="The exact words copied from that document.")


class QuotedAnswer(BaseModel):
    """Answer the question from the documents and quote the words that justify the answer."""

    answer: str = Field(description="The answer to the question, based only on the documents.")
    citations: list[Quote] = Field(
        description="Verbatim quotes from the documents that justify the answer."
    )


# --------------------------------------------------------------------------- responses
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


# --------------------------------------------------------------------------- helpers
def format_context(nodes: Sequence[NodeWithScore]) -> str:
    """The numbered context: ``<document id=1 title="...">text</document>`` per chunk."""
    parts = []
    for position, nws in enumerate(nodes, 1):
        meta = nws.node.metadata or {}
        title = meta.get("title") or meta.get("file_name")
        attr = f' title="{str(title).replace(chr(34), chr(39))}"' if title else ""
        text = nws.node.get_content(metadata_mode=MetadataMode.NONE).strip()
        parts.append(f"<document id={position}{attr}>\n{text}\n</document>")
    return "\n".join(parts) if parts else "(no documents were found)"


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CLOSING = ".!?;:"


def split_sentences(text: str) -> list[str]:
    """Sentences with their trailing whitespace (joining them gives ``text`` back)."""
    pieces: list[str] = []
    last = 0
    for m in _SENTENCE_END.finditer(text):
        pieces.append(text[last : m.end()])
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
    return pieces


def attach_markers(sentence: str, ids: Sequence[int]) -> str:
    """Insert ``[k](id=M)`` markers before the sentence's final punctuation (whitespace kept)."""
    if not ids:
        return sentence
    body = sentence.rstrip()
    trailing = sentence[len(body) :]
    end = len(body)
    while end > 0 and body[end - 1] in _CLOSING:
        end -= 1
    markers = "".join(f"[{k}](id={m})" for k, m in enumerate(ids, 1))
    return f"{body[:end]} {markers}{body[end:]}{trailing}" if end else f"{markers}{body}{trailing}"


_ANNOTATION_LINE = re.compile(r"^\W*(?:s(?:entence)?\s*)?(\d+)\s*[:\-=>)\]]+\s*(.*)$", re.I)


def parse_annotations(text: str, n_sentences: int) -> dict[int, list[int]]:
    """``{sentence_number: [document ids]}`` from lines like ``S1: 2, 3`` (tolerant; 1-based)."""
    found: dict[int, list[int]] = {}
    for line in text.splitlines():
        m = _ANNOTATION_LINE.match(line.strip())
        if not m:
            continue
        sentence = int(m.group(1))
        if not 1 <= sentence <= n_sentences:
            continue
        ids = [int(x) for x in re.findall(r"\d+", m.group(2))]
        found.setdefault(sentence, [])
        found[sentence].extend(i for i in ids if i not in found[sentence])
    return found


# --------------------------------------------------------------------------- the engine
class CitedQueryEngine(BaseQueryEngine):
    """Retrieve, answer with citations, and renumber them deterministically (sync/async/streaming).

    Args:
        retriever: Any LlamaIndex retriever.
        llm: The LLM; default ``Settings.llm`` when set, else
            :func:`llama_index_rag_pack.components.settings.resolve_llm`'s choice.
        node_postprocessors: Applied to the retrieved nodes before they are numbered (e.g. a
            :class:`~llama_index_rag_pack.components.citation_postprocessor.CitationPostprocessor`).
        mode: ``"markers"`` (default), ``"quotes"`` or ``"annotate"``.
        style: ``"markdown"`` (default), ``"text"``, ``"html"``, ``"empty"`` or a
            ``ReferenceStyle``.
        source_id: Which chunks share a number (metadata key or callable; default url → source →
            file_path → node).
        streaming: ``query`` returns a streaming response. In ``markers`` mode the rewritten answer
            streams token by token; the other modes need the whole answer first and stream it once.
        fuzzy_threshold: Minimum similarity for a fuzzy quote match (``quotes`` mode).
        citation_qa_template, quotes_template, annotate_answer_template, annotate_template:
            Prompt overrides (also via ``update_prompts``).
        callback_manager: LlamaIndex callbacks.

    Example:
        >>> from llama_index.core import Document, VectorStoreIndex
        >>> index = VectorStoreIndex.from_documents([Document(text="Milvus is a vector database.",
        ...     metadata={"url": "https://milvus.io"})])  # doctest: +SKIP
        >>> engine = CitedQueryEngine(index.as_retriever(), my_llm, style="text")  # doctest: +SKIP
        >>> response = engine.query("What is Milvus?")  # doctest: +SKIP
        >>> print(response)  # doctest: +SKIP
        Milvus is a vector database [1].
        <BLANKLINE>
        Sources:
          [1] milvus.io — https://milvus.io
    """

    def __init__(
        self,
        retriever: BaseRetriever,
        llm: LLM | None = None,
        *,
        node_postprocessors: Sequence[BaseNodePostprocessor] | None = None,
        mode: str | CitationMode = CitationMode.MARKERS,
        style: str | ReferenceStyle | None = "markdown",
        source_id: str | Callable[[Any], Any] | None = None,
        streaming: bool = False,
        fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
        citation_qa_template: PromptTemplate | None = None,
        quotes_template: PromptTemplate | None = None,
        annotate_answer_template: PromptTemplate | None = None,
        annotate_template: PromptTemplate | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise ConfigurationError(
                "retriever must be a LlamaIndex BaseRetriever (e.g. index.as_retriever()), "
                f"got {type(retriever).__name__}"
            )
        if llm is None:
            llm = resolve_llm(None)  # LlamaIndex's Settings.llm when set, else the pack's order
        if not hasattr(llm, "predict"):
            raise ConfigurationError(
                "CitedQueryEngine needs an LLM: pass llm=<any LlamaIndex LLM> (or use "
                "llama_index_rag_pack.components.settings.resolve_llm())."
            )
        if not 0.0 < fuzzy_threshold <= 1.0:
            raise ConfigurationError(f"fuzzy_threshold must be in (0, 1], got {fuzzy_threshold}")
        self._retriever = retriever
        self._llm = llm
        self._node_postprocessors = list(node_postprocessors or [])
        self.mode = CitationMode.parse(mode)
        # Build one manager now: validates style and source_id at construction.
        ReferenceManager([], style=style, source_id=source_id)
        self._style = style
        self._source_id = source_id
        self.streaming = streaming
        self.fuzzy_threshold = fuzzy_threshold
        self._qa_template = citation_qa_template or DEFAULT_CITATION_QA_PROMPT
        self._quotes_template = quotes_template or DEFAULT_QUOTES_PROMPT
        self._annotate_answer_template = annotate_answer_template or DEFAULT_ANNOTATE_ANSWER_PROMPT
        self._annotate_template = annotate_template or DEFAULT_ANNOTATE_PROMPT
        super().__init__(callback_manager=callback_manager)

    # ------------------------------------------------------------------ prompts
    def _get_prompts(self) -> PromptDictType:
        return {
            "citation_qa_template": self._qa_template,
            "quotes_template": self._quotes_template,
            "annotate_answer_template": self._annotate_answer_template,
            "annotate_template": self._annotate_template,
        }

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "citation_qa_template" in prompts:
            self._qa_template = prompts["citation_qa_template"]
        if "quotes_template" in prompts:
            self._quotes_template = prompts["quotes_template"]
        if "annotate_answer_template" in prompts:
            self._annotate_answer_template = prompts["annotate_answer_template"]
        if "annotate_template" in prompts:
            self._annotate_template = prompts["annotate_template"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    @property
    def retriever(self) -> BaseRetriever:
        return self._retriever

    def _manager(self, nodes: Sequence[NodeWithScore]) -> ReferenceManager:
        return ReferenceManager(nodes, style=self._style, source_id=self._source_id)

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The numbered context nodes for ``query_bundle`` (retrieved, then post-processed)."""
        nodes = self._retriever.retrieve(query_bundle)
        for post in self._node_postprocessors:
            nodes = post.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = await self._retriever.aretrieve(query_bundle)
        for post in self._node_postprocessors:
            nodes = await post.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    # ------------------------------------------------------------------ building responses
    def _metadata(
        self, manager: ReferenceManager, raw: str, nodes: Sequence[NodeWithScore]
    ) -> dict[str, Any]:
        return {
            "mode": self.mode.value,
            "citations": [c.to_dict() for c in manager.citations],
            "dropped_ids": manager.dropped_ids,
            "raw_answer": raw,
            "context_size": len(nodes),
        }

    def _response(
        self,
        nodes: Sequence[NodeWithScore],
        marked: str,
        raw: str,
        quotes: list[QuoteCheck] | None = None,
    ) -> CitedResponse:
        manager = self._manager(nodes)
        answer = manager.feed(marked) + manager.finish(references=False)
        references = manager.format_references()
        metadata = self._metadata(manager, raw, nodes)
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

    def _as_stream(self, response: CitedResponse, asynchronous: bool) -> Any:
        """A finished answer as a (one-chunk) streaming response, for the non-incremental modes."""
        text = response.response or ""

        if asynchronous:

            async def agen() -> AsyncGenerator[str, None]:
                if text:
                    yield text

            return CitedAsyncStreamingResponse(
                response_gen=agen(),
                source_nodes=response.source_nodes,
                metadata=response.metadata,
                citations=response.citations,
                quotes=response.quotes,
                context_nodes=response.context_nodes,
            )

        def gen() -> Generator[str, None, None]:
            if text:
                yield text

        return CitedStreamingResponse(
            response_gen=gen(),
            source_nodes=response.source_nodes,
            metadata=response.metadata,
            citations=response.citations,
            quotes=response.quotes,
            context_nodes=response.context_nodes,
        )

    def _finish_stream(
        self, target: Any, manager: ReferenceManager, raw: str, nodes: Sequence[NodeWithScore]
    ) -> str:
        tail = manager.finish()
        target.source_nodes[:] = manager.cited_nodes
        target.citations[:] = manager.citations
        target.metadata.update(self._metadata(manager, raw, nodes))
        return tail

    # ------------------------------------------------------------------ markers mode
    def _markers_stream(self, nodes: list[NodeWithScore], query: str) -> CitedStreamingResponse:
        manager = self._manager(nodes)
        tokens = self._llm.stream(
            self._qa_template, context_str=format_context(nodes), query_str=query
        )
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

    async def _amarkers_stream(
        self, nodes: list[NodeWithScore], query: str
    ) -> CitedAsyncStreamingResponse:
        manager = self._manager(nodes)
        tokens = await self._llm.astream(
            self._qa_template, context_str=format_context(nodes), query_str=query
        )

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

    # ------------------------------------------------------------------ quotes mode
    def _quotes_kwargs(self, nodes: list[NodeWithScore], query: str) -> dict[str, str]:
        return {"context_str": format_context(nodes), "query_str": query}

    def _uses_tools(self) -> bool:
        return bool(getattr(self._llm.metadata, "is_function_calling_model", False)) and hasattr(
            self._llm, "chat_with_tools"
        )

    def _quotes_from_tool_response(self, chat_response: Any) -> tuple[Any, str]:
        calls = self._llm.get_tool_calls_from_response(chat_response, error_on_no_tool_call=False)
        content = chat_response.message.content or ""
        if calls:
            return calls[0].tool_kwargs, content
        logger.warning(
            "Quotes mode: the LLM answered without calling the tool; parsing its text instead"
        )
        return content, content

    def _quoted_response(self, nodes: list[NodeWithScore], data: Any, raw: str) -> CitedResponse:
        parsed = parse_quoted_answer(data)
        if parsed is None:
            logger.warning(
                "Quotes mode: could not read an answer with quotes from the LLM output (%r...); "
                "returning its text without citations",
                raw[:80],
            )
            return self._response(nodes, _strip_json_noise(raw), raw, quotes=[])
        answer, pairs = parsed
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        checks = [
            verify_quote(q, texts, sid, fuzzy_threshold=self.fuzzy_threshold) for sid, q in pairs
        ]
        for check in checks:
            if not check.verified:
                logger.warning(
                    "Quote not found in any source (flagged, not cited): %r", check.quote[:100]
                )
            elif check.misattributed:
                logger.info(
                    "Quote attributed to id=%s found in id=%s", check.claimed_id, check.source_id
                )
        ids: list[int] = []
        for check in checks:
            if check.verified and check.source_id not in ids:
                ids.append(check.source_id)  # type: ignore[arg-type]
        return self._response(nodes, attach_markers(answer, ids), raw, quotes=checks)

    def _query_quotes(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        kwargs = self._quotes_kwargs(nodes, query)
        if self._uses_tools():
            from llama_index.core.program.function_program import get_function_tool

            chat_response = self._llm.chat_with_tools(
                [get_function_tool(QuotedAnswer)],
                user_msg=self._quotes_template.format(**kwargs),
                tool_required=True,
            )
            data, raw = self._quotes_from_tool_response(chat_response)
            return self._quoted_response(nodes, data, raw if isinstance(data, str) else str(data))
        raw = self._llm.predict(self._quotes_template, **kwargs)
        return self._quoted_response(nodes, raw, raw)

    async def _aquery_quotes(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        kwargs = self._quotes_kwargs(nodes, query)
        if self._uses_tools():
            from llama_index.core.program.function_program import get_function_tool

            chat_response = await self._llm.achat_with_tools(
                [get_function_tool(QuotedAnswer)],
                user_msg=self._quotes_template.format(**kwargs),
                tool_required=True,
            )
            data, raw = self._quotes_from_tool_response(chat_response)
            return self._quoted_response(nodes, data, raw if isinstance(data, str) else str(data))
        raw = await self._llm.apredict(self._quotes_template, **kwargs)
        return self._quoted_response(nodes, raw, raw)

    # ------------------------------------------------------------------ annotate mode
    def _annotated_response(
        self, nodes: list[NodeWithScore], answer: str, reply: str | None
    ) -> CitedResponse:
        sentences = split_sentences(answer)
        mapping = parse_annotations(reply or "", len(sentences)) if reply is not None else {}
        if reply is not None and not mapping and sentences:
            logger.warning(
                "Annotate mode: no 'S<n>: ids' line in the LLM reply (%r...); no citations",
                reply[:80],
            )
        marked = "".join(attach_markers(s, mapping.get(i, [])) for i, s in enumerate(sentences, 1))
        response = self._response(nodes, marked, answer)
        response.metadata["annotations"] = {str(k): v for k, v in mapping.items()}
        return response

    def _annotate_kwargs(self, nodes: list[NodeWithScore], answer: str) -> dict[str, str] | None:
        sentences = [s.strip() for s in split_sentences(answer)]
        if not nodes or not any(sentences):
            return None
        return {
            "context_str": format_context(nodes),
            "sentences_str": "\n".join(f"S{i}: {s}" for i, s in enumerate(sentences, 1)),
        }

    def _query_annotate(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        answer = self._llm.predict(
            self._annotate_answer_template, context_str=format_context(nodes), query_str=query
        )
        kwargs = self._annotate_kwargs(nodes, answer)
        reply = self._llm.predict(self._annotate_template, **kwargs) if kwargs else None
        return self._annotated_response(nodes, answer, reply)

    async def _aquery_annotate(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        answer = await self._llm.apredict(
            self._annotate_answer_template, context_str=format_context(nodes), query_str=query
        )
        kwargs = self._annotate_kwargs(nodes, answer)
        reply = await self._llm.apredict(self._annotate_template, **kwargs) if kwargs else None
        return self._annotated_response(nodes, answer, reply)

    # ------------------------------------------------------------------ entry points
    def _query(self, query_bundle: QueryBundle) -> Any:
        nodes = self.retrieve(query_bundle)
        query = query_bundle.query_str
        if self.mode == CitationMode.MARKERS:
            if self.streaming:
                return self._markers_stream(nodes, query)
            raw = self._llm.predict(
                self._qa_template, context_str=format_context(nodes), query_str=query
            )
            return self._response(nodes, raw, raw)
        if self.mode == CitationMode.QUOTES:
            response = self._query_quotes(nodes, query)
        else:
            response = self._query_annotate(nodes, query)
        return self._as_stream(response, asynchronous=False) if self.streaming else response

    async def _aquery(self, query_bundle: QueryBundle) -> Any:
        nodes = await self.aretrieve(query_bundle)
        query = query_bundle.query_str
        if self.mode == CitationMode.MARKERS:
            if self.streaming:
                return await self._amarkers_stream(nodes, query)
            raw = await self._llm.apredict(
                self._qa_template, context_str=format_context(nodes), query_str=query
            )
            return self._response(nodes, raw, raw)
        if self.mode == CitationMode.QUOTES:
            response = await self._aquery_quotes(nodes, query)
        else:
            response = await self._aquery_annotate(nodes, query)
        return self._as_stream(response, asynchronous=True) if self.streaming else response


async def _empty_agen() -> AsyncGenerator[str, None]:
    return
    yield  # pragma: no cover - makes this an async generator


def _strip_json_noise(text: str) -> str:
    """Model output that was meant to be JSON but is not: drop code fences, keep the words."""
    return re.sub(r"```(?:json)?", "", text).strip()


__all__ = [
    "CitationMode",
    "CitedAsyncStreamingResponse",
    "CitedQueryEngine",
    "CitedResponse",
    "CitedStreamingResponse",
    "DEFAULT_ANNOTATE_ANSWER_PROMPT",
    "DEFAULT_ANNOTATE_PROMPT",
    "DEFAULT_CITATION_QA_PROMPT",
    "DEFAULT_QUOTES_PROMPT",
    "Quote",
    "QuotedAnswer",
    "attach_markers",
    "format_context",
    "parse_annotations",
    "split_sentences",
]
