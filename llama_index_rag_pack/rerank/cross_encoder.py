"""A reranker on this machine: a sentence-transformers ``CrossEncoder`` loaded from a directory
(``rerank="local:DIR"``), offline (``local_files_only``: nothing is downloaded).

The directory is checked when the reranker is made; the model loads on first use, once, and
scores ``batch_size`` pairs per forward pass.

Example:
    >>> CrossEncoderReranker(path="/no/such/dir")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: rerank='local:/no/such/dir': no such directory; give the directory of a saved sentence-transformers CrossEncoder (CrossEncoder.save(DIR)).
"""  # noqa: E501  (doctest output is one line)

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr

from llama_index_rag_pack.core.errors import ConfigurationError, RerankError
from llama_index_rag_pack.rerank.reranker_base import PackReranker

__all__ = ["CrossEncoderReranker"]


class CrossEncoderReranker(PackReranker):
    """Reranks with a local cross-encoder.

    Args:
        path: The directory of a saved sentence-transformers ``CrossEncoder``.
        device: Where it runs (``None``: sentence-transformers' choice).
        top_n, batch_size, fallback: As :class:`~llama_index_rag_pack.rerank.PackReranker`.
    """

    path: str = Field(description="directory of a saved CrossEncoder")
    device: str | None = Field(default=None, description="torch device (None: automatic)")
    _model: Any = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)
        if not Path(self.path).expanduser().is_dir():
            raise ConfigurationError(
                f"rerank='local:{self.path}': no such directory; give the directory of a saved "
                "sentence-transformers CrossEncoder (CrossEncoder.save(DIR))."
            )

    @classmethod
    def class_name(cls) -> str:
        return "CrossEncoderReranker"

    def describe(self) -> str:
        return f"local cross-encoder {self.path}"

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import CrossEncoder
                except ImportError:
                    raise ConfigurationError(
                        "rerank='local:DIR' needs sentence-transformers: "
                        "pip install 'sentence-transformers>=3'."
                    ) from None
                try:
                    self._model = CrossEncoder(
                        str(Path(self.path).expanduser()),
                        device=self.device,
                        local_files_only=True,
                    )
                except (OSError, ValueError) as e:
                    first = " ".join(str(e).split())[:300]
                    raise RerankError(
                        f"Cannot load the cross-encoder in {self.path}: {first}"
                    ) from None
            return self._model

    def _score(self, query: str, texts: Sequence[str]) -> list[float]:
        model = self._loaded()
        scores = model.predict(
            [(query, text) for text in texts],
            batch_size=self.batch_size,
            show_progress_bar=False,
        )
        return [float(s) for s in scores]
