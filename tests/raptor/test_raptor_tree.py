"""RAPTOR tree builder and retriever over real Milvus Lite and the real bundled embedding model.

Only the LLM is scripted; its replies look like a chat model's (preambles, quotes, failures).
One tree is built per module and shared by the read-only tests; the tests that change a tree
(resume, insert, delete) build their own small ones.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.prompts import PromptTemplate

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
)
from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.raptor.raptor_levels import DEFAULT_MIN_COMPRESSION, RaptorBuildError
from llama_index_rag_pack.raptor.raptor_nodes import (
    CHILD_KEY,
    CLUSTER_KEY,
    LEVEL_KEY,
    PARENT_KEY,
    TOKENS_KEY,
    is_carried,
    summary_id,
)
from llama_index_rag_pack.raptor.raptor_retriever import RaptorRetriever
from llama_index_rag_pack.raptor.raptor_summaries import clean_summary
from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
from llama_index_rag_pack.testing import ScriptedLLM

TREE_OPTIONS = dict(
    reduction_dim=4,
    chunk_size=128,
    chunk_overlap=16,
    max_length_in_cluster=1500,
    max_retries=1,
    retry_backoff=0.01,
)
TITLES = ["Aardvark", "Apollo 11", "Alchemy", "Abacus"]


def corpus(titles: list[str] = TITLES, chars: int = 2200) -> list[Document]:
    docs = load_wikipedia_documents(titles)
    return [Document(text=d.text[:chars], doc_id=d.doc_id, metadata=d.metadata) for d in docs]


def context_of(prompt: str) -> str:
    body = prompt.split("(names, numbers, dates, places).", 1)[-1]
    return body.rsplit("Summary:", 1)[0].strip()


def chatty_summary(prompt: str) -> str:
    """What a chat model writes: a preamble, then the summary in quotes."""
    first = re.split(r"(?<=[.!?])\s", context_of(prompt).replace("\n", " "), maxsplit=1)[0]
    return f'Sure! Here is a summary of the text:\n\n"{first[:300]}"'


def summary_llm(**kwargs: Any) -> ScriptedLLM:
    return ScriptedLLM(replies=chatty_summary, **kwargs)


def all_nodes(tree: RaptorTree) -> dict[str, Any]:
    return {n.node_id: n for n in tree.store.tree_nodes()}


def check_invariants(tree: RaptorTree) -> dict[str, Any]:
    nodes = all_nodes(tree)
    levels = tree.levels()
    top = max(levels)
    for nid, node in nodes.items():
        meta = node.metadata
        level = meta[LEVEL_KEY]
        assert isinstance(meta[TOKENS_KEY], int) and meta[TOKENS_KEY] > 0
        for child in meta[CHILD_KEY]:
            assert child in nodes, f"{nid} lists a missing child {child}"
            assert nodes[child].metadata[LEVEL_KEY] == level - 1
            assert nid in nodes[child].metadata[PARENT_KEY], "child and parent agree"
        for parent in meta[PARENT_KEY]:
            assert parent in nodes and nid in nodes[parent].metadata[CHILD_KEY]
        if level == 0:
            assert meta[CHILD_KEY] == []
        else:
            assert meta[CHILD_KEY], "a summary summarises something"
        if level < top:
            assert meta[PARENT_KEY], f"{nid} at level {level} below the top has a parent"
            assert len(meta[CLUSTER_KEY]) == len(meta[PARENT_KEY])
        else:
            assert meta[PARENT_KEY] == []
    return nodes


def leaf_tokens(store: Any, docs: list[Document], embed_model: Any, **options: Any) -> int:
    """Tokens of the leaves ``docs`` make (the text a level-1 clustering must fit into budgets)."""
    tree = RaptorTree(store, embed_model=embed_model, llm=ScriptedLLM(replies=[]), **options)
    return sum(n.metadata[TOKENS_KEY] for n in tree.make_leaves(docs))


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory, embed_model: Any, gated_llm: Any
) -> dict[str, Any]:
    path = str(tmp_path_factory.mktemp("raptor") / "tree.db")
    store = open_vector_store(path, "tree_raptor", dim=384)
    # every summary call waits until two are in flight: concurrency shown without timings
    llm = gated_llm(chatty_summary, target=2)
    retriever = RaptorRetriever.from_documents(
        corpus(), llm=llm, embed_model=embed_model, vector_store=store, tree_options=TREE_OPTIONS
    )
    return {"retriever": retriever, "llm": llm, "store": store, "path": path}


# ----------------------------------------------------------------------------- building
@pytest.mark.slow
def test_build_stores_every_level_with_consistent_links(
    built: dict[str, Any], embed_model: Any
) -> None:
    tree = built["retriever"].tree
    levels = tree.levels()
    assert levels[0] >= 12 and len(levels) >= 2, levels
    # the leaves hold more text than one cluster may: level 1 has two clusters or more, whatever
    # the clustering, so two summaries can be in flight at once
    total = leaf_tokens(built["store"], corpus(), embed_model, **TREE_OPTIONS)
    assert total > TREE_OPTIONS["max_length_in_cluster"]
    assert levels[1] >= 2
    counts = [levels[lvl] for lvl in sorted(levels)]
    assert counts == sorted(counts, reverse=True), "each level summarises the one below"
    # a level is built only where it compresses the one below by min_compression or more; the
    # build stops there, or where nothing merges (at most one top per unrelated article)
    for lvl in sorted(levels)[1:]:
        assert levels[lvl - 1] >= DEFAULT_MIN_COMPRESSION * levels[lvl], levels
    assert 1 <= levels[max(levels)] < levels[0]
    nodes = check_invariants(tree)
    summaries = [n for n in nodes.values() if n.metadata[LEVEL_KEY] > 0]
    # one LLM call per summary, none wasted (none for a cluster of one, carried up), concurrent
    written = [s for s in summaries if not is_carried(s)]
    assert built["llm"].call_count == len(written)
    assert built["llm"].max_concurrency >= 2 and not built["llm"].gate.timed_out
    for s in written:
        assert s.text and not s.text.startswith(("Sure", '"')), "preamble and quotes are stripped"
        assert s.node_id == summary_id(s.metadata[LEVEL_KEY], s.metadata[CHILD_KEY])
    # soft clustering never stores a node twice
    assert sum(levels.values()) == len(nodes)


@pytest.mark.slow
def test_leaves_keep_document_metadata_and_ids(built: dict[str, Any]) -> None:
    leaves = built["retriever"].tree.store.level(0)
    assert {n.ref_doc_id for n in leaves} == {f"wiki:{t}" for t in TITLES}
    assert all(n.metadata["title"] in TITLES for n in leaves)
    assert LEVEL_KEY not in leaves[0].get_content(metadata_mode="embed")


@pytest.mark.slow
def test_summary_prompts_hold_the_children_texts(built: dict[str, Any]) -> None:
    nodes = all_nodes(built["retriever"].tree)
    prompts = built["llm"].prompts
    level1 = next(n for n in nodes.values() if n.metadata[LEVEL_KEY] == 1)
    child_texts = [nodes[c].text.strip() for c in level1.metadata[CHILD_KEY]]
    assert any(all(t[:80] in p for t in child_texts) for p in prompts)


@pytest.mark.slow
def test_building_again_resumes_without_llm_calls(built: dict[str, Any], embed_model: Any) -> None:
    tree = RaptorTree(
        built["store"], embed_model=embed_model, llm=ScriptedLLM(replies=[]), **TREE_OPTIONS
    )
    stats = tree.build(corpus())
    assert stats.llm_calls == 0 and stats.leaves_added == 0 and stats.summaries_written == 0
    assert stats.summaries_reused == sum(n for lvl, n in stats.levels.items() if lvl > 0)
    assert stats.levels == built["retriever"].levels()


# ----------------------------------------------------------------------------- retrieval
@pytest.mark.slow
def test_reopen_retrieves_without_rebuilding_or_llm(
    built: dict[str, Any], embed_model: Any, assert_same_ranking: Any
) -> None:
    no_llm = ScriptedLLM(replies=[], forbid_sync=True)
    retriever = RaptorRetriever(vector_store=built["store"], embed_model=embed_model, llm=no_llm)
    query = "What does the aardvark eat?"
    hits = retriever.retrieve(query)
    assert hits and no_llm.call_count == 0
    assert retriever.levels() == built["retriever"].levels(), "the stored tree, not a new one"
    assert all(LEVEL_KEY in h.node.metadata for h in hits)
    # the reopened tree answers as the one that built it (which node wins is the embedding's call)
    assert_same_ranking(hits, built["retriever"].retrieve(query))
    assert any("aardvark" in h.node.get_content().lower() for h in hits)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.slow
def test_collapsed_mixes_levels_and_respects_the_token_budget(built: dict[str, Any]) -> None:
    # Invariants only: how many nodes the tree has depends on the clustering, not on this feature.
    tree = built["retriever"].tree
    query = "Apollo 11 Moon landing"
    size = sum(not is_carried(n) for n in tree.store.tree_nodes())  # carried copies never return
    wide = RaptorRetriever(tree=tree, similarity_top_k=40, token_budget=None)
    hits = wide.retrieve(query)
    assert len(hits) == min(40, size), "top-k over every level (the whole tree when smaller)"
    assert len({h.node.node_id for h in hits}) == len(hits), "no node twice"
    levels_hit = {h.node.metadata[LEVEL_KEY] for h in hits}
    assert 0 in levels_hit and levels_hit - {0}, "leaves and summaries in one ranking"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    again = [(h.node.node_id, h.score) for h in wide.retrieve(query)]
    assert again == [(h.node.node_id, h.score) for h in hits], "same tree, same answer"

    budget = 300
    cut = RaptorRetriever(tree=tree, similarity_top_k=40, token_budget=budget).retrieve(query)
    assert cut and [h.node.node_id for h in cut] == [h.node.node_id for h in hits[: len(cut)]]
    used = sum(h.node.metadata[TOKENS_KEY] for h in cut)
    assert used <= budget or len(cut) == 1, "the budget holds (the best node is always kept)"
    if len(cut) < len(hits):
        assert used + hits[len(cut)].node.metadata[TOKENS_KEY] > budget, "cut only when full"


@pytest.mark.slow
def test_tree_traversal_descends_through_children(built: dict[str, Any]) -> None:
    tree = built["retriever"].tree
    top = max(tree.levels())
    retriever = RaptorRetriever(
        tree=tree, mode="tree_traversal", similarity_top_k=2, token_budget=None
    )
    hits = retriever.retrieve("Who landed on the Moon?")
    by_level: dict[int, list[Any]] = {}
    for h in hits:
        by_level.setdefault(h.node.metadata[LEVEL_KEY], []).append(h.node)
    # a node carried up unchanged (a cluster of one) is walked through but never returned
    nodes = all_nodes(tree)
    assert 0 in by_level and set(by_level) <= set(range(top + 1)), "top to leaves"
    for level in range(top):
        picked_above = {n.node_id for n in by_level.get(level + 1, [])}
        for node in by_level.get(level, []):
            parents = node.metadata[PARENT_KEY]
            assert picked_above & set(parents) or any(is_carried(nodes[p]) for p in parents)
        assert len(by_level.get(level, [])) <= 2


ANIMAL = [
    "Aardvarks dig burrows and feed at night on ants and termites.",
    "The aardvark uses its long sticky tongue to catch ants and termites.",
]
VOLCANO = [
    "A volcano erupts when magma rises through the crust of the Earth.",
    "Lava from an erupting volcano flows down its slopes and cools into rock.",
]


def swapped_summary(prompt: str) -> str:
    """A misleading summary: a cluster of aardvark chunks is summarised as volcanoes and the
    other way round (anything mixed, like the root's context, gets a neutral one)."""
    animal = any(t in prompt for t in ANIMAL)
    volcano = any(t in prompt for t in VOLCANO)
    if animal and not volcano:
        return "Volcanoes erupt when magma rises through the crust."
    if volcano and not animal:
        return "Aardvarks eat ants and termites."
    return "Animals and geology."


@pytest.mark.slow
@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
async def test_tree_traversal_only_searches_the_children_of_what_it_picked(
    vector_store: Any, embed_model: Any, use_async: bool
) -> None:
    # The query matches the (misleading) summary above the aardvark chunks best, while the best
    # chunk in the whole tree is a volcano chunk under the other summary: a traversal that
    # searched the whole next level instead of the children would return that chunk.
    docs = [Document(text=t) for t in ANIMAL + VOLCANO]
    tokens = sorted(
        n.metadata[TOKENS_KEY]
        for n in RaptorTree(
            vector_store, embed_model=embed_model, llm=ScriptedLLM(replies=[]), **TREE_OPTIONS
        ).make_leaves(docs)
    )
    # two chunks fit one cluster, three do not: level 1 has two summaries or more
    budget = tokens[-1] + tokens[-2]
    assert len(tokens) == 4 and sum(tokens[:3]) > budget
    tree = RaptorTree(
        vector_store,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=swapped_summary),
        **{**TREE_OPTIONS, "max_length_in_cluster": budget},
    )
    tree.build(docs)
    check_invariants(tree)
    query = "volcano magma eruption"
    best_leaf = RaptorRetriever(tree=tree, mode="leaves", similarity_top_k=1).retrieve(query)[0]
    assert best_leaf.node.text in VOLCANO

    retriever = RaptorRetriever(
        tree=tree, mode="tree_traversal", similarity_top_k=1, token_budget=None
    )
    hits = await retriever.aretrieve(query) if use_async else retriever.retrieve(query)
    by_level: dict[int, list[Any]] = {}
    for h in hits:
        by_level.setdefault(h.node.metadata[LEVEL_KEY], []).append(h.node)
    assert set(by_level) == set(range(max(tree.levels()) + 1)), "one pick per level"
    # the picked summary is the one that reads like the query, above the aardvark chunks
    (summary,) = by_level[1]
    assert summary.text.startswith("Volcanoes")
    assert best_leaf.node.node_id not in summary.metadata[CHILD_KEY], "the test can tell"
    for level in range(max(tree.levels())):
        allowed = {c for p in by_level[level + 1] for c in p.metadata[CHILD_KEY]}
        assert {n.node_id for n in by_level[level]} <= allowed, f"level {level} left the subtree"
    (leaf,) = by_level[0]
    assert leaf.text in ANIMAL, "the best chunk under the picked summary, not the best overall"


