"""``CitedChatEngine``: multi-turn chat whose every answer carries citations.

Each turn, the follow-up and the conversation so far are condensed by the LLM into one standalone
question ("and when was it founded?" -> "When was the Milvus project founded?"), which is
retrieved with any retriever and answered through a
:class:`~llama_index_rag_pack.citations.cited_query_engine.CitedQueryEngine`: model markers,
attribution of uncited sentences, reference styles, quotes and annotate modes all work as for one
question. Citations are numbered per answer; ``source_nodes`` are the chunks the answer cites;
``metadata["condensed_question"]`` is what was searched.

The conversation lives in core's ``Memory`` with a token limit below the LLM's context window;
the history keeps each answer without its citations (:func:`history_text`), so old numbers and
links do not pile up in the condense prompt. A core ``BaseChatEngine``: ``chat``, ``achat``,
``stream_chat``, ``astream_chat``, ``reset``, ``chat_history``, and the REPLs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core import Settings
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.generic_utils import messages_to_history_str
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.callbacks import trace_method
from llama_index.core.chat_engine.types import (
    AgentChatResponse,
    BaseChatEngine,
    StreamingAgentChatResponse,
)
from llama_index.core.llms import LLM
from llama_index.core.memory import BaseMemory
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import QueryBundle

from llama_index_rag_pack.chat.chat_store import new_memory
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.citations.references import render_references
from llama_index_rag_pack.core.errors import ConfigurationError, check_count, check_query
from llama_index_rag_pack.fusion.rewrite import parse_rewrite

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CONDENSE_PROMPT",
    "CitedChatEngine",
    "CitedChatResponse",
    "CitedStreamingChatResponse",
    "history_text",
]

DEFAULT_CONDENSE_PROMPT = PromptTemplate(
    "Rewrite the user's last message as one standalone question that can be understood without "
    "the conversation: replace pronouns and vague references (it, they, that, there, he, she) "
    "with the names they refer to. Write only the question, on one line.\n\n"
    "Conversation:\n{chat_history}\n\n"
    "Last message: {question}\n"
    "Standalone question:"
)

_SPACE_BEFORE_PUNCTUATION = re.compile(r"[ \t]+([.,;:!?])")

#: The keywords of ``from_defaults`` that configure the chat rather than the query engine.
_CHAT_OPTIONS = ("chat_history", "memory", "token_limit", "condense_prompt", "skip_condense")

#: Tokens of the context window kept free for the condense prompt's own text and the reply.
_PROMPT_ROOM = 512


@dataclass
class CitedChatResponse(AgentChatResponse):
    """A chat turn's answer: ``response`` is the answer with its reference list, ``answer`` the
    answer alone, ``source_nodes`` the cited chunks, ``citations`` the structured list,
    ``context_nodes`` every chunk the LLM was shown, ``attribution`` the per-sentence support;
    ``metadata`` is the cited response's, plus ``condensed_question``."""

    answer: str = ""
    citations: list[Any] = field(default_factory=list)
    context_nodes: list[Any] = field(default_factory=list)
    attribution: Any = None


@dataclass
class CitedStreamingChatResponse(StreamingAgentChatResponse):
    """A streamed chat turn. ``metadata["condensed_question"]`` is set at once; ``source_nodes``,
    ``citations``, ``answer`` and the rest of ``metadata`` when the stream ends."""

    answer: str = ""
    citations: list[Any] = field(default_factory=list)
    context_nodes: list[Any] = field(default_factory=list)
    attribution: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)


