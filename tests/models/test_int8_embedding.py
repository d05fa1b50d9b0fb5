"""``LocalEmbedding(precision="int8")``: an int8 copy of the ONNX export, made once, checked
against the float32 vectors, used for queries and batches alike, one text per run; and the
sentence pass alone (``sentence_precision="int8"``) beside float32 chunks and queries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models import int8_export, onnx_encoder
from llama_index_rag_pack.models.local_embedding import DEFAULT_SENTENCE_PRECISION, LocalEmbedding
from llama_index_rag_pack.models.settings import describe_embed_model

TEXTS = [
    "Which river flows through Budapest?",
    "The Danube flows through Budapest, Vienna and Belgrade.",
    "Ants and termites live in colonies.",
    "北京是中国的首都。",
    "A long passage about rivers. " * 120,
]


@pytest.mark.slow
def test_int8_vectors_stay_close_to_float32_and_rank_alike(embed_model, quantised_copy) -> None:
    int8 = LocalEmbedding(embed_model.model_name, onnx_dir=str(quantised_copy), precision="int8")
    full = np.asarray(embed_model.get_text_embedding_batch(TEXTS))
    small = np.asarray(int8.get_text_embedding_batch(TEXTS))
    assert small.shape == full.shape
    assert np.allclose(np.linalg.norm(small, axis=1), 1.0, atol=1e-4)
    cosines = np.sum(full * small, axis=1)
    assert cosines.min() > 0.97
    assert not np.allclose(full, small, atol=1e-4)  # really the int8 model
    query = np.asarray(int8.get_query_embedding(TEXTS[0]))
    # queries: the same model as batches, and one text per run, so the very same vector
    assert np.array_equal(query, small[0])
    assert not np.allclose(query, full[0], atol=1e-4)
    assert int(np.argmax(small[1:] @ query)) == int(np.argmax(full[1:] @ full[0])) == 0
    made = list(Path(quantised_copy, "onnx").glob("*.int8-*.onnx"))
    full_file = Path(onnx_encoder.onnx_export_path(embed_model.model_name, quantised_copy))
    # the weight matrices in int8; the word-embedding table stays float32
    assert len(made) == 1 and made[0].stat().st_size < 0.8 * full_file.stat().st_size
    assert describe_embed_model(int8) == "all-MiniLM-L6-v2 (bundled, CPU, int8)"


@pytest.mark.slow
def test_the_int8_copy_is_made_once_and_reused(embed_model, exported_copy, monkeypatch) -> None:
    LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")._embed(
        ["a"]
    )

    def fail(*args, **kwargs):
        raise AssertionError("quantised again")

    monkeypatch.setattr(int8_export, "_quantize", fail)
    again = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")
    assert len(again.get_text_embedding("reused")) == 384


def test_precision_from_the_environment(embed_model, exported_copy, monkeypatch) -> None:
    monkeypatch.setenv("RAG_PACK_EMBED_PRECISION", "int8")
    assert LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy)).precision == "int8"
    monkeypatch.setenv("RAG_PACK_EMBED_PRECISION", "int4")
    with pytest.raises(ConfigurationError, match="int4"):
        LocalEmbedding(embed_model.model_name)


def test_int8_with_pytorch_is_one_error(embed_model) -> None:
    with pytest.raises(ConfigurationError, match="ONNX Runtime"):
        LocalEmbedding(embed_model.model_name, backend="torch", precision="int8")


@pytest.mark.slow
def test_a_copy_that_strays_is_refused_and_never_kept(
    embed_model, exported_copy, monkeypatch
) -> None:
    monkeypatch.setattr(int8_export, "MIN_PROBE_COSINE", 1.01)  # nothing could pass
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")
    with pytest.raises(ConfigurationError, match="strays"):
        model.get_text_embedding("x")
    left = [p.name for p in Path(exported_copy, "onnx").iterdir() if "int8" in p.name]
    assert all(name.endswith(".lock") for name in left)  # no copy, no partial file


@pytest.mark.slow
def test_a_failed_quantisation_is_one_error_not_a_quiet_fallback(
    embed_model, exported_copy, monkeypatch
) -> None:
    def broken(source, target):
        raise RuntimeError("quantizer crashed")

    monkeypatch.setattr(int8_export, "_quantize", broken)
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")
    with pytest.raises(ConfigurationError, match="quantizer crashed"):
        model.get_query_embedding("x")


@pytest.mark.slow
def test_an_int8_vector_depends_on_its_text_alone(embed_model, quantised_copy) -> None:
    """Activations are quantised per run, and an int8 run holds one text: a text's vector is
    the same alone, among short or long texts, in any order (float32's batches differ only
    by rounding)."""
    int8 = LocalEmbedding(embed_model.model_name, onnx_dir=str(quantised_copy), precision="int8")
    alone = np.asarray([int8.get_text_embedding(t) for t in TEXTS])
    batch = np.asarray(int8.get_text_embedding_batch(TEXTS))
    shuffled = np.asarray(int8.get_text_embedding_batch(TEXTS[::-1] + TEXTS[:2]))[::-1][2:]
    assert np.array_equal(alone, batch)
    assert np.array_equal(alone, shuffled)
    # the int8 sentence pass of a float32 model uses the same int8 runs
    mixed = LocalEmbedding(
        embed_model.model_name, onnx_dir=str(quantised_copy), sentence_precision="int8"
    )
    assert np.array_equal(np.asarray(mixed.embed_sentences(TEXTS)), alone)


@pytest.mark.slow
def test_int8_sentences_beside_float32_chunks_and_queries(embed_model, quantised_copy) -> None:
    model = LocalEmbedding(
        embed_model.model_name, onnx_dir=str(quantised_copy), sentence_precision="int8"
    )
    assert model.sentence_precision == "int8" and model.precision == "float32"
    chunks = np.asarray(model.get_text_embedding_batch(TEXTS))
    sentences = np.asarray(model.embed_sentences(TEXTS))
    assert np.allclose(chunks, np.asarray(embed_model.get_text_embedding_batch(TEXTS)), atol=1e-5)
    assert not np.allclose(chunks, sentences, atol=1e-4)  # really int8
    assert np.sum(chunks * sentences, axis=1).min() > 0.97
    # a float32 question ranks int8 sentences as float32 ones
    query = np.asarray(model.get_query_embedding(TEXTS[0]))
    assert int(np.argmax(sentences[1:] @ query)) == int(np.argmax(chunks[1:] @ query)) == 0
    assert describe_embed_model(model) == "all-MiniLM-L6-v2 (bundled, CPU, int8 sentences)"
    assert model.embed_sentences([]) == []


@pytest.mark.slow
def test_sentences_are_embedded_in_float32_by_default(embed_model, monkeypatch) -> None:
    assert DEFAULT_SENTENCE_PRECISION == embed_model.sentence_precision == "float32"
    assert np.allclose(
        embed_model.embed_sentences(TEXTS), embed_model.get_text_embedding_batch(TEXTS), atol=1e-6
    )
    assert describe_embed_model(embed_model) == "all-MiniLM-L6-v2 (bundled, CPU)"
    monkeypatch.setenv("RAG_PACK_SENTENCE_PRECISION", "int8")
    assert LocalEmbedding(embed_model.model_name).sentence_precision == "int8"
    monkeypatch.setenv("RAG_PACK_SENTENCE_PRECISION", "")  # set but empty: the default
    assert LocalEmbedding(embed_model.model_name).sentence_precision == "float32"
    monkeypatch.setenv("RAG_PACK_SENTENCE_PRECISION", "int4")
    with pytest.raises(ConfigurationError, match="int4"):
        LocalEmbedding(embed_model.model_name)
    monkeypatch.delenv("RAG_PACK_SENTENCE_PRECISION")
    # an int8 model embeds its sentences in int8 whatever was asked
    both = LocalEmbedding(embed_model.model_name, precision="int8", sentence_precision="float32")
    assert both.sentence_precision == "int8"


def test_int8_sentences_with_pytorch_is_one_error(embed_model) -> None:
    with pytest.raises(ConfigurationError, match="sentence_precision='int8' runs on ONNX"):
        LocalEmbedding(embed_model.model_name, backend="torch", sentence_precision="int8")
    torch = LocalEmbedding(embed_model.model_name, backend="torch")
    assert torch._sentence_encoder() is None


@pytest.mark.slow
def test_int8_sentences_that_cannot_be_made_are_one_error(
    embed_model, exported_copy, monkeypatch
) -> None:
    def broken(source, target):
        raise RuntimeError("quantizer crashed")

    monkeypatch.setattr(int8_export, "_quantize", broken)
    asked = LocalEmbedding(
        embed_model.model_name, onnx_dir=str(exported_copy), sentence_precision="int8"
    )
    with pytest.raises(ConfigurationError, match="quantizer crashed"):
        asked.embed_sentences(["x", "y"])