@pytest.mark.slow
def test_leaves_mode_only_returns_chunks(built: dict[str, Any]) -> None:
    retriever = RaptorRetriever(
        tree=built["retriever"].tree, mode="leaves", similarity_top_k=6, token_budget=None
    )
    hits = retriever.retrieve("alchemy and the philosopher's stone")
    assert len(hits) == 6 and {h.node.metadata[LEVEL_KEY] for h in hits} == {0}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["collapsed", "tree_traversal", "leaves"])
async def test_async_retrieval_matches_sync(
    built: dict[str, Any], mode: str, assert_same_ranking: Any
) -> None:
    retriever = RaptorRetriever(tree=built["retriever"].tree, mode=mode, similarity_top_k=3)
    query = "How does an abacus work?"
    sync = retriever.retrieve(query)
    # same nodes, scores equal up to float noise; summaries with one text tie, in any order
    assert sync
    assert_same_ranking(sync, await retriever.aretrieve(query))


@pytest.mark.slow
def test_empty_query_and_large_k(built: dict[str, Any]) -> None:
    retriever = RaptorRetriever(
        tree=built["retriever"].tree, similarity_top_k=10_000, token_budget=None
    )
    for empty in ("", "   "):
        with pytest.raises(ConfigurationError, match="query is empty"):
            retriever.retrieve(empty)
    originals = [n for n in retriever.tree.store.tree_nodes() if not is_carried(n)]
    assert len(retriever.retrieve("abacus")) == len(originals), "every node, carried ones once"


