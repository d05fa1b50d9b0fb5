"""Estimating a RAPTOR build without calling the LLM: the clustering the build would run, level
by level, with stand-ins for the summaries not written yet (see
:mod:`~llama_index_rag_pack.raptor.spend_estimate` for the methods and the ceiling).

The walk follows :meth:`LevelBuilder.grow
<llama_index_rag_pack.raptor.raptor_levels.LevelBuilder.grow>`: the same clustering (the same
call, so a build right after an estimate reuses its clustering of the chunks), the same rules
for the top, the same summary ids. A cluster whose summary is stored is reused, a cluster of one
is carried up; each other cluster is one call whose prompt is the summary prompt around its
children's texts. A level is ``clustered`` while every node under it exists (chunks, stored or
carried nodes); above the first summary still to write it is ``predicted``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_rag_pack.core.errors import EmptyCorpusError
from llama_index_rag_pack.raptor.level_clustering import ids_key
from llama_index_rag_pack.raptor.raptor_nodes import TOKENS_KEY, summary_id
from llama_index_rag_pack.raptor.spend_estimate import (
    SUMMARY_SHARE,
    LevelEstimate,
    RaptorEstimate,
    predicted_summary_tokens,
    spend_ceiling,
)

__all__ = ["DEFAULT_CLUSTER_UP_TO", "DEFAULT_SAMPLE", "EstimateResult", "estimate_build"]

#: Up to this many chunks, the estimate clusters them all (as the build will).
DEFAULT_CLUSTER_UP_TO = 10_000
#: Above it, a seeded sample of this many chunks is estimated and scaled.
DEFAULT_SAMPLE = 2_000
#: Stored summaries needed before their own length ratio replaces the paper's.
MIN_MEASURED = 5


@dataclass
class _Rows:
    """The nodes of one level as the estimate sees them."""

    ids: list[str]
    vectors: np.ndarray
    lengths: list[int]  # tokens the clustering counts
    prompt: list[int]  # tokens of the text a summary prompt holds
    real: bool  # every node exists (not a stand-in)


@dataclass
class EstimateResult:
    """An estimate, the digest of the chunk ids it was made on, and the embeddings it made for
    chunks not stored yet (the build can reuse them)."""

    estimate: RaptorEstimate
    leaf_key: str
    new_vectors: dict[str, list[float]]


def _level0(tree: Any, leaves: list[BaseNode] | None, reuse: bool) -> tuple[_Rows, dict]:
    stored_nodes, stored_vecs = (
        tree.store.level_vectors(0) if reuse else ([], np.zeros((0, 0), "f4"))
    )
    by_id: dict[str, tuple[BaseNode, Any]] = {
        n.node_id: (n, v) for n, v in zip(stored_nodes, stored_vecs, strict=True)
    }
    new = [n for n in leaves or [] if n.node_id not in by_id]
    todo = [n for n in new if n.embedding is None]
    if todo:
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in todo]
        for node, vec in zip(todo, tree.embed_model.get_text_embedding_batch(texts), strict=True):
            node.embedding = list(vec)
    for n in new:
        by_id[n.node_id] = (n, n.embedding)
    if not by_id:
        raise EmptyCorpusError(
            f"Collection {tree.store.collection_name!r} holds no RAPTOR leaves to estimate: "
            "give documents."
        )
    ids = sorted(by_id)
    nodes = [by_id[i][0] for i in ids]
    lengths = [int(n.metadata.get(TOKENS_KEY) or tree.count_tokens(n.get_content())) for n in nodes]
    prompt = [tree.count_tokens(n.get_content(metadata_mode=MetadataMode.LLM)) for n in nodes]
    vectors = np.asarray([by_id[i][1] for i in ids], dtype=np.float32)
    rows = _Rows(ids, vectors, lengths, prompt, real=True)
    return rows, {n.node_id: n.embedding for n in new}


def _sample(rows: _Rows, size: int, seed: int | None) -> _Rows:
    pick = np.sort(np.random.default_rng(seed or 0).choice(len(rows.ids), size, replace=False))
    return _Rows(
        [rows.ids[i] for i in pick],
        rows.vectors[pick],
        [rows.lengths[i] for i in pick],
        [rows.prompt[i] for i in pick],
        real=True,
    )


@dataclass
class _Walk:
    """The state of an estimate's walk up the levels."""

    tree: Any
    builder: Any
    reuse: bool
    template: int
    separator: int
    max_output: int | None
    share: float = SUMMARY_SHARE
    source: str = "RAPTOR paper"

    def calibrate(self, measured: list[float]) -> None:
        if len(measured) >= MIN_MEASURED:
            self.share = statistics.median(measured)
            self.source = f"median of {len(measured)} stored summaries"

    def level(self, level: int, rows: _Rows, measured: list[float]) -> tuple[LevelEstimate, _Rows]:
        """Estimate level ``level + 1`` from ``rows`` (level ``level``) and give its rows."""
        groups = self.builder.cluster_rows(rows.vectors, rows.lengths)
        if self.builder.is_top(level, len(rows.ids), groups):
            raise StopIteration
        sids = [summary_id(level + 1, [rows.ids[i] for i in g]) for g in groups]
        stored = (
            {n.node_id: n for n in self.tree.store.get(sids, with_embeddings=True)}
            if self.reuse and self.tree.store.exists()
            else {}
        )
        for g, sid in zip(groups, sids, strict=True):
            if sid in stored and len(g) > 1:
                context = sum(rows.prompt[i] for i in g)
                measured.append(int(stored[sid].metadata.get(TOKENS_KEY) or 0) / max(1, context))
        self.calibrate(measured)
        est = LevelEstimate(level + 1, len(rows.ids), len(groups), 0, 0, 0, 0, 0, "clustered")
        if not rows.real:
            est.method = "predicted"
        out = _Rows([], np.zeros((len(groups), rows.vectors.shape[1]), "f4"), [], [], True)
        for k, (g, sid) in enumerate(zip(groups, sids, strict=True)):
            out.ids.append(sid)
            if sid in stored:
                est.reused += 1
                node = stored[sid]
                out.vectors[k] = node.embedding
                tokens = int(node.metadata.get(TOKENS_KEY) or tree_tokens(self.tree, node))
                out.lengths.append(tokens)
                out.prompt.append(tokens)
            elif len(g) == 1:  # carried up: its child's text and vector
                est.carried += 1
                out.vectors[k] = rows.vectors[g[0]]
                out.lengths.append(rows.lengths[g[0]])
                out.prompt.append(rows.lengths[g[0]])
                out.real = out.real and rows.real
            else:
                context = sum(rows.prompt[i] for i in g) + self.separator * (len(g) - 1)
                summary = predicted_summary_tokens(context, self.share, self.max_output)
                est.calls += 1
                est.input_tokens += self.template + context
                est.output_tokens += summary
                mean = rows.vectors[g].astype(np.float64).mean(axis=0)
                norm = float(np.linalg.norm(mean))
                out.vectors[k] = mean / norm if norm > 0 else mean
                out.lengths.append(summary)
                out.prompt.append(summary)
                out.real = False
        return est, out


