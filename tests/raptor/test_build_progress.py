"""A RAPTOR build stores its summaries group by group as they are written, so a build stopped at
any point resumes without writing a stored summary again and ends with the tree of a build that
was never stopped; progress (rate, ETA) reaches a callback; ``refresh`` writes again the summaries
above leaves a folder sync removed. Real Milvus Lite and the bundled embedding model; the LLM is
scripted and counts its calls."""

from __future__ import annotations

import re
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.raptor.build_progress import BuildProgress
from llama_index_rag_pack.raptor.raptor_nodes import CHILD_KEY, CLUSTER_KEY, LEVEL_KEY, PARENT_KEY
from llama_index_rag_pack.raptor.raptor_store import RaptorStore
from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
from llama_index_rag_pack.raptor.raptor_updates import stale_children
from llama_index_rag_pack.testing import ScriptedLLM

TOPICS = {
    "aardvark": "Aardvarks dig burrows and eat ants and termites at night in Africa.",
    "volcano": "A volcano erupts when magma rises through cracks in the crust.",
    "abacus": "An abacus counts with beads that slide on rods in a wooden frame.",
    "glacier": "A glacier is a slow river of ice that carves valleys in mountains.",
    "violin": "A violin has four strings and is played with a bow of horsehair.",
    "comet": "A comet is an icy body that grows a glowing tail near the Sun.",
}
OPTIONS = dict(
    reduction_dim=4, max_length_in_cluster=100, max_retries=0, retry_backoff=0.0, store_every=2
)


def summary(prompt: str) -> str:
    body = prompt.split("(names, numbers, dates, places).", 1)[-1].rsplit("Summary:", 1)[0]
    first = re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0]
    return f"In short: {first}"


def documents() -> list[Document]:
    out = []
    for name, text in TOPICS.items():
        for k in range(4):
            out.append(Document(text=f"{text} Note {k} on the {name}.", doc_id=f"{name}-{k}"))
    return out


def tree_at(path: Any, embed_model: Any, llm: Any, **options: Any) -> RaptorTree:
    store = open_vector_store(str(path), "t_raptor", dim=384)
    return RaptorTree(store, embed_model=embed_model, llm=llm, **{**OPTIONS, **options})


def shape(tree: RaptorTree) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        n.node_id: (n.get_content(), tuple(sorted(n.metadata.get(CHILD_KEY) or [])))
        for n in tree.store.tree_nodes(min_level=1)
    }


@pytest.mark.slow
def test_a_stopped_build_resumes_to_the_tree_of_an_uninterrupted_one(
    tmp_path: Any, embed_model: Any
) -> None:
    whole_llm = ScriptedLLM(replies=summary)
    whole = tree_at(tmp_path / "whole.db", embed_model, whole_llm)
    stats = whole.build(documents())
    assert stats.llm_calls >= 6, "enough summaries for several groups of two"

    llm = ScriptedLLM(replies=summary)
    tree = tree_at(tmp_path / "stopped.db", embed_model, llm)
    real = tree._summarise
    groups: list[int] = []

    def dies_on_the_third_group(jobs: list[Any]) -> Any:
        groups.append(len(jobs))
        if len(groups) == 3:
            raise KeyboardInterrupt  # the process is stopped while this group is with the LLM
        return real(jobs)

    tree._summarise = dies_on_the_third_group  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        tree.build(documents())
    assert all(size <= 2 for size in groups)
    stored = len(tree.store.tree_nodes(min_level=1))
    assert stored >= 3, "the groups answered before the stop are stored"

    tree._summarise = real  # type: ignore[method-assign]
    calls_before = llm.call_count
    resumed = tree.resume()
    assert resumed.summaries_reused >= 1
    assert llm.call_count - calls_before == stats.llm_calls - (calls_before), (
        "no stored summary is written again"
    )
    assert shape(tree) == shape(whole)
    # each level's parents are written in pieces beside its groups: the stop lost some, and
    # the resume recorded them, so every row has the links of the uninterrupted build
    assert _links(tree) == _links(whole)
    nodes = {n.node_id: n for n in whole.store.tree_nodes(min_level=0)}
    top = max(whole.levels())
    for node in nodes.values():
        parents = node.metadata.get(PARENT_KEY) or []
        assert bool(parents) == (node.metadata[LEVEL_KEY] < top), node.node_id
        assert all(node.node_id in nodes[p].metadata[CHILD_KEY] for p in parents)


@pytest.mark.slow
async def test_progress_reaches_the_callback_with_rate_and_eta(
    tmp_path: Any, embed_model: Any
) -> None:
    seen: list[BuildProgress] = []
    tree = tree_at(
        tmp_path / "p.db", embed_model, ScriptedLLM(replies=summary), progress=seen.append
    )
    stats = await tree.abuild(documents())
    clustering = [p for p in seen if p.stage == "clustering"]
    summarising = [p for p in seen if p.stage == "summarising"]
    assert clustering[0].done == 0 and clustering[0].total == len(documents())
    assert summarising, "one record per group stored"
    level_one = [p for p in summarising if p.level == 1]
    assert [p.done for p in level_one] == sorted(p.done for p in level_one)
    assert level_one[-1].done == level_one[-1].total and level_one[-1].eta_s == 0
    assert all(p.eta_s is not None and p.eta_s >= 0 for p in summarising)
    assert summarising[-1].llm_calls == stats.llm_calls
    assert "summaries" in summarising[0].line() and "ETA" in summarising[0].line()
    assert "clustering" in clustering[0].line()


