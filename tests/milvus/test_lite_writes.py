"""The pack's two changes to how Milvus Lite writes rows (``milvus/lite.py``): its flush takes
the unflushed rows column by column from their Arrow batches, and a row's vector of plain
numbers is checked in one pass. Each gives what Lite's own function gives, on the pinned
release: the same segment table, the same rows accepted and the same errors raised."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.core.errors import MilvusOperationError
from llama_index_rag_pack.milvus.client_open import open_client
from llama_index_rag_pack.milvus.lite_engine import fast_paths as lite


def _lite_own(name: str):
    """Lite's own function behind the pack's replacement."""
    from milvus_lite.engine import collection as engine
    from milvus_lite.schema import validation
    from milvus_lite.storage.memtable import MemTable

    if name == "flush":
        assert lite.flush_rows_by_column()
        built = MemTable._build_data_table
        assert built.rag_pack_columnar
        return built, built.__closure__[0].cell_contents  # (the pack's, Lite's)
    assert lite.check_vector_elements_at_once()
    assert engine.validate_record.rag_pack_elements_at_once
    return engine.validate_record, validation.validate_record


def _schema(client, name: str, *, dynamic: bool = True) -> None:
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=dynamic)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=32)
    schema.add_field("text", DataType.VARCHAR, max_length=200)
    schema.add_field("meta", DataType.JSON)
    schema.add_field("n", DataType.INT64)
    schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=4)
    index = client.prepare_index_params()
    index.add_index("embedding", index_type="FLAT", metric_type="COSINE")
    client.create_collection(name, schema=schema, index_params=index)


def _rows(ids, version: int) -> list[dict]:
    return [
        {
            "id": f"r{i}",
            "text": f"row {i} v{version} é 中",
            "meta": {"i": i, "tags": ["a", None], "v": version},
            "n": i * version,
            "embedding": [float(i), float(version), 0.5, -1.0],
            "extra": f"dynamic {i}",
        }
        for i in ids
    ]


def test_a_flush_builds_the_table_lites_own_flush_builds(tmp_path, monkeypatch) -> None:
    """Inserts across several batches, rows written again and rows deleted before the flush:
    the segment table is the one Lite's own function builds, row for row and type for type,
    and the collection reads back the same."""
    from milvus_lite.storage.memtable import MemTable

    ours, theirs = _lite_own("flush")
    tables = []

    def both(self, rows):
        mine, lites = lite.columnar_table(self, rows), theirs(self, rows)
        assert mine is not None  # taken column by column, not handed back to Lite's
        tables.append((mine, lites))
        return ours(self, rows)

    monkeypatch.setattr(MemTable, "_build_data_table", both)
    client = open_client(str(tmp_path / "flush.db"))
    _schema(client, "rows")
    client.insert("rows", _rows(range(0, 30), 1))
    client.insert("rows", _rows(range(30, 50), 1))
    client.upsert("rows", _rows(range(20, 35), 2))  # written again, across both batches
    client.delete("rows", filter='id in ["r3", "r31", "r49"]')
    client.insert("rows", _rows(range(50, 53), 1))
    client.flush("rows")
    assert tables
    for mine, lites in tables:
        assert mine.schema.equals(lites.schema)
        assert mine.to_pylist() == lites.to_pylist()
    got = client.query("rows", filter="", output_fields=["id", "n", "meta", "extra"], limit=100)
    assert len(got) == 50
    assert {r["id"]: r["n"] for r in got}["r25"] == 50  # the newer write
    assert {r["id"]: r["extra"] for r in got}["r51"] == "dynamic 51"


_ELEMENTS = st.one_of(
    st.floats(allow_nan=False, width=64),
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.none(),
    st.text(max_size=2),
    st.just(np.float32(0.5)),
    st.just(np.float64(1.5)),
)


@settings(max_examples=200, deadline=None)
@given(
    vector=st.one_of(
        st.lists(_ELEMENTS, min_size=3, max_size=5),
        st.lists(st.floats(allow_nan=False), min_size=4, max_size=4).map(tuple),
        st.none(),
        st.just("abcd"),
    ),
    missing_id=st.booleans(),
)
def test_a_row_passes_and_fails_the_vector_check_as_it_does_in_lite(vector, missing_id) -> None:
    """Lists of floats and ints of the right length, bools, None, strings, numpy numbers,
    tuples, wrong lengths, a missing primary key: the same rows pass, the same errors are
    raised, and the row keeps its own vector."""
    from milvus_lite.schema.types import CollectionSchema, DataType, FieldSchema

    ours, theirs = _lite_own("validate")
    schema = CollectionSchema(
        fields=[
            FieldSchema(name="id", dtype=DataType.VARCHAR, is_primary=True, max_length=8),
            FieldSchema(name="embedding", dtype=DataType.FLOAT_VECTOR, dim=4),
        ]
    )

    def outcome(check):
        record = {"embedding": vector} if missing_id else {"id": "a", "embedding": vector}
        try:
            check(record, schema)
        except Exception as e:  # noqa: BLE001 - compared by type and message
            result = (type(e), str(e))
        else:
            result = None
        assert record["embedding"] is vector
        return result

    assert outcome(ours) == outcome(theirs)


def test_rows_written_through_the_pack_are_checked_and_stored(tmp_path) -> None:
    """Through a client the pack opens: a good row is stored as it was given, a vector with a
    string in it is refused (by pymilvus first, named in the pack's error)."""

    client = open_client(str(tmp_path / "checked.db"))
    _schema(client, "rows", dynamic=False)
    good = _rows([1], 1)[0]
    del good["extra"]
    client.insert("rows", [good])
    stored = client.get("rows", ids=["r1"], output_fields=["embedding", "n"])[0]
    assert stored["embedding"] == pytest.approx(good["embedding"]) and stored["n"] == 1
    with pytest.raises(MilvusOperationError, match="must be real number"):
        client.insert("rows", [{**good, "id": "r2", "embedding": [1.0, "x", 0.0, 0.0]}])


def test_a_reopened_flat_index_is_its_segments_own_vectors(tmp_path) -> None:
    """After the database is closed and opened again, each segment's FLAT index searches the
    segment's own vectors (no second copy read from the index file), and ranks as before."""
    from milvus_lite.server_manager import server_manager_instance

    assert lite.share_flat_vectors()
    path = str(tmp_path / "flat.db")
    client = open_client(path)
    _schema(client, "rows", dynamic=False)
    rows = _rows(range(40), 1)
    for row in rows:
        del row["extra"]
    client.insert("rows", rows)
    client.flush("rows")
    query = [[3.0, 1.0, 0.5, -1.0]]
    before = client.search("rows", data=query, limit=5, search_params={"metric_type": "COSINE"})
    client.close()
    server_manager_instance.release_server(path)

    client = open_client(path)
    client.load_collection("rows")
    after = client.search("rows", data=query, limit=5, search_params={"metric_type": "COSINE"})
    assert [h["id"] for h in after[0]] == [h["id"] for h in before[0]]
    db = server_manager_instance._servers[str(tmp_path / "flat.db")][1]
    segments, _ = db.get_collection("rows", "default")._read_snapshot()
    assert segments and all(s.index is not None for s in segments if s.num_rows)
    assert all(s.index._vectors is s.vectors for s in segments if s.num_rows)
