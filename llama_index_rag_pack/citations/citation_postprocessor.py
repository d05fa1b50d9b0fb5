"""``CitationPostprocessor``: retrieved nodes → numbered, citable chunks.

Long retrieved chunks make citations vague (the reader cannot find the fact in 2,000 words). This
postprocessor cuts each node into smaller citable pieces (token chunks or single sentences), keeps
the source metadata and a link to the original node on each piece, optionally keeps only the
pieces most similar to the question (the embedding filter of "retrieval post-processing"), and
numbers the result for the prompt (``citation_id`` metadata, 1-based, the ``M`` of ``[N](id=M)``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    TextNode,
)

from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError

logger = logging.getLogger(__name__)

CITATION_ID_KEY = "citation_id"
PARENT_ID_KEY = "citation_parent_id"


class CitationGranularity(Choice):
    """How retrieved nodes are cut into citable pieces."""

    NODE = "node"  # keep each retrieved node whole
    CHUNK = "chunk"  # token chunks of ``chunk_size``
    SENTENCE = "sentence"  # one sentence per piece


class CitationPostprocessor(BaseNodePostprocessor):
    """Turn retrieved nodes into numbered, citable chunks, optionally filtered by the question.

    Each output node is a new ``TextNode`` holding one piece of text, the metadata of the node it
    came from (``url``, ``title``, ``file_path`` ... so pieces of one source share a citation
    number), ``citation_id`` (its 1-based position, as the prompt shows it),
    ``citation_parent_id`` and a ``SOURCE`` relationship to the original node.

    Args:
        granularity: ``"node"`` (default: no cutting), ``"chunk"`` or ``"sentence"``.
        chunk_size: Tokens per piece for ``"chunk"``.
        chunk_overlap: Token overlap between pieces for ``"chunk"``.
        embed_model: Enables the embedding filter: pieces are scored by cosine similarity to
            the question (then ``top_n`` / ``similarity_cutoff`` apply).
        top_n: Keep at most this many pieces (the most similar ones with an ``embed_model``,
            else the first ones in retrieval order).
        similarity_cutoff: With an ``embed_model``, drop pieces whose similarity is below it.
        min_chars: Pieces shorter than this (after stripping) are dropped ("[1]", "Ibid.").

    Example:
        >>> from llama_index.core.schema import NodeWithScore, TextNode
        >>> text = "Cheetahs run fast. They live in Africa."
        >>> node = TextNode(text=text, metadata={"url": "c.html"})
        >>> post = CitationPostprocessor(granularity="sentence")
        >>> pieces = post.postprocess_nodes([NodeWithScore(node=node)])
        >>> [(n.node.metadata["citation_id"], n.node.text) for n in pieces]
        [(1, 'Cheetahs run fast.'), (2, 'They live in Africa.')]
    """

    granularity: CitationGranularity = Field(default=CitationGranularity.NODE)
    chunk_size: int = Field(default=128, description="Tokens per piece (granularity='chunk').")
    chunk_overlap: int = Field(default=0, description="Token overlap (granularity='chunk').")
    top_n: int | None = Field(default=None, description="Keep at most this many pieces.")
    similarity_cutoff: float | None = Field(default=None, description="Minimum cosine similarity.")
    min_chars: int = Field(default=3, description="Drop shorter pieces.")

    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)
    _splitter: Any = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        granularity: str | CitationGranularity = CitationGranularity.NODE,
        chunk_size: int = 128,
        chunk_overlap: int = 0,
        embed_model: BaseEmbedding | None = None,
        top_n: int | None = None,
        similarity_cutoff: float | None = None,
        min_chars: int = 3,
    ) -> None:
        granularity = CitationGranularity.parse(granularity)
        if chunk_size <= 0:
            raise ConfigurationError(f"chunk_size must be > 0, got {chunk_size}")
        if not 0 <= chunk_overlap < chunk_size:
            raise ConfigurationError(
                f"chunk_overlap must be >= 0 and smaller than chunk_size ({chunk_size}), "
                f"got {chunk_overlap}"
            )
        if top_n is not None and top_n <= 0:
            raise ConfigurationError(f"top_n must be > 0 (or None for no limit), got {top_n}")
        if similarity_cutoff is not None and embed_model is None:
            raise ConfigurationError(
                "similarity_cutoff needs an embed_model to score pieces against the question: "
                "pass embed_model=..."
            )
        if similarity_cutoff is not None and not -1.0 <= similarity_cutoff <= 1.0:
            raise ConfigurationError(
                f"similarity_cutoff is a cosine similarity in [-1, 1], got {similarity_cutoff}"
            )
        super().__init__(
            granularity=granularity,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            top_n=top_n,
            similarity_cutoff=similarity_cutoff,
            min_chars=min_chars,
        )
        self._embed_model = embed_model

    @classmethod
    def class_name(cls) -> str:
        return "CitationPostprocessor"

    # ------------------------------------------------------------------ cutting
    def _split(self, text: str) -> list[str]:
        if self.granularity == CitationGranularity.NODE:
            return [text]
        if self._splitter is None:
            if self.granularity == CitationGranularity.CHUNK:
                self._splitter = SentenceSplitter(
                    chunk_size=self.chunk_size, chunk_overlap=self.chunk_overlap
                )
            else:
                from llama_index.core.node_parser.text.utils import split_by_sentence_tokenizer

                self._splitter = split_by_sentence_tokenizer()
        if self.granularity == CitationGranularity.CHUNK:
            return self._splitter.split_text(text)
        return [piece.strip() for piece in self._splitter(text)]

    def _pieces(self, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        pieces: list[NodeWithScore] = []
        for nws in nodes:
            original = nws.node
            text = original.get_content(metadata_mode=MetadataMode.NONE)
            for piece in self._split(text):
                if len(piece.strip()) < self.min_chars:
                    continue
                metadata = dict(original.metadata)
                metadata[PARENT_ID_KEY] = original.node_id
                node = TextNode(
                    text=piece,
                    metadata=metadata,
                    excluded_embed_metadata_keys=list(original.excluded_embed_metadata_keys)
                    + [PARENT_ID_KEY],
                    excluded_llm_metadata_keys=list(original.excluded_llm_metadata_keys)
                    + [PARENT_ID_KEY],
                )
                node.relationships[NodeRelationship.SOURCE] = original.as_related_node_info()
                pieces.append(NodeWithScore(node=node, score=nws.score))
        return pieces

    # ------------------------------------------------------------------ filtering and numbering
    def _filter(
        self,
        pieces: list[NodeWithScore],
        query: np.ndarray | None,
        texts_emb: list[list[float]] | None,
    ) -> list[NodeWithScore]:
        if query is not None and texts_emb is not None and pieces:
            sims = similarity.cosine_similarities(
                query, similarity.normalize_rows(texts_emb, dtype=np.float64)
            )
            for piece, sim in zip(pieces, sims, strict=True):
                piece.score = float(sim)
            order = sorted(range(len(pieces)), key=lambda i: -sims[i])
            if self.similarity_cutoff is not None:
                order = [i for i in order if sims[i] >= self.similarity_cutoff]
            if self.top_n is not None:
                order = order[: self.top_n]
            pieces = [pieces[i] for i in order]
        elif self.top_n is not None:
            pieces = pieces[: self.top_n]
        for position, piece in enumerate(pieces, 1):
            piece.node.metadata[CITATION_ID_KEY] = position
        return pieces

    def _pieces_to_embed(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> tuple[list[NodeWithScore], BaseEmbedding | None, QueryBundle | None]:
        """The pieces of ``nodes``, and the embedding model and question to score them with
        (the model is ``None`` when they are not scored)."""
        pieces = self._pieces(nodes)
        if self._embed_model is None or not pieces:
            return pieces, None, query_bundle
        if query_bundle is None or not query_bundle.query_str.strip():
            logger.warning(
                "CitationPostprocessor: no question given, the embedding filter is skipped"
            )
            return pieces, None, query_bundle
        return pieces, self._embed_model, query_bundle

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        pieces, embed_model, bundle = self._pieces_to_embed(nodes, query_bundle)
        if embed_model is None or bundle is None:
            return self._filter(pieces, None, None)
        query = bundle.embedding or embed_model.get_query_embedding(bundle.query_str)
        texts = embed_model.get_text_embedding_batch([_embed_text(p) for p in pieces])
        return self._filter(pieces, query, texts)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        pieces, embed_model, bundle = self._pieces_to_embed(nodes, query_bundle)
        if embed_model is None or bundle is None:
            return self._filter(pieces, None, None)
        query = bundle.embedding or await embed_model.aget_query_embedding(bundle.query_str)
        texts = await embed_model.aget_text_embedding_batch([_embed_text(p) for p in pieces])
        return self._filter(pieces, query, texts)


def _embed_text(piece: NodeWithScore) -> str:
    return piece.node.get_content(metadata_mode=MetadataMode.EMBED)


__all__ = ["CITATION_ID_KEY", "CitationGranularity", "CitationPostprocessor", "PARENT_ID_KEY"]