def tree_tokens(tree: Any, node: BaseNode) -> int:
    return int(tree.count_tokens(node.get_content()))


def _walk(walk: _Walk, rows: _Rows, max_levels: int) -> list[LevelEstimate]:
    levels: list[LevelEstimate] = []
    measured: list[float] = []
    level = 0
    while len(rows.ids) > 1 and level < max_levels:
        try:
            est, rows = walk.level(level, rows, measured)
        except StopIteration:
            break
        levels.append(est)
        level += 1
    return levels


def _scaled(levels: list[LevelEstimate], factor: float, stored: dict[int, int]) -> None:
    """Scale a sample's levels to the whole set; summaries stored per level count as done."""
    for lv in levels:
        clusters = lv.clusters * factor
        left = max(0.0, 1.0 - stored.get(lv.level, 0) / clusters) if clusters else 0.0
        lv.method = "sampled"
        lv.nodes_below = round(lv.nodes_below * factor)
        lv.reused = round(min(clusters, stored.get(lv.level, 0)))
        lv.clusters = round(clusters)
        lv.carried = round(lv.carried * factor * left)
        for name in ("calls", "input_tokens", "output_tokens"):
            setattr(lv, name, round(getattr(lv, name) * factor * left))


def estimate_build(
    tree: Any,
    builder: Any,
    leaves: Sequence[BaseNode] | None,
    *,
    reuse: bool = True,
    cluster_up_to: int = DEFAULT_CLUSTER_UP_TO,
    sample: int = DEFAULT_SAMPLE,
) -> EstimateResult:
    """Estimate what building ``tree`` (a ``RaptorTree``) from ``leaves`` (``None``: the leaves
    stored) would spend; ``builder`` is a ``LevelBuilder`` of the tree (its clustering and its
    rule for the top). ``reuse=False``: as if the tree were empty (a build that overwrites it).

    Raises:
        EmptyCorpusError: no leaves given and none stored.
    """
    started = time.perf_counter()
    rows, new_vectors = _level0(tree, list(leaves) if leaves is not None else None, reuse)
    meta = tree.llm.metadata
    max_output = int(meta.num_output) if (meta.num_output or 0) > 0 else None
    walk = _Walk(
        tree,
        builder,
        reuse,
        template=tree.count_tokens(tree.summary_prompt.format(context_str="Text."))
        - tree.count_tokens("Text."),
        separator=max(0, tree.count_tokens("Text.\n\nText.") - 2 * tree.count_tokens("Text.")),
        max_output=max_output,
    )
    n = len(rows.ids)
    sampled = n > cluster_up_to and sample < n
    if sampled:
        walk.reuse = False
        levels = _walk(walk, _sample(rows, sample, tree.random_state), tree.max_levels)
        _scaled(levels, n / sample, tree.store.levels() if reuse and tree.store.exists() else {})
    else:
        levels = _walk(walk, rows, tree.max_levels)
    calls, tokens = spend_ceiling(
        n,
        max_levels=tree.max_levels,
        min_compression=tree.min_compression,
        per_call_input=walk.template + tree.cluster_budget(),
    )
    estimate = RaptorEstimate(
        leaves=n,
        method="sampled" if sampled else "clustered",
        levels=levels,
        summary_share=walk.share,
        share_source=walk.source,
        max_output=max_output,
        ceiling_calls=calls,
        ceiling_input_tokens=tokens,
        sample=sample if sampled else None,
        seconds=time.perf_counter() - started,
    )
    return EstimateResult(estimate, ids_key(rows.ids), new_vectors)
