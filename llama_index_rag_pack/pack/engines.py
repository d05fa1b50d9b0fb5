"""What a :class:`~llama_index_rag_pack.RagPack` builds per retrieval mode and caches: the cache
keys of its retrievers and query engines, and the query engine over a mode's retriever.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import CallbackManager
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import QueryBundle

from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.usage import metered, report_usage
from llama_index_rag_pack.models.answer_style import check_answer_style
from llama_index_rag_pack.pack.pack_view import PackView

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.llms import LLM

__all__ = [
    "ENGINE_DEFAULTS",
    "MAX_CACHED_ENGINES",
    "BoundedCache",
    "build_chat_engine",
    "build_query_engine",
    "query_engine_key",
    "retriever_key",
]

#: Retrievers (and query engines) a pack keeps per distinct arguments: a server asked with ever
#: new filters or ``top_k`` keeps the most recently used ones, not every one it was asked for.
MAX_CACHED_ENGINES = 256

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """A thread-safe mapping that keeps the ``maxsize`` most recently used entries.

    Example:
        >>> cache = BoundedCache(maxsize=2)
        >>> [cache.get_or_build(k, lambda: k.upper()) for k in ("a", "b", "a", "c")]
        ['A', 'B', 'A', 'C']
        >>> sorted(cache)  # "b" was the least recently used
        ['a', 'c']
    """

    def __init__(self, maxsize: int = MAX_CACHED_ENGINES) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[Any, V] = OrderedDict()
        self._lock = threading.RLock()

    def get_or_build(self, key: Any, build: Callable[[], V]) -> V:
        """The entry of ``key``, built by ``build()`` (outside the lock) when missing."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = build()
        with self._lock:
            value = self._items.setdefault(key, value)  # another thread may have built it
            self._items.move_to_end(key)
            while len(self._items) > self.maxsize:
                self._items.popitem(last=False)
            return value

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._items

    def __delitem__(self, key: Any) -> None:
        with self._lock:
            del self._items[key]

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            return iter(list(self._items))

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def retriever_key(mode: str, arguments: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The cache key of ``pack.retriever(mode, **arguments)``, or ``None`` when an argument is an
    unhashable object (such a retriever is built anew every time).

    Lists, tuples, sets and dicts count by value.

    Example:
        >>> retriever_key("hybrid", {"weights": [1.0, 0.5], "modes": ("a", "b")})
        ('hybrid', (('modes', ('a', 'b')), ('weights', (1.0, 0.5))))
        >>> retriever_key("vector", {"filters": {"x": bytearray(b"1")}}) is None
        True
    """
    try:
        key = (mode, _by_value(dict(arguments)))
        hash(key)
    except TypeError:
        return None
    return key


def _by_value(value: Any) -> Any:
    """A hashable stand-in for ``value``: lists, tuples, sets and dicts by value."""
    if isinstance(value, dict):
        return tuple(sorted((k, _by_value(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_by_value(v) for v in value)
    if isinstance(value, (set, frozenset)):
        return frozenset(_by_value(v) for v in value)
    return value


#: ``make_query_engine``'s defaults for the engine options.
ENGINE_DEFAULTS: dict[str, Any] = {
    "streaming": False,
    "citations": True,
    "citation_style": "markdown",
    "citation_mode": "markers",
    "answer_style": "auto",
}


def query_engine_key(
    mode: str,
    *,
    streaming: bool,
    citations: bool,
    citation_style: Any,
    citation_mode: str,
    answer_style: str = "auto",
) -> tuple[Any, ...]:
    """The cache key of ``pack.make_query_engine(mode, ...)`` (a style object counts by
    identity)."""
    if not citations:
        return (mode, streaming)
    style_key = citation_style if isinstance(citation_style, str) else id(citation_style)
    return (mode, streaming, citations, style_key, citation_mode, answer_style)


def build_query_engine(
    retriever: BaseRetriever,
    *,
    llm: LLM,
    streaming: bool,
    citations: bool,
    citation_style: Any,
    citation_mode: str,
    callback_manager: CallbackManager,
    embed_model: Any = None,
    answer_style: str = "auto",
) -> BaseQueryEngine:
    """A query engine answering from ``retriever`` with ``llm``.

    With ``citations`` a :class:`~llama_index_rag_pack.CitedQueryEngine` (``citation_mode`` and
    ``citation_style`` are its ``mode`` and ``style``; ``embed_model`` attributes the sentences
    the LLM leaves uncited; ``answer_style`` its answer style), otherwise core's
    ``RetrieverQueryEngine`` (whose answers are the LLM's own: :class:`PlainQueryEngine`).

    Raises:
        ConfigurationError: ``answer_style="extractive"`` without citations (an extractive
            answer is cited by construction: ``citation_style="empty"`` hides the markers).
    """
    if not citations and check_answer_style(answer_style) == "extractive":
        raise ConfigurationError(
            "answer_style='extractive' needs citations=True (an extractive answer cites each "
            "line); use citation_style='empty' to hide the markers."
        )
    if citations:
        return CitedQueryEngine(
            retriever,
            llm=llm,
            mode=citation_mode,
            style=citation_style,
            streaming=streaming,
            embed_model=embed_model,
            answer_style=answer_style,
            callback_manager=callback_manager,
        )
    return PlainQueryEngine.from_args(
        retriever, llm=llm, streaming=streaming, callback_manager=callback_manager
    )


class PlainQueryEngine(RetrieverQueryEngine):
    """Core's ``RetrieverQueryEngine`` (the answers are the LLM's own, no citations) whose
    responses carry ``metadata["usage"]``, as every engine of the pack does."""

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with metered() as meter:
            response = super()._query(query_bundle)
        return report_usage(response, meter)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        with metered() as meter:
            response = await super()._aquery(query_bundle)
        return report_usage(response, meter)


def build_chat_engine(
    pack: PackView,
    mode: Any,
    *,
    filters: Any = None,
    tenant: str | None = None,
    citation_style: Any = "markdown",
    citation_mode: str = "markers",
    answer_style: str = "auto",
    **chat_options: Any,
) -> Any:
    """``pack.make_chat_engine(...)``: a :class:`~llama_index_rag_pack.CitedChatEngine` over
    ``mode``'s retriever (scoped by ``filters`` and ``tenant``), answering through the pack's
    cited query engine; ``chat_options`` go to the chat engine (``chat_history``, ``memory``,
    ``token_limit``, ``condense_prompt``, ``skip_condense``)."""
    from llama_index_rag_pack.chat.cited_chat_engine import CitedChatEngine

    retriever = pack.retriever(mode, filters=filters, tenant=tenant)
    engine = pack.engine_for(
        retriever,
        citations=True,
        citation_style=citation_style,
        citation_mode=citation_mode,
        answer_style=answer_style,
    )
    return CitedChatEngine.from_query_engine(engine, **chat_options)
