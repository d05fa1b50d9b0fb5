"""Tagging retrieved nodes with metadata the LLM and the embedder never see, without changing
the node a retriever (or a cache behind it) handed out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.schema import NodeWithScore

__all__ = ["annotate_node"]


def annotate_node(item: NodeWithScore, extra: Mapping[str, Any]) -> NodeWithScore:
    """A copy of ``item`` whose node carries ``extra`` metadata, hidden from LLM/embedding text.

    The input node is not changed (its metadata dict and key lists are copied).

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> item = NodeWithScore(node=TextNode(text="Milvus"), score=1.0)
        >>> tagged = annotate_node(item, {"route": "docs"})
        >>> tagged.node.metadata, item.node.metadata
        ({'route': 'docs'}, {})
        >>> tagged.node.excluded_llm_metadata_keys
        ['route']
    """
    node = item.node
    keys = list(extra)
    excluded_llm = list(dict.fromkeys([*node.excluded_llm_metadata_keys, *keys]))
    excluded_embed = list(dict.fromkeys([*node.excluded_embed_metadata_keys, *keys]))
    new_node = node.model_copy(
        update={
            "metadata": {**node.metadata, **extra},
            "excluded_llm_metadata_keys": excluded_llm,
            "excluded_embed_metadata_keys": excluded_embed,
        }
    )
    return item.model_copy(update={"node": new_node})
