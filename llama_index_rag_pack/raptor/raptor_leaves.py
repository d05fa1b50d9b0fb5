"""The leaves of a RAPTOR tree: documents chunked into level-0 nodes with deterministic ids."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from llama_index.core.schema import BaseNode, Document, MetadataMode, NodeRelationship, TextNode

from llama_index_rag_pack.core.errors import ConfigurationError, EmptyCorpusError
from llama_index_rag_pack.documents.chunking import split_documents
from llama_index_rag_pack.raptor.raptor_nodes import (
    CHILD_KEY,
    CLUSTER_KEY,
    LEVEL_KEY,
    PARENT_KEY,
    TOKENS_KEY,
    leaf_id,
    mark_raptor_node,
)

logger = logging.getLogger(__name__)


def _documents_and_chunks(
    documents: Sequence[BaseNode],
) -> tuple[list[Document], list[BaseNode]]:
    """Split the input into ``Document`` objects (to chunk) and ready chunks, skipping blanks.

    Raises:
        EmptyCorpusError: no documents, or only blank ones.
        ConfigurationError: something that is not a LlamaIndex node.
    """
    documents = list(documents or [])
    if not documents:
        raise EmptyCorpusError(
            "No documents given: pass at least one non-empty Document to build a RAPTOR tree."
        )
    docs: list[Document] = []
    chunks: list[BaseNode] = []
    for d in documents:
        if not isinstance(d, BaseNode):
            raise ConfigurationError(
                f"Expected LlamaIndex Documents or nodes, got {type(d).__name__}."
            )
        if not (d.get_content() or "").strip():
            logger.warning("Skipping blank document %s", d.node_id)
            continue
        if isinstance(d, Document):
            docs.append(d)
        else:
            chunks.append(d)
    if not docs and not chunks:
        raise EmptyCorpusError(
            f"All {len(documents)} documents are blank: nothing to build a RAPTOR tree from."
        )
    return docs, chunks


def _leaf(chunk: BaseNode, node_id: str, text: str, tokens: int) -> TextNode:
    """A level-0 node with ``chunk``'s text, metadata, links and embedding under a new id."""
    node = TextNode(
        id_=node_id,
        text=text,
        metadata=dict(chunk.metadata),
        excluded_embed_metadata_keys=list(chunk.excluded_embed_metadata_keys),
        excluded_llm_metadata_keys=list(chunk.excluded_llm_metadata_keys),
        relationships=dict(chunk.relationships),
        start_char_idx=getattr(chunk, "start_char_idx", None),
        end_char_idx=getattr(chunk, "end_char_idx", None),
        embedding=chunk.embedding,
    )
    mark_raptor_node(
        node,
        **{LEVEL_KEY: 0, CLUSTER_KEY: [], PARENT_KEY: [], CHILD_KEY: [], TOKENS_KEY: tokens},
    )
    return node


def _relink_neighbours(leaves: Sequence[TextNode], renamed: dict[str, str]) -> None:
    """Point the previous/next links of ``leaves`` at the renamed chunks."""
    for node in leaves:
        for rel in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT):
            info = node.relationships.get(rel)
            if info is not None and getattr(info, "node_id", None) in renamed:
                info = info.model_copy()
                info.node_id = renamed[info.node_id]
                node.relationships[rel] = info


def make_leaves(
    documents: Sequence[BaseNode],
    *,
    chunk_size: int,
    chunk_overlap: int,
    count_tokens: Callable[[str], int],
) -> list[TextNode]:
    """Chunk ``Document`` objects (other nodes are used as chunks as they are) into level-0 nodes.

    A leaf's id hashes its document id, its position in the document and its text, so the same
    documents always give the same leaves.

    Args:
        documents: ``Document`` objects or ready chunks.
        chunk_size: Chunk size in tokens.
        chunk_overlap: Chunk overlap in tokens.
        count_tokens: Length of a text in tokens (stored on each leaf for token budgets).

    Returns:
        The leaves, one per distinct id, in chunk order.

    Raises:
        EmptyCorpusError: no documents, or only blank ones.
        ConfigurationError: something that is not a LlamaIndex node.

    Example:
        >>> from llama_index.core import Document
        >>> leaves = make_leaves(
        ...     [Document(text="Aardvarks eat ants.", doc_id="d1")],
        ...     chunk_size=128,
        ...     chunk_overlap=16,
        ...     count_tokens=lambda text: len(text.split()),
        ... )
        >>> leaves[0].node_id.startswith("raptor-0-"), leaves[0].metadata["raptor_tokens"]
        (True, 3)
    """
    docs, chunks = _documents_and_chunks(documents)
    if docs:
        chunks.extend(split_documents(docs, chunk_size=chunk_size, chunk_overlap=chunk_overlap))
    leaves: dict[str, TextNode] = {}
    renamed: dict[str, str] = {}
    positions: dict[str | None, int] = {}
    for chunk in chunks:
        ref = chunk.ref_doc_id
        position = positions.get(ref, 0)
        positions[ref] = position + 1
        text = chunk.get_content(metadata_mode=MetadataMode.NONE)
        new_id = leaf_id(ref, position, text)
        renamed[chunk.node_id] = new_id
        leaves[new_id] = _leaf(chunk, new_id, text, count_tokens(text))
    _relink_neighbours(list(leaves.values()), renamed)
    return list(leaves.values())


__all__ = ["make_leaves"]
