"""The llama.cpp engine behind :class:`~llama_index_rag_pack.models.local_llm.LocalGGUFLLM`:
one ``xllamacpp.Server`` per model file and settings, started on first use and shared by the
whole process, and the one-line errors of its requests.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import statistics
import threading
import time
from typing import Any

from llama_index_rag_pack.core.errors import (
    ConfigurationError,
    LLMNotConfiguredError,
    RagPackError,
)
from llama_index_rag_pack.models.json_output import requested_json_schema

logger = logging.getLogger(__name__)

__all__ = [
    "LocalLLMError",
    "default_threads",
    "engine",
    "engine_loaded",
    "error_text",
    "loaded_models",
    "check_schema",
    "one_line",
    "raise_for_error",
    "request_body",
    "schema_request",
]


class LocalLLMError(RagPackError, RuntimeError):
    """llama.cpp refused or failed a request (a prompt longer than the context window, an invalid
    JSON schema, ...)."""


_ENGINES: dict[tuple[Any, ...], Any] = {}
_ENGINES_LOCK = threading.Lock()


def loaded_models() -> list[str]:
    """Paths of the GGUF models loaded in this process (each loads once, shared by every
    :class:`LocalGGUFLLM` with the same settings)."""
    with _ENGINES_LOCK:
        return [key[0] for key in _ENGINES]


def engine_loaded(key: tuple[str, int, int, int, bool]) -> bool:
    """Whether the engine for ``key`` (path, context, slots, threads, verbose) is running."""
    with _ENGINES_LOCK:
        return key in _ENGINES


def engine(key: tuple[str, int, int, int, bool]) -> Any:
    """The running ``xllamacpp.Server`` for ``key``, started (the model loaded) on first use."""
    with _ENGINES_LOCK:
        server = _ENGINES.get(key)
        if server is None:
            server = _ENGINES[key] = _start_engine(*key)
        return server


def _start_engine(path: str, n_ctx: int, parallel: int, threads: int, verbose: bool) -> Any:
    try:
        import xllamacpp
    except ImportError as e:
        raise LLMNotConfiguredError(
            "The local LLM needs xllamacpp (llama.cpp): "
            "`pip install 'llama-index-rag-pack[local]'`."
        ) from e
    params = xllamacpp.CommonParams()
    params.model.path = path
    params.n_ctx = n_ctx
    params.n_parallel = parallel
    params.kv_unified = True  # the slots share one context-sized cache instead of one each
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.verbosity = 3 if verbose else 0
    # The engine also answers HTTP on a random 127.0.0.1 port: a random key keeps other local
    # processes off it (the pack calls it in-process, without HTTP).
    params.api_keys = [os.urandom(16).hex()]
    logger.info("Loading local LLM %s (llama.cpp, %d slots, %d threads)", path, parallel, threads)
    try:
        return xllamacpp.Server(params)
    except RuntimeError as e:
        raise ConfigurationError(
            f"llama.cpp could not load {path!r}: the file is corrupt, truncated, or of a model "
            "architecture this llama.cpp build does not know."
        ) from e


@functools.cache
def _llguidance() -> bool:
    """Whether this llama.cpp build turns JSON schemas into LLGuidance grammars."""
    import xllamacpp

    return str(xllamacpp.json_schema_to_grammar({"type": "object"})).startswith("%llguidance")


def schema_request(schema: dict[str, Any]) -> dict[str, Any]:
    """The request fields that hold a reply to ``schema``: compact JSON (no free whitespace,
    which a small model otherwise spends its token budget on) where LLGuidance is built in, else
    llama.cpp's own ``json_schema``."""
    if not _llguidance():
        return {"json_schema": schema}
    options = {"whitespace_flexible": False, **schema.get("x-guidance", {})}
    compact = {**schema, "x-guidance": options}
    return {"grammar": "%llguidance {}\nstart: %json " + json.dumps(compact)}


_CHECKED_SCHEMAS: set[str] = set()


def check_schema(server: Any, schema: dict[str, Any]) -> None:
    """Raise :class:`LocalLLMError` when llama.cpp cannot use ``schema`` (checked once per
    schema, with a one-token request: an LLGuidance grammar alone would let a bad schema through
    unconstrained)."""
    key = json.dumps(schema, sort_keys=True, default=str)
    if key in _CHECKED_SCHEMAS:
        return
    probe = {"messages": [{"role": "user", "content": "{}"}], "max_tokens": 1}
    try:
        server.handle_chat_completions({**probe, "json_schema": schema})
    except ValueError as e:
        raise LocalLLMError(f"The local LLM rejected the request: {one_line(e)}") from e
    _CHECKED_SCHEMAS.add(key)