@pytest.mark.slow
def test_retriever_validates_arguments(built: dict[str, Any], embed_model: Any) -> None:
    tree = built["retriever"].tree
    with pytest.raises(ConfigurationError, match="collapsed, tree_traversal, leaves"):
        RaptorRetriever(tree=tree, mode="flat")
    with pytest.raises(ConfigurationError, match="similarity_top_k must be an integer > 0, got 0"):
        RaptorRetriever(tree=tree, similarity_top_k=0)
    with pytest.raises(ConfigurationError, match="token_budget"):
        RaptorRetriever(tree=tree, token_budget=-5)
    with pytest.raises(ConfigurationError, match="vector_store"):
        RaptorRetriever()
    with pytest.raises(ConfigurationError, match="max_levels"):
        RaptorTree(built["store"], embed_model=embed_model, max_levels=0)
    with pytest.raises(ConfigurationError, match=r"topic_similarity must be in \[-1, 1\]"):
        RaptorTree(built["store"], embed_model=embed_model, topic_similarity=1.5)


def test_missing_tree_says_how_to_build_one(tmp_path: Any, embed_model: Any) -> None:
    store = open_vector_store(str(tmp_path / "empty.db"), "nothing_raptor", dim=384)
    with pytest.raises(CollectionNotFoundError, match="rag-pack raptor build"):
        RaptorRetriever(vector_store=store, embed_model=embed_model)


