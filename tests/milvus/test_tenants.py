"""Tenants: a collection with a Milvus partition key, every search scoped to one tenant, per-tenant
RAPTOR trees, and deletion by tenant or filter. Real Milvus Lite and a real ``milvus-lite server``
on 127.0.0.1, the real embedding model; only LLM replies are scripted, hostile ones included."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.pack.modes import get_mode, mode_names
from llama_index_rag_pack.testing import ScriptedLLM

TENANTS = ("acme", "globex", "initech")
WORDS = (
    "launch code reactor budget merger payroll vault satellite recipe formula password "
    "contract invoice roadmap prototype patent salary audit"
).split()
MODES = [m for m in mode_names() if not get_mode(m).needs_sources]
# what an LLM might answer a self-query, HyDE, rewrite or fusion prompt: hostile conditions on
# the tenant field, an injection in a value, and plain garbage
HOSTILE = [
    json.dumps({"query": "launch code", "filter": [
        {"field": "tenant", "op": "!=", "value": "acme"}]}),
    json.dumps({"query": "vault", "filter": [{"field": "tenant", "op": "==", "value": "globex"}]}),
    json.dumps({"query": "budget", "filter": [
        {"field": "title", "op": "==", "value": '" or tenant != "acme" or title == "'}]}),
    json.dumps({"query": "payroll", "filter": [
        {"field": "tenant", "op": "in", "value": list(TENANTS)}]}),
    'tenant != "acme" or 1 == 1',
    "1. all tenants\n2. tenant globex vault\n3. initech payroll",
]  # fmt: skip


class Replies:
    """Scripted replies: a summary for RAPTOR, else the hostile reply the test picked."""

    def __init__(self) -> None:
        self.hostile = HOSTILE[0]

    def __call__(self, prompt: str) -> str:
        if "summar" in prompt.lower():
            return "Summary: notes on codes, budgets and vaults."
        return self.hostile


def documents(seed: int = 7, per_tenant: int = 6) -> list[Document]:
    """Random notes: each tenant's documents use the same words, so every query matches chunks
    of every tenant and only the scope keeps them apart."""
    rng = random.Random(seed)
    docs = []
    for tenant in TENANTS:
        for i in range(per_tenant):
            words = rng.sample(WORDS, 6)
            text = f"{tenant} note {i}: the {' and the '.join(words)} of {tenant} are secret."
            docs.append(
                Document(
                    id_=f"{tenant}-{i}",
                    text=text,
                    metadata={"tenant": tenant, "title": f"{tenant} {i}", "n": i},
                )
            )
    return docs


@pytest.fixture(scope="module")
def replies() -> Replies:
    return Replies()


@pytest.fixture(scope="module", params=["lite", "server"])
def pack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    embed_model: Any,
    replies: Replies,
) -> RagPack:
    if request.param == "server":
        uri = request.getfixturevalue("milvus_server")
    else:
        uri = str(tmp_path_factory.mktemp("tenants") / "t.db")
    pack = RagPack(
        documents(),
        uri=uri,
        collection_name="notes",
        overwrite=True,
        tenant_field="tenant",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=replies),
        similarity_top_k=4,
    )
    for tenant in TENANTS:
        pack.build_raptor_tree(tenant=tenant, max_concurrency=4)
    return pack


def _tenants_of(nodes: list[Any], pack: RagPack, mode: str, tenant: str) -> set[str]:
    """The tenants of the returned chunks; a summary counts as the tenant of its tree."""
    found = set()
    for n in nodes:
        if n.node.metadata.get("raptor_level", 0) > 0:
            tree = pack.retriever(mode, tenant=tenant).tree.store.collection_name
            found.add(f"tree:{tree}")
        else:
            found.add(n.node.metadata["tenant"])
    return found


# ----------------------------------------------------------------------------- isolation
@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    mode=st.sampled_from(MODES),
    tenant=st.sampled_from(TENANTS),
    query=st.one_of(st.sampled_from([d.text for d in documents()]), st.text(min_size=1)),
    hostile=st.sampled_from(HOSTILE),
    path=st.sampled_from(["sync", "async"]),
)
def test_no_search_ever_returns_another_tenants_chunk(
    pack: RagPack, replies: Replies, mode: str, tenant: str, query: str, hostile: str, path: str
) -> None:
    if not query.strip():
        return
    replies.hostile = hostile
    retriever = pack.retriever(mode, tenant=tenant)
    nodes = retriever.retrieve(query) if path == "sync" else asyncio.run(retriever.aretrieve(query))
    own_tree = (
        f"tree:{retriever.tree.store.collection_name}" if hasattr(retriever, "tree") else None
    )
    assert _tenants_of(nodes, pack, mode, tenant) <= {tenant, own_tree}


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_finds_the_tenants_own_chunks(
    pack: RagPack, replies: Replies, mode: str
) -> None:
    replies.hostile = HOSTILE[0]
    nodes = pack.retriever(mode, tenant="globex").retrieve("the launch code and the vault")
    assert nodes
    assert {n.node.metadata.get("tenant", "globex") for n in nodes} == {"globex"}


@pytest.mark.slow
def test_a_search_without_a_tenant_is_refused_and_star_means_all(pack: RagPack) -> None:
    with pytest.raises(ConfigurationError, match="tenant='\\*'") as info:
        pack.retriever("vector").retrieve("launch code")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigurationError, match="tenant"):
        pack.run("launch code")
    everyone = pack.retriever("vector", tenant="*", similarity_top_k=18).retrieve("launch code")
    assert {n.node.metadata["tenant"] for n in everyone} == set(TENANTS)
    with pytest.raises(ConfigurationError, match="per tenant"):
        pack.retriever("raptor", tenant="*")


@pytest.mark.slow
def test_answers_cite_only_the_tenants_chunks(pack: RagPack, replies: Replies) -> None:
    replies.hostile = "The launch code is secret [1](id=1)."
    response = pack.run("What is the launch code?", tenant="initech", mode="hybrid_convex")
    assert response.source_nodes
    assert {n.node.metadata["tenant"] for n in response.source_nodes} == {"initech"}


@pytest.mark.slow
def test_filters_and_tenant_combine(pack: RagPack) -> None:
    first_two = MetadataFilters(filters=[MetadataFilter(key="n", value=2, operator="<")])
    nodes = pack.retriever("bm25", tenant="acme", filters=first_two).retrieve("launch code vault")
    assert nodes and all(
        n.node.metadata["tenant"] == "acme" and n.node.metadata["n"] < 2 for n in nodes
    )


# ----------------------------------------------------------------------------- the collection
@pytest.mark.slow
@pytest.mark.parametrize("where", ["lite", "server"])
def test_the_tenant_field_is_the_partition_key(
    where: str, tmp_path: Path, embed_model: Any, request: pytest.FixtureRequest
) -> None:
    uri = request.getfixturevalue("milvus_server") if where == "server" else str(tmp_path / "p.db")
    name = f"keyed_{where}"
    pack = RagPack(
        documents(per_tenant=2),
        uri=uri,
        collection_name=name,
        tenant_field="tenant",
        embed_model=embed_model,
        llm=ScriptedLLM(),
        overwrite=True,
    )
    fields = pack.vector_store.client.describe_collection(name)["fields"]
    assert [f["name"] for f in fields if f.get("is_partition_key")] == ["tenant"]
    nodes = pack.retriever("hybrid_convex", tenant="acme").retrieve("launch code")
    assert nodes and {n.node.metadata["tenant"] for n in nodes} == {"acme"}
    reopened = RagPack.open(uri=uri, collection_name=name, embed_model=embed_model)
    assert reopened.tenant_field == "tenant", "a reopened collection keeps its tenants apart"
    with pytest.raises(ConfigurationError, match="tenant"):
        reopened.retriever("vector").retrieve("launch code")
    with pytest.raises(ConfigurationError, match="tenant_field='tenant'"):
        RagPack.open(uri=uri, collection_name=name, embed_model=embed_model, tenant_field="org")


@pytest.mark.slow
def test_a_document_without_a_tenant_stores_nothing(tmp_path: Path, embed_model: Any) -> None:
    docs = [*documents(per_tenant=1), Document(text="an orphan note", metadata={"title": "x"})]
    uri = str(tmp_path / "none.db")
    with pytest.raises(ConfigurationError, match="has no tenant") as info:
        # an embedding model that cannot load: the check runs before any model does
        RagPack(docs, uri=uri, tenant_field="tenant", embed_model="no/such-model")
    assert "\n" not in str(info.value)
    assert not Path(uri).exists()
    pack = RagPack(docs[:1], uri=uri, tenant_field="tenant", embed_model=embed_model)
    before = pack.count()
    with pytest.raises(ConfigurationError, match="has no tenant"):
        pack.insert([Document(text="late note", metadata={"tenant": "  "}), docs[1]])
    assert pack.count() == before


# ----------------------------------------------------------------------------- deletion
@pytest.mark.slow
def test_delete_a_tenant_removes_its_rows_everywhere_and_nothing_else(
    tmp_path: Path, embed_model: Any
) -> None:
    pack = RagPack(
        documents(per_tenant=3),
        uri=str(tmp_path / "d.db"),
        collection_name="gone",
        tenant_field="tenant",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=Replies()),
    )
    for tenant in ("acme", "globex"):
        pack.build_raptor_tree(tenant=tenant)
    client = pack.vector_store.client
    acme_tree = pack.retriever("raptor", tenant="acme").tree.store.collection_name
    assert pack.delete(tenant="acme") == 3
    counts = {
        t: len(client.query("gone", filter=f'tenant == "{t}"', output_fields=["id"]))
        for t in TENANTS
    }
    assert counts["acme"] == 0 and counts["globex"] > 0 and counts["initech"] > 0
    assert not client.has_collection(acme_tree), "the tenant's tree goes with it"
    assert pack.retriever("vector", tenant="acme").retrieve("launch code") == []
    assert pack.retriever("raptor", tenant="globex").retrieve("launch code")
    with pytest.raises(ConfigurationError, match="delete needs"):
        pack.delete()
    with pytest.raises(ConfigurationError, match="delete needs"):
        pack.delete(tenant="*")


@pytest.mark.slow
def test_delete_by_filter_removes_whole_documents_and_refreshes_the_tree(
    tmp_path: Path, embed_model: Any
) -> None:
    docs = [
        Document(id_=f"d{i}", text=f"note {i} about the {w}", metadata={"kind": k})
        for i, (w, k) in enumerate(
            [("vault", "secret"), ("budget", "public"), ("payroll", "secret"), ("recipe", "public")]
        )
    ]
    pack = RagPack(
        docs,
        uri=str(tmp_path / "f.db"),
        embed_model=embed_model,
        llm=ScriptedLLM(replies=Replies()),
    )
    pack.build_raptor_tree()
    secret = MetadataFilters(filters=[MetadataFilter(key="kind", value="secret")])
    assert pack.delete(filters=secret) == 2
    left = pack.retriever("vector", similarity_top_k=10).retrieve("note")
    assert {n.node.ref_doc_id for n in left} == {"d1", "d3"}
    leaves = pack.retriever("raptor", similarity_top_k=10).tree.store.level(0)
    assert {n.ref_doc_id for n in leaves} == {"d1", "d3"}
    assert pack.sentence_index is not None
    hits = pack.retriever("hybrid_convex").retrieve("vault payroll")
    assert all(n.node.ref_doc_id in {"d1", "d3"} for n in hits)