class CitedChatEngine(BaseChatEngine):
    """Condense the follow-up, retrieve, answer with citations; remember the conversation.

    Args:
        query_engine: Answers each standalone question (its retriever, LLM, citation mode,
            style, attribution and prompts are used as they are).
        llm: Condenses follow-ups (default: the query engine's LLM).
        memory: Core memory (default: ``Memory`` with :meth:`default_token_limit`, its messages
            in an :class:`~llama_index_rag_pack.chat.chat_store.InProcessChatStore`).
        condense_prompt: Template with ``{chat_history}`` and ``{question}``.
        skip_condense: Search each message as it stands (no condense call).
        callback_manager: LlamaIndex callbacks (default: the query engine's).

    Example:
        >>> engine = CitedChatEngine.from_defaults(pack.retriever(), llm)  # doctest: +SKIP
        >>> engine.chat("Who founded Milvus?").response  # doctest: +SKIP
        >>> follow_up = engine.chat("And when was it released?")  # doctest: +SKIP
        >>> follow_up.metadata["condensed_question"]  # doctest: +SKIP
        'When was Milvus released?'
    """

    def __init__(
        self,
        query_engine: CitedQueryEngine,
        llm: LLM | None = None,
        memory: BaseMemory | None = None,
        *,
        condense_prompt: str | BasePromptTemplate | None = None,
        skip_condense: bool = False,
        callback_manager: Any | None = None,
    ) -> None:
        if not isinstance(query_engine, CitedQueryEngine):
            raise ConfigurationError(
                "CitedChatEngine needs a CitedQueryEngine (or use CitedChatEngine.from_defaults"
                f"(retriever, llm)); got {type(query_engine).__name__}."
            )
        self._engine = query_engine
        self._llm = llm or query_engine.llm
        self._memory = memory or new_memory(self.default_token_limit(self._llm))
        if isinstance(condense_prompt, str):
            condense_prompt = PromptTemplate(condense_prompt)
        self._condense_prompt = condense_prompt or DEFAULT_CONDENSE_PROMPT
        self._skip_condense = skip_condense
        self.callback_manager = callback_manager or query_engine.callback_manager

    @classmethod
    def from_defaults(
        cls, retriever: BaseRetriever, llm: LLM | None = None, **options: Any
    ) -> CitedChatEngine:
        """Build the engine over ``retriever`` like core's ``CondensePlusContextChatEngine``.

        Args:
            retriever: Any LlamaIndex retriever (e.g. ``pack.retriever(mode, filters=...)``).
            llm: Condenses and answers (default ``Settings.llm`` when set, else the pack's
                choice).
            options: The chat options of :meth:`from_query_engine` (``chat_history``,
                ``memory``, ``token_limit``, ``condense_prompt``, ``skip_condense``); every
                other keyword goes to :class:`CitedQueryEngine` (``mode``, ``style``,
                ``embed_model``, ``node_postprocessors``, ``attribution``, ...).
        """
        chat = {k: options.pop(k) for k in _CHAT_OPTIONS if k in options}
        options.setdefault("callback_manager", Settings.callback_manager)
        options.pop("streaming", None)  # chosen per call: stream_chat / astream_chat
        return cls.from_query_engine(CitedQueryEngine(retriever, llm, **options), **chat)

    @classmethod
    def from_query_engine(
        cls,
        query_engine: CitedQueryEngine,
        *,
        llm: LLM | None = None,
        chat_history: Sequence[ChatMessage] | None = None,
        memory: BaseMemory | None = None,
        token_limit: int | None = None,
        condense_prompt: str | BasePromptTemplate | None = None,
        skip_condense: bool = False,
    ) -> CitedChatEngine:
        """Chat through an existing cited ``query_engine`` (e.g. ``pack.make_query_engine()``).

        Args:
            query_engine: Answers each standalone question.
            llm: Condenses follow-ups (default: the query engine's LLM).
            chat_history: The conversation so far.
            memory: Core memory (then ``chat_history`` and ``token_limit`` are not used).
            token_limit: History tokens kept (default :meth:`default_token_limit`).
            condense_prompt, skip_condense: As in the constructor.
        """
        if memory is None:
            limit = check_count("token_limit", token_limit, none_ok=True)
            memory = new_memory(
                limit or cls.default_token_limit(llm or query_engine.llm),
                list(chat_history or []) or None,
            )
        return cls(
            query_engine,
            llm,
            memory,
            condense_prompt=condense_prompt,
            skip_condense=skip_condense,
        )

    @staticmethod
    def default_token_limit(llm: Any) -> int:
        """History tokens kept for ``llm``: what its context window leaves after its output and
        the condense prompt's own text (at least 256)."""
        metadata = getattr(llm, "metadata", None)
        window = int(getattr(metadata, "context_window", 0) or 4096)
        output = int(getattr(metadata, "num_output", 0) or 256)
        return max(256, window - output - _PROMPT_ROOM)

    # ------------------------------------------------------------------ state
    @property
    def chat_history(self) -> list[ChatMessage]:
        """Every message of the conversation (the condense step sees the recent ones that fit)."""
        return self._memory.get_all()

    @property
    def query_engine(self) -> CitedQueryEngine:
        return self._engine

    def reset(self) -> None:
        """Forget the conversation."""
        self._memory.reset()

    # ------------------------------------------------------------------ condensing
    def condense(self, message: str) -> str:
        """The standalone question for ``message`` after the conversation so far (the message
        itself on the first turn, with ``skip_condense``, or when the reply is unusable)."""
        history = self._memory.get()
        if self._skip_condense or not history:
            return message
        reply = self._llm.predict(self._condense_prompt, **self._condense_args(history, message))
        return self._condensed(reply, message)

    async def acondense(self, message: str) -> str:
        history = await self._memory.aget()
        if self._skip_condense or not history:
            return message
        reply = await self._llm.apredict(
            self._condense_prompt, **self._condense_args(history, message)
        )
        return self._condensed(reply, message)

    @staticmethod
    def _condense_args(history: Sequence[ChatMessage], message: str) -> dict[str, str]:
        return {"chat_history": messages_to_history_str(history), "question": message}

    @staticmethod
    def _condensed(reply: str, message: str) -> str:
        question = parse_rewrite(reply)
        if question is None:
            logger.warning("Unusable condensed question %r: searching the message as is", reply)
            return message
        return question

    def _start(self, message: str, chat_history: Sequence[ChatMessage] | None) -> str:
        message = check_query(message)
        if chat_history is not None:
            self._memory.set(list(chat_history))
        return message

    # ------------------------------------------------------------------ turns
    @trace_method("chat")
    def chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedChatResponse:
        message = self._start(message, chat_history)
        question = self.condense(message)
        nodes = self._engine.retrieve(QueryBundle(question))
        response = self._engine.respond(nodes, question, streaming=False)
        self._memory.put_messages(_turn(message, response))
        return _chat_response(response, question)

    @trace_method("chat")
    async def achat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedChatResponse:
        message = self._start(message, chat_history)
        question = await self.acondense(message)
        nodes = await self._engine.aretrieve(QueryBundle(question))
        response = await self._engine.arespond(nodes, question, streaming=False)
        await self._memory.aput_messages(_turn(message, response))
        return _chat_response(response, question)

    @trace_method("chat")
    def stream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedStreamingChatResponse:
        message = self._start(message, chat_history)
        question = self.condense(message)
        nodes = self._engine.retrieve(QueryBundle(question))
        streamed = self._engine.respond(nodes, question, streaming=True)
        chat = _streaming_chat_response(streamed, question)

        def gen() -> Generator[ChatResponse, None, None]:
            text = ""
            for delta in streamed.response_gen:
                text += delta
                yield _delta(text, delta)
            _finish(chat, streamed)
            self._memory.put_messages(_turn(message, streamed))

        chat.chat_stream = gen()
        return chat

    @trace_method("chat")
    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedStreamingChatResponse:
        message = self._start(message, chat_history)
        question = await self.acondense(message)
        nodes = await self._engine.aretrieve(QueryBundle(question))
        streamed = await self._engine.arespond(nodes, question, streaming=True)
        chat = _streaming_chat_response(streamed, question)

        async def agen() -> AsyncGenerator[ChatResponse, None]:
            text = ""
            async for delta in streamed.async_response_gen():
                text += delta
                yield _delta(text, delta)
            _finish(chat, streamed)
            await self._memory.aput_messages(_turn(message, streamed))

        chat.achat_stream = agen()
        return chat


