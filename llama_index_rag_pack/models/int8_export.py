"""An int8 copy of a sentence model's ONNX export: about half the model time on a CPU.

``LocalEmbedding(precision="int8")`` (or ``RAG_PACK_EMBED_PRECISION=int8``) embeds everything
with it, ``sentence_precision="int8"`` (``RAG_PACK_SENTENCE_PRECISION=int8``) only the sentence
index's texts. The copy of the model's float32 export
(:mod:`~llama_index_rag_pack.models.onnx_encoder`) has int8 weight matrices, one scale per output
channel, and quantises their inputs per run (ONNX Runtime's dynamic quantisation). Only matrix
products with a weight are quantised; the attention products, layer norms and pooling stay
float32. An int8 model runs one text per run, so a text's vector depends on that text alone,
never on the texts it is embedded with. The copy is made once from the float32 export (about a
second, no PyTorch), checked against it on probe texts, and kept beside it as
``<model>.int8-<digest>.onnx``.

Measured: ``benchmarks/results/sentence_precision.md`` (held-out quality: every int8 variant
ranks 2-6 fewer of 294 questions' evidence first, so float32 stays the default) and
``benchmarks/results/indexing_profile_sentences_int8.md`` (time).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

import numpy as np

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.onnx_encoder import OnnxSentenceEncoder, export_lock, prune_exports

logger = logging.getLogger(__name__)

__all__ = ["EmbedPrecision", "MIN_PROBE_COSINE", "int8_export", "int8_export_path"]


class EmbedPrecision(Choice):
    """The numbers a local model's ONNX export computes with."""

    FLOAT32 = "float32"
    INT8 = "int8"


#: The int8 copy must keep at least this cosine to the float32 vectors on every probe text.
MIN_PROBE_COSINE = 0.97
_PROBES = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Milvus stores the vectors; BM25 reads the words.",
    "RAPTOR 先对文本块聚类，然后总结每个聚类。",
    "What year did the first expedition reach the summit?",
)


def int8_export_path(float32_path: str | Path) -> Path:
    """Where the int8 copy of the float32 export at ``float32_path`` lives (beside it, with its
    own name stem, so the two kinds are pruned apart)."""
    path = Path(float32_path)
    model, digest = path.stem.rsplit("-", 1)
    return path.with_name(f"{model}.int8-{digest}.onnx")


def _weight_products(model: object) -> list[str]:
    """The ``MatMul`` nodes one of whose inputs is a weight (an initializer)."""
    graph = model.graph  # type: ignore[attr-defined]
    weights = {init.name for init in graph.initializer}
    return [
        node.name
        for node in graph.node
        if node.op_type == "MatMul" and any(name in weights for name in node.input)
    ]


def _quantize(source: Path, target: Path) -> None:
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        raise ConfigurationError(
            f"An int8 embedding model needs onnx and onnxruntime ({e.name} missing)."
        ) from None
    quantize_dynamic(
        str(source),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        nodes_to_quantize=_weight_products(onnx.load(str(source))),
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def _check(reference: OnnxSentenceEncoder, candidate: OnnxSentenceEncoder) -> None:
    cosines = np.sum(reference.encode(list(_PROBES)) * candidate.encode(list(_PROBES)), axis=1)
    worst = float(cosines.min())
    if worst < MIN_PROBE_COSINE:
        raise ConfigurationError(
            f"The int8 model strays from the float32 one (cosine {worst:.4f} on a probe "
            f"text, below {MIN_PROBE_COSINE}); use precision='float32'."
        )


def int8_export(reference: OnnxSentenceEncoder, model_dir: str | Path, threads: int = 1) -> Path:
    """The int8 copy of ``reference``'s export (made once, atomically, and checked against
    ``reference`` on probe texts); its path.

    Raises:
        ConfigurationError: a library is missing, the copy cannot be written, or it strays
            from the float32 vectors.
    """
    target = int8_export_path(reference.path)
    with export_lock(target):
        if target.is_file():
            with contextlib.suppress(OSError):
                target.touch()
            return target
        partial = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")
        try:
            logger.info("Quantising %s to int8 once (%s)", reference.path, target)
            _quantize(Path(reference.path), partial)
            _check(reference, OnnxSentenceEncoder(model_dir, partial, threads=threads, run_batch=1))
            os.replace(partial, target)
        except (OSError, RuntimeError, ValueError) as e:  # file system, onnx, onnxruntime
            raise ConfigurationError(f"Cannot make the int8 model {target}: {e}") from e
        finally:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        prune_exports(target)
    return target
