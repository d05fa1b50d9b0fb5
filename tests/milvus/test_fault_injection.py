"""Fault injection: each pymilvus call the pack makes raises, in turn, under every public call
that reaches Milvus. Whatever fails must fail as a documented ``RagPackError`` with one line, never
as a raw pymilvus (or gRPC) exception; a call that does not use the failing method must work."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from llama_index_rag_pack.core.errors import RagPackError
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.pack.rag_pack import RagPack
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

#: The MilvusClient methods the pack calls.
METHODS = (
    "search",
    "hybrid_search",
    "query",
    "query_iterator",
    "insert",
    "upsert",
    "delete",
    "flush",
    "has_collection",
    "describe_collection",
    "create_collection",
    "create_index",
    "describe_index",
    "load_collection",
    "drop_collection",
    "alter_collection_properties",
    "get_server_version",
)

DOCS = [
    Document(text="The aardvark eats ants and termites at night.", id_="aardvark"),
    Document(text="Apollo 11 landed on the Moon in 1969.", id_="apollo", metadata={"n": 1}),
    Document(text="Einstein was born in Ulm in 1879.", id_="einstein", metadata={"n": 2}),
]


def public_calls(uri: str, embed_model: Any) -> dict[str, Callable[[], Any]]:
    """Each public call that reaches Milvus, on a collection built before the fault starts."""

    def pack(name: str = "faults") -> RagPack:
        return RagPack.open(
            uri=uri, collection_name=name, embed_model=embed_model, llm=ScriptedLLM()
        )

    later = [Document(text="Termites build mounds.", id_="termites")]
    keep = MetadataFilters(filters=[MetadataFilter(key="n", value=1, operator=">=")])
    return {
        "create": lambda: RagPack(
            DOCS,
            uri=uri,
            collection_name="faults_new",
            overwrite=True,
            embed_model=embed_model,
            llm=ScriptedLLM(),
        ),  # fmt: skip
        "open": lambda: pack(),
        "insert": lambda: pack().insert(later),
        "delete": lambda: pack().delete(filters=keep),
        "count": lambda: pack().count(),
        "vector": lambda: pack().retriever("vector").retrieve("aardvark"),
        "bm25": lambda: pack().retriever("bm25").retrieve("aardvark"),
        "hybrid": lambda: pack().retriever("hybrid").retrieve("aardvark"),
        "default": lambda: pack().retriever().retrieve("aardvark"),
        "filtered": lambda: pack().retriever("hybrid_convex", filters=keep).retrieve("Moon"),
        "async": lambda: asyncio.run(pack().retriever().aretrieve("aardvark")),
        "answer": lambda: pack().run("Where was Einstein born?", answer_style="extractive"),
        # a collection whose BM25 vectors the pack computes (Milvus 2.4's path)
        "client insert": lambda: pack("faults_client").insert(later),
        "client bm25": lambda: pack("faults_client").retriever("bm25").retrieve("termites"),
        "client delete": lambda: pack("faults_client").delete(filters=keep),
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("faults") / "f.db")
    RagPack(DOCS, uri=uri, collection_name="faults", embed_model=embed_model, llm=ScriptedLLM())
    RagPack(
        DOCS, uri=uri, collection_name="faults_client", embed_model=embed_model,
        llm=ScriptedLLM(), bm25_vectors="client",
    )  # fmt: skip
    return uri


@pytest.mark.parametrize("method", METHODS)
def test_a_failing_milvus_call_surfaces_as_a_rag_pack_error(
    built: str, embed_model: Any, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    real = getattr(MilvusClient, method)
    failures: list[str] = []

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        failures.append(method)
        raise MilvusException(code=1100, message=f"injected fault in {method}")

    calls = public_calls(built, embed_model)
    outcomes: dict[str, str] = {}
    for name, call in calls.items():
        if name == "create":  # there is one to overwrite (a failed create dropped its own)
            open_vector_store(built, "faults_new", dim=384)
        monkeypatch.setattr(MilvusClient, method, failing)
        try:
            call()
            outcomes[name] = "ok"
        except RagPackError as e:
            assert "\n" not in str(e), f"{name}: a multi-line error"
            outcomes[name] = type(e).__name__
        except Exception as e:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{method} failing under {name}: {type(e).__module__}.{type(e).__name__}")
        finally:
            monkeypatch.setattr(MilvusClient, method, real)
    assert failures, f"no public call met a failing {method}"
    assert any(v != "ok" for v in outcomes.values()), outcomes


def test_every_public_call_meets_some_fault(built: str, embed_model: Any) -> None:
    """Each public call above really reaches Milvus (so the test above covers it)."""
    from pymilvus import MilvusClient

    seen: dict[str, set[str]] = {}
    current = [""]
    originals = {m: getattr(MilvusClient, m) for m in METHODS}

    def spy(method: str) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            seen.setdefault(current[0], set()).add(method)
            return originals[method](self, *args, **kwargs)

        return call

    mp = pytest.MonkeyPatch()
    try:
        for m in METHODS:
            mp.setattr(MilvusClient, m, spy(m))
        for name, call in public_calls(built, embed_model).items():
            current[0] = name
            call()
    finally:
        mp.undo()
    assert set(seen) == set(public_calls(built, embed_model)), seen


def test_the_fault_on_a_new_collection_leaves_nothing(
    tmp_path: Path, embed_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A creation that fails at its index step drops the half-made collection."""
    from pymilvus import MilvusClient
    from pymilvus.exceptions import MilvusException

    uri = str(tmp_path / "half.db")
    RagPack([DOCS[0]], uri=uri, collection_name="other", embed_model=embed_model)

    def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise MilvusException(code=1100, message="create index on 104 field is not supported")

    monkeypatch.setattr(MilvusClient, "create_index", failing)
    with pytest.raises(RagPackError, match="create index on 104"):
        RagPack(DOCS, uri=uri, collection_name="half", embed_model=embed_model)
    monkeypatch.undo()
    client = RagPack.open(uri=uri, collection_name="other", embed_model=embed_model)
    names = client.vector_store.client.list_collections()
    assert not [n for n in names if n.startswith("half")], names
