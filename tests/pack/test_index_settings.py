"""One embedding model, one chunking and one BM25 analysis per collection: an insert made
otherwise is refused in one line, before anything is embedded, and nothing stored is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import Document
from llama_index.core.embeddings import MockEmbedding

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.index_settings import CHUNKING_PROPERTY, EMBEDDING_PROPERTY
from llama_index_rag_pack.pack.rag_pack import RagPack

DOCS = [Document(text="Aardvarks eat ants and termites at night.", doc_id="a")]
MORE = [Document(text="Bonobos live in the forests of the Congo basin.", doc_id="b")]


class CountingEmbedding(MockEmbedding):
    """A second model with the bundled model's dimension (384): same shape, other vectors."""

    calls: int = 0

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.calls += len(texts)
        return super()._get_text_embeddings(texts)


def _props(pack: RagPack) -> dict:
    store = pack.vector_store
    return store.client.describe_collection(store.collection_name).get("properties") or {}


@pytest.mark.slow
def test_a_second_embedding_model_of_the_same_dimension_is_refused(tmp_path, embed_model) -> None:
    uri = str(tmp_path / "m.db")
    pack = RagPack(DOCS, uri=uri, collection_name="c", embed_model=embed_model, llm="none")
    assert "all-MiniLM-L6-v2" in _props(pack)[EMBEDDING_PROPERTY]
    assert _props(pack)[CHUNKING_PROPERTY] == "256/32 tokens"
    other = CountingEmbedding(embed_dim=384)
    mixed = RagPack.open(uri=uri, collection_name="c", embed_model=other, llm="none")
    other.calls = 0
    with pytest.raises(ConfigurationError) as caught:
        mixed.insert(MORE)
    text = str(caught.value)
    assert "embedding model" in text and "--overwrite" in text and "\n" not in text
    assert other.calls == 0, "refused before anything was embedded"
    assert mixed.count() == pack.count(), "nothing written, nothing lost"
    # the same model adds rows as before
    same = RagPack.open(uri=uri, collection_name="c", embed_model=embed_model, llm="none")
    before = same.count()
    same.insert(MORE)
    assert same.count() > before


@pytest.mark.slow
def test_other_chunking_is_refused_and_the_same_is_accepted(tmp_path, embed_model) -> None:
    uri = str(tmp_path / "c.db")
    RagPack(DOCS, uri=uri, collection_name="c", embed_model=embed_model, llm="none")
    smaller = RagPack.open(
        uri=uri, collection_name="c", embed_model=embed_model, llm="none", chunk_size=128
    )
    with pytest.raises(ConfigurationError, match=r"chunking 256/32 tokens, this pack uses 128/32"):
        smaller.insert(MORE)


@pytest.mark.slow
def test_a_bm25_analysis_asked_for_by_name_must_be_the_stored_one(tmp_path, embed_model) -> None:
    uri = str(tmp_path / "b.db")
    RagPack(DOCS, uri=uri, collection_name="c", embed_model=embed_model, llm="none")
    german = RagPack.open(
        uri=uri, collection_name="c", embed_model=embed_model, llm="none", bm25_analyzer="german"
    )
    with pytest.raises(ConfigurationError, match=r"--reindex --bm25-analyzer german"):
        german.insert(MORE)
    # the default ("auto") writes with the collection's own analysis: nothing to mix
    RagPack.open(uri=uri, collection_name="c", embed_model=embed_model, llm="none").insert(MORE)


@pytest.mark.slow
def test_a_collection_from_before_records_its_settings_on_the_next_insert(
    tmp_path, embed_model
) -> None:
    uri = str(tmp_path / "old.db")
    pack = RagPack(DOCS, uri=uri, collection_name="c", embed_model=embed_model, llm="none")
    store = pack.vector_store
    store.client.drop_collection_properties(
        store.collection_name, property_keys=[EMBEDDING_PROPERTY, CHUNKING_PROPERTY]
    )
    assert EMBEDDING_PROPERTY not in _props(pack)
    pack.insert(MORE)
    assert "all-MiniLM-L6-v2" in _props(pack)[EMBEDDING_PROPERTY]


@pytest.mark.slow
def test_the_cli_refuses_other_chunking_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("docs").mkdir()
    Path("docs/a.txt").write_text("Aardvarks eat ants and termites.", encoding="utf-8")
    assert main(["--uri", "x.db", "index", "docs"]) == 0
    Path("docs/b.txt").write_text("Bonobos live in the Congo.", encoding="utf-8")
    capsys.readouterr()
    assert main(["--uri", "x.db", "index", "docs", "--chunk-size", "128"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar
    assert last.startswith("error: Collection 'rag_pack' was indexed with the chunking")
    assert "--overwrite" in last


@pytest.mark.slow
def test_a_pack_at_the_default_chunking_takes_the_collections(tmp_path, embed_model) -> None:
    uri = str(tmp_path / "d.db")
    RagPack(DOCS, uri=uri, collection_name="c", embed_model=embed_model, llm="none", chunk_size=128)
    opened = RagPack.open(uri=uri, collection_name="c", embed_model=embed_model, llm="none")
    opened.insert(MORE)  # not refused: it chunks as the collection was chunked
    assert (opened.chunk_size, opened.chunk_overlap) == (128, 32)


def test_an_endpoint_model_is_named_without_its_url() -> None:
    from llama_index_rag_pack.models.index_settings import embedding_identity

    class Endpoint(MockEmbedding):
        api_base: str = "http://localhost:8000/v1"

    a = Endpoint(embed_dim=8, model_name="bge-m3")
    b = Endpoint(embed_dim=8, model_name="bge-m3", api_base="http://127.0.0.1:8000/v1")
    assert embedding_identity(a) == embedding_identity(b) == "Endpoint:bge-m3"