# ------------------------------------------------------------------ bad input, small corpora
@pytest.mark.slow
def test_empty_and_blank_documents(
    tmp_path: Any, embed_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    tree = RaptorTree(store, embed_model=embed_model, llm=ScriptedLLM(replies=[]), **TREE_OPTIONS)
    with pytest.raises(EmptyCorpusError, match="No documents"):
        tree.build([])
    with pytest.raises(EmptyCorpusError, match="blank"):
        tree.build([Document(text="  \n")])
    with caplog.at_level(logging.WARNING):
        stats = tree.build(
            [Document(text=" "), Document(text="Aardvarks eat ants and termites at night.")]
        )
    assert "Skipping blank document" in caplog.text
    assert stats.levels == {0: 1} and stats.llm_calls == 0, (
        "one chunk: a one-level tree, no summary"
    )


@pytest.mark.slow
def test_small_corpus_on_one_topic_gets_a_single_root(tmp_path: Any, embed_model: Any) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    llm = ScriptedLLM(replies=['"Aardvarks: what they eat and where they live."'])
    docs = [
        Document(text=t)
        for t in (
            "Aardvarks eat ants and termites.",
            "The aardvark digs into termite mounds at night.",
            "Aardvarks live in burrows across Africa.",
        )
    ]
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, **TREE_OPTIONS)
    stats = tree.build(docs)
    assert stats.levels == {0: 3, 1: 1} and llm.call_count == 1
    root = tree.store.level(1)[0]
    assert root.text == "Aardvarks: what they eat and where they live."
    check_invariants(tree)


