"""An in-memory BM25 index of a Milvus Lite collection's analysed chunk texts.

Milvus Lite scores BM25 in Python, in the process that opened the file: it walks each query
term's posting list row by row (about 12 ms a search over 3,600 chunks on a 2-core machine,
holding the GIL). A Lite file belongs to one process, so, as it does for the vectors
(:mod:`~llama_index_rag_pack.milvus.vector_memory`), that process may hold a copy: each chunk's
BM25 weight for each of its terms in one sparse matrix, which scores a query with one sparse
product (under 1 ms).

The copy reads the analysed field (``bm25_text``, see
:mod:`~llama_index_rag_pack.milvus.bm25.bm25_fields`) and scores it with Lite's formula and
parameters (``k1`` 1.5, ``b`` 0.75), a query term counted as often as it occurs::

    score(D, Q) = Σ_t count(t, Q) · IDF(t) · tf(t, D) · (k1 + 1)
                  / (tf(t, D) + k1 · (1 - b + b · |D| / avgdl))
    IDF(t) = ln((N - df(t) + 0.5) / (df(t) + 0.5) + 1)

so it ranks as Lite does. Before a copy is used, a probe query (a few terms of the first, middle
and last chunks) is scored by both, and a copy whose scores differ is dropped for Milvus' own
search: Lite computes the statistics (``N``, ``df``, ``avgdl``) per stored segment where the
copy uses the collection's (the same for a collection in one segment, as after ``rag-pack
index``; documents added later in separate writes may land in another segment). One difference
stays, rare: terms are kept apart by their text, where Lite hashes them to 32 bits (two terms
with the same hash count as one there).

Only collections analysed on the client have a copy (their analysed field is terms joined by
spaces, which Lite's tokenizer splits back exactly); a ``standard`` collection, indexed before
the ``english`` analysis, is searched in Milvus. The copy is dropped with the vector copies
(:func:`~llama_index_rag_pack.milvus.vector_memory.forget_vectors`) on every write through the
package.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import sparse

from llama_index_rag_pack.milvus.lite import lite_columns
from llama_index_rag_pack.milvus.vector_memory import (
    key_mask,
    memory_copy,
    read_rows,
    text_page_rows,
)

logger = logging.getLogger(__name__)

__all__ = ["LITE_BM25_B", "LITE_BM25_K1", "MemoryBM25", "bm25_slot", "memory_bm25"]

#: Milvus Lite's BM25 parameters (it does not read ``bm25_k1``/``bm25_b`` from an index).
LITE_BM25_K1 = 1.5
LITE_BM25_B = 0.75
#: Hits compared between the copy and Milvus before the copy is used.
PROBE_LIMIT = 10


class MemoryBM25:
    """BM25 over fixed documents, scored with one sparse product per query.

    Args:
        keys: The id of each document.
        texts: Each document's terms, separated by white space.
        k1: Term-frequency saturation (> 0).
        b: Length normalisation in [0, 1].

    Example:
        >>> index = MemoryBM25(["a", "b"], ["run fast run", "walk slow"])
        >>> [key for key, _ in index.search("run", 5)]
        ['a']
    """

    def __init__(
        self,
        keys: Sequence[str],
        texts: Sequence[str],
        k1: float = LITE_BM25_K1,
        b: float = LITE_BM25_B,
    ) -> None:
        self.keys = list(keys)
        self.vocabulary: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        counts: list[float] = []
        lengths = np.zeros(len(self.keys), dtype=np.float64)
        for row, text in enumerate(texts):
            terms = Counter(text.split())
            lengths[row] = sum(terms.values())
            for term, count in terms.items():
                rows.append(row)
                cols.append(self.vocabulary.setdefault(term, len(self.vocabulary)))
                counts.append(count)
        n_docs = len(self.keys)
        tf = np.asarray(counts, dtype=np.float64)
        row_ids = np.asarray(rows, dtype=np.int64)
        col_ids = np.asarray(cols, dtype=np.int64)
        df = np.bincount(col_ids, minlength=len(self.vocabulary)).astype(np.float64)
        idf = np.log((n_docs - df + 0.5) / (df + 0.5) + 1.0)
        avgdl = float(lengths.sum()) / n_docs if n_docs else 0.0
        norm = k1 * (1.0 - b + b * lengths[row_ids] / (avgdl if avgdl > 0 else 1.0))
        weights = idf[col_ids] * tf * (k1 + 1.0) / (tf + norm)
        self.matrix = sparse.csc_matrix(
            (weights, (row_ids, col_ids)), shape=(n_docs, len(self.vocabulary))
        )

    def search(
        self, query: str, limit: int, only: frozenset[str] | None = None
    ) -> list[tuple[str, float]]:
        """The ``limit`` best documents for the terms of ``query`` (white-space separated), as
        ``(key, score)`` with scores > 0, best first, equal scores by key; with ``only``, among
        the documents whose key is in it."""
        counts = Counter(t for t in query.split() if t in self.vocabulary)
        if not counts or limit <= 0:
            return []
        cols = [self.vocabulary[t] for t in counts]
        scores = self.matrix[:, cols] @ np.asarray(list(counts.values()), dtype=np.float64)
        if only is not None:
            scores = np.where(key_mask(self.keys, only), scores, 0.0)
        found = np.flatnonzero(scores > 0)
        if len(found) > limit:
            # every document scoring as the limit-th best stays, so ties are cut by key
            cut = -np.partition(-scores[found], limit - 1)[limit - 1]
            found = found[scores[found] >= cut]
        best = [(self.keys[i], float(scores[i])) for i in found.tolist()]
        return sorted(best, key=lambda hit: (-hit[1], hit[0]))[:limit]

    def probe_query(self) -> str:
        """A few terms of the first, middle and last documents (to check the copy against
        Milvus' own scores)."""
        if not self.keys:
            return ""
        terms: list[str] = []
        by_column = self.matrix.tocsr()
        names = list(self.vocabulary)
        for row in sorted({0, len(self.keys) // 2, len(self.keys) - 1}):
            cols = by_column.indices[by_column.indptr[row] : by_column.indptr[row + 1]]
            terms.extend(names[c] for c in sorted(cols.tolist())[:2])
        return " ".join(dict.fromkeys(terms))


def bm25_slot(text_field: str) -> str:
    """The name under which :func:`memory_bm25` holds a copy (a
    :func:`~llama_index_rag_pack.milvus.vector_memory.copy_due` slot)."""
    return f"bm25:{text_field}"


def memory_bm25(
    client: Any,
    collection_name: str,
    *,
    text_field: str,
    milvus_scores: Callable[[str, int], list[tuple[str, float]]],
) -> MemoryBM25 | None:
    """The BM25 copy of ``collection_name`` (its analysed ``text_field``), read once per client;
    ``None`` when it does not score as Milvus does (``milvus_scores(terms, limit)``, checked
    once on a probe query), e.g. a collection in several segments, which Lite scores apart.
    Then the caller searches in Milvus."""

    def read() -> MemoryBM25 | None:
        keys: list[str] = []
        texts: list[str] = []
        fields = ["id", text_field]
        direct = lite_columns(client, collection_name, fields)
        if direct is not None:  # Lite's own rows, without a query per page
            keys = [str(key) for key in direct["id"]]
            texts = [str(text or "") for text in direct[text_field]]
        else:
            page = text_page_rows(client, collection_name, fields)
            for batch in read_rows(client, collection_name, fields, page):
                keys.extend(str(row["id"]) for row in batch)
                texts.extend(str(row.get(text_field) or "") for row in batch)
        index = MemoryBM25(keys, texts)
        probe = index.probe_query()
        if probe:
            mine = [score for _, score in index.search(probe, PROBE_LIMIT)]
            theirs = [score for _, score in milvus_scores(probe, PROBE_LIMIT)]
            if len(mine) != len(theirs) or not np.allclose(mine, theirs, rtol=1e-4, atol=1e-6):
                logger.info(
                    "Collection %r: BM25 stays in Milvus (an in-memory copy scores %s, Milvus %s)",
                    collection_name,
                    mine[:3],
                    theirs[:3],
                )
                return None
        logger.info(
            "Collection %r: BM25 index of %d chunks held in memory (%d terms)",
            collection_name,
            len(keys),
            len(index.vocabulary),
        )
        return index

    return memory_copy(client, collection_name, bm25_slot(text_field), read)