def _turn(message: str, response: Any) -> list[ChatMessage]:
    return [
        ChatMessage(role=MessageRole.USER, content=message),
        ChatMessage(role=MessageRole.ASSISTANT, content=history_text(response)),
    ]


def history_text(response: Any) -> str:
    """What the conversation remembers of a cited answer: its text with the citations removed
    (no numbers, links or reference list to repeat in later condense prompts)."""
    marked = (response.metadata or {}).get("marked_answer", response.answer)
    plain = render_references(marked, response.context_nodes, style="empty")
    return _SPACE_BEFORE_PUNCTUATION.sub(r"\1", plain).strip()


def _chat_response(response: Any, question: str) -> CitedChatResponse:
    return CitedChatResponse(
        response=str(response.response or ""),
        source_nodes=list(response.source_nodes),
        metadata={**(response.metadata or {}), "condensed_question": question},
        answer=response.answer,
        citations=list(response.citations),
        context_nodes=list(response.context_nodes),
        attribution=response.attribution,
    )


def _streaming_chat_response(streamed: Any, question: str) -> CitedStreamingChatResponse:
    """The chat response around a cited streaming response; tokens are read by the caller
    (``response_gen`` / ``async_response_gen``), the memory is written when they end."""
    metadata = streamed.metadata if streamed.metadata is not None else {}
    metadata["condensed_question"] = question
    return CitedStreamingChatResponse(
        source_nodes=streamed.source_nodes,
        metadata=metadata,
        is_writing_to_memory=False,
    )


def _delta(text: str, delta: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=delta)


def _finish(chat: CitedStreamingChatResponse, streamed: Any) -> None:
    """Copy what the cited stream filled in when it ended."""
    chat.source_nodes[:] = streamed.source_nodes
    chat.metadata.update(streamed.metadata or {})
    chat.answer = streamed.answer
    chat.citations[:] = streamed.citations
    chat.context_nodes[:] = streamed.context_nodes
    chat.attribution = streamed.attribution
