"""The bases every retriever and query engine of the pack derives from.

:class:`PackRetriever` is where a query enters the pack's retrieval: core's
``BaseRetriever.retrieve`` / ``aretrieve`` open the instrumentation span and the callback
events, then :meth:`PackRetriever._retrieve` checks the query once (one
:class:`~llama_index_rag_pack.core.errors.ConfigurationError` for ``""``, ``"   "`` or
``"\\n\\t"``, before any model or search runs) and hands the checked text to the subclass's
:meth:`~PackRetriever._search` / :meth:`~PackRetriever._asearch`. :class:`PackQueryEngine` does
the same for the query engines that do not answer through a pack retriever (the judge and
text-to-SQL engines): ``_answer`` / ``_aanswer`` get the checked text.

:class:`LLMQueryRetriever` adds what the retrievers that ask an LLM about the query (RAG-Fusion,
HyDE, query rewriting, self-query) share: the LLM resolved on first use, one prompt exposed
through LlamaIndex's prompt mixin (``get_prompts`` / ``update_prompts``), and the wrapped
retriever(s) as prompt sub-modules.

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
from typing import Any, ClassVar

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.components.settings import LazyLLMMixin
from llama_index_rag_pack.core.errors import ConfigurationError, check_query
from llama_index_rag_pack.core.text_decoding import without_lone_surrogates

__all__ = ["LLMQueryRetriever", "PackQueryEngine", "PackRetriever", "wrapped_retriever"]


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


class LLMQueryRetriever(LazyLLMMixin, PackRetriever):
    """A pack retriever that asks an LLM about the query before searching.

    Subclasses name their prompt (``prompt_key``, what ``get_prompts()`` lists), set
    ``self.retriever`` (or override :meth:`_get_prompt_modules`) and call
    ``super().__init__(llm, prompt, default_prompt, callback_manager, verbose)``.
    """

    #: The prompt's name in ``get_prompts()`` and the attribute that holds it.
    prompt_key: ClassVar[str] = "llm_prompt"

    def __init__(
        self,
        llm: Any | None,
        prompt: str | BasePromptTemplate | None,
        default_prompt: BasePromptTemplate,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self._llm = llm
        if isinstance(prompt, str):
            prompt = PromptTemplate(prompt)
        self.prompt = prompt or default_prompt
        super().__init__(callback_manager=callback_manager or CallbackManager([]), verbose=verbose)

    @property
    def prompt(self) -> BasePromptTemplate:
        """The prompt, also readable as the attribute named ``prompt_key``."""
        return getattr(self, self.prompt_key)

    @prompt.setter
    def prompt(self, value: BasePromptTemplate) -> None:
        setattr(self, self.prompt_key, value)

    def _get_prompts(self) -> PromptDictType:
        return {self.prompt_key: self.prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if self.prompt_key in prompts:
            self.prompt = prompts[self.prompt_key]

    def _get_prompt_modules(self) -> PromptMixinType:
        retriever = getattr(self, "retriever", None)
        return {"retriever": retriever} if retriever is not None else {}
