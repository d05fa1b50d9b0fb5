"""The in-memory BM25 index (milvus/bm25/bm25_memory.py): Lite's BM25 formula exactly, the same
ranking as searching in Milvus Lite, filters still applied, never stale after the pack's writes,
a chunk gone from the collection never returned, a ``standard`` collection left in Milvus."""

from __future__ import annotations

import asyncio
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from pymilvus import DataType, Function, FunctionType, MilvusClient

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.milvus import connection as milvus_utils
from llama_index_rag_pack.milvus.bm25.bm25_memory import LITE_BM25_B, LITE_BM25_K1, MemoryBM25
from llama_index_rag_pack.milvus.vector_memory import forget_vectors

DOCS = [
    Document(
        id_="tennis",
        text="Agassi beat Medvedev in the French Open final after losing the first two sets. "
        "The final was played on clay in Paris.",
        metadata={"title": "Tennis", "year": 1999},
    ),
    Document(
        id_="chess",
        text="Chess players move pieces on a board of sixty-four squares; the final match "
        "of the championship was played in Paris.",
        metadata={"title": "Chess", "year": 2004},
    ),
    Document(
        id_="bread",
        text="Bakers knead dough from flour and water; yeast ferments and the dough rises.",
        metadata={"title": "Bread", "year": 2010},
    ),
    Document(
        id_="volcano",
        text="The volcano erupted, and ash from the eruption closed the airports of Paris.",
        metadata={"title": "Volcano", "year": 2010},
    ),
]
QUESTIONS = [
    "Who played the final in Paris?",
    "kneading the dough",
    "eruptions closing airports",
    "championship matches and finals",
]


# ----------------------------------------------------------------------------- the formula
def _reference(texts, query, k1=LITE_BM25_K1, b=LITE_BM25_B):
    """BM25 as Milvus Lite's SparseInvertedIndex computes it, term by term."""
    docs = [Counter(t.split()) for t in texts]
    n = len(docs)
    avgdl = sum(sum(d.values()) for d in docs) / n
    scores = {}
    for term, weight in Counter(query.split()).items():
        df = sum(1 for d in docs if term in d)
        if not df:
            continue
        idf = math.log((n - df + 0.5) / (df + 0.5) + 1.0)
        for i, d in enumerate(docs):
            if term in d:
                tf, dl = d[term], sum(d.values())
                part = idf * tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * dl / avgdl))
                scores[i] = scores.get(i, 0.0) + part * weight
    return scores


WORDS = st.sampled_from(["run", "fast", "paris", "final", "dough", "ash", "x"])


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(
    texts=st.lists(st.lists(WORDS, max_size=8).map(" ".join), min_size=1, max_size=12),
    query=st.lists(WORDS, max_size=5).map(" ".join),
    limit=st.integers(1, 15),
    k1=st.floats(0.1, 3.0),
    b=st.floats(0.0, 1.0),
    kept=st.sets(st.integers(0, 11)),
)
def test_scores_are_lites_formula_best_first_ties_by_key(texts, query, limit, k1, b, kept):
    keys = [f"d{i:02d}" for i in range(len(texts))]
    index = MemoryBM25(keys, texts, k1=k1, b=b)
    expected = {keys[i]: s for i, s in _reference(texts, query, k1, b).items() if s > 0}
    only = frozenset(keys[i] for i in kept if i < len(keys))
    for allowed in (None, only):
        got = index.search(query, limit, allowed)
        best = sorted(
            ((k, s) for k, s in expected.items() if allowed is None or k in allowed),
            key=lambda hit: (-hit[1], hit[0]),
        )[:limit]
        assert [k for k, _ in got] == [k for k, _ in best]
        assert [s for _, s in got] == pytest.approx([s for _, s in best], rel=1e-9)
    assert index.search(query, limit) == index.search(query, limit)  # searching changes nothing


def test_nothing_to_score_is_empty():
    index = MemoryBM25(["a", "b"], ["run fast", ""])
    assert index.search("", 5) == []
    assert index.search("unknown words", 5) == []
    assert index.search("run", 0) == []
    assert index.search("run", 5, frozenset()) == []
    assert MemoryBM25([], []).search("run", 5) == []


# ----------------------------------------------------------------------------- Milvus Lite
@pytest.fixture()
def pack(tmp_path, embed_model):
    return RagPack(
        DOCS, uri=str(tmp_path / "m.db"), collection_name="docs", embed_model=embed_model
    )


def _in_milvus(pack, **kwargs):
    return MilvusHybridRetriever(pack.vector_store, search_type="sparse", **kwargs)


def _ids(nodes):
    return [n.node.node_id for n in nodes]


@pytest.mark.slow
def test_lite_bm25_mode_ranks_in_memory_like_milvus(pack):
    fast = pack.retriever("bm25", similarity_top_k=4)
    assert fast.in_memory and fast._bm25_copy("q") is not None  # a Lite file, English analysis
    slow = _in_milvus(pack, similarity_top_k=4)
    assert slow._bm25_copy("q") is None
    for question in QUESTIONS:
        got, expected = fast.retrieve(question), slow.retrieve(question)
        assert got and _ids(got) == _ids(expected)
        assert [n.score for n in got] == pytest.approx([n.score for n in expected], rel=1e-5)
        assert _ids(asyncio.run(fast.aretrieve(question))) == _ids(got)
        for hit, ref in zip(got, expected, strict=True):
            assert hit.node.get_content() == ref.node.get_content() != ""
            assert hit.node.metadata == ref.node.metadata


