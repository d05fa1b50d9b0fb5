"""The in-memory copies of a Lite collection: bounded by a budget, off on request, and the
rankings the same either way (up to ties of equal scores)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus import memory_budget, vector_memory
from llama_index_rag_pack.pack.rag_pack import RagPack

QUERIES = [
    "Which river flows through the capital?",
    "glaciers and ice",
    "a tool for calculating",
    "desert animals at night",
    "forest fires in summer",
]
TOPICS = ["river", "glacier", "abacus", "desert", "forest", "island", "volcano", "ocean"]


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    uri = str(tmp_path_factory.mktemp("budget") / "budget.db")
    docs = [
        Document(
            text=f"Note {i} is about the {TOPICS[i % 8]}. The {TOPICS[(i * 3) % 8]} is near. "
            f"People visit the {TOPICS[i % 8]} in season {i % 4}.",
            id_=f"n{i}",
            metadata={"kind": "even" if i % 2 == 0 else "odd"},
        )
        for i in range(40)
    ]
    return RagPack(docs, uri=uri, collection_name="budget", embed_model=embed_model, llm="none")


def _fresh(pack: RagPack) -> RagPack:
    """The pack with no retriever built and no copy held (the budget is read again)."""
    pack.forget_engines()
    store = pack.vector_store
    vector_memory.forget_vectors(store.client, store.collection_name)
    vector_memory.forget_vectors(store.client, f"{store.collection_name}__sentences")
    return pack


def _copies(pack: RagPack) -> int:
    return len(vector_memory._COPIES.get(pack.vector_store.client, {}))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hybrid_convex", "bm25", "vector", "hybrid"])
@pytest.mark.parametrize("filtered", [False, True])
def test_rankings_are_the_same_with_the_copies_off(
    pack, monkeypatch, assert_same_ranking, mode, filtered
) -> None:
    filters = 'kind == "even"' if filtered else None
    _fresh(pack)
    with_copies = [pack.retriever(mode, filters=filters).retrieve(q) for q in QUERIES]
    assert _copies(pack) > 0 or mode in ("vector", "hybrid")
    monkeypatch.setenv("RAG_PACK_MEMORY_COPIES", "off")
    _fresh(pack)
    without = [pack.retriever(mode, filters=filters).retrieve(q) for q in QUERIES]
    assert _copies(pack) == 0
    assert sum(map(bool, with_copies)) >= 2  # BM25: nothing for "a tool for calculating"
    for a, b in zip(with_copies, without, strict=True):
        assert_same_ranking(a, b)


@pytest.mark.slow
def test_a_collection_over_the_budget_is_searched_in_milvus(pack, monkeypatch, caplog) -> None:
    monkeypatch.setenv("RAG_PACK_MEMORY_BUDGET_MB", "0.01")  # 40 chunks need more
    _fresh(pack)
    with caplog.at_level(logging.INFO, logger=memory_budget.__name__):
        hits = pack.retriever().retrieve(QUERIES[0])
    assert hits and _copies(pack) == 0
    assert "over the 0 MB budget" in caplog.text


def test_the_estimate_grows_with_the_collection() -> None:
    small = memory_budget.estimated_copies_mb(1_000, 7_000, 384)
    large = memory_budget.estimated_copies_mb(100_000, 700_000, 384)
    assert 0 < small < large == pytest.approx(100 * small)
    # read from Lite's segments the vectors are not copied: the keys and the BM25 index
    assert 50 < large < 400
    copied = memory_budget.estimated_copies_mb(100_000, 700_000, 384, copied=True)
    assert large + 1_000 < copied < memory_budget.DEFAULT_BUDGET_MB  # 100k chunks fit


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RAG_PACK_MEMORY_COPIES", "sometimes"),
        ("RAG_PACK_MEMORY_BUDGET_MB", "lots"),
        ("RAG_PACK_MEMORY_BUDGET_MB", "-5"),
        ("RAG_PACK_MEMORY_BUDGET_MB", "nan"),
    ],
)
def test_bad_settings_are_one_error(monkeypatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=name):
        memory_budget.copies_budget_mb()
