"""What a RAPTOR node is: its metadata fields and its deterministic id.

Each node is an ordinary LlamaIndex ``TextNode`` with RAPTOR fields in its metadata (dynamic
fields in Milvus, so they can be filtered on):

==========================  ==================================================================
``raptor_level``            0 for leaves (chunks), 1 for their summaries, ...
``raptor_cluster_ids``      ids of the clusters the node belongs to at its level
``raptor_parent_ids``       ids of the summary nodes that summarise it
``raptor_child_ids``        ids of the nodes a summary summarises (empty for leaves)
``raptor_tokens``           the node's length in tokens (for token budgets)
``raptor_source_cluster``   summaries only: the cluster of the level below they summarise
``raptor_carried``          summaries only: True when the node is its single child carried up
                            unchanged (a cluster of one is not sent to the LLM)
==========================  ==================================================================

Ids are hashes of what a node holds, so that rebuilding the same corpus finds the nodes already
stored: a leaf's id hashes its document id, position and text, a summary's id its level and its
children's ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode

LEVEL_KEY = "raptor_level"
CLUSTER_KEY = "raptor_cluster_ids"
PARENT_KEY = "raptor_parent_ids"
CHILD_KEY = "raptor_child_ids"
TOKENS_KEY = "raptor_tokens"
SOURCE_CLUSTER_KEY = "raptor_source_cluster"
CARRIED_KEY = "raptor_carried"
RAPTOR_KEYS = (
    LEVEL_KEY,
    CLUSTER_KEY,
    PARENT_KEY,
    CHILD_KEY,
    TOKENS_KEY,
    SOURCE_CLUSTER_KEY,
    CARRIED_KEY,
)


def summary_id(level: int, child_ids: Sequence[str]) -> str:
    """Deterministic id of the summary of ``child_ids`` at ``level`` (what makes builds
    resumable).

    Example:
        >>> summary_id(1, ["b", "a"]) == summary_id(1, ["a", "b"])
        True
    """
    digest = hashlib.sha1(("\n".join(sorted(child_ids)) + f"\n@{level}").encode()).hexdigest()[:24]
    return f"raptor-{level}-{digest}"


def leaf_id(ref_doc_id: str | None, position: int, text: str) -> str:
    """Deterministic id of the ``position``-th chunk of document ``ref_doc_id``."""
    digest = hashlib.sha1(f"{ref_doc_id}\x00{position}\x00{text}".encode()).hexdigest()[:24]
    return f"raptor-0-{digest}"


def is_carried(node: BaseNode) -> bool:
    """Whether ``node`` is a cluster of one carried up unchanged: it stands for its single child,
    which retrieval returns instead (the tree keeps it so every level links to the next).

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> is_carried(TextNode(text="x", metadata={CARRIED_KEY: True}))
        True
    """
    return bool(node.metadata.get(CARRIED_KEY))


def mark_raptor_node(node: BaseNode, **fields: object) -> None:
    """Set RAPTOR metadata on ``node``, kept out of the text the embedder and the LLM see."""
    node.metadata.update(fields)
    for key in RAPTOR_KEYS:
        if key not in node.excluded_embed_metadata_keys:
            node.excluded_embed_metadata_keys.append(key)
        if key not in node.excluded_llm_metadata_keys:
            node.excluded_llm_metadata_keys.append(key)


__all__ = [
    "CARRIED_KEY",
    "CHILD_KEY",
    "CLUSTER_KEY",
    "LEVEL_KEY",
    "PARENT_KEY",
    "RAPTOR_KEYS",
    "SOURCE_CLUSTER_KEY",
    "TOKENS_KEY",
    "is_carried",
    "leaf_id",
    "learn_memberships",
    "mark_raptor_node",
    "summary_id",
]


def learn_memberships(
    nodes: Sequence[BaseNode], targets: dict[str, tuple[int, list[Any]]]
) -> list[int]:
    """Give each of a level's ``nodes`` its clusters and parents from ``targets`` (summary id ->
    cluster id, children); the positions of the nodes whose clusters or parents changed."""
    memberships: dict[str, tuple[list[int], list[str]]] = {n.node_id: ([], []) for n in nodes}
    for sid, (cid, children) in targets.items():
        for c in children:
            memberships[c.node_id][0].append(cid)
            memberships[c.node_id][1].append(sid)
    changed = []
    for i, n in enumerate(nodes):
        clusters, parents = memberships[n.node_id]
        if n.metadata.get(CLUSTER_KEY) != clusters or n.metadata.get(PARENT_KEY) != parents:
            n.metadata[CLUSTER_KEY], n.metadata[PARENT_KEY] = clusters, parents
            changed.append(i)
    return changed
