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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, ClassVar

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.errors import ConfigurationError, check_query
from llama_index_rag_pack.core.text_decoding import without_lone_surrogates
from llama_index_rag_pack.core.usage import metered, report_usage

__all__ = [
    "PackQueryEngine",
    "PackRetriever",
    "PromptAttributes",
    "checked_question",
    "wrapped_retriever",
]


#: True while a question that was checked runs: the retrievers and engines it calls inside (a
#: fusion's variants, HyDE's passages, the cited engine's retriever) do not check it again.
_QUESTION_CHECKED: ContextVar[bool] = ContextVar("rag_pack_question_checked", default=False)


@contextmanager
def checked_question(query: object) -> Iterator[str]:
    """The text of ``query`` (a ``str`` or a ``QueryBundle``), checked non-empty once per
    question: by the first pack retriever, engine or pack method it enters
    (:func:`~llama_index_rag_pack.core.errors.check_query`: one ``ConfigurationError`` before
    any model or search runs); inside that ``with`` block, the retrievers and engines the
    question reaches take their queries as they come.

    Example:
        >>> with checked_question("What is Milvus?") as outer:
        ...     with checked_question("a variant the LLM wrote") as inner:
        ...         (outer, inner)
        ('What is Milvus?', 'a variant the LLM wrote')
    """
    text = getattr(query, "query_str", query)
    if _QUESTION_CHECKED.get() and isinstance(text, str):
        yield text
        return
    text = check_query(query)
    token = _QUESTION_CHECKED.set(True)
    try:
        yield text
    finally:
        _QUESTION_CHECKED.reset(token)


def _cleaned(query_bundle: QueryBundle, text: str) -> tuple[QueryBundle, str]:
    """What a subclass's ``_search`` / ``_answer`` get: the bundle and its text, surrogates
    (which UTF-8 cannot encode) replaced by U+FFFD."""
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
        with checked_question(query_bundle) as text:
            return self._search(*_cleaned(query_bundle, text))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with checked_question(query_bundle) as text:
            return await self._asearch(*_cleaned(query_bundle, text))

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        """The nodes for ``query`` (``query_bundle.query_str``, checked non-empty)."""
        raise NotImplementedError

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        """Async :meth:`_search`; by default the sync one in a worker thread."""
        return await asyncio.to_thread(self._search, query_bundle, query)


class PackQueryEngine(BaseQueryEngine):
    """A LlamaIndex query engine whose query is checked once, here, before the subclass runs.

    Subclasses implement :meth:`_answer` and :meth:`_aanswer`. The response's
    ``metadata["usage"]`` is what the LLM calls made for it spent
    (:func:`~llama_index_rag_pack.core.usage.report_usage`).
    """

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with checked_question(query_bundle) as text, metered() as meter:
            response = self._answer(*_cleaned(query_bundle, text))
        return report_usage(response, meter)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with checked_question(query_bundle) as text, metered() as meter:
            response = await self._aanswer(*_cleaned(query_bundle, text))
        return report_usage(response, meter)

    def _answer(self, query_bundle: QueryBundle, query: str) -> RESPONSE_TYPE:
        """The response to ``query`` (``query_bundle.query_str``, checked non-empty)."""
        raise NotImplementedError

    async def _aanswer(self, query_bundle: QueryBundle, query: str) -> RESPONSE_TYPE:
        """Async :meth:`_answer`."""
        raise NotImplementedError


class PromptAttributes:
    """LlamaIndex's prompt mixin (``get_prompts`` / ``update_prompts``) over attributes, written
    once for the pack's engines: ``prompt_attributes`` maps each prompt's name to the attribute
    that holds it. Put it before the LlamaIndex base class.

    Example:
        >>> from llama_index.core.prompts import PromptTemplate
        >>> from llama_index.core.prompts.mixin import PromptMixin
        >>> class Engine(PromptAttributes, PromptMixin):
        ...     prompt_attributes = {"answer_template": "_answer"}
        ...     def __init__(self):
        ...         self._answer = PromptTemplate("Answer {q}")
        >>> engine = Engine()
        >>> engine.update_prompts({"answer_template": PromptTemplate("Reply to {q}")})
        >>> engine.get_prompts()["answer_template"].template
        'Reply to {q}'
    """

    prompt_attributes: ClassVar[Mapping[str, str]] = {}

    def _get_prompts(self) -> PromptDictType:
        return {key: getattr(self, attr) for key, attr in self.prompt_attributes.items()}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        for key, attr in self.prompt_attributes.items():
            if key in prompts:
                setattr(self, attr, prompts[key])

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}


def wrapped_retriever(retriever: Any, owner: str) -> BaseRetriever:
    """``retriever`` when it is a LlamaIndex ``BaseRetriever``, else ``ConfigurationError``
    naming ``owner`` (the class that wraps it)."""
    if not isinstance(retriever, BaseRetriever):
        raise ConfigurationError(
            f"{owner} wraps a LlamaIndex BaseRetriever, got {type(retriever).__name__!r}."
        )
    return retriever
