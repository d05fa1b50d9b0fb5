"""In-memory vector copies (milvus/vector_memory.py) and the hybrid search that uses them on a
Milvus Lite file: same ranking as searching in Milvus, never stale after the pack's writes, a
filter still applied, chunks gone from the collection never returned."""

from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.similarity import UnitRows, normalize_rows
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever
from llama_index_rag_pack.milvus import connection as milvus_utils
from llama_index_rag_pack.milvus import vector_memory
from llama_index_rag_pack.milvus.bm25 import bm25_memory
from llama_index_rag_pack.milvus.vector_memory import forget_vectors, memory_vectors, top_scores

TOPICS = {
    "tennis": "Agassi beat Medvedev in the French Open final after losing the first two sets.",
    "chess": "Chess is a board game for two players on a checkered board of 64 squares.",
    "bread": "Bread is baked from flour, water and yeast; the dough rises as the yeast ferments.",
    "volcano": "A volcano erupts when molten rock, ash and gases escape from a magma chamber.",
    "violin": "The violin is a bowed string instrument with four strings tuned in fifths.",
    "comet": "A comet is an icy body that releases gas and dust when it passes near the Sun.",
    "glacier": "Glaciers are slow rivers of ice that carve valleys as they move downhill.",
    "coffee": "Coffee beans are roasted seeds of the coffee plant, brewed with hot water.",
}
DOCS = [
    Document(id_=name, text=f"{text} It is a topic of its own.", metadata={"title": name.title()})
    for name, text in TOPICS.items()
]
QUESTIONS = [
    "Who won in Paris after trailing by two sets?",
    "How many squares does the game board have?",
    "What makes dough rise?",
    "string instrument played with a bow",
]


# ----------------------------------------------------------------------------- top_scores
@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.lists(st.sampled_from("abcdefgh"), min_size=n, max_size=n),
            st.lists(st.floats(-1, 1, width=32), min_size=n * 3, max_size=n * 3),
            st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3),
            st.integers(1, 40),
        )
    )
)
def test_top_scores_keeps_each_keys_best_row_among_the_best_rows(case):
    keys, flat, query, limit = case
    matrix = np.asarray(flat, dtype=np.float32).reshape(len(keys), 3)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix /= np.where(norms > 0, norms, 1.0)
    got = top_scores(keys, matrix, query, limit)
    q = np.asarray(query, dtype=np.float32)
    q = q / np.linalg.norm(q) if np.linalg.norm(q) > 0 else q
    scores = matrix @ q
    # best first, equal scores by key, each key once
    assert got == sorted(got, key=lambda kv: (-kv[1], kv[0]))
    assert len({k for k, _ in got}) == len(got)
    # every row scoring above the cut belongs to a returned key, with at most that score
    cut = np.sort(scores)[::-1][min(limit, len(keys)) - 1]
    returned = dict(got)
    for key, score in zip(keys, scores, strict=True):
        if score > cut + 1e-6:
            assert key in returned and returned[key] >= score - 1e-6
    # a returned key scores as its best row
    for key, score in returned.items():
        best = max(s for k, s in zip(keys, scores, strict=True) if k == key)
        assert score == pytest.approx(float(best), abs=1e-6)


