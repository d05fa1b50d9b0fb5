"""Pictures of a RAPTOR tree: a 2-D scatter per level (PNG) and Mermaid / Graphviz / text exports.

The PNGs need matplotlib (``pip install matplotlib``); the exports need nothing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.raptor.dimension_reduction import reduce_embeddings
from llama_index_rag_pack.raptor.raptor_nodes import CHILD_KEY, CLUSTER_KEY, LEVEL_KEY
from llama_index_rag_pack.raptor.raptor_store import RaptorStore

logger = logging.getLogger(__name__)

__all__ = ["legend_groups", "plot_levels", "to_dot", "to_mermaid", "tree_outline"]


def _store(tree_or_store: Any) -> RaptorStore:
    if isinstance(tree_or_store, RaptorStore):
        return tree_or_store
    store = getattr(tree_or_store, "store", None) or getattr(
        getattr(tree_or_store, "tree", None), "store", None
    )
    return store if isinstance(store, RaptorStore) else RaptorStore(tree_or_store)


def _label(node: Any, chars: int) -> str:
    text = " ".join((node.get_content() or "").split())
    title = node.metadata.get("title")
    if title and node.metadata.get(LEVEL_KEY) == 0:
        text = f"{title}: {text}"
    return text[:chars] + ("…" if len(text) > chars else "")


def _selected(store: RaptorStore, max_nodes: int) -> list[Any]:
    """Nodes from the top level down, whole levels while they fit in ``max_nodes``."""
    levels = store.levels()
    picked: list[Any] = []
    for level in sorted(levels, reverse=True):
        if picked and len(picked) + levels[level] > max_nodes:
            break
        picked.extend(store.level(level))
    return picked


def to_mermaid(tree_or_store: Any, *, max_nodes: int = 150, label_chars: int = 48) -> str:
    """A Mermaid ``graph TD`` of the tree (top levels first, at most ``max_nodes`` nodes).

    Example:
        >>> print(to_mermaid(retriever))  # doctest: +SKIP
        graph TD
          n0["L2 · The articles cover aardvarks, …"]
          n0 --> n1
    """
    nodes = _selected(_store(tree_or_store), max_nodes)
    short = {n.node_id: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["graph TD"]
    for n in nodes:
        label = _label(n, label_chars).replace('"', "'").replace("[", "(").replace("]", ")")
        lines.append(f'  {short[n.node_id]}["L{n.metadata.get(LEVEL_KEY, 0)} · {label}"]')
    for n in nodes:
        for child in n.metadata.get(CHILD_KEY) or []:
            if child in short:
                lines.append(f"  {short[n.node_id]} --> {short[child]}")
    return "\n".join(lines) + "\n"


def to_dot(tree_or_store: Any, *, max_nodes: int = 150, label_chars: int = 48) -> str:
    """A Graphviz ``digraph`` of the tree (render with ``dot -Tpng``)."""
    nodes = _selected(_store(tree_or_store), max_nodes)
    ids = {n.node_id for n in nodes}
    lines = ["digraph raptor {", "  rankdir=TB;", "  node [shape=box, fontsize=10];"]
    for n in nodes:
        label = f"L{n.metadata.get(LEVEL_KEY, 0)} · {_label(n, label_chars)}"
        lines.append(f"  {json.dumps(n.node_id)} [label={json.dumps(label)}];")
    for n in nodes:
        for child in n.metadata.get(CHILD_KEY) or []:
            if child in ids:
                lines.append(f"  {json.dumps(n.node_id)} -> {json.dumps(child)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def tree_outline(tree_or_store: Any, *, max_depth_nodes: int = 8, label_chars: int = 90) -> str:
    """An indented text outline from the top level down (at most ``max_depth_nodes`` children
    each)."""
    store = _store(tree_or_store)
    levels = store.levels()
    if not levels:
        return "(empty tree)\n"
    nodes = {n.node_id: n for n in store.tree_nodes()}
    top = [n for n in nodes.values() if n.metadata.get(LEVEL_KEY) == max(levels)]
    lines = ["levels: " + ", ".join(f"L{lvl}={count}" for lvl, count in levels.items())]

    def walk(node: Any, depth: int) -> None:
        lines.append(
            f"{'  ' * depth}- L{node.metadata.get(LEVEL_KEY, 0)} {_label(node, label_chars)}"
        )
        children = [nodes[c] for c in node.metadata.get(CHILD_KEY) or [] if c in nodes]
        for child in children[:max_depth_nodes]:
            walk(child, depth + 1)
        if len(children) > max_depth_nodes:
            lines.append(f"{'  ' * (depth + 1)}… {len(children) - max_depth_nodes} more")

    for node in top[:max_depth_nodes]:
        walk(node, 0)
    return "\n".join(lines) + "\n"


def legend_groups(clusters: list[list[int]], top_n: int = 12) -> list[tuple[str, np.ndarray]]:
    """The legend entries of a level's scatter: ``(label, row indices)`` per group.

    Each row counts in its first cluster. The ``top_n`` largest clusters get an entry each
    (``"cluster 4 · 12 nodes"``, largest first, ties by id); the rest share one ``"other"`` entry;
    rows in no cluster (the top of the tree) get ``"top level (no parent)"``.

    Example:
        >>> [(label, rows.tolist()) for label, rows in legend_groups([[1], [1], [0], [2], []], 2)]
        [('cluster 1 · 2 nodes', [0, 1]), ('cluster 0 · 1 node', [2]), \
('other: 1 cluster, 1 node', [3]), ('top level (no parent)', [4])]
    """
    first = np.asarray([c[0] if c else -1 for c in clusters], dtype=np.int64)
    ids, counts = np.unique(first[first >= 0], return_counts=True)
    order = sorted(zip(ids.tolist(), counts.tolist(), strict=True), key=lambda ic: (-ic[1], ic[0]))
    groups: list[tuple[str, np.ndarray]] = []
    for cid, count in order[:top_n]:
        groups.append((f"cluster {cid} · {count} node{'s' if count > 1 else ''}", first == cid))
    rest = [cid for cid, _ in order[top_n:]]
    if rest:
        mask = np.isin(first, rest)
        groups.append(
            (
                f"other: {len(rest)} cluster{'s' if len(rest) > 1 else ''}, "
                f"{int(mask.sum())} node{'s' if mask.sum() > 1 else ''}",
                mask,
            )
        )
    if (first < 0).any():
        groups.append(("top level (no parent)", first < 0))
    return [(label, np.flatnonzero(mask)) for label, mask in groups]


def _plot_level(plt: Any, nodes: list[Any], level: int, xy: np.ndarray, top_n: int) -> Any:
    clusters = [list(n.metadata.get(CLUSTER_KEY) or []) for n in nodes]
    fig, ax = plt.subplots(figsize=(8, 6))
    palette = plt.get_cmap("tab20").colors
    for i, (label, rows) in enumerate(legend_groups(clusters, top_n)):
        grey = label.startswith(("other", "top level"))
        colour = "0.6" if label.startswith("other") else "black" if grey else palette[i % 20]
        ax.scatter(xy[rows, 0], xy[rows, 1], color=colour, s=22, alpha=0.85, label=label)
    multi = np.asarray([len(c) > 1 for c in clusters])
    if multi.any():
        ax.scatter(
            xy[multi, 0],
            xy[multi, 1],
            facecolors="none",
            edgecolors="black",
            s=60,
            linewidths=0.8,
            label="in several clusters",
        )
    n_clusters = len({c for row in clusters for c in row})
    ax.set_title(
        f"RAPTOR level {level}: {len(nodes)} nodes, {n_clusters} "
        f"cluster{'s' if n_clusters != 1 else ''}"
    )
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    return fig


def plot_levels(
    tree_or_store: Any,
    out_dir: str | Path,
    *,
    random_state: int | None = 0,
    dpi: int = 110,
    top_n: int = 12,
) -> list[Path]:
    """Save ``level_<L>.png``: the level's embeddings in 2-D (UMAP), coloured by cluster.

    Categorical colours with a legend: the ``top_n`` largest clusters with their sizes, the
    rest as "other"; rings mark nodes in several clusters. Levels with fewer than 3 nodes are
    skipped. Returns the written paths.

    Raises:
        ConfigurationError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ConfigurationError("Plotting needs matplotlib: pip install matplotlib") from e
    store = _store(tree_or_store)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for level, count in store.levels().items():
        if count < 3:
            continue
        nodes = store.level(level, with_embeddings=True)
        emb = np.asarray([n.embedding for n in nodes], dtype=np.float32)
        xy = reduce_embeddings(emb, 2, random_state=random_state)
        if xy.shape[1] < 2:
            xy = np.pad(xy, ((0, 0), (0, 2 - xy.shape[1])))
        fig = _plot_level(plt, nodes, level, xy, top_n)
        path = out / f"level_{level}.png"
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
        plt.close(fig)
        written.append(path)
        logger.info("Wrote %s", path)
    return written
