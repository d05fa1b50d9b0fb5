"""The sources of a :class:`~llama_index_rag_pack.RoutedRagPack`: :class:`RouteSource` (one
named Milvus collection), and sources read from a JSON file or discovered in a Milvus database.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.schema import Document

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import in_file, read_json_file
from llama_index_rag_pack.pack.modes import RetrievalMode
from llama_index_rag_pack.routing.routes import Route

__all__ = [
    "RouteSource",
    "checked_sources",
    "coerce_source",
    "discover_sources",
    "load_sources",
]


@dataclass
class RouteSource:
    """A named data source of a :class:`~llama_index_rag_pack.RoutedRagPack`: one Milvus
    collection.

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
        """The Milvus collection (``collection_name``, else ``name``)."""
        return self.collection_name or self.name

    def route(self) -> Route:
        """This source as a :class:`~llama_index_rag_pack.Route`."""
        return Route(self.name, self.description, tuple(self.utterances), self.threshold)


def coerce_source(value: RouteSource | Mapping[str, Any]) -> RouteSource:
    """A :class:`RouteSource` from itself or from a dict (``collection`` is accepted for
    ``collection_name``).

    Raises:
        ConfigurationError: unknown dict keys or an unsupported type.
    """
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
        for key, types in _FIELD_TYPES.items():
            if key in data:
                _check_type(f"source field {key!r}", data[key], types)
        if not all(isinstance(u, str) for u in data.get("utterances") or ()):
            raise ConfigurationError("source field 'utterances' must be a list of strings.")
        return RouteSource(**data)
    raise ConfigurationError(
        f"A source must be a RouteSource or a dict, got {type(value).__name__}."
    )


def checked_sources(sources: Sequence[RouteSource | Mapping[str, Any]] | None) -> list[RouteSource]:
    """``sources`` as :class:`RouteSource` objects, checked to be usable together.

    Raises:
        ConfigurationError: no sources, two sources with one name, or two sharing a collection.
    """
    srcs = [coerce_source(s) for s in sources or ()]
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
    return srcs


# ------------------------------------------------------------------ sources from files / databases
_NONE, _NUMBER = type(None), (int, float)
# The types a source's fields (and the pack options beside them in a routes file) may have.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "description": (str, _NONE),
    "utterances": (list, tuple),
    "collection_name": (str, _NONE),
    "input_dir": (str, Path, _NONE),
    "threshold": (*_NUMBER, _NONE),
    "mode": (str,),
}
_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "fallback": (str, _NONE),
    "threshold": (*_NUMBER, _NONE),
    "top_k_routes": (int,),
    "selector": (str, _NONE),
}


def _check_type(name: str, value: Any, types: tuple[type, ...]) -> None:
    """``ConfigurationError`` unless ``value`` is one of ``types`` (a bool is no number) and, for
    a number, finite."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (
        not isinstance(value, types)
        or (isinstance(value, bool) and bool not in types)
        or (number and not math.isfinite(value))
    ):
        kinds = " or ".join(sorted({"null" if t is _NONE else t.__name__ for t in types}))
        raise ConfigurationError(f"{name} must be {kinds}, got {value!r:.60}.")


def load_sources(path: str | Path) -> tuple[list[RouteSource], dict[str, Any]]:
    """Read sources from a JSON file: a list of sources, or
    ``{"sources": [...], "fallback": ..., "threshold": ...}``.

    Returns:
        The sources and the pack options found beside them (``fallback``, ``threshold``,
        ``top_k_routes``, ``selector``).

    Raises:
        ConfigurationError: the file is missing, not a regular file, not UTF-8 JSON, nested too
            deeply, or holds no sources or a field of the wrong type (one line naming the file).
    """
    p = Path(path)
    data = read_json_file(
        p,
        what="the routes file",
        missing=f"Routes file {str(p)!r} not found: give a JSON file with the sources.",
    )
    options: dict[str, Any] = {}
    if isinstance(data, dict):
        raw = data.get("sources", data.get("routes"))
        options = {k: data[k] for k in _OPTION_TYPES if k in data}
    else:
        raw = data
    if not isinstance(raw, list) or not raw:
        raise ConfigurationError(
            f"Routes file {str(p)!r} has no sources: "
            "expected a list of {name, description, collection}."
        )
    with in_file(p):
        for key, value in options.items():
            _check_type(key, value, _OPTION_TYPES[key])
        return [coerce_source(s) for s in raw], options


def discover_sources(
    uri: str, *, token: str | None = None, sample: int = 40, max_utterances: int = 8
) -> list[RouteSource]:
    """Every collection of a Milvus database as a source, described from a sample of its chunks.

    The description lists the titles/file names seen in the sample; the first sentences of a few
    chunks from different documents become utterances. A collection's sentence index
    (``<name>__sentences``) belongs to it and is no source of its own.
    """
    from llama_index_rag_pack.milvus.connection import ensure_loaded, open_client
    from llama_index_rag_pack.milvus.sentence_index import SENTENCE_COLLECTION_SUFFIX

    client = open_client(uri, token=token)
    names = sorted(
        n for n in client.list_collections() if not n.endswith(SENTENCE_COLLECTION_SUFFIX)
    )
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