@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.lists(st.booleans(), min_size=6, max_size=6)),
        min_size=0,
        max_size=4,
    ),
    st.integers(0, 2**31 - 1),
)
@settings(max_examples=60, deadline=None)
def test_unit_rows_score_the_kept_rows_as_a_normalised_copy_would(blocks, seed):
    """``UnitRows(blocks) @ q`` equals the normalised matrix of the kept rows times ``q``, with
    zero rows, huge and tiny rows, and blocks that keep some, all or none of their rows."""
    rng = np.random.default_rng(seed)
    parts, kept_rows = [], []
    for rows, keep in blocks:
        matrix = rng.normal(size=(rows, 3)).astype(np.float32)
        matrix[0] *= 0  # a zero row
        matrix[-1] *= np.float32(rng.choice([1e-30, 1e30, 1.0]))
        kept = [i for i in range(rows) if keep[i]]
        parts.append((matrix, None if len(kept) == rows else kept))
        kept_rows.append(matrix[kept])
    unit = UnitRows(parts)
    query = rng.normal(size=3).astype(np.float32)
    expected = normalize_rows(np.concatenate(kept_rows)) @ query if kept_rows else np.zeros(0)
    assert len(unit) == len(expected)
    np.testing.assert_allclose(unit @ query, expected, rtol=1e-5, atol=1e-6)
    assert unit.rows().shape == (len(expected), 3 if parts else 0)
    assert all(m is p[0] for (m, _), p in zip(unit.blocks, parts, strict=True))  # not copied


def test_top_scores_of_nothing_is_empty():
    assert top_scores([], np.zeros((0, 3), dtype=np.float32), [1.0, 0.0, 0.0], 5) == []
    assert top_scores(["a"], np.ones((1, 3), dtype=np.float32), [1.0, 0.0, 0.0], 0) == []


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 9).flatmap(
        lambda n: st.lists(
            st.lists(
                st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=3, max_size=3
            )
            | st.just([0.0, 0.0, 0.0]),
            min_size=n,
            max_size=n,
        )
    ),
    st.integers(1, 4),
)
def test_rows_scaled_in_place_equal_normalize_rows_bit_for_bit(rows, block):
    """A copy's matrix is scaled in place, block by block (milvus/vector_memory.py): the same
    float32 values as core's normalize_rows, whatever the blocks."""
    from llama_index_rag_pack.core import similarity

    matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), 3)
    expected = similarity.normalize_rows(matrix)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(similarity, "_BLOCK_ROWS", block)
        got = similarity.normalize_rows_in_place(matrix.copy())
    assert got.dtype == np.float32 and np.array_equal(got, expected)


# ----------------------------------------------------------------------------- Milvus Lite
@pytest.fixture()
def pack(tmp_path, embed_model):
    return RagPack(
        DOCS, uri=str(tmp_path / "m.db"), collection_name="docs", embed_model=embed_model
    )


def _in_milvus(pack, **kwargs):
    return MilvusScoreFusionRetriever(
        pack.vector_store, embed_model=pack.embed_model, in_memory=False, **kwargs
    )


def _ids(nodes):
    return [n.node.node_id for n in nodes]


@pytest.mark.slow
def test_lite_pack_fuses_in_memory_and_ranks_like_milvus(pack):
    fast = pack.retriever("hybrid_convex", similarity_top_k=5)
    assert fast.in_memory  # a Lite file
    slow = _in_milvus(pack, similarity_top_k=5, concurrent_searches=False)
    for question in QUESTIONS:
        got, expected = fast.retrieve(question), slow.retrieve(question)
        assert _ids(got) == _ids(expected)
        assert [n.score for n in got] == pytest.approx([n.score for n in expected], abs=1e-5)
        assert _ids(asyncio.run(fast.aretrieve(question))) == _ids(got)
        # every returned chunk carries its text and metadata, read from Milvus
        for hit, ref in zip(got, expected, strict=True):
            assert hit.node.get_content() == ref.node.get_content() != ""
            assert hit.node.ref_doc_id == ref.node.ref_doc_id
            assert hit.node.metadata["title"] == ref.node.metadata["title"]
            assert hit.node.metadata["retrieval_search_type"] == "hybrid"


@pytest.mark.slow
def test_chunks_found_by_dense_search_alone_come_back_whole(pack):
    # the glacier chunk shares no word with the question: BM25 never brings it, it is read by id
    fast = pack.retriever("hybrid_convex", similarity_top_k=3)
    nodes = fast.retrieve("frozen water moving slowly")
    assert nodes[0].node.ref_doc_id == "glacier"
    assert all(n.node.get_content().endswith("It is a topic of its own.") for n in nodes)