def default_threads() -> int:
    env = os.environ.get("RAG_PACK_LLM_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ConfigurationError(
                f"RAG_PACK_LLM_THREADS must be a positive integer, got {env!r}."
            ) from None
    global _DEFAULT_THREADS
    if _DEFAULT_THREADS is None:  # once per process: every model of it shares the choice
        _DEFAULT_THREADS = free_cores(usable_cores(), _load_average())
    return _DEFAULT_THREADS


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


_DEFAULT_THREADS: int | None = None


def _load_average() -> float | None:
    """How many cores other work keeps busy now: the median, over five reads 10 ms apart, of the
    runnable tasks Linux counts in ``/proc/loadavg`` less this one (the 1-minute average lags a
    minute behind a job that just ended); elsewhere the 1-minute load average."""
    try:
        samples = []
        for _ in range(5):
            with open("/proc/loadavg", encoding="ascii") as f:
                samples.append(int(f.read().split()[3].split("/")[0]) - 1)
            time.sleep(0.01)
        return float(statistics.median(samples))
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except (AttributeError, OSError):  # pragma: no cover - Windows
            return None


def free_cores(cores: int, load: float | None) -> int:
    """The cores other work leaves free (``cores`` less ``load``, the cores busy elsewhere,
    rounded; at least 1), half of them when the load is unknown.

    llama.cpp's threads wait for each other at every step, so a thread that shares its core with
    other work stalls them all: on a busy 2-core machine 4 short replies took 68 s with 2
    threads and 4.5 s with 1; on a quiet one, one answer took 5.7 s with 2 and 9.1 s with 1.

    Example:
        >>> free_cores(2, 0.2), free_cores(2, 1.1), free_cores(8, 3.0), free_cores(4, None)
        (2, 1, 5, 2)
    """
    if load is None:
        return max(1, cores // 2)
    return max(1, min(cores, round(cores - load)))


def one_line(error: Any) -> str:
    return " ".join(str(error).split())[:300]


def error_text(result: Any) -> str:
    error = result.get("error") if isinstance(result, dict) else None
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or "unknown error"
    elif isinstance(result, dict) and "message" in result:
        message = result["message"]
    else:
        message = error or result
    return f"The local LLM failed: {one_line(message)}"


def raise_for_error(result: Any) -> None:
    if isinstance(result, dict) and result.get("choices"):
        return
    raise LocalLLMError(error_text(result))


def request_body(
    kwargs: dict[str, Any], *, max_tokens: int, temperature: float, repeat_penalty: float
) -> dict[str, Any]:
    """The chat-completion request for a call's ``kwargs`` (``max_tokens``, ``temperature``,
    ``json_schema`` or ``grammar``, ``stop``, ``repeat_penalty``) over the model's defaults; a
    reply held to a schema or grammar gets no repetition penalty (its structure repeats).

    Raises:
        ConfigurationError: both ``json_schema`` and ``grammar``, or a schema that is not a dict.
    """
    body: dict[str, Any] = {
        "max_tokens": int(kwargs.get("max_tokens") or max_tokens),
        "temperature": float(kwargs.get("temperature", temperature)),
        # every prompt is computed whole: reusing a slot's cached prefix of an earlier prompt
        # changes the floating-point path, and with it a greedy reply (same question, another
        # answer after other questions)
        "cache_prompt": False,
    }
    grammar = kwargs.get("grammar")
    schema = kwargs.get("json_schema") or (None if grammar else requested_json_schema())
    if grammar and kwargs.get("json_schema"):
        raise ConfigurationError("Pass json_schema= or grammar=, not both.")
    if schema is not None:
        if not isinstance(schema, dict):
            raise ConfigurationError(
                f"json_schema must be a JSON schema dict, got {type(schema).__name__}."
            )
        body.update(schema_request(schema), _schema=schema)
    elif grammar:
        body["grammar"] = str(grammar)
    else:
        body["repeat_penalty"] = float(kwargs.get("repeat_penalty", repeat_penalty))
    stop = kwargs.get("stop")
    if stop:
        body["stop"] = [stop] if isinstance(stop, str) else list(stop)
    return body
