"""Route texts embedded once and scored against queries: the cache behind
:class:`~llama_index_rag_pack.routing.semantic_selector.SemanticSelector`.

Every route text (description, example utterances) is embedded the first time a route is seen
and kept as a unit vector, keyed by the text: a route whose texts change is re-embedded, nothing
else is. Scoring a query is one matrix-vector product (:mod:`~llama_index_rag_pack.core.similarity`)
and a per-route aggregation (:mod:`~llama_index_rag_pack.routing.route_scores`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.routing import route_scores
from llama_index_rag_pack.routing.routes import Route

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding

logger = logging.getLogger(__name__)

__all__ = ["RouteEmbeddings"]


class RouteEmbeddings:
    """Unit vectors of route texts, cached by text, and route scores for a query embedding.

    Args:
        embed_model: The LlamaIndex embedding model that embeds route texts and queries.
        use_descriptions: Embed descriptions beside utterances (descriptions are always used for
            routes without utterances).

    Example:
        >>> from llama_index.core.embeddings import MockEmbedding
        >>> cache = RouteEmbeddings(MockEmbedding(embed_dim=8))
        >>> routes = [Route("a", "first"), Route("b", "second", ("an example",))]
        >>> cache.ensure(routes)
        >>> cache.text_embedding_count
        3
        >>> cache.scores([1.0] * 8, routes, route_scores.Aggregation.MAX).shape
        (2,)
    """

    def __init__(self, embed_model: BaseEmbedding, *, use_descriptions: bool = True) -> None:
        self.embed_model = embed_model
        self.use_descriptions = use_descriptions
        self._vectors: dict[str, np.ndarray] = {}  # text -> unit vector
        self._matrix_key: tuple[Any, ...] | None = None
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        self.text_embedding_count = 0
        """How many route texts were embedded so far (the cache makes this stop growing)."""

    def _missing(self, routes: Sequence[Route]) -> list[str]:
        texts = {t for r in routes for t in r.texts(self.use_descriptions)}
        return sorted(t for t in texts if t not in self._vectors)

    def _store(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        if texts:
            unit = similarity.normalize_rows(np.asarray(vectors, dtype=np.float32))
            self._vectors.update(zip(texts, unit, strict=True))
            self.text_embedding_count += len(texts)
            logger.debug("Embedded %d route texts", len(texts))

    def ensure(self, routes: Sequence[Route]) -> None:
        """Embed the texts of ``routes`` that are not cached yet (one batch)."""
        missing = self._missing(routes)
        if missing:
            self._store(missing, self.embed_model.get_text_embedding_batch(missing))

    async def aensure(self, routes: Sequence[Route]) -> None:
        """Async :meth:`ensure`."""
        missing = self._missing(routes)
        if missing:
            self._store(missing, await self.embed_model.aget_text_embedding_batch(missing))

    def vectors(self, routes: Sequence[Route]) -> dict[str, np.ndarray]:
        """The cached unit vector of each text of ``routes`` (embedded ones only)."""
        texts = {t for r in routes for t in r.texts(self.use_descriptions)}
        return {t: self._vectors[t] for t in sorted(texts) if t in self._vectors}

    def restore(self, vectors: Mapping[str, Any]) -> None:
        """Take saved unit vectors by text (not counted as embedded here)."""
        self._vectors.update({t: np.asarray(v, dtype=np.float32) for t, v in vectors.items()})
        self._matrix_key = self._matrix = None

    def _route_matrix(self, routes: Sequence[Route]) -> tuple[np.ndarray, np.ndarray]:
        """The unit vectors of every route text and the route index of each row."""
        key = tuple((r.name, tuple(r.texts(self.use_descriptions))) for r in routes)
        if key != self._matrix_key or self._matrix is None:
            rows, ids = [], []
            for i, r in enumerate(routes):
                for t in r.texts(self.use_descriptions):
                    rows.append(self._vectors[t])
                    ids.append(i)
            self._matrix = (np.vstack(rows), np.asarray(ids))
            self._matrix_key = key
        return self._matrix

    def scores(
        self,
        query_embedding: Sequence[float],
        routes: Sequence[Route],
        aggregation: route_scores.Aggregation,
    ) -> np.ndarray:
        """One cosine score per route (``routes`` must be embedded: :meth:`ensure`)."""
        matrix, ids = self._route_matrix(routes)
        sims = similarity.cosine_similarities(np.asarray(query_embedding), matrix)
        return route_scores.aggregate_route_scores(sims, ids, len(routes), aggregation.value)

    def embed_queries(self, queries: Sequence[str]) -> list[list[float]]:
        """Query embeddings, in one batch when queries and texts embed alike."""
        if _symmetric(self.embed_model):
            return self.embed_model.get_text_embedding_batch(list(queries))
        return [self.embed_model.get_query_embedding(q) for q in queries]


def _symmetric(embed_model: Any) -> bool:
    """True when query and text embeddings are the same function (no query instruction)."""
    symmetric_classes = ("HuggingFaceEmbedding", "LocalEmbedding")
    return type(embed_model).__name__ in symmetric_classes and not getattr(
        embed_model, "query_instruction", None
    )
