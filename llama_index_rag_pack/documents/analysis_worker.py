"""A helper process for the BM25 analysis of an insert: it analyses the chunks of the next slice
(:func:`~llama_index_rag_pack.documents.bm25_analysis.analyse_chunks`) while the pack embeds and
stores the one before.

The analysis (language identification, segmentation, stemming) is Python work that holds the
interpreter's lock, as do chunking and Milvus Lite's writes in the same process, so a thread
cannot overlap them; a second process can. It is started with ``python -m`` (never by forking a
process that runs Milvus Lite's threads, and without re-running the caller's script), reads plain
values (:class:`~llama_index_rag_pack.documents.bm25_analysis.ChunkToAnalyse`) over its standard
input and answers on its standard output, one request at a time, and ends when its input closes,
so it never outlives the insert, even when the caller is killed. It imports neither LlamaIndex
nor pymilvus. Its log records come back with each answer and are logged here.
``RAG_PACK_INDEX_WORKER=off`` analyses every slice in the calling process.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.bm25_analysis import (
    AnalysedChunk,
    ChunkToAnalyse,
    analyse_chunks,
    resolve_analyzer,
)

logger = logging.getLogger(__name__)

__all__ = ["WORKER_ENV", "AnalysisWorker", "analyse_by_name", "start_worker", "worker_enabled"]

#: ``auto`` (default): a helper process analyses the slices after the first when an insert has
#: more than one; ``off``: every slice is analysed in the calling process.
WORKER_ENV = "RAG_PACK_INDEX_WORKER"
_FRAME = struct.Struct("!Q")
#: Seconds a closing helper is given to end before it is killed.
_CLOSE_WAIT = 5.0


def worker_enabled() -> bool:
    """What :data:`WORKER_ENV` says (``auto`` or ``off``).

    Raises:
        ConfigurationError: another value.
    """
    value = os.environ.get(WORKER_ENV, "auto").strip().lower()
    if value not in ("auto", "off"):
        raise ConfigurationError(f"{WORKER_ENV} must be 'auto' or 'off'; got {value!r}.")
    return value == "auto"


def _write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_FRAME.pack(len(data)) + data)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> Any:
    """The next message, or ``None`` at the end of the stream."""
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None
    (size,) = _FRAME.unpack(head)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


class AnalysisWorker:
    """The helper process, for one insert under the analysis called ``analysis`` (a context
    manager; :meth:`close` ends it).

    Raises:
        OSError: the process could not be started.
    """

    def __init__(self, analysis: str) -> None:
        env = dict(os.environ)
        root = Path(__file__).resolve().parents[2]
        if root.name not in ("site-packages", "dist-packages"):  # a checkout: found as here
            # (an installed package is found anyway; on PYTHONPATH its site directory would
            # come before the standard library)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.alive = True
        self._send(("analysis", analysis, logging.getLogger().getEffectiveLevel()))

    def _send(self, message: Any) -> bool:
        try:
            _write_frame(self._process.stdin, message)  # type: ignore[arg-type]
        except (OSError, ValueError, pickle.PicklingError, TypeError, AttributeError) as e:
            self._lost(f"could not be sent a slice ({type(e).__name__}: {e})")
        return self.alive

    def submit(self, chunks: Sequence[ChunkToAnalyse]) -> bool:
        """Send a slice's chunks to analyse; ``False`` when the helper is gone."""
        return self.alive and self._send(("chunks", list(chunks)))

    def result(self) -> list[AnalysedChunk] | None:
        """The chunks last submitted, analysed; ``None`` when the helper failed on them (the
        reason is logged) or is gone."""
        if not self.alive:
            return None
        try:
            reply = _read_frame(self._process.stdout)  # type: ignore[arg-type]
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError) as e:
            reply, reason = None, f"{type(e).__name__}: {e}"
        else:
            reason = f"exit code {self._process.poll()}"
        if reply is None:
            self._lost(f"stopped ({reason})")
            return None
        status, payload, records = reply
        for name, level, text in records:
            logging.getLogger(name).log(level, "%s", text)
        if status == "ok":
            return payload
        logger.debug("The analysis helper failed on a slice (%s); analysing it here", payload)
        return None

    def _lost(self, what: str) -> None:
        logger.warning("The BM25 analysis helper process %s; analysing the rest here", what)
        self.close()

    def close(self) -> None:
        """End the helper (closing its input ends it; killed if it does not end)."""
        self.alive = False
        process = self._process
        if process.poll() is None:
            for stream in (process.stdout, process.stdin):  # a reply it is writing fails first
                with contextlib.suppress(OSError):
                    stream.close()  # type: ignore[union-attr]
            try:
                process.wait(_CLOSE_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None and not stream.closed:
                with contextlib.suppress(OSError):  # unsent bytes to a helper that is gone
                    stream.close()

    def __enter__(self) -> AnalysisWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def start_worker(analysis: str) -> AnalysisWorker | None:
    """A helper for the analysis called ``analysis``, or ``None`` (with a warning) when no
    process can be started."""
    try:
        return AnalysisWorker(analysis)
    except OSError as e:
        logger.warning("No BM25 analysis helper process (%s): slices are analysed here", e)
        return None


def analyse_by_name(chunks: Sequence[ChunkToAnalyse], analysis: str) -> list[AnalysedChunk]:
    """``chunks`` analysed by the analysis called ``analysis`` (what the helper runs)."""
    return analyse_chunks(resolve_analyzer(analysis), chunks)


class _Records(logging.Handler):
    """Keeps the helper's log records, to send back with the slice."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        # a record that cannot be formatted is dropped, as logging would
        with contextlib.suppress(Exception):
            self.records.append((record.name, record.levelno, record.getMessage()))


def serve(
    stdin: IO[bytes], stdout: IO[bytes], analyse: Callable[..., Any] = analyse_by_name
) -> None:
    """The helper's loop: the analysis's name, then slices of chunks, each answered with their
    analysed copies (or the failure), until ``stdin`` ends."""
    handler = _Records()
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    name = None
    while (message := _read_frame(stdin)) is not None:
        if message[0] == "analysis":
            name = message[1]
            logging.getLogger().setLevel(message[2])
            continue
        handler.records.clear()
        try:
            reply: tuple[str, Any, list[Any]] = ("ok", analyse(message[1], name), [])
        except Exception as e:  # the caller analyses the slice itself and meets the error
            reply = ("error", f"{type(e).__name__}: {e}", [])
        try:
            _write_frame(stdout, (reply[0], reply[1], list(handler.records)))
        except (pickle.PicklingError, TypeError, AttributeError) as e:  # an unpicklable answer
            _write_frame(stdout, ("error", f"{type(e).__name__}: {e}", []))


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may land among the frames
    serve(stdin, stdout)


if __name__ == "__main__":
    main()