@pytest.mark.slow
@pytest.mark.parametrize("sentence_index", [True, False])
def test_dense_copy_follows_the_packs_writes(tmp_path, embed_model, sentence_index):
    pack = RagPack(
        DOCS,
        uri=str(tmp_path / "w.db"),
        collection_name="docs",
        embed_model=embed_model,
        sentence_index=sentence_index,
    )
    dense_only = {"alpha": 1.0, "sentence_weight": 0.0}
    question = "the four largest planets of the solar system"
    before = pack.retriever("hybrid_convex", **dense_only).retrieve(question)
    assert before[0].node.ref_doc_id != "planets"
    pack.insert([Document(id_="planets", text="Jupiter, Saturn, Uranus and Neptune are giants.")])
    after = pack.retriever("hybrid_convex", **dense_only).retrieve(question)
    assert after[0].node.ref_doc_id == "planets"


@pytest.mark.slow
def test_a_chunk_gone_from_the_collection_is_never_returned(pack):
    client, name = pack.vector_store.client, pack.vector_store.collection_name
    fast = pack.retriever("hybrid_convex", similarity_top_k=4)
    first = fast.retrieve(QUESTIONS[0])[0]
    # removed behind the pack's back: its sentences and the dense copy still name it
    client.delete(name, filter=f'id == "{first.node.node_id}"')
    client.flush(name)
    again = fast.retrieve(QUESTIONS[0])
    assert first.node.node_id not in _ids(again)
    assert len(again) == 4  # the next chunks fill the place
    milvus_utils.flush(pack.vector_store)  # what the pack's writes call: the copy is re-read
    assert first.node.node_id not in _ids(fast.retrieve(QUESTIONS[0]))


@pytest.mark.slow
def test_a_filter_keeps_the_dense_search_in_milvus(pack):
    kwargs = dict(embed_model=pack.embed_model, filter='doc_id != "tennis"', similarity_top_k=3)
    fast = MilvusScoreFusionRetriever(pack.vector_store, in_memory=True, **kwargs)
    nodes = fast.retrieve(QUESTIONS[0])
    assert nodes and all(n.node.ref_doc_id != "tennis" for n in nodes)
    assert _ids(nodes) == _ids(
        _in_milvus(pack, filter='doc_id != "tennis"', similarity_top_k=3).retrieve(QUESTIONS[0])
    )


@pytest.mark.slow
def test_forget_drops_every_clients_copy(pack, tmp_path):
    client, name = pack.vector_store.client, pack.vector_store.collection_name
    keys, _ = memory_vectors(client, name, key_field="id")
    assert len(keys) == pack.count()
    assert memory_vectors(client, name, key_field="id")[0] is keys  # read once
    forget_vectors(object(), name)  # any client: the copy is of the collection
    assert memory_vectors(client, name, key_field="id")[0] is not keys


def _held(pack):
    """The collections of ``pack``'s client that have an in-memory copy."""
    return {key[0] for key in vector_memory._COPIES.get(pack.vector_store.client, {})}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hybrid_convex", "bm25"])
def test_milvus_answers_the_first_queries_then_the_copy_does_the_same(pack, monkeypatch, mode):
    monkeypatch.setattr(vector_memory, "SEARCHES_BEFORE_COPY", 2)  # the default's idea, smaller
    fast = pack.retriever(mode, similarity_top_k=5)
    assert fast.in_memory
    slow = (
        _in_milvus(pack, similarity_top_k=5, concurrent_searches=False)
        if mode == "hybrid_convex"
        else MilvusHybridRetriever(pack.vector_store, search_type="sparse", similarity_top_k=5)
    )
    expected = {q: _ids(slow.retrieve(q)) for q in QUESTIONS}
    first, second, third = QUESTIONS[:3]
    assert _ids(fast.retrieve(first)) == expected[first]
    assert _ids(asyncio.run(fast.aretrieve(first))) == expected[first]  # the same query again
    assert _ids(fast.retrieve(second)) == expected[second]
    # two different queries: Milvus answered for the chunks, whose copies were not read (the
    # sentence vectors are Lite's own arrays, searched where they are from the first query)
    assert "docs" not in _held(pack)
    assert _ids(fast.retrieve(third)) == expected[third]
    assert "docs" in _held(pack)  # the third one made the copies and used them
    assert _ids(fast.retrieve(QUESTIONS[3])) == expected[QUESTIONS[3]]


