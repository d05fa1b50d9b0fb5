"""The evaluation corpus and its cached Milvus index.

The corpus is indexed once per (documents, chunking, embedding model): the collection name carries
a hash of the three, and a marker file next to the results records how many chunks a complete
build holds, so an interrupted build is detected and redone.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError, RagPackError
from llama_index_rag_pack.documents.language_analysis import AUTO_VERSION
from llama_index_rag_pack.evaluation.cache import stable_hash
from llama_index_rag_pack.evaluation.labelled import LabelledExample, LabelledSet
from llama_index_rag_pack.milvus.connection import count_entities
from llama_index_rag_pack.pack.rag_pack import RagPack

logger = logging.getLogger(__name__)

__all__ = ["default_pack_factory", "index_key", "open_or_build_index", "questions_about"]


def questions_about(dataset: LabelledSet, documents: Sequence[Any]) -> list[LabelledExample]:
    """The questions of ``dataset`` whose relevant documents are all among ``documents``.

    Raises:
        ConfigurationError: no question is left (wrong corpus, or ids that name no document).
    """
    doc_ids = {d.doc_id for d in documents}
    examples = [
        ex for ex in dataset.examples if not ex.relevant_ids or set(ex.relevant_ids) <= doc_ids
    ]
    dropped = len(dataset.examples) - len(examples)
    if dropped:
        logger.info("%d questions refer to documents outside the indexed corpus: left out", dropped)
    if not examples:
        raise ConfigurationError(
            f"None of the {len(dataset)} questions has its relevant documents in the "
            f"corpus ({len(documents)} documents): check --corpus / --corpus-limit and the ids "
            "in the set."
        )
    return examples


#: Version of the sentence index's layout (splitting, headers; v2: Chinese and Japanese
#: sentences end at their full stops); part of the index key.
SENTENCE_INDEX_VERSION = "sentences-v2"
#: Version of the BM25 field's analysis (documents.bm25_analysis, the default ``auto``); part of the
#: index key.
BM25_INDEX_VERSION = f"bm25-auto-v{AUTO_VERSION}"


def index_key(
    documents: Sequence[Any],
    chunk_size: int,
    chunk_overlap: int,
    embed_model_name: str,
    *,
    sentence_index: bool = True,
) -> str:
    """Hash of what the index holds: the documents' ids and texts, the chunking, the embeddings,
    the BM25 analysis, and whether (and how) sentences are indexed."""
    corpus_hash = stable_hash(
        [(d.doc_id, hashlib.sha256(d.text.encode()).hexdigest()) for d in documents]
    )
    parts: list[Any] = [corpus_hash, chunk_size, chunk_overlap, embed_model_name]
    parts.append(BM25_INDEX_VERSION)
    if sentence_index:
        parts.append(SENTENCE_INDEX_VERSION)
    return stable_hash(*parts)


def _sentence_count(pack: Any) -> int | None:
    index = getattr(pack, "sentence_index", None)
    return index.count() if index is not None else None


def open_or_build_index(
    factory: Callable[..., Any],
    documents: Sequence[Any],
    pack_kwargs: dict[str, Any],
    *,
    marker: Path,
    rebuild: bool = False,
) -> Any:
    """The pack over the cached index when it is complete, else one that indexes ``documents``.

    Args:
        factory: ``(documents | None, **pack_kwargs) -> RagPack``; ``None`` opens an existing
            collection.
        documents: The corpus.
        pack_kwargs: ``uri``, ``collection_name`` and the pack's other arguments.
        marker: JSON file recording the chunk count of a complete build.
        rebuild: Index again even when the cached index is complete.
    """
    if not rebuild and marker.exists():
        recorded = json.loads(marker.read_text())
        try:
            pack = factory(None, **pack_kwargs)
            if count_entities(pack.vector_store) == recorded.get("chunks") and _sentence_count(
                pack
            ) == recorded.get("sentences"):
                return pack
            logger.warning(
                "Cached index %s is incomplete: rebuilding", pack_kwargs["collection_name"]
            )
        except RagPackError as e:
            logger.info("No usable cached index (%s): building it", e)
    logger.info(
        "Indexing %d documents into %s (%s)",
        len(documents),
        pack_kwargs["collection_name"],
        pack_kwargs["uri"],
    )
    marker.unlink(missing_ok=True)
    pack = factory(documents, overwrite=True, **pack_kwargs)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(
        json.dumps(
            {
                "chunks": count_entities(pack.vector_store),
                "sentences": _sentence_count(pack),
                "documents": len(documents),
            }
        )
    )
    return pack


def default_pack_factory(documents: Any, **kwargs: Any) -> RagPack:
    """``RagPack.open(**kwargs)`` without documents, else ``RagPack(documents, **kwargs)``."""
    if documents is None:
        return RagPack.open(**kwargs)
    return RagPack(documents, **kwargs)
