"""``CitedChatEngine``: multi-turn chat whose every answer carries citations.

Each turn, the follow-up and the conversation so far are condensed by the LLM into one standalone
question ("and when was it founded?" -> "When was the Milvus project founded?"), which is
retrieved with any retriever and answered through a
:class:`~llama_index_rag_pack.citations.cited_query_engine.CitedQueryEngine`: model markers,
attribution of uncited sentences, reference styles, quotes and annotate modes all work as for one
question. Citations are numbered per answer; ``source_nodes`` are the chunks the answer cites;
``metadata["condensed_question"]`` is what was searched. When the condensed question drops the
subject a follow-up refers to (a small model's habit), the follow-up joined to the previous
question is searched instead and ``metadata["follow_up"]`` is ``"joined"``
(:mod:`~llama_index_rag_pack.chat.follow_ups`).

The conversation lives in core's ``Memory`` with a token limit below the LLM's context window;
the history keeps each answer without its citations (:func:`history_text`), so old numbers and
links do not pile up in the condense prompt. A core ``BaseChatEngine``: ``chat``, ``achat``,
``stream_chat``, ``astream_chat``, ``reset``, ``chat_history``, and the REPLs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Generator, Sequence
from functools import partial
from typing import Any

from llama_index.core import Settings
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.generic_utils import messages_to_history_str
from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.callbacks import trace_method
from llama_index.core.chat_engine.types import (
    BaseChatEngine,
)
from llama_index.core.llms import LLM
from llama_index.core.memory import BaseMemory
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import QueryBundle

from llama_index_rag_pack.chat.chat_responses import (
    CitedChatResponse,
    CitedStreamingChatResponse,
    chat_response,
    finish_stream,
    history_text,
    streaming_chat_response,
    text_delta,
    turn_messages,
)
from llama_index_rag_pack.chat.chat_store import new_memory
from llama_index_rag_pack.chat.follow_ups import needs_context, searched_question
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.core.errors import ConfigurationError, check_count, check_query
from llama_index_rag_pack.core.usage import (
    metered,
    metered_astream,
    metered_stream,
    report_usage,
    set_usage,
)
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


#: The keywords of ``from_defaults`` that configure the chat rather than the query engine.
_CHAT_OPTIONS = ("chat_history", "memory", "token_limit", "condense_prompt", "skip_condense")

#: Tokens of the context window kept free for the condense prompt's own text and the reply.
_PROMPT_ROOM = 512


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
        self._subject: str | None = None
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
        self._subject = None

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

    def _searched(
        self, message: str, condensed: str, history: Sequence[ChatMessage]
    ) -> tuple[str, dict[str, str]]:
        """What the turn searches: ``condensed``, or the follow-up joined to the last question
        that named its subject when ``condensed`` lost it."""
        question, extra = condensed, {}
        if history and not self._skip_condense:
            last_turn = [str(m.content or "") for m in history[-2:]]
            question, extra = searched_question(condensed, message, last_turn, self._subject)
            if extra:
                logger.info("Condensed %r lost the follow-up: searching %r", condensed, question)
        if not extra and not (history and needs_context(message)):
            self._subject = question  # a question that names its subject
        return question, extra

    def question(self, message: str) -> tuple[str, dict[str, str]]:
        """The question a turn searches for ``message``, and the metadata about it."""
        history = self._memory.get()
        return self._searched(message, self.condense(message), history)

    async def aquestion(self, message: str) -> tuple[str, dict[str, str]]:
        history = await self._memory.aget()
        return self._searched(message, await self.acondense(message), history)

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
            self._subject = None
        return message

    # ------------------------------------------------------------------ turns
    @trace_method("chat")
    def chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedChatResponse:
        message = self._start(message, chat_history)
        with metered() as meter:
            question, extra = self.question(message)
            nodes = self._engine.retrieve(QueryBundle(question))
            response = self._engine.respond(nodes, question, streaming=False)
        self._memory.put_messages(turn_messages(message, response))
        return report_usage(chat_response(response, question, extra), meter)

    @trace_method("chat")
    async def achat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedChatResponse:
        message = self._start(message, chat_history)
        with metered() as meter:
            question, extra = await self.aquestion(message)
            nodes = await self._engine.aretrieve(QueryBundle(question))
            response = await self._engine.arespond(nodes, question, streaming=False)
        await self._memory.aput_messages(turn_messages(message, response))
        return report_usage(chat_response(response, question, extra), meter)

    @trace_method("chat")
    def stream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedStreamingChatResponse:
        message = self._start(message, chat_history)
        with metered() as meter:
            question, extra = self.question(message)
            nodes = self._engine.retrieve(QueryBundle(question))
            streamed = self._engine.respond(nodes, question, streaming=True)
        chat = streaming_chat_response(streamed, question, extra)

        def gen() -> Generator[ChatResponse, None, None]:
            text = ""
            for delta in streamed.response_gen:
                text += delta
                yield text_delta(text, delta)
            finish_stream(chat, streamed)
            self._memory.put_messages(turn_messages(message, streamed))

        chat.chat_stream = metered_stream(gen(), meter, partial(set_usage, chat))
        return chat

    @trace_method("chat")
    async def astream_chat(
        self, message: str, chat_history: list[ChatMessage] | None = None
    ) -> CitedStreamingChatResponse:
        message = self._start(message, chat_history)
        with metered() as meter:
            question, extra = await self.aquestion(message)
            nodes = await self._engine.aretrieve(QueryBundle(question))
            streamed = await self._engine.arespond(nodes, question, streaming=True)
        chat = streaming_chat_response(streamed, question, extra)

        async def agen() -> AsyncGenerator[ChatResponse, None]:
            text = ""
            async for delta in streamed.async_response_gen():
                text += delta
                yield text_delta(text, delta)
            finish_stream(chat, streamed)
            await self._memory.aput_messages(turn_messages(message, streamed))

        chat.achat_stream = metered_astream(agen(), meter, partial(set_usage, chat))
        return chat
