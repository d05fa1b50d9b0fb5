"""Milvus store helpers: reopen, errors, server."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    MilvusOperationError,
    MilvusUnavailableError,
)
from llama_index_rag_pack.milvus import client_open
from llama_index_rag_pack.milvus import connection as milvus


def _nodes(n: int = 5, dim: int = 8) -> list[TextNode]:
    return [
        TextNode(
            id_=f"n{i}",
            text=f"node number {i}",
            embedding=[1.0 if j == i % dim else 0.0 for j in range(dim)],
        )
        for i in range(n)
    ]


def _run(code: str, cwd: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.integration
def test_reopening_in_a_new_process_finds_data_without_reindexing(tmp_path: Path) -> None:
    uri = str(tmp_path / "store.db")
    write = f"""
        import json
        from llama_index.core import Document
        from llama_index_rag_pack import RagPack
        docs = [Document(id_="a", text="The aardvark eats ants and termites at night."),
                Document(id_="b", text="Apollo 11 landed on the Moon in July 1969.")]
        pack = RagPack(docs, uri={uri!r}, collection_name="reopen", llm="none")
        print(json.dumps({{"count": pack.count()}}))
    """
    read = f"""
        import json
        from unittest import mock
        from llama_index_rag_pack import RagPack
        from llama_index.core.indices.vector_store import VectorStoreIndex
        with mock.patch.object(
            VectorStoreIndex, "insert_nodes", side_effect=AssertionError("re-indexed")
        ):
            pack = RagPack.open(uri={uri!r}, collection_name="reopen", llm="none")
            hits = pack.retriever().retrieve("When did astronauts land on the Moon?")
        print(json.dumps({{
            "count": pack.count(),
            "top": hits[0].node.ref_doc_id,
            "text": hits[0].node.get_content(),
        }}))
    """
    written = _run(write, tmp_path)
    assert written["count"] == 2
    reopened = _run(read, tmp_path)
    assert reopened["count"] == 2
    assert reopened["top"] == "b"
    assert "Apollo 11" in reopened["text"]


def test_reopened_collection_is_loaded_and_searchable(tmp_path: Path) -> None:
    uri = str(tmp_path / "x.db")
    store = milvus.open_vector_store(uri, "c", dim=8)
    store.add(_nodes())
    milvus.flush(store)
    store.client.release_collection("c")  # what Milvus Lite does on reopen
    again = milvus.open_vector_store(uri, "c", dim=8, must_exist=True)
    result = again.query(
        VectorStoreQuery(query_embedding=[0, 0, 1.0, 0, 0, 0, 0, 0], similarity_top_k=1)
    )
    assert result.nodes[0].node_id == "n2"
    assert milvus.count_entities(again) == 5
    assert milvus.has_bm25(again.client, "c")


def test_bm25_can_be_disabled(tmp_path: Path) -> None:
    store = milvus.open_vector_store(str(tmp_path / "x.db"), "dense_only", dim=8, enable_bm25=False)
    store.add(_nodes())
    assert not milvus.has_bm25(store.client, "dense_only")


def test_missing_collection_is_reported(tmp_path: Path) -> None:
    with pytest.raises(CollectionNotFoundError, match="rag-pack index"):
        milvus.open_vector_store(str(tmp_path / "x.db"), "nothing_here", dim=8, must_exist=True)


def test_dimension_mismatch_is_reported(tmp_path: Path) -> None:
    uri = str(tmp_path / "x.db")
    store = milvus.open_vector_store(uri, "c", dim=8)
    store.add(_nodes())
    with pytest.raises(ConfigurationError, match="8-d vectors"):
        milvus.open_vector_store(uri, "c", dim=384)


def test_unreachable_server_fails_fast_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # "fast": one bounded connection attempt, and no pymilvus client (whose retries take
    # minutes); checked by what is called, not by a wall-clock time the machine's load can break
    import pymilvus

    def no_client(*args: object, **kwargs: object) -> None:
        raise AssertionError("a MilvusClient was created for an unreachable server")

    monkeypatch.setattr(pymilvus, "MilvusClient", no_client)
    attempts: list[object] = []
    real_connect = client_open.socket.create_connection

    def connect(address: object, timeout: object = None, *args: object) -> object:
        attempts.append(timeout)
        return real_connect(address, timeout, *args)

    monkeypatch.setattr(client_open.socket, "create_connection", connect)
    with pytest.raises(MilvusUnavailableError) as info:
        milvus.open_vector_store("http://127.0.0.1:9", "c", dim=8)
    assert len(attempts) == 1 and attempts[0] is not None and 0 < attempts[0] <= 5
    assert "milvus-lite server" in str(info.value)


@pytest.mark.parametrize("uri", ["./data/milvus", "", "store.sqlite"])
def test_bad_lite_paths(uri: str) -> None:
    with pytest.raises(ConfigurationError):
        milvus.check_uri(uri)


def test_a_file_where_the_database_directory_should_be(tmp_path: Path) -> None:
    path = tmp_path / "taken.db"
    path.write_text("not a database")
    with pytest.raises(ConfigurationError, match="not a Milvus Lite database"):
        milvus.check_uri(str(path))


def test_bad_metric() -> None:
    with pytest.raises(ConfigurationError, match="COSINE, IP, L2"):
        milvus.open_vector_store("./unused.db", "c", similarity_metric="HAMMING")


@pytest.mark.slow
@pytest.mark.integration
def test_database_locked_by_another_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "locked.db")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            from llama_index_rag_pack.milvus.connection import open_vector_store
            open_vector_store({uri!r}, "c", dim=8)
            print("ready", flush=True)
            time.sleep(60)
        """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(MilvusUnavailableError, match="in use by another process"):
            milvus.open_vector_store(uri, "c", dim=8)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
