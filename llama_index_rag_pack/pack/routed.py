"""``RoutedRagPack``: one pack over several named sources (Milvus collections), routing between
them.

Each :class:`RouteSource` is a collection with a name, a description and optionally example
questions. ``RagPack.retriever("route")`` (``RetrievalMode.ROUTE``) is a
:class:`~llama_index_rag_pack.components.router.FusionRouterRetriever` over the sources' own
retrievers, choosing with a :class:`SemanticSelector` (default, no LLM call) or a
:class:`LogicalSelector` (the pack's LLM decides).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_selector import BaseSelector
from llama_index.core.schema import Document

from llama_index_rag_pack.components.selectors import (
    DEFAULT_SEMANTIC_THRESHOLD,
    LogicalSelector,
    Route,
    SemanticSelector,
)
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.pack.modes import RetrievalMode
from llama_index_rag_pack.pack.rag_pack import RagPack

if TYPE_CHECKING:  # pragma: no cover
    pass

logger = logging.getLogger(__name__)

__all__ = [
    "RoutedRagPack",
    "RouteSource",
    "discover_sources",
    "load_sources",
]

SELECTOR_CHOICES = ("semantic", "logical")


@dataclass
class RouteSource:
    """A named data source of a :class:`RoutedRagPack`: one Milvus collection.

    Args:
        name: Route name (unique).
        description: What the source holds (selectors route on it).
        utterances: Example questions that belong here (semantic routing).
        collection_name: Milvus collection (default: ``name``).
        documents: Documents to index into it now (``None``: reopen the existing collection).
        input_dir: A file or directory to read and index instead of ``documents``.
        threshold: This route's semantic threshold (default: the pack's).
        mode: Retrieval mode used inside the source (``"vector"`` or any other mode).

    Example:
        >>> RouteSource("python_docs", "The Python language reference", collection_name="py")
        RouteSource(name='python_docs', description='The Python language reference', utterances=(), collection_name='py', documents=None, input_dir=None, threshold=None, mode='vector')
    """  # noqa: E501  (doctest output: the dataclass repr is one line)

    name: str
    description: str = ""
    utterances: Sequence[str] = field(default_factory=tuple)
    collection_name: str | None = None
    documents: Sequence[Document] | None = None
    input_dir: str | Path | None = None
    threshold: float | None = None
    mode: str = "vector"

    def __post_init__(self) -> None:
        self.utterances = tuple(self.utterances)
        self.route()  # validates name, description/utterances and threshold
        if self.mode == RetrievalMode.ROUTE.value:
            raise ConfigurationError(
                f"RouteSource {self.name!r}: mode 'route' would route recursively; use 'vector'."
            )
        RetrievalMode.parse(self.mode)

    @property
    def collection(self) -> str:
        return self.collection_name or self.name

    def route(self) -> Route:
        return Route(self.name, self.description, tuple(self.utterances), self.threshold)


def _coerce_source(value: RouteSource | Mapping[str, Any]) -> RouteSource:
    if isinstance(value, RouteSource):
        return value
    if isinstance(value, Mapping):
        data = dict(value)
        if "collection" in data:
            data["collection_name"] = data.pop("collection")
        allowed = {
            "name",
            "description",
            "utterances",
            "collection_name",
            "documents",
            "input_dir",
            "threshold",
            "mode",
        }
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ConfigurationError(
                f"Unknown source field(s) {unknown}; use {sorted(allowed | {'collection'})}."
            )
        return RouteSource(**data)
    raise ConfigurationError(
        f"A source must be a RouteSource or a dict, got {type(value).__name__}."
    )


class RoutedRagPack(RagPack):
    """A :class:`RagPack` over several named sources that routes every question.

    The first source is also the pack's own collection (other modes such as ``"vector"`` use it);
    ``mode="route"`` — the default of :meth:`run`, :meth:`arun` and :attr:`query_engine` here —
    picks source(s) per question, fusing several with reciprocal rank fusion.

    Args:
        sources: :class:`RouteSource` objects or dicts (``name``, ``description``, ``utterances``,
            ``collection``, ``documents``, ``input_dir``, ``threshold``, ``mode``).
        selector: ``"semantic"`` (default, no LLM call), ``"logical"`` (the pack's LLM), or any
            LlamaIndex ``BaseSelector``.
        fallback: RouteSource used when no route fits (default: none, the answer then has no
            context).
        top_k_routes: Most sources searched per question.
        threshold: Default semantic threshold.
        **kwargs: Passed to :class:`RagPack` (``uri``, ``embed_model``, ``llm``,
            ``similarity_top_k``, ...).

    Example:
        >>> pack = RoutedRagPack(  # doctest: +SKIP
        ...     [RouteSource("physics", "Physics articles", documents=physics_docs),
        ...      RouteSource("history", "History articles", documents=history_docs)],
        ...     uri="./routed.db",
        ... )
        >>> response = pack.run("Who crossed the Rubicon?")  # doctest: +SKIP
        >>> response.source_nodes[0].metadata["route"]  # doctest: +SKIP
        'history'
    """

    def __init__(
        self,
        sources: Sequence[RouteSource | Mapping[str, Any]],
        *,
        selector: str | BaseSelector = "semantic",
        fallback: str | None = None,
        top_k_routes: int = 1,
        threshold: float = DEFAULT_SEMANTIC_THRESHOLD,
        **kwargs: Any,
    ) -> None:
        srcs = [_coerce_source(s) for s in sources or ()]
        if not srcs:
            raise ConfigurationError(
                "RoutedRagPack needs at least one source: sources=[RouteSource(name, description)]."
            )
        names = [s.name for s in srcs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigurationError(
                f"Duplicate source names {dupes}: every source needs its own name."
            )
        collections = [s.collection for s in srcs]
        if len(set(collections)) != len(collections):
            raise ConfigurationError(
                f"Two sources share a collection: {collections}. Give each its own."
            )
        for bad in ("vector_store", "collection_name", "documents", "input_dir"):
            if bad in kwargs:
                raise ConfigurationError(
                    f"RoutedRagPack takes {bad!r} per source (RouteSource(...)), not for the pack."
                )
        if fallback is not None and fallback not in names:
            raise ConfigurationError(
                f"Fallback source {fallback!r} is not among the sources {names}."
            )
        if isinstance(selector, str) and selector not in SELECTOR_CHOICES:
            raise ConfigurationError(
                f"Unknown selector {selector!r}; valid: {', '.join(SELECTOR_CHOICES)} "
                "or a BaseSelector."
            )
        if not isinstance(selector, (str, BaseSelector)):
            raise ConfigurationError(
                f"selector must be a name or a BaseSelector, got {type(selector).__name__}."
            )
        if not isinstance(top_k_routes, int) or top_k_routes < 1:
            raise ConfigurationError(f"top_k_routes must be an integer >= 1, got {top_k_routes!r}.")
        self.sources: dict[str, RouteSource] = {s.name: s for s in srcs}
        self.fallback = fallback
        self.top_k_routes = top_k_routes
        self.route_threshold = threshold
        self._selector_spec = selector
        self._selector: BaseSelector | None = (
            selector if isinstance(selector, BaseSelector) else None
        )
        first = srcs[0]
        super().__init__(
            documents=first.documents,
            input_dir=first.input_dir,
            collection_name=first.collection,
            **kwargs,
        )
        self.source_packs: dict[str, RagPack] = {first.name: self}
        shared = {k: v for k, v in kwargs.items() if k not in ("embed_model", "uri")}
        for src in srcs[1:]:
            self.source_packs[src.name] = RagPack(
                documents=src.documents,
                input_dir=src.input_dir,
                collection_name=src.collection,
                uri=self.uri,
                embed_model=self.embed_model,
                **shared,
            )

    @classmethod
    def open_sources(
        cls, sources: Sequence[RouteSource | Mapping[str, Any]], **kwargs: Any
    ) -> RoutedRagPack:
        """Reopen existing collections (documents are never indexed)."""
        cleaned = []
        for s in sources:
            src = _coerce_source(s)
            if src.documents is not None or src.input_dir is not None:
                raise ConfigurationError(
                    f"open_sources reopens collections; source {src.name!r} has documents."
                )
            cleaned.append(src)
        return cls(cleaned, **kwargs)

    @property
    def routes(self) -> list[Route]:
        """The sources as routes."""
        return [s.route() for s in self.sources.values()]

    @property
    def selector(self) -> BaseSelector:
        """The selector, built on first use (a logical one resolves the LLM then)."""
        if self._selector is None:
            if self._selector_spec == "logical":
                self._selector = LogicalSelector(
                    self.llm, fallback=self.fallback, max_outputs=self.top_k_routes
                )
            else:
                self._selector = SemanticSelector(
                    self.routes,
                    embed_model=self.embed_model,
                    threshold=self.route_threshold,
                    top_k=self.top_k_routes,
                    fallback=self.fallback,
                )
        return self._selector

    def insert_into(self, source: str, documents: Sequence[Document]) -> int:
        """Index ``documents`` into the named source's collection."""
        if source not in self.source_packs:
            raise ConfigurationError(
                f"Unknown source {source!r}; sources: {list(self.source_packs)}."
            )
        n = self.source_packs[source].insert(documents)
        self._retrievers.clear()
        self._query_engines.clear()
        return n

    def count_by_source(self) -> dict[str, int]:
        """Chunks stored per source."""
        return {name: pack.count() for name, pack in self.source_packs.items()}

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["vector_store"] = (
            f"{len(self.sources)} Milvus collections "
            + ", ".join(f"{n}={s.collection!r}" for n, s in self.sources.items())
            + (f" at {self.uri}" if self.uri else "")
        )
        info["router"] = (
            type(self.selector).__name__ if self._selector is not None else str(self._selector_spec)
        )
        return info

    def get_modules(self) -> dict[str, Any]:
        modules = super().get_modules()
        modules["selector"] = self.selector
        modules["router_retriever"] = self.retriever(RetrievalMode.ROUTE)
        modules["source_packs"] = dict(self.source_packs)
        modules["query_engine"] = self.make_query_engine(RetrievalMode.ROUTE)
        return modules

    @property
    def query_engine(self) -> Any:
        return self.make_query_engine(RetrievalMode.ROUTE)

    def run(
        self, query: str, *, mode: str | RetrievalMode = RetrievalMode.ROUTE, **kwargs: Any
    ) -> Any:
        return super().run(query, mode=mode, **kwargs)

    async def arun(
        self, query: str, *, mode: str | RetrievalMode = RetrievalMode.ROUTE, **kwargs: Any
    ) -> Any:
        return await super().arun(query, mode=mode, **kwargs)


RagPack.multi_source_class = RoutedRagPack


# ------------------------------------------------------------------ sources from files / databases
def load_sources(path: str | Path) -> tuple[list[RouteSource], dict[str, Any]]:
    """Read sources from a JSON file: a list of sources, or
    ``{"sources": [...], "fallback": ..., "threshold": ...}``.

    Returns:
        The sources and the pack options found beside them (``fallback``, ``threshold``,
        ``top_k_routes``, ``selector``).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigurationError(
            f"Routes file {str(p)!r} not found: give a JSON file with the sources."
        )
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigurationError(f"Routes file {str(p)!r} is not valid JSON ({e}).") from e
    options: dict[str, Any] = {}
    if isinstance(data, dict):
        raw = data.get("sources", data.get("routes"))
        options = {
            k: data[k] for k in ("fallback", "threshold", "top_k_routes", "selector") if k in data
        }
    else:
        raw = data
    if not isinstance(raw, list) or not raw:
        raise ConfigurationError(
            f"Routes file {str(p)!r} has no sources: "
            "expected a list of {name, description, collection}."
        )
    return [_coerce_source(s) for s in raw], options


def discover_sources(
    uri: str, *, token: str | None = None, sample: int = 40, max_utterances: int = 8
) -> list[RouteSource]:
    """Every collection of a Milvus database as a source, described from a sample of its chunks.

    The description lists the titles/file names seen in the sample; the first sentences of a few
    chunks from different documents become utterances.
    """
    from llama_index_rag_pack.storage.milvus import ensure_loaded, open_client

    client = open_client(uri, token=token)
    names = sorted(client.list_collections())
    if not names:
        raise ConfigurationError(
            f"No collections in {uri}: index some documents first "
            "(rag-pack index ... --collection NAME)."
        )
    sources = []
    for name in names:
        ensure_loaded(client, name)
        rows = client.query(name, filter="", limit=sample, output_fields=["*"])
        titles: list[str] = []
        utterances: list[str] = []
        for row in rows:
            title = str(row.get("title") or row.get("file_name") or "").strip()
            if title and title not in titles:
                titles.append(title)
                text = " ".join(str(row.get("text", "")).split())[:200]
                if text and len(utterances) < max_utterances:
                    utterances.append(text)
        if not titles:
            utterances = [
                " ".join(str(r.get("text", "")).split())[:200]
                for r in rows[:max_utterances]
                if r.get("text")
            ]
        description = (
            f"Documents about: {', '.join(titles[:20])}" if titles else f"Collection {name}"
        )
        sources.append(
            RouteSource(
                name=name,
                description=description,
                utterances=tuple(utterances),
                collection_name=name,
            )
        )
    return sources
