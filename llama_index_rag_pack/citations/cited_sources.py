"""Cited sources: :class:`Citation`, and which source a context chunk belongs to.

Chunks are read by duck typing, so this works without LlamaIndex: ``NodeWithScore.node``,
``.metadata``, ``.node_id``; dicts with a ``metadata`` key; strings (no metadata).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "Citation",
    "SOURCE_KEYS",
    "default_source_id",
    "evidence_spans",
    "is_extractive",
    "passage_text",
    "new_citation",
    "source_keys",
    "unwrap_node",
]

SOURCE_KEYS = ("url", "source", "file_path")
TITLE_KEYS = ("title", "file_name", "document_title")


@dataclass
class Citation:
    """One cited source.

    Attributes:
        number: The number shown to the reader (1 = first source cited).
        source_id: What identifies the source (url, file path, node id, or your callable's value).
        title: A human title (metadata ``title``/``file_name``, else derived from the link).
        url: A link to the source (metadata ``url``/``source``/``file_path``), if any.
        positions: 1-based context positions of the cited chunks, in first-use order.
        nodes: The cited chunks themselves (as given to the manager), same order as ``positions``.
        count: How many times the source was cited.
        origin: ``model`` (the LLM's markers), ``attributed`` (code matched answer sentences to
            the chunks, the model wrote no marker there) or ``both``.
    """

    number: int
    source_id: str
    title: str
    url: str | None = None
    positions: list[int] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list, repr=False)
    count: int = 0
    origin: str = "model"

    @property
    def pages(self) -> list[str]:
        """The page (or slide) labels of the cited chunks, in first-use order: metadata
        ``page_label``, which PDF pages and ``.pptx`` slides carry (empty for other files)."""
        labels = (str(_metadata(node).get("page_label") or "") for node in self.nodes)
        return list(dict.fromkeys(label for label in labels if label))

    def where(self) -> str:
        """``, p. 3`` or ``, pp. 2, 5`` after a title (empty without page labels)."""
        pages = self.pages
        if not pages:
            return ""
        return f", {'p.' if len(pages) == 1 else 'pp.'} {', '.join(pages)}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (without the node objects)."""
        return {
            "number": self.number,
            "source_id": self.source_id,
            "title": self.title,
            "pages": self.pages,
            "url": self.url,
            "positions": list(self.positions),
            "count": self.count,
            "origin": self.origin,
        }


# --------------------------------------------------------------------------- nodes, duck-typed
def unwrap_node(item: Any) -> Any:
    """``NodeWithScore`` → its node; anything else unchanged."""
    inner = getattr(item, "node", None)
    return inner if inner is not None and hasattr(inner, "metadata") else item


def _metadata(item: Any) -> dict[str, Any]:
    node = unwrap_node(item)
    if isinstance(node, dict):
        meta = node.get("metadata", node)
        return meta if isinstance(meta, dict) else {}
    meta = getattr(node, "metadata", None)
    return meta if isinstance(meta, dict) else {}


def _node_id(item: Any, position: int) -> str:
    node = unwrap_node(item)
    if isinstance(node, dict):
        value = node.get("id") or node.get("node_id")
    else:
        value = getattr(node, "node_id", None) or getattr(node, "id_", None)
    return str(value) if value else f"chunk-{position}"


def _link(meta: dict[str, Any]) -> str | None:
    for key in SOURCE_KEYS:
        value = meta.get(key)
        if value:
            return str(value)
    return None


def _title(meta: dict[str, Any], url: str | None, source_id: str) -> str:
    for key in TITLE_KEYS:
        value = meta.get(key)
        if value:
            return str(value)
    if url:
        return os.path.basename(url.rstrip("/")) or url
    return source_id


# --------------------------------------------------------------------------- sources
def default_source_id(node: Any, position: int = 0) -> str:
    """The source of a chunk: metadata ``url``, ``source`` or ``file_path``, else the node id.

    Args:
        node: A LlamaIndex node, ``NodeWithScore``, dict with ``metadata``, or anything else.
        position: 1-based position in the context (names nodes without an id).

    Example:
        >>> default_source_id({"metadata": {"file_path": "a.pdf"}}, 1)
        'a.pdf'
        >>> default_source_id("plain text", 2)
        'chunk-2'
    """
    return _link(_metadata(node)) or _node_id(node, position)


def source_keys(
    nodes: Sequence[Any], source_id: str | Callable[[Any], Any] | None = None
) -> list[str]:
    """The source of every chunk, in context order (chunks with one source share a number).

    Args:
        nodes: The context chunks in prompt order.
        source_id: A metadata key, or a callable ``node -> str`` (it receives the node, unwrapped
            from ``NodeWithScore``). Default: :func:`default_source_id`.

    Raises:
        ConfigurationError: ``source_id`` is neither a string nor a callable.

    Example:
        >>> source_keys([{"metadata": {"doc": "a"}}, {"metadata": {}}], "doc")
        ['a', 'chunk-2']
    """
    if source_id is not None and not (callable(source_id) or isinstance(source_id, str)):
        raise ConfigurationError(
            f"source_id must be a metadata key (str) or a callable node -> str, got {source_id!r}"
        )
    keys: list[str] = []
    for position, node in enumerate(nodes, 1):
        if source_id is None:
            key = default_source_id(node, position)
        elif isinstance(source_id, str):
            value = _metadata(node).get(source_id)
            key = str(value) if value else _node_id(node, position)
        else:
            key = str(source_id(unwrap_node(node)))
        keys.append(key)
    return keys


def new_citation(number: int, source_id: str, node: Any) -> Citation:
    """A citation numbered ``number`` for the source of ``node``, titled and linked from its
    metadata (no chunk recorded yet).

    Example:
        >>> new_citation(1, "https://x.org/a/", {"metadata": {"url": "https://x.org/a/"}}).title
        'a'
    """
    meta = _metadata(node)
    url = _link(meta)
    return Citation(number=number, source_id=source_id, title=_title(meta, url, source_id), url=url)


# --------------------------------------------------------------------------- evidence, duck-typed
def is_extractive(response: Any) -> bool:
    """Whether ``response`` is an extractive answer (its sentences are the passages' own)."""
    return (getattr(response, "metadata", None) or {}).get("answer_style") == "extractive"


def passage_text(response: Any, position: int) -> str:
    """The text of the passage at 1-based context ``position`` of a cited response, whitespace
    collapsed (the text that :func:`evidence_spans` indexes)."""
    attribution = getattr(response, "attribution", None)
    if attribution is not None and position <= len(attribution.passages):
        return str(attribution.passages[position - 1].text)
    node = response.context_nodes[position - 1]
    return " ".join(unwrap_node(node).get_content().split())


def evidence_spans(response: Any, position: int) -> list[tuple[str, tuple[int, int] | None]]:
    """Per answer sentence that leans on the passage at ``position``: the sentence, and where
    the passage's supporting sentence stands in :func:`passage_text` (``None`` when no span was
    found). An extractive answer's sentences are quotes of the passage itself."""
    if is_extractive(response):
        text = passage_text(response, position)
        found: list[tuple[str, tuple[int, int] | None]] = []
        for quote in (response.metadata or {}).get("extracted_quotes", []):
            if quote.get("position") == position:
                sentence = " ".join(str(quote.get("text", "")).split())
                start = text.find(sentence)
                found.append((sentence, (start, start + len(sentence)) if start >= 0 else None))
        return found
    attribution = getattr(response, "attribution", None)
    found = []
    for verdict in attribution.verdicts if attribution is not None else []:
        if position in verdict.positions:
            span = next(
                ((e.start, e.end) for e in verdict.evidence if e.position == position), None
            )
            found.append((verdict.text, span))
    return found