@pytest.mark.slow
def test_default_mode_fuses_the_in_memory_bm25_side(pack):
    fast = pack.retriever("hybrid_convex", similarity_top_k=4)
    assert fast.sparse._bm25_copy("q") is not None
    from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever

    slow = MilvusScoreFusionRetriever(
        pack.vector_store, embed_model=pack.embed_model, similarity_top_k=4
    )
    for question in QUESTIONS:
        got, expected = fast.sparse.bm25_ids(question, 10), slow.sparse.bm25_ids(question, 10)
        assert got and [k for k, _ in got] == [k for k, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-5)
        assert _ids(fast.retrieve(question)) == _ids(slow.retrieve(question))


@pytest.mark.slow
@pytest.mark.parametrize("expr", ["year == 2010", 'doc_id != "tennis"'])
def test_a_filter_still_applies_in_memory(pack, expr):
    fast = pack.retriever("bm25", similarity_top_k=3, filters=expr)
    slow = _in_milvus(pack, similarity_top_k=3, filter=expr)
    for question in QUESTIONS:
        got = fast.retrieve(question)
        assert _ids(got) == _ids(slow.retrieve(question))
        assert all(n.node.ref_doc_id != "tennis" for n in got)
        if expr.startswith("year"):
            assert all(n.node.metadata["year"] == 2010 for n in got)


@pytest.mark.slow
def test_the_copy_follows_the_packs_writes(pack):
    question = "saxophone quartet"
    assert pack.retriever("bm25").retrieve(question) == []
    pack.insert([Document(id_="jazz", text="A saxophone quartet played jazz all night.")])
    assert [n.node.ref_doc_id for n in pack.retriever("bm25").retrieve(question)] == ["jazz"]
    pack.delete(filters='doc_id == "jazz"')
    assert pack.retriever("bm25").retrieve(question) == []


@pytest.mark.slow
def test_a_chunk_gone_from_the_collection_is_never_returned(pack):
    client, name = pack.vector_store.client, pack.vector_store.collection_name
    fast = pack.retriever("bm25", similarity_top_k=2)
    first = fast.retrieve(QUESTIONS[0])[0]
    # removed behind the pack's back: the in-memory copy still holds it
    client.delete(name, filter=f'id == "{first.node.node_id}"')
    client.flush(name)
    again = fast.retrieve(QUESTIONS[0])
    assert first.node.node_id not in _ids(again)
    assert len(again) == 2  # the next chunk takes its place
    milvus_utils.flush(pack.vector_store)  # what the pack's writes call: the copy is re-read
    assert first.node.node_id not in _ids(fast.retrieve(QUESTIONS[0]))


@pytest.mark.slow
def test_a_standard_collection_stays_in_milvus(tmp_path, embed_model):
    pack = RagPack(
        DOCS,
        uri=str(tmp_path / "s.db"),
        collection_name="docs",
        embed_model=embed_model,
        bm25_analyzer="standard",
    )
    fast = pack.retriever("bm25", similarity_top_k=3)
    assert fast.in_memory and fast._bm25_copy("q") is None
    assert _ids(fast.retrieve(QUESTIONS[0])) == _ids(
        _in_milvus(pack, similarity_top_k=3).retrieve(QUESTIONS[0])
    )


@pytest.mark.slow
def test_a_collection_lite_scores_segment_by_segment_stays_in_milvus(tmp_path):
    client = MilvusClient(str(tmp_path / "k.db"))
    schema = client.create_schema()
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
    schema.add_field("bm25_text", DataType.VARCHAR, max_length=1000, enable_analyzer=True)
    schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    schema.add_function(
        Function(
            name="bm25",
            function_type=FunctionType.BM25,
            input_field_names=["bm25_text"],
            output_field_names=["sparse"],
        )
    )
    index = client.prepare_index_params()
    index.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    client.create_collection("c", schema=schema, index_params=index)
    texts = ["run run run far", "run", "walk far away", "far far run walk slow", "slow", "far"]
    rows = [{"id": f"k{i}", "bm25_text": t} for i, t in enumerate(texts)]

    def retriever():
        return MilvusHybridRetriever(
            client=client,
            collection_name="c",
            search_type="sparse",
            sparse_field="sparse",
            text_field="bm25_text",
            in_memory=True,
        )

    def in_lite(query):
        return retriever()._milvus_bm25_ids(query, 10, "")

    client.insert("c", rows[:3])
    client.flush("c")
    assert retriever()._bm25_copy("q") is not None  # one segment: the copy scores as Lite
    # a second write in its own segment: Lite scores each segment with its own statistics
    client.insert("c", rows[3:])
    client.flush("c")
    forget_vectors(client, "c")
    assert retriever()._bm25_copy("q") is None
    copy = MemoryBM25([r["id"] for r in rows], texts)
    assert [s for _, s in copy.search("run far walk", 10)] != pytest.approx(
        [s for _, s in in_lite("run far walk")]
    )
    for query in ("run far walk", "slow", "far"):
        assert retriever().bm25_ids(query, 10) == in_lite(query)  # answered by Lite
