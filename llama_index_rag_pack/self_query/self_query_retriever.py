"""``SelfQueryRetriever``: the LLM turns a question into a search query and a Milvus filter.

"Mystery novels after 2010 about memory" becomes the query ``memory`` and the filter
``(genre == "mystery") and (year > 2010)``. The reply is untrusted: it is read tolerantly
(:func:`~llama_index_rag_pack.self_query.replies.parse_self_query`), every condition is checked
against the declared fields and dropped, with a logged reason, when it names an unknown field,
an unknown operator, a value of the wrong type or out of range; the rest is compiled with
escaped literals (:mod:`~llama_index_rag_pack.milvus.milvus_filter`). No LLM text reaches the
expression except as a validated literal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.node_tags import annotate_node
from llama_index_rag_pack.fusion.llm_query import LLMQueryRetriever
from llama_index_rag_pack.milvus.metadata_fields import FieldSpec, field_specs
from llama_index_rag_pack.models.json_output import json_output
from llama_index_rag_pack.self_query.metadata_filter import (
    check_filterable,
    infer_field_specs,
    milvus_target,
    retriever_filter,
    with_filter,
)
from llama_index_rag_pack.self_query.replies import SelfQuery, parse_self_query, self_query_schema

__all__ = ["DEFAULT_SELF_QUERY_PROMPT", "SelfQueryRetriever"]

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

DEFAULT_SELF_QUERY_PROMPT = PromptTemplate(
    "Turn the question into a search query and a metadata filter.\n"
    "Documents: {description}\n"
    "Metadata fields:\n{fields}\n\n"
    "Reply with one JSON object and nothing else:\n"
    '{{"query": "<the topic to search for, without the filter conditions>", '
    '"filter": [{{"field": "<field>", "op": "<one of {operators}>", "value": <value>}}]}}\n'
    "Use only the fields above; use [low, high] for between and a list for in / not in; "
    'give "filter": [] when the question sets no condition.\n\n'
    "Question: {question}\n"
    "JSON:"
)
_OPERATORS = "==, !=, >, >=, <, <=, in, not in, between"
#: Metadata keys this retriever adds to every node.
META_FILTER = "self_query_filter"
META_QUERY = "self_query_query"
META_FALLBACK = "self_query_filter_dropped"


class SelfQueryRetriever(LLMQueryRetriever):
    """Search a Milvus retriever with the query and filter an LLM reads from the question.

    When the filtered search finds nothing (or the filter names values no chunk has) it searches
    again without the filter. Every node's metadata says what was used: ``self_query_query``,
    ``self_query_filter`` (the expression, ``""`` for none) and ``self_query_filter_dropped``
    (True when the filter was dropped because it matched nothing). These keys are hidden from the
    LLM and the embedding.

    Args:
        retriever: A :class:`~llama_index_rag_pack.MilvusHybridRetriever` (dense, sparse/BM25 or
            hybrid) or :class:`~llama_index_rag_pack.MilvusScoreFusionRetriever`.
        llm: The LLM that writes the query and filter.
        fields: The declared fields (:class:`FieldSpec` or dicts with ``name``, ``type``,
            ``description``, ``allowed``, ``minimum``, ``maximum``); ``None`` infers them from
            the collection's schema and a sample of the rows ``retriever`` searches (under its
            filter, a tenant's scope included; when no row passes it, no field is inferred and
            the LLM is not asked: the question is searched as it is).
        description: What the documents are, for the prompt.
        fallback_without_filter: Search again without the filter when it finds nothing.
        prompt: The prompt (``{description}``, ``{fields}``, ``{operators}``, ``{question}``).
        sample_size: Rows sampled when inferring the fields.
        callback_manager: LlamaIndex callback manager.

    Raises:
        ConfigurationError: a retriever that takes no Milvus filter, or bad field declarations.

    Example:
        >>> from llama_index_rag_pack import MilvusHybridRetriever, SelfQueryRetriever
        >>> dense = MilvusHybridRetriever(store, search_type="dense")  # doctest: +SKIP
        >>> retriever = SelfQueryRetriever(  # doctest: +SKIP
        ...     dense, llm=llm, fields=[{"name": "year", "type": "int"}]
        ... )
        >>> retriever.retrieve("novels after 2010 about memory")  # doctest: +SKIP
    """

    prompt_key = "self_query_prompt"

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        llm: LLM,
        fields: Iterable[FieldSpec | Mapping[str, Any]] | None = None,
        description: str = "text chunks with metadata",
        fallback_without_filter: bool = True,
        prompt: PromptTemplate | None = None,
        sample_size: int = 200,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_filterable(retriever)
        if llm is None:
            raise ConfigurationError("SelfQueryRetriever needs llm= (it writes the filter).")
        self.retriever = retriever
        inferred = fields is None
        if inferred:  # sampled under the retriever's own scope: a tenant sees only its own rows
            scope = retriever_filter(retriever)
            fields = infer_field_specs(
                *milvus_target(retriever), sample_size=sample_size, scope=scope
            )
        self.fields: tuple[FieldSpec, ...] = field_specs(fields)
        if not self.fields and not inferred:  # inferred: the scope holds no row, nothing to ask
            raise ConfigurationError("SelfQueryRetriever needs at least one field to filter on.")
        self.description = description
        self.fallback_without_filter = fallback_without_filter
        super().__init__(llm, prompt, DEFAULT_SELF_QUERY_PROMPT, callback_manager, verbose)

    # ------------------------------------------------------------------ prompts
    def _format(self, question: str) -> str:
        return self.prompt.format(
            description=self.description,
            fields="\n".join(f.describe() for f in self.fields),
            operators=_OPERATORS,
            question=question,
        )

    def _read(self, reply: str, question: str) -> SelfQuery:
        sq = parse_self_query(reply, self.fields, question)
        for reason in sq.dropped:
            logger.warning("self-query: condition dropped (%s)", reason)
        logger.info("self-query: query %r, filter %r", sq.query, sq.expression)
        return sq

    @dispatcher.span
    def parse(self, question: str) -> SelfQuery:
        """The query and filter the LLM reads from ``question`` (no search). An LLM that can
        constrain its decoding (the local llama.cpp model) is held to the reply's JSON schema."""
        if not self.fields:  # no row under the retriever's scope when it was made: no filter
            return self._read("", question)
        with json_output(self_query_schema(self.fields)):
            reply = self.llm.complete(self._format(question)).text
        return self._read(reply, question)

    @dispatcher.span
    async def aparse(self, question: str) -> SelfQuery:
        """Async :meth:`parse`."""
        if not self.fields:
            return self._read("", question)
        with json_output(self_query_schema(self.fields)):
            reply = (await self.llm.acomplete(self._format(question))).text
        return self._read(reply, question)

    # ------------------------------------------------------------------ retrieval
    @staticmethod
    def _mark(nodes: list[NodeWithScore], sq: SelfQuery, dropped: bool) -> list[NodeWithScore]:
        values = {META_QUERY: sq.query, META_FILTER: sq.expression, META_FALLBACK: dropped}
        return [annotate_node(n, values) for n in nodes]

    def _search_bundle(self, query_bundle: QueryBundle, sq: SelfQuery) -> QueryBundle:
        if sq.query == query_bundle.query_str:
            return query_bundle
        return QueryBundle(query_str=sq.query)

    def _search(self, query_bundle: QueryBundle, question: str) -> list[NodeWithScore]:
        sq = self.parse(question)
        bundle = self._search_bundle(query_bundle, sq)
        if sq.expression:
            nodes = with_filter(self.retriever, sq.expression).retrieve(bundle)
            if nodes or not self.fallback_without_filter:
                return self._mark(nodes, sq, False)
            logger.warning(
                "self-query: filter %r matched nothing; searching without it", sq.expression
            )
        return self._mark(self.retriever.retrieve(bundle), sq, bool(sq.expression))

    async def _asearch(self, query_bundle: QueryBundle, question: str) -> list[NodeWithScore]:
        sq = await self.aparse(question)
        bundle = self._search_bundle(query_bundle, sq)
        if sq.expression:
            nodes = await with_filter(self.retriever, sq.expression).aretrieve(bundle)
            if nodes or not self.fallback_without_filter:
                return self._mark(nodes, sq, False)
            logger.warning(
                "self-query: filter %r matched nothing; searching without it", sq.expression
            )
        return self._mark(await self.retriever.aretrieve(bundle), sq, bool(sq.expression))
