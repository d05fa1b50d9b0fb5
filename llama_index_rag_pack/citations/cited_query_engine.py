"""``CitedQueryEngine``: answers whose citations are renumbered by code, not by the LLM.

Three ways to get citations (``mode``):

* ``markers`` (default): the context chunks are shown with ids, the LLM writes ``[N](id=M)``
  after each claim, and :class:`~llama_index_rag_pack.citations.references.ReferenceManager`
  rewrites the markers while the answer streams.
* ``quotes``: the LLM returns ``{answer, citations: [{source_id, quote}]}`` (function calling when
  the model supports it, a JSON prompt otherwise); every quote is verified against its source
  (exact → whitespace-normalised → fuzzy) and unverifiable ones are flagged, never cited
  (:mod:`~llama_index_rag_pack.citations.quoted_answers`).
* ``annotate``: the LLM answers first, then a second call maps each answer sentence to the
  documents supporting it (post-generation annotation,
  :mod:`~llama_index_rag_pack.citations.annotations`).

In every mode, with an embedding model, the sentences left without a valid citation are
attributed to the passages that support them by similarity
(:mod:`~llama_index_rag_pack.citations.citation_attribution`), marked as attributed in the
metadata and by a note line; sentences no passage supports are flagged.

The response's ``source_nodes`` are only the cited chunks; ``citations`` holds the structured list
(:mod:`~llama_index_rag_pack.citations.cited_responses`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core import Settings
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.indices.base import BaseIndex
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.citations.annotated_answers import (
    annotate_prompt_args,
    annotated_marks,
    with_annotations,
)
from llama_index_rag_pack.citations.citation_attribution import (
    Attribution,
    SentenceAttributor,
    resolve_attributor,
)
from llama_index_rag_pack.citations.citation_options import (
    CitationMode,
    as_retriever,
    check_retriever,
)
from llama_index_rag_pack.citations.citation_prompts import (
    DEFAULT_ANNOTATE_ANSWER_PROMPT,
    DEFAULT_ANNOTATE_PROMPT,
    DEFAULT_CITATION_QA_PROMPT,
    DEFAULT_QUOTES_PROMPT,
    format_context,
)
from llama_index_rag_pack.citations.cited_responses import (
    CitedResponse,
    CitedResponseBuilder,
    as_streaming_response,
)
from llama_index_rag_pack.citations.extractive_answers import ExtractiveAnswerer
from llama_index_rag_pack.citations.quoted_answers import (
    arequest_quotes,
    mark_verified_quotes,
    request_quotes,
    uses_tools,
)
from llama_index_rag_pack.citations.quotes import DEFAULT_FUZZY_THRESHOLD
from llama_index_rag_pack.citations.reference_styles import ReferenceStyle
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.query_bases import PromptAttributes
from llama_index_rag_pack.core.usage import metered, report_usage
from llama_index_rag_pack.models.answer_style import resolve_answer_style
from llama_index_rag_pack.models.settings import resolve_llm

logger = logging.getLogger(__name__)

__all__ = ["CitationMode", "CitedQueryEngine"]

# Prompt key (get_prompts / update_prompts) → engine attribute.
_PROMPT_ATTRIBUTES = {
    "citation_qa_template": "_qa_template",
    "quotes_template": "_quotes_template",
    "annotate_answer_template": "_annotate_answer_template",
    "annotate_template": "_annotate_template",
}


class CitedQueryEngine(PromptAttributes, BaseQueryEngine):
    """Retrieve, answer with citations, and renumber them deterministically (sync/async/streaming).

    Args:
        retriever: Any LlamaIndex retriever (:meth:`from_args` also takes an index).
        llm: The LLM; default ``Settings.llm`` when set, else
            :func:`llama_index_rag_pack.models.settings.resolve_llm`'s choice.
        node_postprocessors: Applied to the retrieved nodes before they are numbered (e.g. a
            :class:`~llama_index_rag_pack.citations.citation_postprocessor.CitationPostprocessor`).
        mode: ``"markers"`` (default), ``"quotes"`` or ``"annotate"``.
        style: ``"markdown"`` (default), ``"text"``, ``"html"``, ``"empty"`` or a
            ``ReferenceStyle``.
        source_id: Which chunks share a number (metadata key or callable; default url → source →
            file_path → node).
        streaming: ``query`` returns a streaming response. In ``markers`` mode the rewritten answer
            streams token by token; the other modes need the whole answer first and stream it once.
        fuzzy_threshold: Minimum similarity for a fuzzy quote match (``quotes`` mode).
        embed_model: Embedding model for attributed citations (the index's; ``from_args`` takes
            it from an index). ``None``: no attribution.
        attribution: ``True`` (default): attribute the sentences the LLM left uncited when an
            ``embed_model`` is given; ``False``: never; or a configured ``SentenceAttributor``.
        answer_style: ``"auto"`` (default): ``extractive`` for a local GGUF model below
            ``SMALL_MODEL_PARAMETERS`` (the bundled one), ``generative`` for any other LLM; or
            name one. An extractive answer is the passages' own sentences under a short answer
            line, cited in every ``mode`` (``citations/extractive_answers.py``).
        short_answer: How an extractive answer's short line is chosen: ``"rule"`` (default),
            ``"model"`` (the LLM picks among the rule's spans) or ``"none"``.
        citation_qa_template, quotes_template, annotate_answer_template, annotate_template:
            Prompt overrides (also via ``update_prompts``).
        callback_manager: LlamaIndex callbacks.

    Example:
        >>> from llama_index.core import Document, VectorStoreIndex
        >>> index = VectorStoreIndex.from_documents([Document(text="Milvus is a vector database.",
        ...     metadata={"url": "https://milvus.io"})])  # doctest: +SKIP
        >>> engine = CitedQueryEngine.from_args(index, my_llm, style="text")  # doctest: +SKIP
        >>> response = engine.query("What is Milvus?")  # doctest: +SKIP
        >>> print(response)  # doctest: +SKIP
        Milvus is a vector database [1].
        <BLANKLINE>
        Sources:
          [1] milvus.io — https://milvus.io
    """

    prompt_attributes = _PROMPT_ATTRIBUTES

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
        embed_model: BaseEmbedding | None = None,
        attribution: bool | SentenceAttributor = True,
        answer_style: str = "auto",
        short_answer: str = "rule",
        citation_qa_template: BasePromptTemplate | None = None,
        quotes_template: BasePromptTemplate | None = None,
        annotate_answer_template: BasePromptTemplate | None = None,
        annotate_template: BasePromptTemplate | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        check_retriever(retriever)
        if llm is None:
            llm = resolve_llm(None)  # LlamaIndex's Settings.llm when set, else the pack's order
        if not hasattr(llm, "predict"):
            raise ConfigurationError(
                "CitedQueryEngine needs an LLM: pass llm=<any LlamaIndex LLM> (or use "
                "llama_index_rag_pack.models.settings.resolve_llm())."
            )
        if not 0.0 < fuzzy_threshold <= 1.0:
            raise ConfigurationError(f"fuzzy_threshold must be in (0, 1], got {fuzzy_threshold}")
        self._retriever = retriever
        self._llm = llm
        self._node_postprocessors = list(node_postprocessors or [])
        self.mode = CitationMode.parse(mode)
        self._responses = CitedResponseBuilder(self.mode.value, style=style, source_id=source_id)
        self.streaming = streaming
        self.fuzzy_threshold = fuzzy_threshold
        self.attributor = resolve_attributor(attribution, embed_model)
        self.answer_style = resolve_answer_style(answer_style, llm)
        self.extractor = ExtractiveAnswerer(embed_model, llm, short_answer=short_answer)
        self._qa_template = citation_qa_template or DEFAULT_CITATION_QA_PROMPT
        self._quotes_template = quotes_template or DEFAULT_QUOTES_PROMPT
        self._annotate_answer_template = annotate_answer_template or DEFAULT_ANNOTATE_ANSWER_PROMPT
        self._annotate_template = annotate_template or DEFAULT_ANNOTATE_PROMPT
        super().__init__(callback_manager=callback_manager)

    @classmethod
    def from_args(
        cls,
        retriever: BaseRetriever | BaseIndex,
        llm: LLM | None = None,
        *,
        similarity_top_k: int | None = None,
        callback_manager: CallbackManager | None = None,
        embed_model: BaseEmbedding | None = None,
        **options: Any,
    ) -> CitedQueryEngine:
        """Build the engine like core's ``RetrieverQueryEngine.from_args`` /
        ``CitationQueryEngine.from_args``.

        Args:
            retriever: A retriever, or an index (then ``index.as_retriever(similarity_top_k=...)``).
            llm: The LLM; ``None``: ``Settings.llm`` when set, else
                :func:`~llama_index_rag_pack.models.settings.resolve_llm`'s choice.
            similarity_top_k: Chunks retrieved per question when ``retriever`` is an index
                (default: the index's own default).
            callback_manager: Default ``Settings.callback_manager``, as in core.
            embed_model: For attributed citations; default: the index's embedding model when
                ``retriever`` is an index.
            options: Every other keyword of :class:`CitedQueryEngine` (``mode``, ``style``,
                ``streaming``, ``attribution``, the templates, ...), passed on as they are.

        Raises:
            ConfigurationError: ``similarity_top_k`` is not positive, or is given with a
                retriever (set it on the retriever instead); an unknown option.

        Example:
            >>> engine = CitedQueryEngine.from_args(index, similarity_top_k=4)  # doctest: +SKIP
        """
        unknown = sorted(set(options) - _OPTION_NAMES)
        if unknown:
            raise ConfigurationError(
                f"CitedQueryEngine.from_args got unknown options {unknown}; valid: "
                f"{', '.join(sorted(_OPTION_NAMES))}."
            )
        return cls(
            as_retriever(retriever, similarity_top_k),
            llm,
            embed_model=embed_model or getattr(retriever, "_embed_model", None),
            callback_manager=callback_manager or Settings.callback_manager,
            **options,
        )

    # ------------------------------------------------------------------ prompts
    @property
    def retriever(self) -> BaseRetriever:
        return self._retriever

    @property
    def llm(self) -> LLM:
        """The LLM that answers."""
        return self._llm

    # ------------------------------------------------------------------ retrieval
    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The numbered context nodes for ``query_bundle`` (retrieved, then post-processed),
        inside core's ``RETRIEVE`` callback event."""
        with self._event(CBEventType.RETRIEVE, query_bundle) as event:
            nodes = self._retriever.retrieve(query_bundle)
            for post in self._node_postprocessors:
                nodes = post.postprocess_nodes(nodes, query_bundle=query_bundle)
            event.on_end(payload={EventPayload.NODES: nodes})
        return nodes

    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with self._event(CBEventType.RETRIEVE, query_bundle) as event:
            nodes = await self._retriever.aretrieve(query_bundle)
            for post in self._node_postprocessors:
                nodes = await post.apostprocess_nodes(nodes, query_bundle=query_bundle)
            event.on_end(payload={EventPayload.NODES: nodes})
        return nodes

    def _event(self, kind: CBEventType, query_bundle: QueryBundle) -> Any:
        payload = {EventPayload.QUERY_STR: query_bundle.query_str}
        return self.callback_manager.event(kind, payload=payload)

    # ------------------------------------------------------------------ quotes mode
    def _query_quotes(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        kwargs = {"context_str": format_context(nodes), "query_str": query}
        if uses_tools(self._llm):
            data, raw = request_quotes(self._llm, self._quotes_template.format(**kwargs))
        else:
            data = raw = self._llm.predict(self._quotes_template, **kwargs)
        marked, checks = self._quoted_marks(nodes, data, raw)
        return self._build(nodes, marked, raw, quotes=checks)

    async def _aquery_quotes(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        kwargs = {"context_str": format_context(nodes), "query_str": query}
        if uses_tools(self._llm):
            data, raw = await arequest_quotes(self._llm, self._quotes_template.format(**kwargs))
        else:
            data = raw = await self._llm.apredict(self._quotes_template, **kwargs)
        marked, checks = self._quoted_marks(nodes, data, raw)
        return await self._abuild(nodes, marked, raw, quotes=checks)

    def _quoted_marks(self, nodes: list[NodeWithScore], data: Any, raw: str) -> tuple[str, Any]:
        return mark_verified_quotes(data, raw, nodes, fuzzy_threshold=self.fuzzy_threshold)

    # ------------------------------------------------------------------ annotate mode
    def _query_annotate(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        answer = self._llm.predict(
            self._annotate_answer_template, context_str=format_context(nodes), query_str=query
        )
        kwargs = annotate_prompt_args(nodes, answer)
        reply = self._llm.predict(self._annotate_template, **kwargs) if kwargs else None
        marked, mapping = annotated_marks(answer, reply)
        return with_annotations(self._build(nodes, marked, answer), mapping)

    async def _aquery_annotate(self, nodes: list[NodeWithScore], query: str) -> CitedResponse:
        answer = await self._llm.apredict(
            self._annotate_answer_template, context_str=format_context(nodes), query_str=query
        )
        kwargs = annotate_prompt_args(nodes, answer)
        reply = await self._llm.apredict(self._annotate_template, **kwargs) if kwargs else None
        marked, mapping = annotated_marks(answer, reply)
        return with_annotations(await self._abuild(nodes, marked, answer), mapping)

    # ------------------------------------------------------------------ responses
    def _build(self, nodes: list[NodeWithScore], marked: str, raw: str, **kw: Any) -> CitedResponse:
        """The response, with the sentences the LLM left uncited attributed (when enabled)."""
        attribution = self.attributor.attribute(marked, nodes) if self.attributor else None
        return self._responses.build(nodes, marked, raw, attribution=attribution, **kw)

    async def _abuild(
        self, nodes: list[NodeWithScore], marked: str, raw: str, **kw: Any
    ) -> CitedResponse:
        attribution: Attribution | None = None
        if self.attributor is not None:
            attribution = await self.attributor.aattribute(marked, nodes)
        return self._responses.build(nodes, marked, raw, attribution=attribution, **kw)

    def _attribute_streamed(self, nodes: list[NodeWithScore]) -> Any:
        if self.attributor is None:
            return None
        return lambda text: self.attributor.attribute(text, nodes)

    def _aattribute_streamed(self, nodes: list[NodeWithScore]) -> Any:
        if self.attributor is None:
            return None
        return lambda text: self.attributor.aattribute(text, nodes)

    # ------------------------------------------------------------------ entry points
    def _query(self, query_bundle: QueryBundle) -> Any:
        """Retrieve and answer inside core's ``QUERY`` callback event (as ``CitationQueryEngine``
        does), so callback handlers and tracers see this engine."""
        with self._event(CBEventType.QUERY, query_bundle) as event, metered() as meter:
            response = self.respond(self.retrieve(query_bundle), query_bundle.query_str)
            event.on_end(payload={EventPayload.RESPONSE: response})
        return report_usage(response, meter)

    async def _aquery(self, query_bundle: QueryBundle) -> Any:
        with self._event(CBEventType.QUERY, query_bundle) as event, metered() as meter:
            nodes = await self.aretrieve(query_bundle)
            response = await self.arespond(nodes, query_bundle.query_str)
            event.on_end(payload={EventPayload.RESPONSE: response})
        return report_usage(response, meter)

    def respond(
        self, nodes: list[NodeWithScore], query: str, *, streaming: bool | None = None
    ) -> Any:
        """The cited answer to ``query`` from ``nodes`` (already retrieved, e.g. by
        :meth:`retrieve`): a ``CitedResponse``, or a streaming one when ``streaming`` (default:
        the engine's ``streaming``). A chat engine asks with the question it condensed."""
        streaming = self.streaming if streaming is None else streaming
        if self.answer_style == "extractive":
            response = self.extractor.response(self._responses, nodes, query)
        elif self.mode == CitationMode.MARKERS:
            kwargs = {"context_str": format_context(nodes), "query_str": query}
            if streaming:
                tokens = self._llm.stream(self._qa_template, **kwargs)
                return self._responses.stream(tokens, nodes, self._attribute_streamed(nodes))
            raw = self._llm.predict(self._qa_template, **kwargs)
            return self._build(nodes, raw, raw)
        elif self.mode == CitationMode.QUOTES:
            response = self._query_quotes(nodes, query)
        else:
            response = self._query_annotate(nodes, query)
        return as_streaming_response(response, asynchronous=False) if streaming else response

    async def arespond(
        self, nodes: list[NodeWithScore], query: str, *, streaming: bool | None = None
    ) -> Any:
        """Async :meth:`respond` (a streaming response is an async one)."""
        streaming = self.streaming if streaming is None else streaming
        if self.answer_style == "extractive":
            response = await self.extractor.aresponse(self._responses, nodes, query)
        elif self.mode == CitationMode.MARKERS:
            kwargs = {"context_str": format_context(nodes), "query_str": query}
            if streaming:
                tokens = await self._llm.astream(self._qa_template, **kwargs)
                return self._responses.astream(tokens, nodes, self._aattribute_streamed(nodes))
            raw = await self._llm.apredict(self._qa_template, **kwargs)
            return await self._abuild(nodes, raw, raw)
        elif self.mode == CitationMode.QUOTES:
            response = await self._aquery_quotes(nodes, query)
        else:
            response = await self._aquery_annotate(nodes, query)
        return as_streaming_response(response, asynchronous=True) if streaming else response


#: The keywords ``from_args`` passes on to ``CitedQueryEngine`` (its own keyword parameters).
_OPTION_NAMES = frozenset(
    name
    for name, p in inspect.signature(CitedQueryEngine.__init__).parameters.items()
    if p.kind is p.KEYWORD_ONLY and name not in ("embed_model", "callback_manager")
)