def test_store_every_must_be_positive(tmp_path: Any, embed_model: Any) -> None:
    with pytest.raises(ConfigurationError, match="store_every"):
        tree_at(tmp_path / "x.db", embed_model, ScriptedLLM(replies=summary), store_every=0)


@pytest.mark.slow
def test_refresh_writes_again_what_lost_leaves_and_nothing_else(
    tmp_path: Any, embed_model: Any
) -> None:
    llm = ScriptedLLM(replies=summary)
    tree = tree_at(tmp_path / "r.db", embed_model, llm)
    tree.build(documents())
    assert stale_children(tree.store) == set()
    calls = llm.call_count
    assert tree.refresh().llm_calls == 0 and llm.call_count == calls, "nothing stale: no call"

    gone = [n.node_id for n in tree.store.by_doc(["volcano-0", "volcano-1"])]
    tree.store.delete_ids(gone)  # what a folder sync does: leaves out, no LLM call
    assert stale_children(tree.store) == set(gone)
    stats = tree.refresh()
    assert stats.llm_calls >= 1 and stats.leaves_removed == len(gone)
    assert stale_children(tree.store) == set()
    texts = " ".join(n.get_content() for n in tree.store.tree_nodes(min_level=1))
    assert "Note 0 on the volcano" not in texts and "Note 1 on the volcano" not in texts


@pytest.mark.slow
def test_a_build_reads_each_level_vectors_once_as_float32(
    tmp_path: Any, embed_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A level's vectors come as one float32 matrix, never as Python floats on every node
    (about 8 times the room): the build still makes the same tree."""
    import numpy as np

    from llama_index_rag_pack.raptor.raptor_store import RaptorStore

    whole = tree_at(tmp_path / "a.db", embed_model, ScriptedLLM(replies=summary))
    whole.build(documents())
    real_level, real_vectors = RaptorStore.level, RaptorStore.level_vectors
    matrices: list[Any] = []

    def level(self: Any, level: int, *, with_embeddings: bool = False) -> Any:
        assert not with_embeddings, "a build reads no level with its embeddings as floats"
        return real_level(self, level)

    def level_vectors(self: Any, level: int, ids: Any = None) -> Any:
        nodes, vectors = real_vectors(self, level, ids)
        matrices.append(vectors)
        assert all(n.embedding is None for n in nodes)
        return nodes, vectors

    monkeypatch.setattr(RaptorStore, "level", level)
    monkeypatch.setattr(RaptorStore, "level_vectors", level_vectors)
    lean = tree_at(tmp_path / "b.db", embed_model, ScriptedLLM(replies=summary))
    lean.build(documents())
    assert matrices and all(m.dtype == np.float32 for m in matrices if m.size)
    monkeypatch.setattr(RaptorStore, "level", real_level)
    assert shape(lean) == shape(whole)


def _links(tree: Any) -> dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]]:
    return {
        n.node_id: (
            tuple(n.metadata.get(PARENT_KEY) or []),
            tuple(n.metadata.get(CLUSTER_KEY) or []),
        )
        for n in tree.store.tree_nodes(min_level=0)
    }


@pytest.mark.slow
def test_a_fresh_build_reads_levels_by_id_and_makes_the_same_tree(
    tmp_path: Any, embed_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[str] = []
    real_batches, real_count = RaptorStore._row_batches, RaptorStore.count

    def row_batches(self: Any, expr: str, fields: list[str]) -> Any:
        scans.append(expr)
        return real_batches(self, expr, fields)

    monkeypatch.setattr(RaptorStore, "_row_batches", row_batches)
    fresh = tree_at(tmp_path / "fresh.db", embed_model, ScriptedLLM(replies=summary))
    fresh_stats = fresh.build(documents())
    assert not [e for e in scans if "raptor_level" in e]  # every level read by its ids
    assert fresh_stats.levels == fresh.store.levels() and len(fresh_stats.levels) >= 2

    # the same build taking the long way: the tree is not taken for empty
    monkeypatch.setattr(RaptorStore, "count", lambda self: real_count(self) + 1)
    scans.clear()
    scanned = tree_at(tmp_path / "scanned.db", embed_model, ScriptedLLM(replies=summary))
    scanned_stats = scanned.build(documents())
    assert [e for e in scans if "raptor_level" in e]
    assert scanned_stats.levels == fresh_stats.levels
    assert shape(scanned) == shape(fresh) and _links(scanned) == _links(fresh)
    assert scanned_stats.llm_calls == fresh_stats.llm_calls