@pytest.mark.slow
def test_unrelated_one_liners_are_not_summarised_together(tmp_path: Any, embed_model: Any) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    llm = ScriptedLLM(replies=[])
    docs = [
        Document(text=t)
        for t in ("Aardvarks eat ants.", "The abacus is a counting frame.", "Alchemy sought gold.")
    ]
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, **TREE_OPTIONS)
    stats = tree.build(docs)
    assert stats.levels == {0: 3} and llm.call_count == 0, "three topics, three tops, no summary"
    check_invariants(tree)


def first_sentence_summary(prompt: str) -> str:
    """A summary as a model writes it: about the text, without the metadata lines it was shown."""
    lines = context_of(prompt).splitlines()
    text = " ".join(line for line in lines if not re.match(r"^[a-z_]+: ", line))
    return re.split(r"(?<=[.!?])\s", text.strip(), maxsplit=1)[0][:300]


def leaves_under(nodes: dict[str, Any], nid: str) -> set[str]:
    children = nodes[nid].metadata[CHILD_KEY]
    if not children:
        return {nid}
    return set().union(*(leaves_under(nodes, c) for c in children))


@pytest.mark.slow
@pytest.mark.parametrize("chars", [900, 2200])
def test_a_handful_of_chunks_on_two_distant_topics_are_never_mixed(
    tmp_path: Any, embed_model: Any, chars: int
) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    docs = corpus(["Andre Agassi", "Atomic number"], chars=chars)
    llm = ScriptedLLM(replies=first_sentence_summary)
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, **TREE_OPTIONS)
    stats = tree.build(docs)
    nodes = check_invariants(tree)
    leaves_per_doc = {d.doc_id: 0 for d in docs}
    for node in nodes.values():
        if node.metadata[LEVEL_KEY] == 0:
            leaves_per_doc[node.ref_doc_id] += 1
    assert all(2 <= n <= 12 for n in leaves_per_doc.values()), leaves_per_doc
    for nid, node in nodes.items():
        if node.metadata[LEVEL_KEY] > 0:
            docs_below = {nodes[leaf].ref_doc_id for leaf in leaves_under(nodes, nid)}
            assert len(docs_below) == 1, f"summary {nid} mixes tennis and chemistry"
    top = stats.levels and max(stats.levels)
    assert len(tree.store.level(top)) >= 2, "two distinct topics give at least two tops"