@pytest.fixture()
def gated_reads(monkeypatch):
    """Copies read in the background (the default) after two searches, each chunk copy's read
    held until the returned event is set (the sentence vectors, Lite's own arrays searched where
    they are, are read by the first search)."""
    monkeypatch.setattr(vector_memory, "SEARCHES_BEFORE_COPY", 2)
    monkeypatch.setattr(vector_memory, "BACKGROUND_COPIES", True)
    monkeypatch.setattr(vector_memory, "SEARCH_READS_UP_TO", 0)  # even the tests' small ones
    gate, real = threading.Event(), vector_memory.lite_columns

    def held(*args, **kwargs):
        assert args[1].endswith("__sentences") or gate.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(vector_memory, "lite_columns", held)
    monkeypatch.setattr(bm25_memory, "lite_columns", held)
    yield gate
    gate.set()
    assert vector_memory.wait_for_copies(30)


@pytest.mark.slow
def test_a_due_copy_is_read_in_the_background_while_milvus_answers(pack, gated_reads):
    fast = pack.retriever("hybrid_convex", similarity_top_k=5)
    slow = _in_milvus(pack, similarity_top_k=5, concurrent_searches=False)
    expected = {q: _ids(slow.retrieve(q)) for q in QUESTIONS}
    for question in QUESTIONS:  # the third makes the copies due: none of them waits for it
        assert _ids(fast.retrieve(question)) == expected[question]
    assert _ids(asyncio.run(fast.aretrieve(QUESTIONS[3]))) == expected[QUESTIONS[3]]
    assert _held(pack) == {"docs__sentences"}  # the chunks' copies: still being read
    assert not vector_memory.wait_for_copies(0.05)
    gated_reads.set()
    assert vector_memory.wait_for_copies(30)
    assert {"docs", "docs__sentences"} <= _held(pack)
    for question in QUESTIONS:  # from the copies now, ranked the same
        assert _ids(fast.retrieve(question)) == expected[question]


@pytest.mark.slow
def test_a_small_collections_copy_is_read_by_the_search_that_makes_it_due(pack, monkeypatch):
    monkeypatch.setattr(vector_memory, "SEARCHES_BEFORE_COPY", 2)
    monkeypatch.setattr(vector_memory, "BACKGROUND_COPIES", True)  # the default, as shipped
    fast = pack.retriever("hybrid_convex", similarity_top_k=5)
    expected = _ids(_in_milvus(pack, similarity_top_k=5).retrieve(QUESTIONS[2]))
    for question in QUESTIONS[:2]:
        fast.retrieve(question)
    assert "docs" not in _held(pack)
    assert _ids(fast.retrieve(QUESTIONS[2])) == expected
    assert {"docs", "docs__sentences"} <= _held(pack)  # read by that search: no thread
    assert not vector_memory._READERS


@pytest.mark.slow
def test_a_write_during_a_background_read_keeps_nothing_it_read(pack, gated_reads):
    fast = pack.retriever("hybrid_convex", similarity_top_k=3)
    for question in QUESTIONS:
        fast.retrieve(question)  # the copies are due and being read
    pack.insert([Document(id_="planets", text="Jupiter, Saturn, Uranus and Neptune are giants.")])
    gated_reads.set()  # the read goes on, of a collection written to since it began
    assert vector_memory.wait_for_copies(30)
    held = vector_memory._COPIES.get(pack.vector_store.client, {})
    assert ("docs", vector_memory.vectors_slot("id")) not in held  # begun before: thrown away
    question = "the four largest planets of the solar system"
    assert fast.retrieve(question)[0].node.ref_doc_id == "planets"  # Milvus, reading again
    assert vector_memory.wait_for_copies(30)
    keys, _ = memory_vectors(pack.vector_store.client, "docs", key_field="id")
    assert len(keys) == pack.count()  # the copy read after the write holds the new chunk
    assert fast.retrieve(question)[0].node.ref_doc_id == "planets"


