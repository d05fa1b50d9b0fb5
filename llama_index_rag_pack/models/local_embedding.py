"""``LocalEmbedding``: a local sentence-transformers model, queries on ONNX Runtime.

The pack's default embedding model (the bundled all-MiniLM-L6-v2, or any local model named by
``RAG_PACK_EMBED_MODEL``). Two runtimes, one set of vectors:

* queries and indexing batches run on ONNX Runtime
  (:mod:`~llama_index_rag_pack.models.onnx_encoder`): one query in ≈5.5 ms instead of ≈17 ms,
  batches faster than on PyTorch (978 sentences 5.6 vs 9.4 s, 146 chunks 5.5 vs 7.0 s;
  ``benchmarks/results/query_embedding.md``), and a process that asks or indexes never imports
  PyTorch (≈5 s) once the model has been exported (once per installation, ≈6 s, with PyTorch);
* PyTorch (sentence-transformers through core's ``HuggingFaceEmbedding``) embeds only when the
  model cannot run on ONNX, or with ``backend="torch"``.

Batches are embedded in texts of similar length (the 3,165 sentences of 8 articles embed 2.4x
faster sorted than in the order given; ``benchmarks/results/embedding_batches.md``).

``backend`` (or ``RAG_PACK_EMBED_BACKEND``): ``auto`` (the above), ``onnx`` (everything on ONNX
Runtime) or ``torch`` (everything on PyTorch). ``precision`` (or ``RAG_PACK_EMBED_PRECISION``):
``float32``, or ``int8`` for an int8 copy of the export (about half the model time)
(:mod:`~llama_index_rag_pack.models.int8_export`); queries and batches use the same one.
``sentence_precision`` (or ``RAG_PACK_SENTENCE_PRECISION``) ``int8`` embeds only the sentence
index's texts with that copy (:meth:`LocalEmbedding.embed_sentences`), chunks and questions
staying float32. An int8 model runs one text per run, so its vectors never depend on the
texts embedded beside them.
The async methods run the model in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import Field, PrivateAttr

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.text_decoding import without_lone_surrogates
from llama_index_rag_pack.models.hub_cache import cached_model_dir
from llama_index_rag_pack.models.int8_export import EmbedPrecision, int8_export
from llama_index_rag_pack.models.onnx_encoder import (
    RUN_BATCH,
    OnnxSentenceEncoder,
    export_lock,
    export_onnx,
    onnx_export_path,
    onnx_support,
)
from llama_index_rag_pack.models.text_batches import by_length, in_order

__all__ = ["DEFAULT_SENTENCE_PRECISION", "EmbedBackend", "LocalEmbedding", "cached_model_dir"]

logger = logging.getLogger(__name__)


_EXPORT_LOCK = threading.Lock()

#: What the sentence index's texts are embedded with unless said otherwise (see
#: :class:`LocalEmbedding`'s ``sentence_precision``).
DEFAULT_SENTENCE_PRECISION = "float32"


class EmbedBackend(Choice):
    """Which runtime embeds texts (see the module docstring)."""

    AUTO = "auto"
    ONNX = "onnx"
    TORCH = "torch"


class LocalEmbedding(BaseEmbedding):
    """A local sentence-transformers model: queries and batches on ONNX Runtime (see the module).

    Args:
        model_name: A local sentence-transformers directory (loaded on first use), or the
            name of a Hub model already in LlamaIndex's cache directory (loaded now; runs on
            PyTorch only; nothing is downloaded).
        device: ``cpu`` (ONNX Runtime is used on the CPU only; another device means PyTorch).
        backend: ``auto``, ``onnx`` or ``torch`` (default: ``RAG_PACK_EMBED_BACKEND`` or auto).
        embed_batch_size: Texts per batch.
        onnx_dir: Where the ONNX export is kept (default: the cache directory).
        onnx_threads: ONNX Runtime threads (default: up to 2 for a query; a batch runs one
            run per core at a time; idle threads sleep at once instead of spinning).
        precision: ``float32`` or ``int8`` (ONNX Runtime only; default:
            ``RAG_PACK_EMBED_PRECISION`` or float32).
        sentence_precision: What the sentence index's texts are embedded with
            (:meth:`embed_sentences`): ``float32`` or ``int8`` (ONNX Runtime only; default:
            ``RAG_PACK_SENTENCE_PRECISION``, else :data:`DEFAULT_SENTENCE_PRECISION`; ``int8``
            whenever ``precision`` is). ``int8`` roughly halves the sentence pass, the larger
            half of indexing, at a measured cost in ranking
            (``benchmarks/results/sentence_precision.md``). A model that cannot run on ONNX
            Runtime embeds its sentences as its chunks.

    Raises:
        ConfigurationError: unknown backend or precision, ``int8`` (either precision) with
            ``backend="torch"``,
            a model name that is not on this machine or cannot be loaded, or
            ``backend="onnx"`` for a model that cannot be exported (the first embedding says
            why).
    """

    model_name: str = Field(description="Local sentence-transformers model directory or name.")
    device: str = Field(default="cpu")
    backend: str = Field(default="auto")
    onnx_dir: str | None = Field(default=None)
    onnx_threads: int | None = Field(default=None)
    precision: str = Field(default="float32")
    sentence_precision: str = Field(default=DEFAULT_SENTENCE_PRECISION)

    _lock: Any = PrivateAttr(default_factory=threading.Lock)
    _onnx: Any = PrivateAttr(default=None)
    _onnx_failed: str | None = PrivateAttr(default=None)
    _pooler: Any = PrivateAttr(default=None)
    _sentence_onnx: Any = PrivateAttr(default=None)
    _pooler_failed: bool = PrivateAttr(default=False)
    _torch: Any = PrivateAttr(default=None)

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        backend = kwargs.pop("backend", None) or os.environ.get("RAG_PACK_EMBED_BACKEND", "auto")
        kwargs.setdefault("embed_batch_size", 64)
        precision = kwargs.pop("precision", None) or os.environ.get(
            "RAG_PACK_EMBED_PRECISION", "float32"
        )
        kwargs["precision"] = EmbedPrecision.parse(precision).value
        sentence_precision = (
            kwargs.pop("sentence_precision", None)
            or os.environ.get("RAG_PACK_SENTENCE_PRECISION")
            or DEFAULT_SENTENCE_PRECISION
        )
        sentence_precision = EmbedPrecision.parse(sentence_precision).value
        if kwargs["precision"] == EmbedPrecision.INT8.value:
            sentence_precision = EmbedPrecision.INT8.value
        kwargs["sentence_precision"] = sentence_precision
        name = str(model_name)
        if name.startswith("~"):
            name = str(Path(name).expanduser())
        super().__init__(model_name=name, backend=EmbedBackend.parse(backend).value, **kwargs)
        if self.device != "cpu" and self.backend == EmbedBackend.ONNX.value:
            raise ConfigurationError("backend='onnx' runs on the CPU; use backend='torch'.")
        on_torch = self.backend == EmbedBackend.TORCH.value or self.device != "cpu"
        if self.precision == EmbedPrecision.INT8.value and on_torch:
            raise ConfigurationError(
                "precision='int8' runs on ONNX Runtime on the CPU; use backend='auto' or 'onnx'."
            )
        if self.sentence_precision == EmbedPrecision.INT8.value and on_torch:
            raise ConfigurationError(
                "sentence_precision='int8' runs on ONNX Runtime on the CPU; use backend='auto' "
                "or 'onnx'."
            )
        if not self.model_name.strip():
            raise ConfigurationError("LocalEmbedding needs a model directory or name.")
        if Path(self.model_name).is_dir():
            return
        if Path(self.model_name).is_absolute() or self.model_name.startswith("."):
            # a path, not a name: said at once, before PyTorch is imported to look it up
            raise ConfigurationError(
                f"No embedding model directory at {self.model_name!r} (a local "
                "sentence-transformers model directory is needed)."
            )
        if cached_model_dir(self.model_name) is None:  # said before PyTorch is imported
            from llama_index.core.utils import get_cache_dir

            raise ConfigurationError(
                f"No embedding model {self.model_name!r} on this machine: not a directory, nor "
                f"a model in the cache {get_cache_dir()} (models are never downloaded). Give a "
                "local sentence-transformers model directory, or leave the embedding model "
                "unset for the bundled all-MiniLM-L6-v2."
            )
        # a name found in the cache: loaded now, so a model that cannot load is an error here
        # and not at the first embedding
        self._torch_model()

    @classmethod
    def class_name(cls) -> str:
        return "LocalEmbedding"

    # ------------------------------------------------------------------ runtimes
    @property
    def query_backend(self) -> str:
        """``onnx`` or ``torch``: what embeds a query (loads the ONNX model if needed)."""
        return EmbedBackend.ONNX.value if self._onnx_encoder() else EmbedBackend.TORCH.value

    def _onnx_encoder(self) -> OnnxSentenceEncoder | None:
        if self._onnx is not None or self._onnx_failed is not None:
            return self._onnx
        if self.backend == EmbedBackend.TORCH.value or self.device != "cpu":
            self._onnx_failed = f"backend {self.backend!r} on {self.device!r}"
            return None
        with self._lock:
            if self._onnx is None and self._onnx_failed is None:
                try:
                    self._onnx = self._load_onnx()
                except Exception as e:  # export or load: torch, onnx and the file system
                    # int8 runs on ONNX Runtime only: no quiet fall-back to PyTorch
                    if (
                        self.backend == EmbedBackend.ONNX.value
                        or self.precision == EmbedPrecision.INT8.value
                    ):
                        if isinstance(e, ConfigurationError):
                            raise
                        raise ConfigurationError(f"Cannot run on ONNX Runtime: {e}") from e
                    self._onnx_failed = str(e)
                    logger.info("Embedding on PyTorch only: %s", e)
        return self._onnx

    def _load_onnx(self) -> OnnxSentenceEncoder:
        reason = onnx_support(self.model_name)
        if reason:
            raise ConfigurationError(f"{self.model_name} cannot run on ONNX Runtime: {reason}.")
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise ConfigurationError("onnxruntime is not installed.") from None
        path = onnx_export_path(self.model_name, self.onnx_dir)
        with _EXPORT_LOCK:
            encoder = self._existing_export(path)
            if encoder is None:
                with export_lock(path):  # one export at a time, across processes too
                    encoder = self._existing_export(path)  # made by another process meanwhile
                    if encoder is None:
                        logger.info("Exporting %s to ONNX once (%s)", self.model_name, path)
                        encoder = self._encoder(export_onnx(self.model_name, path))
        if self.precision == EmbedPrecision.INT8.value:
            return self._int8_encoder(encoder)
        return encoder

    def _existing_export(self, path: Path) -> OnnxSentenceEncoder | None:
        """The export at ``path``, marked used (older exports are pruned); ``None`` when there
        is none or it is damaged (then deleted, to be made again)."""
        if not path.is_file():
            return None
        with contextlib.suppress(OSError):
            path.touch()
        try:
            return self._encoder(path)
        except ConfigurationError as e:
            logger.warning("%s; exporting again", e)
            path.unlink(missing_ok=True)
            return None

    def _encoder(self, path: Path, run_batch: int = RUN_BATCH) -> OnnxSentenceEncoder:
        return OnnxSentenceEncoder(
            self.model_name,
            path,
            threads=self.onnx_threads or min(2, os.cpu_count() or 1),
            batch_threads=self.onnx_threads or os.cpu_count() or 1,
            run_batch=run_batch,
        )

    def _int8_encoder(self, reference: OnnxSentenceEncoder) -> OnnxSentenceEncoder:
        # one text per run: its activations' scales, so its vector, depend on it alone
        return self._encoder(int8_export(reference, self.model_name), run_batch=1)

    def _sentence_encoder(self) -> OnnxSentenceEncoder | None:
        """What :meth:`embed_sentences` runs apart from the chunks' model: the int8 copy of
        the float32 export where ``sentence_precision`` is int8 and ``precision`` is not;
        ``None`` where sentences are embedded as chunks are."""
        if self.sentence_precision == self.precision or not self._on_onnx():
            return None
        encoder = self._onnx_encoder()
        if encoder is None:  # the model runs on PyTorch: no int8 copy to make
            return None
        if self._sentence_onnx is None:
            with self._lock:
                if self._sentence_onnx is None:
                    self._sentence_onnx = self._int8_encoder(encoder)
        return self._sentence_onnx

    def embed_sentences(self, texts: list[str], show_progress: bool = False) -> list[list[float]]:
        """Vectors of the sentence index's texts, at ``sentence_precision`` (see the module).

        Raises:
            ConfigurationError: the int8 copy of the model cannot be made.
        """
        encoder = self._sentence_encoder()
        if encoder is None or not texts:
            return self.get_text_embedding_batch(texts, show_progress=show_progress)
        order = by_length(texts)
        ordered = [without_lone_surrogates(texts[i]) for i in order]
        step = max(1, self.embed_batch_size) * 16
        parts = range(0, len(ordered), step)
        if show_progress:
            from tqdm.auto import tqdm

            parts = tqdm(parts, desc="Embedding sentences", unit="batch")
        vectors: list[list[float]] = []
        for start in parts:
            vectors += encoder.encode(ordered[start : start + step]).tolist()
        return in_order(order, vectors)

    def _torch_model(self) -> BaseEmbedding:
        if self._torch is None:
            with self._lock:
                if self._torch is None:
                    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

                    try:
                        self._torch = HuggingFaceEmbedding(
                            model_name=self.model_name,
                            device=self.device,
                            embed_batch_size=self.embed_batch_size,
                            local_files_only=True,  # never a download
                        )
                    except Exception as e:  # OSError, ValueError, HF hub errors
                        reason = " ".join(str(e).split())  # one line
                        raise ConfigurationError(
                            f"Cannot load the embedding model {self.model_name!r}: {reason}"
                        ) from None
        return self._torch

    def _on_onnx(self) -> bool:
        """Whether texts embed on ONNX Runtime: see the module docstring."""
        if self.backend != EmbedBackend.AUTO.value:
            return self.backend == EmbedBackend.ONNX.value
        # ONNX unless only PyTorch is loaded (a model ONNX cannot run); the first call exports
        # the model once if needed
        return self._onnx is not None or self._torch is None

    def token_pooler(self) -> Any:
        """The :class:`~llama_index_rag_pack.models.token_pooling.TokenPooler` of this model
        (chunk and sentence vectors from one pass per chunk), or ``None`` where the model does
        not run on ONNX Runtime or its token model cannot be made (logged once)."""
        if self._pooler is not None or self._pooler_failed:
            return self._pooler
        encoder = self._onnx_encoder() if self._on_onnx() else None
        with self._lock:
            if self._pooler is None and not self._pooler_failed:
                try:
                    if encoder is None:
                        raise ConfigurationError("the model does not run on ONNX Runtime")
                    from llama_index_rag_pack.models.token_pooling import TokenPooler

                    self._pooler = TokenPooler(encoder, self.model_name, self.onnx_dir)
                except Exception as e:  # export, load, or the check against the model
                    self._pooler_failed = True
                    logger.warning("Sentence vectors embedded one by one: %s", e)
        return self._pooler

    def _embed(self, texts: list[str]) -> list[list[float]]:
        texts = [without_lone_surrogates(t) for t in texts]  # the tokenizers refuse them
        encoder = self._onnx_encoder() if self._on_onnx() else None
        if encoder is not None:
            return encoder.encode(texts).tolist()
        return self._torch_model()._get_text_embeddings(texts)

    # ------------------------------------------------------------------ BaseEmbedding
    def _get_query_embedding(self, query: str) -> list[float]:
        return self._embed([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._embed([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    def get_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[list[float]]:
        order = by_length(texts)
        vectors = super().get_text_embedding_batch(
            [texts[i] for i in order], show_progress=show_progress, **kwargs
        )
        return in_order(order, vectors)

    async def aget_text_embedding_batch(
        self, texts: list[str], show_progress: bool = False, **kwargs: Any
    ) -> list[list[float]]:
        order = by_length(texts)
        vectors = await super().aget_text_embedding_batch(
            [texts[i] for i in order], show_progress=show_progress, **kwargs
        )
        return in_order(order, vectors)