def test_topic_similarity_none_lets_a_tiny_corpus_share_one_summary(
    tmp_path: Any, embed_model: Any
) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    llm = ScriptedLLM(replies=['"Aardvarks, abacuses and alchemy."'])
    docs = [
        Document(text=t)
        for t in ("Aardvarks eat ants.", "The abacus is a counting frame.", "Alchemy sought gold.")
    ]
    options = {**TREE_OPTIONS, "topic_similarity": None}
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, **options)
    assert tree.build(docs).levels == {0: 3, 1: 1} and llm.call_count == 1


@pytest.mark.slow
def test_build_progress_shows_levels_clusters_llm_calls_and_eta(
    tmp_path: Any, embed_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    llm = summary_llm()
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, show_progress=True, **TREE_OPTIONS)
    stats = tree.build(corpus(TITLES[:2], chars=1500))
    err = capsys.readouterr().err
    assert f"RAPTOR level 0: clustering {stats.levels[0]} nodes" in err
    assert re.search(r"RAPTOR level 0: \d+ clusters \(\d+\.\d s\)", err)
    level_1 = stats.levels[1]
    assert re.search(rf"RAPTOR level 1 summaries: 100%.*{level_1}/{level_1} ", err)
    assert re.search(r"<00:00", err), "tqdm's remaining-time estimate is shown"
    assert f"LLM calls {level_1}" in err


def test_custom_summary_prompt_is_used(tmp_path: Any, embed_model: Any) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    llm = ScriptedLLM(replies=["Kurz: Tiere und Werkzeuge."])
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, **TREE_OPTIONS)
    tree.update_prompts({"summary_prompt": PromptTemplate("Fasse zusammen:\n{context_str}")})
    assert "summary_prompt" in tree.get_prompts()
    tree.build(
        [Document(text="Aardvarks eat ants."), Document(text="Aardvarks dig burrows at night.")]
    )
    assert llm.prompts[0].startswith("Fasse zusammen:") and "Aardvarks eat ants." in llm.prompts[0]


@pytest.mark.parametrize(
    "reply, expected",
    [
        ('Sure! Here is a summary of the text:\n\n"Aardvarks eat ants."', "Aardvarks eat ants."),
        ("Summary: The abacus counts.", "The abacus counts."),
        ("  'Quoted.'  ", "Quoted."),
        ("Here's a concise summary:\nApollo 11 landed in 1969.", "Apollo 11 landed in 1969."),
        ("Plain text stays: as it is.", "Plain text stays: as it is."),
        ('""', ""),
    ],
)
def test_clean_summary(reply: str, expected: str) -> None:
    assert clean_summary(reply) == expected


# ----------------------------------------------------------------------------- failures and resume
@pytest.mark.slow
@pytest.mark.parametrize("path", ["sync", "async"])
def test_failed_summaries_are_never_stored_and_the_build_resumes(
    tmp_path: Any, embed_model: Any, path: str
) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    docs = corpus(TITLES[:3], chars=1500)
    # a small budget: the leaves need three clusters or more, whatever the clustering
    options = {**TREE_OPTIONS, "max_length_in_cluster": 400}
    assert leaf_tokens(store, docs, embed_model, **options) > 2 * options["max_length_in_cluster"]
    lock = threading.Lock()
    calls = []

    def flaky(prompt: str) -> Any:
        # the first call succeeds, every later one (retries too) fails, in one of two ways;
        # which summary gets the good answer depends on thread timing, how many do not
        with lock:
            calls.append(prompt)
            n = len(calls)
        if n == 1:
            return chatty_summary(prompt)
        if n % 2:
            return "   "  # an empty answer is a failure too, never a node's text
        return TimeoutError("Request timed out.")

    first = ScriptedLLM(replies=flaky)
    tree = RaptorTree(store, embed_model=embed_model, llm=first, **options)
    with pytest.raises(RaptorBuildError, match="build again") as info:
        tree.build(docs)
    assert "TimeoutError" in str(info.value) or "empty summary" in str(info.value)
    assert tree.levels()[0] == len(tree.make_leaves(docs)) and max(tree.levels()) == 1
    stored = {n.node_id for n in tree.store.tree_nodes(min_level=1)}
    asked = {n.node_id for n in tree.store.tree_nodes(min_level=1) if not is_carried(n)}
    assert len(asked) == 1, "the one good summary is stored, the failed ones are not"
    assert all(n.text.strip() for n in tree.store.tree_nodes(min_level=1))

    second = summary_llm(forbid_sync=path == "async")
    tree2 = RaptorTree(store, embed_model=embed_model, llm=second, **options)
    stats = tree2.resume() if path == "sync" else asyncio.run(tree2.aresume())
    assert stats.summaries_reused >= len(stored) > 0
    summaries = {n.node_id for n in tree2.store.tree_nodes(min_level=1)}
    assert stored <= summaries, "finished summaries were kept"
    written = {n.node_id for n in tree2.store.tree_nodes(min_level=1) if not is_carried(n)}
    assert second.call_count == len(written - stored), "only the missing summaries were written"
    check_invariants(tree2)


