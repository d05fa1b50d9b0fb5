"""``LocalEmbedding(precision="int8")``: an int8 copy of the ONNX export, made once, checked
against the float32 vectors, used for queries and batches alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models import int8_export, onnx_encoder
from llama_index_rag_pack.models.local_embedding import LocalEmbedding
from llama_index_rag_pack.models.settings import describe_embed_model

TEXTS = [
    "Which river flows through Budapest?",
    "The Danube flows through Budapest, Vienna and Belgrade.",
    "Ants and termites live in colonies.",
    "北京是中国的首都。",
    "A long passage about rivers. " * 120,
]


def test_int8_vectors_stay_close_to_float32_and_rank_alike(embed_model, exported_copy) -> None:
    int8 = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")
    full = np.asarray(embed_model.get_text_embedding_batch(TEXTS))
    small = np.asarray(int8.get_text_embedding_batch(TEXTS))
    assert small.shape == full.shape
    assert np.allclose(np.linalg.norm(small, axis=1), 1.0, atol=1e-4)
    cosines = np.sum(full * small, axis=1)
    assert cosines.min() > 0.97
    assert not np.allclose(full, small, atol=1e-4)  # really the int8 model
    query = np.asarray(int8.get_query_embedding(TEXTS[0]))
    # queries: the same model as batches (activations are quantised per run, so a text's
    # vector moves a little with the texts it runs beside)
    assert float(query @ small[0]) > 0.99
    assert not np.allclose(query, full[0], atol=1e-4)
    assert int(np.argmax(small[1:] @ query)) == int(np.argmax(full[1:] @ full[0])) == 0
    made = list(Path(exported_copy, "onnx").glob("*.int8-*.onnx"))
    full_file = Path(onnx_encoder.onnx_export_path(embed_model.model_name, exported_copy))
    # the weight matrices in int8; the word-embedding table stays float32
    assert len(made) == 1 and made[0].stat().st_size < 0.8 * full_file.stat().st_size
    assert "int8" in describe_embed_model(int8)
    assert "int8" not in describe_embed_model(embed_model)


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


def test_a_copy_that_strays_is_refused_and_never_kept(
    embed_model, exported_copy, monkeypatch
) -> None:
    monkeypatch.setattr(int8_export, "MIN_PROBE_COSINE", 1.01)  # nothing could pass
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")
    with pytest.raises(ConfigurationError, match="strays"):
        model.get_text_embedding("x")
    left = [p.name for p in Path(exported_copy, "onnx").iterdir() if "int8" in p.name]
    assert all(name.endswith(".lock") for name in left)  # no copy, no partial file


def test_a_failed_quantisation_is_one_error_not_a_quiet_fallback(
    embed_model, exported_copy, monkeypatch
) -> None:
    def broken(source, target):
        raise RuntimeError("quantizer crashed")

    monkeypatch.setattr(int8_export, "_quantize", broken)
    model = LocalEmbedding(embed_model.model_name, onnx_dir=str(exported_copy), precision="int8")
    with pytest.raises(ConfigurationError, match="quantizer crashed"):
        model.get_query_embedding("x")