@pytest.mark.slow
def test_a_copy_the_background_could_not_read_is_read_by_the_search(pack, monkeypatch, caplog):
    monkeypatch.setattr(vector_memory, "SEARCHES_BEFORE_COPY", 0)
    monkeypatch.setattr(vector_memory, "BACKGROUND_COPIES", True)
    monkeypatch.setattr(vector_memory, "SEARCH_READS_UP_TO", 0)
    real, failures = vector_memory.lite_columns, []

    def failing_once(*args, **kwargs):
        if not failures:
            failures.append(args[1])
            raise ConnectionError("server gone for a moment")
        return real(*args, **kwargs)

    monkeypatch.setattr(vector_memory, "lite_columns", failing_once)
    caplog.set_level(logging.INFO, logger=vector_memory.__name__)
    fast = pack.retriever("hybrid_convex", similarity_top_k=3)
    expected = _ids(fast.retrieve(QUESTIONS[2]))  # Milvus answers; the copy is read meanwhile
    assert vector_memory.wait_for_copies(30) and failures
    assert "copy not read in the background: server gone" in caplog.text
    assert _ids(fast.retrieve(QUESTIONS[2])) == expected  # the search read it itself
    assert failures[0] in _held(pack)


@pytest.mark.slow
@pytest.mark.parametrize(("dim", "rows"), [(8, vector_memory.MAX_VECTOR_PAGE), (4096, 4032)])
def test_a_copy_reads_its_vectors_in_pages_bounded_by_bytes(tmp_path, monkeypatch, dim, rows):
    """Where the rows cannot be read from Lite's segments (a server, another Lite release), a
    copy reads them with a query iterator, which Milvus Lite answers page by page by scanning the
    collection: as many vectors a page as fit VECTOR_PAGE_BYTES (up to Milvus' largest page),
    every row once."""
    from llama_index.core.schema import TextNode

    store = milvus_utils.open_vector_store(str(tmp_path / "pages.db"), "pages", dim=dim)
    rng = np.random.default_rng(0)
    store.add(
        [TextNode(id_=f"n{i}", text=f"row {i}", embedding=list(rng.random(dim))) for i in range(5)]
    )
    milvus_utils.flush(store)
    client = store.client
    asked: list[int] = []
    real = client.query_iterator

    def recording(*args, **kwargs):
        asked.append(kwargs["batch_size"])
        return real(*args, **kwargs)

    monkeypatch.setattr(client, "query_iterator", recording)
    monkeypatch.setattr(vector_memory, "VECTOR_PAGE_BYTES", 64 * 1024 * 1024)
    monkeypatch.setattr(vector_memory, "lite_columns", lambda *args: None)  # e.g. a server
    keys, matrix = memory_vectors(client, "pages", key_field="id")
    assert asked == [rows] and rows * 4 * dim <= vector_memory.VECTOR_PAGE_BYTES
    assert sorted(keys) == [f"n{i}" for i in range(5)] and matrix.shape == (5, dim)


def test_a_collection_whose_dimension_cannot_be_read_is_copied_in_small_pages() -> None:
    class Unreadable:
        def describe_collection(self, name):
            raise RuntimeError("server gone")

    assert vector_memory.vector_page_rows(Unreadable(), "c", "embedding") == 2000


