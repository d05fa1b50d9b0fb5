"""String filters and metadata values that once escaped a tenant's scope or reached Milvus raw.

A string filter is ``and``-ed with the tenant's scope in parentheses; ``'true) or (true'`` closed
them and matched every tenant. It is now checked by Milvus' grammar first: one-line
``ConfigurationError`` before anything is searched or deleted, in every mode and entry point. The
self-query prompt is sampled under the retriever's scope (no other tenant's values), and values
Milvus cannot hold are refused when the filter is compiled. Real Milvus Lite, the bundled
embedding model; only LLM replies are scripted.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from llama_index_rag_pack import RagPack, configure_self_query
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

DOCS = [
    Document(id_="a1", text="Acme launch code is 1234.",
             metadata={"tenant": "acme", "title": "acme plan (v2)", "project": "roadrunner",
                       "IS": "v"}),
    Document(id_="a2", text="Acme budget notes.",
             metadata={"tenant": "acme", "title": "acme budget", "project": "roadrunner"}),
    Document(id_="g1", text="Globex launch code is 9876.",
             metadata={"tenant": "globex", "title": "globex merger with initrode",
                       "project": "hammock-takeover", "IS": "v"}),
]  # fmt: skip
ESCAPES = [
    "true) or (true",
    'tenant == "globex") or (tenant == "globex"',
    "true) or (true -- ",
    'title == "a\\q") or (true',
]
READ_MODES = ["vector", "bm25", "hybrid", "hybrid_weighted", "hybrid_convex", "fusion", "hyde",
              "rewrite", "self_query"]  # fmt: skip
GLOBEX = ("globex", "initrode", "hammock", "9876")


class Recorder:
    """Scripted replies that keep every prompt: the self-query reply is :attr:`reply`."""

    def __init__(self) -> None:
        self.reply = json.dumps({"query": "launch code", "filter": []})
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.reply if "metadata filter" in prompt else "Answer [1](id=1)."

    def self_query_prompts(self) -> list[str]:
        return [p for p in self.prompts if "metadata filter" in p]

    def leaked(self) -> bool:
        return any(word in p for p in self.prompts for word in GLOBEX)


def make_pack(path: Path, embed_model: Any) -> tuple[RagPack, Recorder]:
    rec = Recorder()
    pack = RagPack(
        DOCS,
        uri=str(path / "t.db"),
        collection_name="t",
        tenant_field="tenant",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=rec),
        similarity_top_k=5,
    )
    return pack, rec


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> tuple[RagPack, Recorder]:
    return make_pack(tmp_path_factory.mktemp("attacks"), embed_model)


@pytest.fixture()
def fresh(tmp_path: Path, embed_model: Any) -> tuple[RagPack, Recorder]:
    return make_pack(tmp_path, embed_model)


def one_line(info: pytest.ExceptionInfo[ConfigurationError]) -> None:
    assert "\n" not in str(info.value) and str(info.value).startswith("Bad filter")


# ----------------------------------------------------------------------------- string filters
@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("mode", READ_MODES)
def test_a_string_filter_cannot_break_out_of_the_tenant_scope(
    shared: tuple[RagPack, Recorder], mode: str, escape: str
) -> None:
    pack, _ = shared
    with pytest.raises(ConfigurationError) as info:
        pack.retriever(mode, tenant="acme", filters=escape)
    one_line(info)


def test_run_arun_and_chat_refuse_it_before_any_prompt(shared: tuple[RagPack, Recorder]) -> None:
    pack, rec = shared
    rec.prompts.clear()
    with pytest.raises(ConfigurationError) as info:
        pack.run("launch code", tenant="acme", mode="hybrid_convex", filters=ESCAPES[0])
    one_line(info)
    with pytest.raises(ConfigurationError):
        asyncio.run(pack.arun("launch code", tenant="acme", mode="bm25", filters=ESCAPES[0]))
    with pytest.raises(ConfigurationError):
        pack.make_chat_engine("vector", tenant="acme", filters=ESCAPES[0]).chat("launch code?")
    assert rec.prompts == [] and not rec.leaked()


@pytest.mark.parametrize("escape", ESCAPES[:2])
def test_delete_refuses_it_and_deletes_nothing(
    fresh: tuple[RagPack, Recorder], escape: str
) -> None:
    pack, _ = fresh
    with pytest.raises(ConfigurationError) as info:
        pack.delete(tenant="acme", filters=escape)
    one_line(info)
    assert pack.count() == 3


def test_parentheses_and_quotes_inside_a_literal_are_just_text(
    fresh: tuple[RagPack, Recorder],
) -> None:
    pack, _ = fresh
    nodes = pack.retriever("bm25", tenant="acme", filters='title == "acme plan (v2)"').retrieve(
        "launch code"
    )
    assert [n.node.ref_doc_id for n in nodes] == ["a1"]
    for literal in ['"x) or (true"', "'x\") or (\"'", '"globex merger with initrode"']:
        filters = f"title == {literal}"
        for mode in ("vector", "hybrid_convex"):
            assert pack.retriever(mode, tenant="acme", filters=filters).retrieve("launch") == []
        assert pack.delete(tenant="acme", filters=filters) == 0
    assert pack.delete(tenant="acme", filters="title == 'acme plan (v2)'") == 1
    assert pack.count() == 2


# ----------------------------------------------------------------------------- self-query prompt
@pytest.mark.parametrize("path", ["sync", "async"])
def test_the_self_query_prompt_shows_only_the_tenants_values(
    fresh: tuple[RagPack, Recorder], path: str
) -> None:
    pack, rec = fresh
    retriever = pack.retriever("self_query", tenant="acme")
    if path == "sync":
        nodes = retriever.retrieve("what is the launch code?")
    else:
        nodes = asyncio.run(retriever.aretrieve("what is the launch code?"))
    (prompt,) = rec.self_query_prompts()
    assert "roadrunner" in prompt and "acme plan (v2)" in prompt
    assert not rec.leaked(), prompt
    assert {n.node.metadata["tenant"] for n in nodes} == {"acme"}


def test_the_self_query_prompt_is_sampled_under_the_callers_filter_too(
    fresh: tuple[RagPack, Recorder],
) -> None:
    pack, rec = fresh
    pack.retriever("self_query", tenant="acme", filters='title == "acme budget"').retrieve("notes")
    (prompt,) = rec.self_query_prompts()
    assert "acme budget" in prompt and "acme plan" not in prompt and not rec.leaked()
    rec.prompts.clear()
    nothing = pack.retriever("self_query", tenant="acme", filters='title == "none"')
    assert nothing.retrieve("launch code") == []
    assert rec.self_query_prompts() == []  # no row in scope: nothing to show, no LLM call


@pytest.mark.parametrize("path", ["sync", "async", "run"])
def test_a_huge_integer_for_a_float_field_is_dropped(
    fresh: tuple[RagPack, Recorder], path: str
) -> None:
    pack, rec = fresh
    configure_self_query(pack, [{"name": "score", "type": "float"}, {"name": "title"}])
    rec.reply = (
        '{"query": "launch code", "filter": [{"field": "score", "op": ">", "value": 1'
        + "0" * 400
        + '}, {"field": "title", "op": "==", "value": "acme plan (v2)"}]}'
    )
    retriever = pack.retriever("self_query", tenant="acme")
    if path == "sync":
        nodes = retriever.retrieve("launch code")
    elif path == "async":
        nodes = asyncio.run(retriever.aretrieve("launch code"))
    else:
        nodes = pack.run("launch code", tenant="acme", mode="self_query").source_nodes
    assert {n.node.ref_doc_id for n in nodes} == {"a1"}  # the title condition was kept
    assert nodes[0].node.metadata["self_query_filter"] == '(title == "acme plan (v2)")'


# ----------------------------------------------------------------------------- metadata values
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
@pytest.mark.parametrize("mode", ["vector", "bm25", "hybrid_convex"])
def test_an_integer_outside_int64_is_refused_before_any_search(
    shared: tuple[RagPack, Recorder], mode: str, value: int
) -> None:
    pack, _ = shared
    filters = MetadataFilters(filters=[MetadataFilter(key="n", value=value, operator="<")])
    with pytest.raises(ConfigurationError, match="outside int64") as info:
        pack.retriever(mode, tenant="acme", filters=filters)
    assert "\n" not in str(info.value)


def test_delete_refuses_an_integer_outside_int64(fresh: tuple[RagPack, Recorder]) -> None:
    pack, _ = fresh
    filters = MetadataFilters(filters=[MetadataFilter(key="n", value=2**63, operator="<")])
    with pytest.raises(ConfigurationError, match="outside int64"):
        pack.delete(tenant="acme", filters=filters)
    assert pack.count() == 3


@pytest.mark.parametrize("key", ["IS", "Is", "iS"])
@pytest.mark.parametrize("mode", ["vector", "bm25", "hybrid_convex"])
def test_a_keyword_key_filters_like_any_key(
    shared: tuple[RagPack, Recorder], mode: str, key: str
) -> None:
    pack, _ = shared
    filters = MetadataFilters(filters=[MetadataFilter(key=key, value="v")])
    nodes = pack.retriever(mode, tenant="acme", filters=filters).retrieve("launch code")
    assert [n.node.ref_doc_id for n in nodes] == (["a1"] if key == "IS" else [])
