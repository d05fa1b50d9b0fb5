"""A sentence-transformers model run by ONNX Runtime: export once, then embed without PyTorch.

A mean-pooled sentence-transformers model (``Transformer`` → ``Pooling(mean)`` →
``Normalize``, e.g. the bundled all-MiniLM-L6-v2) is exported once from its own weights with
``torch.onnx`` (mean pooling and the L2 normalisation inside the graph) into the cache directory
(:func:`cache_dir`), checked against the PyTorch model on a probe text, and reused by every later
process. Embedding then needs only ONNX Runtime and the model's ``tokenizer.json`` (the
``tokenizers`` library): no PyTorch import (≈5 s on a 2-core machine), and one query in ≈5.5 ms
instead of ≈17 ms (``benchmarks/results/query_embedding.md``). A batch is cut into runs of
``RUN_BATCH`` texts, one run per core at a time; up to ``RUN_BATCH`` texts are one run on the
query session (at most 2 threads). An int8 model runs one text per run (``run_batch=1``), so
that its per-run activation scales, and so its vectors, depend on that text alone.

Texts are tokenized as sentence-transformers does (whitespace stripped, lower-cased when the
model says so, truncated to ``max_seq_length``), so the vectors match the PyTorch model's to
float precision.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.model_key import model_key

__all__ = [
    "OnnxSentenceEncoder",
    "cache_dir",
    "export_lock",
    "export_onnx",
    "onnx_export_path",
    "onnx_support",
    "prune_exports",
]

logger = logging.getLogger(__name__)

# bump when the exported graph changes, so old exports are not reused
EXPORT_FORMAT = 1
#: Texts per ONNX Runtime run: on a 2-core CPU 4 at a time embed 256-token chunks ≈20% faster
#: than 64 at a time (``benchmarks/results/query_embedding.md``).
RUN_BATCH = 4
#: Exports kept per model (the most recently used; older installations' are deleted).
KEEP_EXPORTS = 3
#: Seconds a process waits for another one's export of the same model (one takes ≈10 s).
EXPORT_WAIT_S = 600.0
PROBE_TEXT = "The quick brown fox jumps over the lazy dog near the river bank."
MIN_PROBE_COSINE = 0.9999
_MEAN_POOLING = "sentence_transformers.models.Pooling"
_MODULES = (
    "sentence_transformers.models.Transformer",
    _MEAN_POOLING,
    "sentence_transformers.models.Normalize",
)


def cache_dir() -> Path:
    """Where derived model files live: ``RAG_PACK_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/llama-index-rag-pack``, else ``~/.cache/llama-index-rag-pack``."""
    configured = os.environ.get("RAG_PACK_CACHE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llama-index-rag-pack"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def onnx_support(model_dir: str | Path) -> str | None:
    """``None`` when ``model_dir`` can run on ONNX Runtime, else why not (one line).

    Supported: a local sentence-transformers directory whose modules are a ``Transformer``, a
    mean ``Pooling`` and a ``Normalize``, with a ``tokenizer.json`` and no prompts.
    """
    root = Path(model_dir)
    if not root.is_dir():
        return f"{model_dir} is not a local model directory"
    modules = _read_json(root / "modules.json")
    if not isinstance(modules, list) or tuple(m.get("type") for m in modules) != _MODULES:
        return "only Transformer + mean Pooling + Normalize sentence-transformers models"
    pooling = _read_json(root / modules[1].get("path", "") / "config.json") or {}
    others = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
    if others != ["pooling_mode_mean_tokens"]:
        return f"pooling {others} is not mean pooling"
    if not (root / "tokenizer.json").is_file():
        return "no tokenizer.json"
    if (_read_json(root / "config_sentence_transformers.json") or {}).get("prompts"):
        return "the model defines prompts"
    return None


def _weights(root: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (root / name).is_file():
            return root / name
    raise ConfigurationError(f"No model weights (model.safetensors) in {root}.")


def onnx_export_path(model_dir: str | Path, directory: str | Path | None = None) -> Path:
    """Where the export of ``model_dir`` lives: named by the content of its weights and
    configuration (:func:`~llama_index_rag_pack.models.model_key.model_key`) and the export
    format, so every installation of one model shares it and a changed model is exported again."""
    root = Path(model_dir).resolve()
    folder = Path(directory or cache_dir()) / "onnx"
    key = f"{model_key(root, _weights(root), folder)}|{EXPORT_FORMAT}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    name = root.name if root.name != "model" else root.parent.name
    return folder / f"{name}-{digest}.onnx"


def _max_length(root: Path) -> int:
    config = _read_json(root / "sentence_bert_config.json") or {}
    return int(config.get("max_seq_length") or 512)


def _lower_case(root: Path) -> bool:
    return bool((_read_json(root / "sentence_bert_config.json") or {}).get("do_lower_case"))


def export_onnx(model_dir: str | Path, target: str | Path) -> Path:
    """Export ``model_dir`` (with mean pooling and normalisation) to ``target``, atomically.

    Needs PyTorch, ``transformers`` and ``onnx``. The export is checked against the PyTorch
    model on a probe text before it is kept.

    Raises:
        ConfigurationError: the model is not supported, a library is missing, or the export
            does not reproduce the PyTorch vectors.
    """
    root, target = Path(model_dir), Path(target)
    reason = onnx_support(root)
    if reason:
        raise ConfigurationError(f"Cannot export {root} to ONNX: {reason}.")
    try:
        import onnx  # noqa: F401  (torch.onnx needs it)
        import torch
        from transformers import AutoModel
    except ImportError as e:
        raise ConfigurationError(
            f"Exporting to ONNX needs torch and onnx ({e.name} missing)."
        ) from None
    partial = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _export(torch, AutoModel, root, partial)
        os.replace(partial, target)
    except (OSError, RuntimeError, ValueError) as e:  # file system, torch.onnx, weights
        raise ConfigurationError(f"Cannot export {root} to ONNX: {e}") from e
    finally:
        with contextlib.suppress(OSError):  # nothing to remove where nothing could be written
            partial.unlink(missing_ok=True)
    logger.info("Exported %s to ONNX: %s", root, target)
    prune_exports(target)
    return target


@contextlib.contextmanager
def export_lock(target: Path, timeout: float = EXPORT_WAIT_S) -> Iterator[None]:
    """Held while ``target`` is looked for and, if missing, exported: of several processes
    starting at once (the workers of a test run, a few ``rag-pack`` commands), one exports and
    the others wait for its file instead of exporting it again.

    Raises:
        ConfigurationError: the lock cannot be made where ``target`` goes, or another process
            held it for ``timeout`` seconds.
    """
    from filelock import FileLock, Timeout

    lock = FileLock(f"{target}.lock")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=timeout)
    except Timeout:
        raise ConfigurationError(
            f"Another process has been exporting {target.name} for over {timeout:.0f} s; "
            f"delete {target}.lock if it is gone."
        ) from None
    except OSError as e:
        raise ConfigurationError(f"Cannot export to {target}: {e}") from e
    try:
        yield
    finally:
        lock.release()


def prune_exports(kept: Path, keep: int = KEEP_EXPORTS) -> None:
    """Delete all but the ``keep`` most recently used exports of ``kept``'s model (a model whose
    files changed, or an older export format, has exports of its own)."""
    model = kept.stem.rsplit("-", 1)[0]
    with contextlib.suppress(OSError):
        kept.touch()
        exports = sorted(
            kept.parent.glob(f"{glob.escape(model)}-*.onnx"),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in exports[keep:]:
            if old != kept:
                old.unlink(missing_ok=True)
                Path(f"{old}.lock").unlink(missing_ok=True)
                logger.info("Removed an older ONNX export: %s", old)


def _export(torch: Any, auto_model: Any, root: Path, partial: Path) -> None:
    """Export ``root`` to ``partial`` and check it against the PyTorch model on a probe."""
    pooled = _pooled_module(torch, auto_model.from_pretrained(str(root)).eval())
    ids = torch.tensor([[101, 2023, 102], [101, 102, 0]])
    mask = (ids != 0).long()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            pooled,
            (ids, mask),
            str(partial),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "embedding": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
    encoder = OnnxSentenceEncoder(root, partial, threads=1)
    with torch.no_grad():
        expected = pooled(*_torch_inputs(torch, encoder, [PROBE_TEXT]))[0].numpy()
    cosine = float(np.dot(encoder.encode([PROBE_TEXT])[0], expected))
    if cosine < MIN_PROBE_COSINE:
        raise ConfigurationError(
            f"The ONNX export of {root} does not reproduce its vectors (cosine {cosine:.6f})."
        )


def _pooled_module(torch: Any, model: Any) -> Any:
    class MeanPooled(torch.nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2.0, dim=1)

    return MeanPooled().eval()


def _torch_inputs(torch: Any, encoder: OnnxSentenceEncoder, texts: list[str]) -> tuple[Any, Any]:
    ids, mask = encoder.tokenize(texts)
    return torch.from_numpy(ids), torch.from_numpy(mask)


class OnnxSentenceEncoder:
    """An exported sentence model: ``encode(texts)`` returns unit vectors (float32 rows).

    Thread-safe (ONNX Runtime sessions run concurrently; the tokenizer is used per call).
    """

    def __init__(
        self,
        model_dir: str | Path,
        onnx_path: str | Path,
        *,
        threads: int = 2,
        batch_threads: int | None = None,
        run_batch: int = RUN_BATCH,
    ) -> None:
        from tokenizers import Tokenizer

        root = Path(model_dir)
        self.max_length = _max_length(root)
        self.lower_case = _lower_case(root)
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(self.max_length)
        self._tokenizer = tokenizer
        self._path = str(onnx_path)
        # 1 for a model whose activations are quantised per run (int8): a text's vector then
        # depends on that text alone, never on the texts it is batched with
        self.run_batch = max(1, int(run_batch))
        self._session = self._new_session(threads)
        # Batches (indexing) run on every core, one run per core at a time on a one-thread
        # session (made on the first batch): small runs split over threads spend much of their
        # time waking them, and a query on many threads would wake them all for a few products.
        self._batch_threads = max(1, int(batch_threads or threads))
        self._batch_session: Any = self._session if self._batch_threads == 1 else None
        # one pool for every batch of this encoder, so concurrent batches (LlamaIndex embeds
        # an async batch's parts at once) still run one run per core at a time
        self._pool: tuple[int, ThreadPoolExecutor] | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        """The ONNX file this encoder runs."""
        return self._path

    def _new_session(self, threads: int) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, int(threads))
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # idle threads sleep at once instead of spinning on a core the caller needs next
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            return ort.InferenceSession(self._path, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail/InvalidProtobuf types
            raise ConfigurationError(f"Cannot load the ONNX model {self._path}: {e}") from None

    def _batch_runner(self) -> Any:
        if self._batch_session is None:
            with self._lock:
                if self._batch_session is None:
                    self._batch_session = self._new_session(1)
        return self._batch_session

    def _batch_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pool[0] != os.getpid():  # a forked child: new threads
                pool = ThreadPoolExecutor(self._batch_threads, thread_name_prefix="rag-pack-embed")
                self._pool = (os.getpid(), pool)
            return self._pool[1]

    def prepare(self, text: str) -> str:
        """``text`` as the model reads it (stripped; lower-cased for an uncased model)."""
        return text.strip().lower() if self.lower_case else text.strip()

    def encodings(self, prepared: list[str]) -> list[Any]:
        """The tokenizer's encodings of prepared texts (ids and character offsets), truncated
        to the model's length."""
        return list(self._tokenizer.encode_batch(prepared))

    def tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and attention mask (int64), padded to the longest text."""
        encodings = self.encodings([self.prepare(t) for t in texts])
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        return ids, mask

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length vectors of ``texts``, run in batches of ``run_batch`` (texts of similar
        length together, as the caller sorts them, waste little padding), up to one run per
        core at a time."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        size = self.run_batch
        batches = [texts[start : start + size] for start in range(0, len(texts), size)]
        if len(batches) == 1:  # one run (up to run_batch texts): the query session's threads
            return self._run(self._session, batches[0])
        session = self._batch_runner()
        futures = self._submitted(session, batches) if self._batch_threads > 1 else []
        if futures:  # ONNX Runtime runs one session from several threads, without the GIL
            parts = [future.result() for future in futures]
        else:
            parts = [self._run(session, batch) for batch in batches]
        return np.concatenate(parts)

    def _submitted(self, session: Any, batches: list[list[str]]) -> list[Future]:
        """The runs of ``batches`` on the pool; none when it takes no more work (the
        interpreter is shutting down): the caller runs them itself."""
        futures: list[Future] = []
        try:
            pool = self._batch_pool()
            for batch in batches:
                futures.append(pool.submit(self._run, session, batch))
        except RuntimeError:  # "cannot schedule new futures after (interpreter) shutdown"
            for future in futures:
                future.cancel()
            return []
        return futures

    def _run(self, session: Any, texts: list[str]) -> np.ndarray:
        ids, mask = self.tokenize(texts)
        return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
