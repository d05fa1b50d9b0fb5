"""Sentence vectors from one pass per chunk: the mean of each sentence's token vectors in the
chunk's own forward pass (``sentence_vectors="pooled"``).

The sentence index embeds every sentence of every chunk: with MiniLM on 2 cores that costs as much
model time as the chunks themselves (``benchmarks/results/indexing_profile.md``). A chunk's pass
already computes a vector for each of its tokens, in context; the model's sentence vector is the
mean of a text's token vectors, so the mean over one sentence's tokens is that sentence's vector
in its chunk, and the mean over all of them is the chunk's own vector, as before. One pass per
chunk then gives both. Measured on the held-out ``wiki_qa_para`` splits, the sentence side alone
ranks evidence about as well (evidence@1 dev 0.597 against 0.629, test 0.661 against 0.629) at
half the model time (``benchmarks/results/sentence_pooling.md``); the default mode, with fusion
weights fitted on separate vectors, ranks worse at evidence@1 (test 0.680 against 0.735), so
separate passes stay the default (``benchmarks/results/sentence_vectors.md``).

The token model is a second ONNX export of the same weights (its token vectors, no pooling),
made once with PyTorch into the cache directory next to the pooled one and checked against it.
A sentence the chunk's pass does not reach (past the model's 256 word pieces) is left to the
caller, which embeds it on its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.onnx_encoder import (
    OnnxSentenceEncoder,
    export_lock,
    onnx_export_path,
    onnx_support,
    prune_exports,
)

logger = logging.getLogger(__name__)

__all__ = ["SENTENCE_VECTORS", "TokenPooler", "token_export_path"]

#: How the sentence index gets its vectors: a pass per sentence, or pooled from the chunk's pass.
SENTENCE_VECTORS = ("separate", "pooled")
#: Chunks per ONNX Runtime run (sorted by length, so little padding).
POOL_BATCH = 16
#: The export must reproduce the pooled model: the mean of its token vectors, normalised.
MIN_PROBE_COSINE = 0.9999
_PROBE = "The quick brown fox jumps over the lazy dog near the river bank."


def token_export_path(model_dir: str | Path, directory: str | Path | None = None) -> Path:
    """Where the token-vector export of ``model_dir`` lives (beside its pooled export)."""
    pooled = onnx_export_path(model_dir, directory)
    model, digest = pooled.stem.rsplit("-", 1)
    # its own name stem, so the pooled exports and these are pruned apart (3 of each kept)
    return pooled.with_name(f"{model}.tokens-{digest}.onnx")


def _export(model_dir: Path, target: Path) -> None:
    try:
        import onnx  # noqa: F401  (torch.onnx needs it)
        import torch
        from transformers import AutoModel
    except ImportError as e:
        raise ConfigurationError(
            f"Exporting the token model needs torch and onnx ({e.name} missing)."
        ) from None
    model = AutoModel.from_pretrained(str(model_dir)).eval()

    class Tokens(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

    ids = torch.tensor([[101, 2023, 102], [101, 102, 0]])
    partial = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                Tokens().eval(),
                (ids, (ids != 0).long()),
                str(partial),
                input_names=["input_ids", "attention_mask"],
                output_names=["tokens"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "tokens"},
                    "attention_mask": {0: "batch", 1: "tokens"},
                    "tokens": {0: "batch", 1: "tokens"},
                },
                opset_version=17,
                dynamo=False,
            )
        os.replace(partial, target)
    except (OSError, RuntimeError, ValueError) as e:
        raise ConfigurationError(f"Cannot export the token model of {model_dir}: {e}") from e
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def _span(text: str, sentence: str, start: int) -> tuple[int, int] | None:
    """Where ``sentence`` (whitespace-normalised) is in ``text``, looked for from ``start``."""
    words = sentence.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(w) for w in words))
    found = pattern.search(text, start) or pattern.search(text)
    return (found.start(), found.end()) if found else None


class TokenPooler:
    """Chunk and sentence vectors from one pass per chunk.

    Args:
        encoder: The model's pooled encoder (its tokenizer and settings are used).
        model_dir: The model directory (for the export).
        onnx_dir: The export directory (default: the cache directory).
    """

    def __init__(
        self, encoder: OnnxSentenceEncoder, model_dir: str | Path, onnx_dir: str | None = None
    ) -> None:
        import onnxruntime as ort

        reason = onnx_support(model_dir)
        if reason:
            raise ConfigurationError(f"{model_dir} cannot pool sentence vectors: {reason}.")
        self.encoder = encoder
        path = token_export_path(model_dir, onnx_dir)
        with export_lock(path):
            if not path.is_file():
                logger.info("Exporting the token model of %s once (%s)", model_dir, path)
                _export(Path(model_dir), path)
                prune_exports(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = os.cpu_count() or 1
        options.log_severity_level = 3
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._check()

    def _check(self) -> None:
        chunk, _ = self.pool([_PROBE], [[]])
        cosine = float(np.dot(chunk[0], self.encoder.encode([_PROBE])[0]))
        if cosine < MIN_PROBE_COSINE:
            raise ConfigurationError(
                f"The token model does not reproduce the sentence model (cosine {cosine:.6f})."
            )

    def pool(
        self, texts: Sequence[str], sentences: Sequence[Sequence[str]]
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]]]:
        """For each text: its vector (the mean of its token vectors, normalised, as the
        sentence model gives it) and, for each of its ``sentences``, the mean of that
        sentence's token vectors, normalised (``None`` where the pass does not reach it)."""
        prepared = [self.encoder.prepare(t) for t in texts]
        encodings = self.encoder.encodings(prepared)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        chunk_vectors = np.zeros((len(texts), 0), dtype=np.float32)
        pooled: list[list[np.ndarray | None]] = [[] for _ in texts]
        for start in range(0, len(order), POOL_BATCH):
            rows = order[start : start + POOL_BATCH]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                ids[r, : len(encodings[i].ids)] = encodings[i].ids
                mask[r, : len(encodings[i].ids)] = 1
            out = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
            if chunk_vectors.shape[1] == 0:
                chunk_vectors = np.zeros((len(texts), out.shape[2]), dtype=np.float32)
            for r, i in enumerate(rows):
                tokens = out[r, : len(encodings[i].ids)]
                whole = tokens.mean(0)
                chunk_vectors[i] = whole / max(float(np.linalg.norm(whole)), 1e-12)
                pooled[i] = self._sentences(prepared[i], sentences[i], tokens, encodings[i].offsets)
        return chunk_vectors, pooled

    def _sentences(
        self,
        text: str,
        sentences: Sequence[str],
        tokens: np.ndarray,
        offsets: Sequence[tuple[int, int]],
    ) -> list[np.ndarray | None]:
        out: list[np.ndarray | None] = []
        cursor = 0
        for sentence in sentences:
            span = _span(text, self.encoder.prepare(sentence), cursor)
            if span is None:
                out.append(None)
                continue
            cursor = span[1]
            inside = [
                k for k, (a, z) in enumerate(offsets) if a < z and span[0] <= a and z <= span[1]
            ]
            if not inside:
                out.append(None)
                continue
            vector = tokens[inside].mean(0)
            out.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
        return out
