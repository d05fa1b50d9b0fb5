"""Incremental RAPTOR updates: insert and delete documents without rebuilding the tree.

``insert`` places each new leaf into the existing cluster with the nearest centroid (or clusters
the new leaves on their own when no centroid is close), re-summarises only the clusters that
changed and walks those changes up to the root. ``delete`` removes a document's leaves and
refreshes the summaries above them. A cluster that grows over the token budget is split by the
same clustering as a build.

Besides the methods :class:`~llama_index_rag_pack.raptor.raptor_levels.LevelBuilder` uses,
the store is read through ``by_doc(ref_doc_ids)`` and ``top_level()``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llama_index.core.schema import TextNode

from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.raptor.raptor_levels import LevelBuilder
from llama_index_rag_pack.raptor.raptor_nodes import (
    CHILD_KEY,
    CLUSTER_KEY,
    PARENT_KEY,
    SOURCE_CLUSTER_KEY,
    TOKENS_KEY,
    summary_id,
)
from llama_index_rag_pack.raptor.raptor_summaries import SummaryBatch, SummaryJob

logger = logging.getLogger(__name__)


def insert_leaves(builder: LevelBuilder, leaves: list[TextNode]) -> None:
    """Add ``leaves`` to the tree; leaves of the same documents stored before are replaced."""
    store = builder.store
    doc_ids = {n.ref_doc_id for n in leaves if n.ref_doc_id}
    old = {n.node_id for n in store.by_doc(doc_ids)} if doc_ids and store.exists() else set()
    removed = old - {n.node_id for n in leaves}
    added = [n for n in leaves if n.node_id not in old]
    top = store.top_level() if store.exists() else None
    store.delete_ids(removed)
    builder.stats.leaves_removed += len(removed)
    if top is None or top == 0:  # no summaries yet: a plain build
        builder.store_leaves(added)
        builder.grow(0)
        return
    builder.embed(added, "new leaves")
    store.add(added)
    builder.stats.leaves_added += len(added)
    propagate_changes(builder, added, set(), removed)


def delete_documents(builder: LevelBuilder, ref_doc_ids: str | Sequence[str]) -> None:
    """Remove the leaves of these document ids and refresh the summaries above them."""
    ids = [ref_doc_ids] if isinstance(ref_doc_ids, str) else list(ref_doc_ids)
    leaves = builder.store.by_doc(ids)
    if not leaves:
        logger.warning("No RAPTOR leaves for document ids %s: nothing deleted", ids)
        return
    removed = {n.node_id for n in leaves}
    builder.store.delete_ids(removed)
    builder.stats.leaves_removed += len(removed)
    propagate_changes(builder, [], set(), removed)


def stale_children(store: Any) -> set[str]:
    """Ids that summaries of level 1 list as children but that are no longer stored: leaves
    removed without refreshing the summaries above them (a folder sync)."""
    leaves = {n.node_id for n in store.level(0)}
    return {c for p in store.level(1) for c in (p.metadata.get(CHILD_KEY) or []) if c not in leaves}


def refresh_stale(builder: LevelBuilder) -> None:
    """Write again the summaries that lost children (:func:`stale_children`) and walk the
    changes up to the root; a tree with none is left as it is (no LLM call)."""
    missing = stale_children(builder.store) if builder.store.exists() else set()
    if missing:
        builder.stats.leaves_removed += len(missing)
        propagate_changes(builder, [], set(), missing)


@dataclass
class _LevelUpdate:
    """The summaries of ``level + 1`` to refresh, create and delete after level ``level``
    changed."""

    level: int
    nodes: dict[str, TextNode]
    parents: dict[str, TextNode]
    children: dict[str, list[str]]
    refreshed: list[SummaryJob] = field(default_factory=list)
    created: list[SummaryJob] = field(default_factory=list)
    deleted: set[str] = field(default_factory=set)


def propagate_changes(
    builder: LevelBuilder, added: list[TextNode], changed: set[str], removed: set[str]
) -> None:
    """Propagate leaf changes upwards, level by level, touching only affected clusters.

    Args:
        builder: The operation's builder.
        added: New nodes of level 0 (stored, with embeddings).
        changed: Ids of level-0 nodes whose text changed.
        removed: Ids of level-0 nodes deleted.
    """
    level = 0
    while added or changed or removed:
        parents = builder.store.level(level + 1, with_embeddings=True)
        if not parents or level >= builder.max_levels:
            builder.grow(level)  # top reached: extend the tree if it grew wider
            return
        update = _plan_update(builder, level, parents, added, changed)
        _relink_children(builder, update)
        logger.info(
            "Level %d update: %d summaries refreshed, %d new, %d removed",
            level + 1,
            len(update.refreshed),
            len(update.created),
            len(update.deleted),
        )
        added, changed = _write_update(builder, update)
        removed = update.deleted
        level += 1


def _plan_update(
    builder: LevelBuilder,
    level: int,
    parents: list[TextNode],
    added: list[TextNode],
    changed: set[str],
) -> _LevelUpdate:
    nodes = {n.node_id: n for n in builder.store.level(level, with_embeddings=True)}
    update = _LevelUpdate(
        level=level,
        nodes=nodes,
        parents={p.node_id: p for p in parents},
        children={
            p.node_id: [c for c in (p.metadata.get(CHILD_KEY) or []) if c in nodes] for p in parents
        },
    )
    affected = {
        pid
        for pid, p in update.parents.items()
        if set(update.children[pid]) != set(p.metadata.get(CHILD_KEY) or [])
        or changed & set(update.children[pid])
    }
    orphans = _place_by_nearest_centroid(update, added, affected, builder.new_cluster_similarity)
    overflow = _plan_refreshes(builder, update, affected, builder.cluster_budget())
    if len(orphans) == 1:
        overflow.append(orphans)
    elif orphans:
        overflow.extend([orphans[i] for i in g] for g in builder.groups(orphans))
    next_source = 1 + max(
        (int(p.metadata.get(SOURCE_CLUSTER_KEY, -1)) for p in parents), default=-1
    )
    for source, group in enumerate(overflow, start=next_source):
        update.created.append(
            SummaryJob(
                node_id=summary_id(level + 1, [m.node_id for m in group]),
                level=level + 1,
                children=group,
                source_cluster=source,
            )
        )
    return update


def _place_by_nearest_centroid(
    update: _LevelUpdate, added: list[TextNode], affected: set[str], min_similarity: float
) -> list[TextNode]:
    """Add each new node to the cluster with the nearest centroid (marking it affected); return
    the nodes that no cluster is similar enough to."""
    live = [pid for pid in update.parents if update.children[pid]]
    if not (added and live):
        return list(added)
    centroids = similarity.normalize_rows(
        [np.mean([update.nodes[c].embedding for c in update.children[pid]], axis=0) for pid in live]
    )
    emb = similarity.normalize_rows([n.embedding for n in added])
    orphans = []
    for node, row in zip(added, emb @ centroids.T, strict=True):
        best = int(np.argmax(row))
        if row[best] >= min_similarity:
            update.children[live[best]].append(node.node_id)
            affected.add(live[best])
        else:
            orphans.append(node)
    return orphans


def _plan_refreshes(
    builder: LevelBuilder, update: _LevelUpdate, affected: set[str], budget: int
) -> list[list[TextNode]]:
    """Plan a refreshed summary per affected cluster (or its deletion when it lost every member);
    return the groups split off clusters grown over ``budget``, which need new summaries."""
    split_off: list[list[TextNode]] = []
    for pid in sorted(affected):
        members = [update.nodes[c] for c in update.children[pid]]
        if not members:
            update.deleted.add(pid)
            continue
        if sum(int(m.metadata.get(TOKENS_KEY) or 0) for m in members) > budget and len(members) > 1:
            first, *rest = builder.groups(members)
            split_off.extend([members[i] for i in g] for g in rest)
            members = [members[i] for i in first]
        update.refreshed.append(
            SummaryJob(
                node_id=pid,
                level=update.level + 1,
                children=members,
                source_cluster=int(update.parents[pid].metadata.get(SOURCE_CLUSTER_KEY, 0)),
            )
        )
    return split_off


def _relink_children(builder: LevelBuilder, update: _LevelUpdate) -> None:
    """The nodes of the level learn their (new) parents and clusters; deleted summaries go."""
    final = {job.node_id: job for job in update.refreshed + update.created}
    for pid, p in update.parents.items():
        if pid in update.deleted or pid in final:
            continue
        final[pid] = SummaryJob(
            pid,
            update.level + 1,
            [update.nodes[c] for c in update.children[pid]],
            int(p.metadata.get(SOURCE_CLUSTER_KEY, 0)),
        )
    membership: dict[str, tuple[list[int], list[str]]] = {}
    for job in final.values():
        for c in job.children:
            clusters, parents = membership.setdefault(c.node_id, ([], []))
            clusters.append(job.source_cluster)
            parents.append(job.node_id)
    relinked = []
    for nid, n in update.nodes.items():
        clusters, parents = membership.get(nid, ([], []))
        if n.metadata.get(CLUSTER_KEY) != clusters or n.metadata.get(PARENT_KEY) != parents:
            n.metadata[CLUSTER_KEY], n.metadata[PARENT_KEY] = clusters, parents
            relinked.append(n)
    builder.store.upsert(relinked)
    builder.store.delete_ids(update.deleted)


def _write_update(builder: LevelBuilder, update: _LevelUpdate) -> tuple[list[TextNode], set[str]]:
    """Summarise and store the refreshed and new summaries; return the new nodes and the ids of
    the refreshed ones (the changes of the next level)."""
    jobs = update.refreshed + update.created
    batch = builder.summarise(jobs) if jobs else SummaryBatch()
    # refreshed summaries keep their own place in the tree (parents, clusters)
    inherited = {
        job.node_id: {
            PARENT_KEY: list(update.parents[job.node_id].metadata.get(PARENT_KEY) or []),
            CLUSTER_KEY: list(update.parents[job.node_id].metadata.get(CLUSTER_KEY) or []),
        }
        for job in update.refreshed
    }
    refreshed: list[TextNode] = []
    created: list[TextNode] = []
    try:
        if update.refreshed:
            refreshed = builder.write_summaries(
                update.refreshed, batch, replace=True, inherited=inherited
            )
    finally:
        if update.created:
            created = builder.write_summaries(update.created, batch, replace=False)
    return created, {n.node_id for n in refreshed}


__all__ = ["delete_documents", "insert_leaves", "propagate_changes"]