@pytest.mark.slow
def test_a_copy_of_texts_reads_pages_sized_by_its_widest_sampled_row(tmp_path) -> None:
    from llama_index.core.schema import TextNode

    store = milvus_utils.open_vector_store(str(tmp_path / "texts.db"), "texts", dim=8)
    widths = [10, 40_000, 200]  # one long row among short ones
    store.add(
        [TextNode(id_=f"t{i}", text="é" * n, embedding=[1.0] * 8) for i, n in enumerate(widths)]
    )
    milvus_utils.flush(store)
    rows = vector_memory.text_page_rows(store.client, "texts", ["id", "text"])
    # 80,002 bytes at most (two-byte characters and the id): pages of 64 MB over four times that
    assert rows == max(vector_memory.MIN_PAGE, vector_memory.VECTOR_PAGE_BYTES // (4 * 80_002))
    assert rows * 80_002 <= 256 * 1024 * 1024  # the most a message may carry
    assert (
        vector_memory.text_page_rows(store.client, "texts", ["id"]) == vector_memory.MAX_VECTOR_PAGE
    )


@pytest.mark.slow
def client_collection(client, name: str):
    """Milvus Lite's own collection object behind ``client`` (served in this process)."""
    from milvus_lite.server_manager import server_manager_instance

    address = client._config.address
    (db,) = [
        db
        for _, db, port in server_manager_instance._servers.values()
        if address.endswith(f":{port}")
    ]
    return db.get_collection(name, "default")


def test_lite_rows_are_read_from_its_segments_as_its_queries_read_them(tmp_path) -> None:
    """The copies' source on a Lite file (``milvus.lite.lite_columns``): every live row once,
    whether flushed or not, written twice or deleted, and the same as a query iterator reads."""
    from pymilvus import DataType, MilvusClient

    from llama_index_rag_pack.milvus.lite import lite_columns

    client = MilvusClient(str(tmp_path / "rows.db"))
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=16)
    schema.add_field("chunk_id", DataType.VARCHAR, max_length=16)
    schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=4)
    index = client.prepare_index_params()
    index.add_index("embedding", index_type="FLAT", metric_type="COSINE")
    client.create_collection("rows", schema=schema, index_params=index)

    def rows(ids, version):
        return [
            {"id": f"s{i}", "chunk_id": f"c{i // 3}.{version}", "embedding": [i, version, 1, 0]}
            for i in ids
        ]

    client.insert("rows", rows(range(0, 40), 1))
    client.flush("rows")  # one segment
    client.insert("rows", rows(range(40, 60), 1))
    client.flush("rows")  # a second one
    client.upsert("rows", rows(range(30, 45), 2))  # written again, spanning both, unflushed
    client.delete("rows", filter='id in ["s1", "s41", "s50"]')  # flushed rows, deleted later
    client.insert("rows", rows(range(60, 64), 1))  # unflushed
    client.delete("rows", filter='id in ["s62"]')  # unflushed, deleted before a flush

    direct = lite_columns(client, "rows", ["id", "chunk_id", "embedding"])
    assert direct is not None  # this Milvus Lite release is read from its segments
    vectors = direct["embedding"]
    got = sorted(zip(direct["id"], direct["chunk_id"], vectors.rows().tolist(), strict=True))
    queried = sorted(
        (row["id"], row["chunk_id"], [float(x) for x in row["embedding"]])
        for batch in vector_memory.read_rows(client, "rows", ["id", "chunk_id", "embedding"])
        for row in batch
    )
    assert got == queried
    assert len(got) == 60 and {"s1", "s41", "s50", "s62"}.isdisjoint(direct["id"])
    assert dict((i, c) for i, c, _ in got)["s44"] == "c14.2"  # the newer write
    # the flushed segments' vectors are Lite's own arrays, not copies of them
    segments, _ = client_collection(client, "rows")._read_snapshot()
    assert all(
        any(np.shares_memory(block, s.vectors) for block, _ in vectors.blocks)
        for s in segments
        if s.num_rows
    )
    assert lite_columns(object(), "rows", ["id"]) is None  # not a client Lite serves here
    assert lite_columns(client, "missing", ["id"]) is None
