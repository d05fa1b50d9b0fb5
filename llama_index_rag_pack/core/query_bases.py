"""The bases every retriever and query engine of the pack derives from.

:class:`PackRetriever` is where a query enters the pack's retrieval: core's
``BaseRetriever.retrieve`` / ``aretrieve`` open the instrumentation span and the callback
events, then :meth:`PackRetriever._retrieve` checks the query once (one
:class:`~llama_index_rag_pack.core.errors.ConfigurationError` for ``""``, ``"   "`` or
``"\\n\\t"``, before any model or search runs) and hands the checked text to the subclass's
:meth:`~PackRetriever._search` / :meth:`~PackRetriever._asearch`. :class:`PackQueryEngine` does
the same for the query engines that do not answer through a pack retriever (the judge and
text-to-SQL engines): ``_answer`` / ``_aanswer`` get the checked text.

The retrievers that ask an LLM about the query build on
:class:`~llama_index_rag_pack.fusion.llm_query.LLMQueryRetriever`.

Example:
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> class Echo(PackRetriever):
    ...     def _search(self, query_bundle, query):
    ...         return [NodeWithScore(node=TextNode(text=query), score=1.0)]
    >>> Echo().retrieve("What is Milvus?")[0].node.text
    'What is Milvus?'
    >>> Echo().retrieve(" \\n")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: The query is empty: ask a question with some text in it.
"""  # noqa: E501  (doctest output: the exception line can't be wrapped)

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError, check_query
from llama_index_rag_pack.core.text_decoding import without_lone_surrogates

__all__ = ["PackQueryEngine", "PackRetriever", "wrapped_retriever"]


def _checked(query_bundle: QueryBundle) -> tuple[QueryBundle, str]:
    """What a subclass's ``_search`` / ``_answer`` get: the bundle and its text, checked
    non-empty, surrogates (which UTF-8 cannot encode) replaced by U+FFFD. Every query of a pack
    retriever or engine is checked here, once."""
    text = check_query(query_bundle)
    clean = without_lone_surrogates(text)
    if clean != text:
        strs = query_bundle.custom_embedding_strs
        query_bundle = dataclasses.replace(
            query_bundle,
            query_str=clean,
            custom_embedding_strs=[without_lone_surrogates(s) for s in strs] if strs else strs,
        )
    return query_bundle, clean


class PackRetriever(BaseRetriever):
    """A LlamaIndex retriever whose query is checked once, here, before the subclass runs.

    Subclasses implement :meth:`_search` (and :meth:`_asearch` when they have a non-blocking
    path; the default runs :meth:`_search` in a worker thread so the event loop never blocks).
    """

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._search(*_checked(query_bundle))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await self._asearch(*_checked(query_bundle))

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        """The nodes for ``query`` (``query_bundle.query_str``, checked non-empty)."""
        raise NotImplementedError

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        """Async :meth:`_search`; by default the sync one in a worker thread."""
        return await asyncio.to_thread(self._search, query_bundle, query)


class PackQueryEngine(BaseQueryEngine):
    """A LlamaIndex query engine whose query is checked once, here, before the subclass runs.

    Subclasses implement :meth:`_answer` and :meth:`_aanswer`.
    """

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return self._answer(*_checked(query_bundle))

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        return await self._aanswer(*_checked(query_bundle))

    def _answer(self, query_bundle: QueryBundle, query: str) -> RESPONSE_TYPE:
        """The response to ``query`` (``query_bundle.query_str``, checked non-empty)."""
        raise NotImplementedError

    async def _aanswer(self, query_bundle: QueryBundle, query: str) -> RESPONSE_TYPE:
        """Async :meth:`_answer`."""
        raise NotImplementedError


def wrapped_retriever(retriever: Any, owner: str) -> BaseRetriever:
    """``retriever`` when it is a LlamaIndex ``BaseRetriever``, else ``ConfigurationError``
    naming ``owner`` (the class that wraps it)."""
    if not isinstance(retriever, BaseRetriever):
        raise ConfigurationError(
            f"{owner} wraps a LlamaIndex BaseRetriever, got {type(retriever).__name__!r}."
        )
    return retriever
