"""How high a RAPTOR tree grows and what it asks the LLM: a level that would barely compress the
one below is not built (``min_compression``), and a cluster of one is carried up unchanged
without an LLM call, yet never comes back twice from retrieval. Real Milvus Lite and the bundled
embedding model; the LLM is scripted and counts its calls.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.raptor.raptor_nodes import (
    CARRIED_KEY,
    CHILD_KEY,
    LEVEL_KEY,
    PARENT_KEY,
    is_carried,
)
from llama_index_rag_pack.raptor.raptor_retriever import RaptorRetriever
from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
from llama_index_rag_pack.testing import ScriptedLLM

OPTIONS = dict(reduction_dim=4, max_length_in_cluster=1500, max_retries=0, retry_backoff=0.0)
AARDVARK = [
    "Aardvarks dig burrows and feed at night on ants and termites.",
    "The aardvark uses its long sticky tongue to catch ants and termites.",
]
VOLCANO = "A volcano erupts when magma rises through the crust of the Earth."
ABACUS = "The abacus is a counting frame of beads on rods, used for arithmetic."


def summary(prompt: str) -> str:
    """A short reply in the words of the first child, as a chat model would write it."""
    body = prompt.split("(names, numbers, dates, places).", 1)[-1].rsplit("Summary:", 1)[0]
    first = re.split(r"(?<=[.!?])\s", body.strip(), maxsplit=1)[0]
    return f'Here is a summary:\n\n"In short: {first}"'


def tree_over(tmp_path: Any, embed_model: Any, llm: Any, **options: Any) -> RaptorTree:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    return RaptorTree(store, embed_model=embed_model, llm=llm, **{**OPTIONS, **options})


def docs(*texts: str) -> list[Document]:
    return [Document(text=t, doc_id=f"doc-{i}") for i, t in enumerate(texts)]


def nodes_of(tree: RaptorTree) -> dict[str, Any]:
    return {n.node_id: n for n in tree.store.tree_nodes(with_embeddings=True)}


# ----------------------------------------------------------------------------- min_compression
def test_a_level_that_would_barely_compress_is_not_built(tmp_path: Any, embed_model: Any) -> None:
    # four chunks on three topics cluster into three groups: 4 / 3 compresses less than 2
    llm = ScriptedLLM(replies=summary)
    tree = tree_over(tmp_path, embed_model, llm)
    stats = tree.build(docs(*AARDVARK, VOLCANO, ABACUS))
    assert stats.levels == {0: 4} and stats.llm_calls == 0 and llm.call_count == 0
    assert all(n.metadata[PARENT_KEY] == [] for n in tree.store.level(0)), "every chunk is a top"


@pytest.mark.slow
def test_min_compression_one_builds_every_level_that_merges(
    tmp_path: Any, embed_model: Any
) -> None:
    llm = ScriptedLLM(replies=summary)
    tree = tree_over(tmp_path, embed_model, llm, min_compression=1.0)
    stats = tree.build(docs(*AARDVARK, VOLCANO, ABACUS))
    assert stats.levels[1] == 3, "the aardvark pair merges, the others are carried up"
    assert len(stats.levels) >= 2, "levels go on while anything merges (4 -> 3 is built)"
    summaries = [n for n in tree.store.tree_nodes(min_level=1)]
    carried = [n for n in summaries if is_carried(n)]
    assert len(carried) == stats.summaries_carried >= 2
    assert llm.call_count == stats.llm_calls == len(summaries) - len(carried), "none for carried"


@pytest.mark.slow
def test_a_level_that_compresses_enough_is_built(tmp_path: Any, embed_model: Any) -> None:
    llm = ScriptedLLM(replies=summary)
    tree = tree_over(tmp_path, embed_model, llm, min_compression=3.0)
    texts = [*AARDVARK, "Aardvarks live in burrows across Africa, south of the Sahara."]
    stats = tree.build(docs(*texts))
    assert stats.levels == {0: 3, 1: 1} and llm.call_count == 1, "3 / 1 >= 3"


@pytest.mark.parametrize("value", [0.5, 0.0, -2.0, math.nan])
def test_min_compression_is_validated(tmp_path: Any, embed_model: Any, value: float) -> None:
    with pytest.raises(ConfigurationError, match="min_compression must be >= 1"):
        tree_over(tmp_path, embed_model, ScriptedLLM(replies=[]), min_compression=value)


# ----------------------------------------------------------------------------- clusters of one
@pytest.fixture
def carried_tree(tmp_path: Any, embed_model: Any) -> tuple[RaptorTree, ScriptedLLM]:
    llm = ScriptedLLM(replies=summary)
    tree = tree_over(tmp_path, embed_model, llm, min_compression=1.0)
    tree.build(docs(*AARDVARK, VOLCANO))
    return tree, llm


@pytest.mark.slow
def test_a_cluster_of_one_is_carried_up_without_an_llm_call(
    carried_tree: tuple[RaptorTree, ScriptedLLM],
) -> None:
    tree, llm = carried_tree
    assert tree.levels() == {0: 3, 1: 2}
    assert llm.call_count == 1 and not any(VOLCANO in p for p in llm.prompts)
    nodes = nodes_of(tree)
    (carried,) = [n for n in nodes.values() if is_carried(n)]
    (leaf,) = [nodes[c] for c in carried.metadata[CHILD_KEY]]
    assert leaf.text == carried.text == VOLCANO and carried.embedding == leaf.embedding
    assert carried.metadata[LEVEL_KEY] == 1 and leaf.metadata[PARENT_KEY] == [carried.node_id]
    (pair,) = [n for n in nodes.values() if n.metadata[LEVEL_KEY] == 1 and not is_carried(n)]
    assert pair.metadata[CARRIED_KEY] is False and pair.text.startswith("In short:")


@pytest.mark.slow
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("mode", ["collapsed", "tree_traversal"])
async def test_retrieval_never_returns_a_carried_copy(
    carried_tree: tuple[RaptorTree, ScriptedLLM], mode: str, use_async: bool
) -> None:
    tree, _ = carried_tree
    retriever = RaptorRetriever(tree=tree, mode=mode, similarity_top_k=3, token_budget=None)
    query = "How does a volcano erupt?"
    hits = await retriever.aretrieve(query) if use_async else retriever.retrieve(query)
    assert hits[0].node.text == VOLCANO and hits[0].node.metadata[LEVEL_KEY] == 0
    assert not any(is_carried(h.node) for h in hits)
    assert len({h.node.text for h in hits}) == len(hits), "no text twice"
    if mode == "collapsed":
        assert len(hits) == 3, "the carried copy's place goes to the next original"
    else:
        assert {h.node.metadata[LEVEL_KEY] for h in hits} == {0, 1}, "walked through to leaves"


@pytest.mark.slow
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_resume_reuses_every_summary_and_carried_node(
    carried_tree: tuple[RaptorTree, ScriptedLLM], embed_model: Any, use_async: bool
) -> None:
    tree, _ = carried_tree
    no_llm = ScriptedLLM(replies=[], forbid_sync=use_async)
    again = RaptorTree(
        tree.vector_store, embed_model=embed_model, llm=no_llm, **OPTIONS, min_compression=1.0
    )
    documents = docs(*AARDVARK, VOLCANO)
    stats = await again.abuild(documents) if use_async else again.build(documents)
    assert no_llm.call_count == 0 and stats.llm_calls == 0 and stats.summaries_written == 0
    assert stats.summaries_reused == 2 and stats.levels == {0: 3, 1: 2}


@pytest.mark.slow
def test_insert_next_to_a_carried_node_summarises_the_grown_cluster(
    carried_tree: tuple[RaptorTree, ScriptedLLM],
) -> None:
    tree, llm = carried_tree
    before = llm.call_count
    lava = "Lava from an erupting volcano flows down its slopes and cools into rock."
    stats = tree.insert([Document(text=lava, doc_id="doc-lava")])
    assert stats.levels == {0: 4, 1: 2}, "the lava chunk joins the volcano's cluster"
    nodes = nodes_of(tree)
    volcano_leaf = next(n for n in nodes.values() if n.text == VOLCANO)
    (parent,) = [nodes[p] for p in volcano_leaf.metadata[PARENT_KEY]]
    assert {nodes[c].text for c in parent.metadata[CHILD_KEY]} == {VOLCANO, lava}
    assert not is_carried(parent) and parent.text == f"In short: {VOLCANO}", "now a summary"
    assert llm.call_count - before == stats.llm_calls == 1 and stats.summaries_carried == 0