@pytest.mark.slow
async def test_async_build_is_concurrent_and_never_calls_sync_llm(
    tmp_path: Any, embed_model: Any, gated_llm: Any
) -> None:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    docs = corpus(TITLES, chars=1500)
    # a small budget: level 1 needs four clusters or more, whatever the clustering, so the limit
    # of 3 in flight is reached and would be exceeded if it were not enforced (a budget of about
    # two chunks: a cluster of one is carried up without an LLM call, pairs are summarised);
    # min_compression 1: level 1 is built even where it would not halve the leaves
    options = {
        **TREE_OPTIONS,
        "max_length_in_cluster": 300,
        "max_concurrency": 3,
        "min_compression": 1.0,
    }
    assert leaf_tokens(store, docs, embed_model, **options) > 4 * options["max_length_in_cluster"]
    # each call waits until 3 are in flight (then a short delay, so a 4th would overlap them)
    llm = gated_llm(chatty_summary, target=3, forbid_sync=True, delay=0.01)
    retriever = await RaptorRetriever.afrom_documents(
        docs, llm=llm, embed_model=embed_model, vector_store=store, tree_options=options
    )
    assert retriever.levels()[0] >= 6 and retriever.levels()[1] >= 4
    assert llm.call_count >= 4, "more summaries than may be in flight at once"
    assert llm.max_concurrency == 3 and not llm.gate.timed_out
    summaries = retriever.tree.store.tree_nodes(min_level=1)
    assert llm.call_count == sum(not is_carried(n) for n in summaries), "none for clusters of one"
    check_invariants(retriever.tree)


# ----------------------------------------------------------------------------- incremental updates
@pytest.fixture()
def small_tree(tmp_path: Any, embed_model: Any) -> RaptorRetriever:
    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    return RaptorRetriever.from_documents(
        corpus(TITLES[:3], chars=1500),
        llm=summary_llm(),
        embed_model=embed_model,
        vector_store=store,
        tree_options=TREE_OPTIONS,
    )


@pytest.mark.slow
def test_insert_resummarises_only_what_changed(
    small_tree: RaptorRetriever, embed_model: Any
) -> None:
    before = all_nodes(small_tree.tree)
    llm = summary_llm()
    small_tree.tree.llm = llm
    new_doc = corpus(["Andre Agassi"], chars=900)
    # all leaves fit one cluster's budget: no cluster has to be split, so the only summaries to
    # write are those above the new leaves
    total = leaf_tokens(
        small_tree.tree.store.vector_store,
        corpus(TITLES[:3], chars=1500) + new_doc,
        embed_model,
        **TREE_OPTIONS,
    )
    assert total <= TREE_OPTIONS["max_length_in_cluster"]
    stats = small_tree.insert(new_doc)
    assert stats.leaves_added >= 2 and stats.leaves_removed == 0
    after = check_invariants(small_tree.tree)
    new_leaves = [n for n in after.values() if n.ref_doc_id == "wiki:Andre Agassi"]
    assert len(new_leaves) == stats.leaves_added
    above_new: set[str] = set()
    frontier = {p for n in new_leaves for p in n.metadata[PARENT_KEY]}
    while frontier:
        above_new |= frontier
        frontier = {p for i in frontier for p in after[i].metadata[PARENT_KEY]} - above_new
    # no full rebuild: one call per summary above the new leaves (none for a cluster of one,
    # carried up), every other summary untouched
    assert stats.summaries_written == len(above_new)
    carried = sum(is_carried(after[i]) for i in above_new)
    assert 0 < llm.call_count == len(above_new) - carried == stats.llm_calls
    for i, n in before.items():
        if n.metadata[LEVEL_KEY] > 0 and i not in above_new:
            assert after[i].text == n.text
            assert after[i].metadata[CHILD_KEY] == n.metadata[CHILD_KEY]
    untouched = [i for i, n in before.items() if n.metadata[LEVEL_KEY] == 0]
    assert all(after[i].text == before[i].text for i in untouched), (
        "old leaves are kept as they were"
    )
    hits = RaptorRetriever(tree=small_tree.tree, mode="leaves", similarity_top_k=1).retrieve(
        "Agassi tennis player"
    )
    assert hits[0].node.ref_doc_id == "wiki:Andre Agassi"
    # inserting the same document again changes nothing
    llm.reset()
    again = small_tree.insert(new_doc)
    assert again.leaves_added == 0 and llm.call_count == 0