@pytest.mark.integration
def test_same_code_against_a_milvus_server(milvus_server: str) -> None:
    assert milvus.is_remote_uri(milvus_server)
    store = milvus.open_vector_store(milvus_server, "server_c", dim=8, overwrite=True)
    store.add(_nodes())
    milvus.flush(store)
    result = store.query(
        VectorStoreQuery(query_embedding=[0, 1.0, 0, 0, 0, 0, 0, 0], similarity_top_k=2)
    )
    assert result.nodes[0].node_id == "n1"
    reopened = milvus.open_vector_store(milvus_server, "server_c", dim=8, must_exist=True)
    assert milvus.count_entities(reopened) == 5


def test_opening_milvus_lite_logs_no_error_or_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Creating a collection makes pymilvus call AllocTimestamp, an RPC Milvus Lite lacks; gRPC's
    # server would log that as an ERROR with a traceback although nothing failed.
    caplog.set_level(logging.WARNING)
    store = milvus.open_vector_store(str(tmp_path / "quiet.db"), "quiet", dim=8)
    store.add(_nodes())
    hits = store.query(VectorStoreQuery(query_embedding=[1.0] + [0.0] * 7, similarity_top_k=2))
    assert [n.node_id for n in hits.nodes][0] == "n0"
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not noisy, [f"{r.name}: {r.getMessage()}" for r in noisy]


@pytest.mark.parametrize(
    ("uri", "local"),
    [
        ("./data/milvus.db", True),
        ("http://127.0.0.1:19530", True),
        ("http://localhost:19530", True),
        ("http://milvus.internal:19530", False),
        ("https://example.zillizcloud.com", False),
    ],
)
def test_local_servers_get_no_keepalive_pings(uri: str, local: bool) -> None:
    # Milvus Lite's server answers pymilvus' 10 s pings with a "too_many_pings" GOAWAY that gRPC
    # prints; remote servers keep pymilvus' defaults.
    options = milvus.client_kwargs(uri).get("grpc_options", {})
    assert bool(options) is local
    if local:
        assert options["grpc.keepalive_permit_without_calls"] == 0
        assert options["grpc.keepalive_time_ms"] >= 5 * 60 * 1000


def test_row_inserts_check_each_string_as_one_value(tmp_path: Path) -> None:
    # pymilvus' row path ran its column check over each string's characters: O(characters)
    # calls per value, and a string over max_length passed (every character is shorter)
    from pymilvus import DataType, MilvusClient, MilvusException
    from pymilvus.client import entity_helper

    client = milvus.open_client(str(tmp_path / "rows.db"))
    check = entity_helper._ROW_SCALAR_NORMALIZERS[DataType.VARCHAR]
    field = {"name": "text", "params": {"max_length": 8}}
    assert check("ünïcode", field) == "ünïcode"
    with pytest.raises(MilvusException, match="exceeds max length"):
        check("x" * 9, field)
    with pytest.raises(MilvusException, match="expects string input"):
        check(12345, field)

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("text", DataType.VARCHAR, max_length=64)
    schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=2)
    index = client.prepare_index_params()
    index.add_index(field_name="embedding", index_type="FLAT", metric_type="COSINE")
    client.create_collection("rows", schema=schema, index_params=index)
    texts = ["plain", "RAPTOR 先对文本块聚类。", "x" * 64]
    rows = [{"id": i, "text": t, "embedding": [1.0, 0.5]} for i, t in enumerate(texts)]
    client.insert("rows", data=rows)
    with pytest.raises(MilvusOperationError, match="exceeds max length"):  # before a row is sent
        client.insert("rows", data=[{"id": 9, "text": "y" * 65, "embedding": [1.0, 0.0]}])
    got = client.query("rows", filter="id >= 0", output_fields=["text"])
    assert sorted(r["text"] for r in got) == sorted(texts)


def test_threads_opening_their_first_stores_at_once_get_one_store_class(monkeypatch) -> None:
    """Two packs created at once in threads (a server opening tenants' collections) once got
    two store classes, and the store whose class was not the cached one was never configured:
    its tenant field was lost."""
    from llama_index_rag_pack.milvus import store_classes

    make = store_classes._loop_safe_store_class.__wrapped__

    def slow_make() -> type:
        time.sleep(0.05)  # every thread inside at once, were there no lock
        return make()

    monkeypatch.setattr(store_classes, "_loop_safe_store_class", functools.lru_cache(1)(slow_make))
    barrier = threading.Barrier(6)

    def first_call(_: int) -> type:
        barrier.wait()
        return store_classes.loop_safe_store_class()

    with ThreadPoolExecutor(6) as pool:
        classes = set(pool.map(first_call, range(6)))
    assert len(classes) == 1
