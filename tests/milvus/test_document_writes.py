"""Writes by document id: ids that look like Milvus expressions, tenants that use the same ids,
ids in any script. Real Milvus Lite and the real embedding model; the LLM is never called."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.milvus.document_rows import ids_expression
from llama_index_rag_pack.milvus.milvus_expr import expression_fields

# ids that close the quoted list of an unescaped ``doc_id in ["..."]`` and match every row
EVIL_IDS = ['x"] or true or doc_id in ["', 'x\\"] or true or doc_id in [\\"', "a'] or true or ['"]


def _pack(tmp_path: Path, embed_model: Any, docs: list[Document], **kwargs: Any) -> RagPack:
    return RagPack(
        docs, uri=str(tmp_path / "w.db"), collection_name="w", embed_model=embed_model, **kwargs
    )


def _chunks(pack: RagPack) -> Counter[tuple[Any, str]]:
    """Chunks per (tenant, document id)."""
    field = pack.tenant_field
    rows = pack.vector_store.client.query(
        "w", filter="", output_fields=["doc_id", *([field] if field else [])], limit=16384
    )
    return Counter((row.get(field) if field else None, row["doc_id"]) for row in rows)


def _sentence_chunks(pack: RagPack) -> Counter[str]:
    """Sentences per chunk id."""
    index = pack.sentence_index
    assert index is not None
    rows = index.client.query(
        index.collection_name, filter="", output_fields=["chunk_id"], limit=16384
    )
    return Counter(row["chunk_id"] for row in rows)


def _chunk_ids(pack: RagPack) -> set[str]:
    rows = pack.vector_store.client.query("w", filter="", output_fields=["id"], limit=16384)
    return {row["id"] for row in rows}


def _texts(pack: RagPack, tenant: str | None, query: str) -> str:
    kwargs = {"tenant": tenant} if tenant else {}
    hits = pack.retriever("vector", similarity_top_k=20, **kwargs).retrieve(query)
    return " | ".join(n.node.get_content() for n in hits)


def _tenant_doc(doc_id: str, tenant: str, text: str) -> Document:
    return Document(id_=doc_id, text=text, metadata={"tenant": tenant, "kind": doc_id})


@pytest.mark.slow
def test_two_tenants_keep_their_own_documents_under_the_same_id(
    tmp_path: Path, embed_model: Any
) -> None:
    pack = _pack(
        tmp_path,
        embed_model,
        [
            _tenant_doc("report", "acme", "Acme report: the launch code is 1234."),
            _tenant_doc("report", "globex", "Globex report: the reactor is ready."),
            _tenant_doc("other", "acme", "Acme budget notes for the year."),
        ],
        tenant_field="tenant",
    )
    assert set(_chunks(pack)) == {("acme", "report"), ("globex", "report"), ("acme", "other")}

    # globex replaces its "report": acme's document of the same id stays as it was
    pack.insert([_tenant_doc("report", "globex", "Globex report: the merger is off.")])
    assert set(_chunks(pack)) == {("acme", "report"), ("globex", "report"), ("acme", "other")}
    assert "1234" in _texts(pack, "acme", "launch code")
    globex = _texts(pack, "globex", "report")
    assert "merger" in globex and "reactor" not in globex and "1234" not in globex
    # the sentences of the replaced chunks went with them; every sentence has its chunk
    assert set(_sentence_chunks(pack)) == _chunk_ids(pack)

    # deleting globex's "report" by filter leaves acme's "report"
    kind = MetadataFilters(filters=[MetadataFilter(key="kind", value="report")])
    assert pack.delete(tenant="globex", filters=kind) == 1
    assert set(_chunks(pack)) == {("acme", "report"), ("acme", "other")}
    assert "1234" in _texts(pack, "acme", "launch code")
    assert set(_sentence_chunks(pack)) == _chunk_ids(pack)


@pytest.mark.slow
@pytest.mark.parametrize("evil", EVIL_IDS)
def test_an_id_that_looks_like_an_expression_touches_only_its_own_rows(
    tmp_path: Path, embed_model: Any, evil: str
) -> None:
    pack = _pack(
        tmp_path,
        embed_model,
        [
            _tenant_doc("a-1", "acme", "Acme note about the vault."),
            _tenant_doc("g-1", "globex", "Globex note about the roadmap."),
        ],
        tenant_field="tenant",
    )
    before = _chunks(pack)
    pack.insert([_tenant_doc(evil, "acme", "A harmless note.")])
    pack.insert([_tenant_doc(evil, "acme", "A harmless note, edited.")])  # replaced, not added
    assert _chunks(pack) == before + Counter({("acme", evil): 1})
    assert set(_sentence_chunks(pack)) == _chunk_ids(pack)

    # LlamaIndex's delete by document id (the store's own method) escapes the id as well
    pack.vector_store.delete(evil)
    assert _chunks(pack) == before


@pytest.mark.slow
def test_ids_in_any_script_are_replaced_not_added_or_refused(
    tmp_path: Path, embed_model: Any
) -> None:
    ids = ["docs/北京.txt", "café/naïve.md", 'q"uote\\back\nslash']
    docs = [Document(id_=i, text=f"Notes from {i}: rivers and bridges.") for i in ids]
    pack = _pack(tmp_path, embed_model, docs)
    first, sentences = _chunks(pack), _sentence_chunks(pack)
    pack.insert(docs)  # indexing the same files again replaces their chunks and sentences
    assert _chunks(pack) == first and sum(_sentence_chunks(pack).values()) == sum(
        sentences.values()
    )
    pack.vector_store.delete(ids[0])
    assert set(_chunks(pack)) == {(None, i) for i in ids[1:]}


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=4))
def test_ids_expression_is_one_field_compared_with_literals(ids: list[str]) -> None:
    """Whatever the ids, the expression names ``doc_id`` and nothing else: no id becomes code."""
    expr = ids_expression("doc_id", [*EVIL_IDS, *ids])
    assert expression_fields(expr) == {"doc_id"}


# ----------------------------------------------------------------------------- failed writes
@pytest.mark.slow
def test_a_reindex_with_bad_chunk_options_changes_nothing(tmp_path: Path, embed_model: Any) -> None:
    from llama_index_rag_pack.cli.app import main
    from llama_index_rag_pack.core.errors import ConfigurationError

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("Milvus is a vector database. It stores embeddings.")
    uri = str(tmp_path / "cli.db")
    assert main(["--uri", uri, "index", str(docs)]) == 0
    pack = RagPack.open(uri=uri, embed_model=embed_model)
    chunks, sentences = pack.count(), pack.sentence_index.count()
    assert chunks and sentences
    for options in (["--chunk-overlap", "300"], ["--chunk-size", "0", "--overwrite"]):
        assert main(["--uri", uri, "index", str(docs), *options]) == 2
    with pytest.raises(ConfigurationError, match="chunk_overlap"):
        RagPack(input_dir=docs, uri=uri, overwrite=True, chunk_overlap=999, embed_model="nope")
    pack = RagPack.open(uri=uri, embed_model=embed_model)
    assert (pack.count(), pack.sentence_index.count()) == (chunks, sentences)


def test_an_insert_that_fails_before_storing_keeps_the_old_rows(
    tmp_path: Path, embed_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pack = _pack(tmp_path, embed_model, [Document(id_="a", text="Milvus stores vectors.")])
    before, sentences = _chunks(pack), _sentence_chunks(pack)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the embedding server went away")

    monkeypatch.setattr(type(pack.embed_model), "get_text_embedding_batch", broken)
    with pytest.raises(RuntimeError, match="went away"):
        pack.insert([Document(id_="a", text="Milvus stores vectors and runs searches.")])
    assert _chunks(pack) == before and _sentence_chunks(pack) == sentences