@pytest.mark.slow
async def test_async_insert_and_delete(small_tree: RaptorRetriever) -> None:
    llm = summary_llm(forbid_sync=True)
    small_tree.tree.llm = llm
    await small_tree.ainsert(corpus(["Andre Agassi"], chars=900))
    inserted_calls = llm.call_count
    assert inserted_calls > 0
    stats = await small_tree.adelete("wiki:Andre Agassi")
    assert stats.leaves_removed >= 2
    nodes = check_invariants(small_tree.tree)
    assert not any(n.ref_doc_id == "wiki:Andre Agassi" for n in nodes.values())
    # no summary is left over the removed leaves (a summary of tennis alone goes with them)
    for nid, node in nodes.items():
        if node.metadata[LEVEL_KEY] > 0:
            assert all(
                nodes[leaf].ref_doc_id != "wiki:Andre Agassi" for leaf in leaves_under(nodes, nid)
            )


@pytest.mark.slow
def test_delete_removes_leaves_and_refreshes_summaries(small_tree: RaptorRetriever) -> None:
    before = all_nodes(small_tree.tree)
    doomed = {i for i, n in before.items() if n.ref_doc_id == "wiki:Alchemy"}
    parents = {p for i in doomed for p in before[i].metadata[PARENT_KEY]}
    llm = summary_llm()
    small_tree.tree.llm = llm
    stats = small_tree.delete("wiki:Alchemy")
    assert stats.leaves_removed == len(doomed) > 0
    after = check_invariants(small_tree.tree)
    assert not doomed & set(after)
    for pid in parents & set(after):
        assert (
            after[pid].text != before[pid].text
            or after[pid].metadata[CHILD_KEY] != before[pid].metadata[CHILD_KEY]
        )
    assert llm.call_count <= sum(1 for n in before.values() if n.metadata[LEVEL_KEY] > 0)


@pytest.mark.slow
async def test_async_traversal_scans_levels_off_the_event_loop(
    built: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = built["retriever"].tree
    retriever = RaptorRetriever(tree=tree, mode="tree_traversal", similarity_top_k=2)
    loop_thread = threading.current_thread()
    scanned_in: list[threading.Thread] = []
    real_top_level = tree.store.top_level

    def recording_top_level() -> int | None:
        scanned_in.append(threading.current_thread())
        return real_top_level()

    monkeypatch.setattr(tree.store, "top_level", recording_top_level)
    hits = await retriever.aretrieve("Who landed on the Moon?")
    assert hits and scanned_in, "the first traversal reads the top level from Milvus"
    assert loop_thread not in scanned_in, "the level scan blocked the event loop"


@pytest.mark.slow
def test_no_bookkeeping_metadata_reaches_the_embedder_or_the_llm(tmp_path: Any, embed_model):
    """A summary's embedding text held ``raptor_source_cluster: N``: the same line in every
    summary pulled unrelated topics together (cosine 0.25-0.43 between tennis and chemistry
    summaries instead of about 0)."""
    from llama_index.core.schema import MetadataMode

    store = open_vector_store(str(tmp_path / "t.db"), "t_raptor", dim=384)
    llm = ScriptedLLM(replies=first_sentence_summary)
    tree = RaptorTree(store, embed_model=embed_model, llm=llm, **TREE_OPTIONS)
    tree.build(corpus(["Andre Agassi", "Atomic number"], chars=900))
    nodes = check_invariants(tree)
    assert any(n.metadata[LEVEL_KEY] > 0 for n in nodes.values())
    for node in nodes.values():
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert "raptor_" not in node.get_content(metadata_mode=mode), (node.node_id, mode)
