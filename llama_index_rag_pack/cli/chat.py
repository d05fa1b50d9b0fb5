"""``rag-pack chat``: a conversation over one index, with citations in every answer.

Each line is a turn of one :class:`~llama_index_rag_pack.CitedChatEngine`: a follow-up such as
"and when was it founded?" is condensed with the conversation into a standalone question (shown
as ``(searched: ...)`` when it differs), then answered with citations, streamed as it comes.
Commands: ``/reset`` forgets the conversation, ``/sources`` lists the chunks the last answer
cites, ``/history`` prints the conversation, ``/help`` lists them. With ``--route`` or
``--no-citations`` every line is answered on its own, as ``rag-pack ask`` would.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index_rag_pack.cli import output as _cli
from llama_index_rag_pack.cli.session import Session
from llama_index_rag_pack.core.errors import RagPackError

__all__ = ["COMMANDS", "ChatSession"]

logger = logging.getLogger(__name__)

COMMANDS = {
    "/reset": "forget the conversation",
    "/sources": "list the chunks the last answer cites",
    "/history": "print the conversation so far",
    "/help": "list these commands",
}


class ChatSession:
    """The chat engine of a ``rag-pack chat`` session, and its last answer."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.stream = session.answer_options()["stream"]
        self.show_sources = session.answer_options()["show_sources"]
        self._engine: Any = None
        self.last: Any = None

    @property
    def engine(self) -> Any:
        """The chat engine, built on first use (a mode that cannot be built fails each turn
        with its one-line error, and the session goes on)."""
        if self._engine is None:
            options = self.session.answer_options()
            self._engine = self.session.pack.make_chat_engine(
                self.session.args.mode,
                citation_style=options["fmt"],
                answer_style=options["answer_style"],
                **options["scope"],
            )
        return self._engine

    def handle(self, line: str) -> None:
        """Run one line: a command, or a turn of the conversation."""
        try:
            if line.startswith("/"):
                self.command(line.split()[0].lower())
                return
            _cli.out(f"\nQ: {line}")
            self.session.time_answer(line, lambda: self.turn(line))
        except RagPackError as e:
            if self.session.args.verbose:
                logger.exception("question failed")
            _cli.err(f"error: {e}")

    def turn(self, message: str) -> None:
        if self.stream:
            response = self.engine.stream_chat(message)
            for delta in response.response_gen:
                _cli.out(delta, end="", flush=True)
            _cli.out()
        else:
            response = self.engine.chat(message)
            _cli.out(response.response)
        searched = response.metadata.get("condensed_question")
        if searched and searched != message:
            why = ""
            if response.metadata.get("follow_up") == "joined":
                why = " — the condensed question lost the follow-up; joined to the last question"
            _cli.err(f"(searched: {searched}{why})")
        if self.show_sources:
            from llama_index_rag_pack.cli.evidence import print_evidence

            print_evidence(response)
        self.last = response

    def command(self, name: str) -> None:
        if name == "/reset":
            self.engine.reset()
            self.last = None
            _cli.out("(conversation forgotten)")
        elif name == "/sources":
            if self.last is None or not self.last.source_nodes:
                _cli.out("(no cited sources yet)")
            else:
                _cli.print_sources(self.last.source_nodes)
        elif name == "/history":
            history = self.engine.chat_history
            if not history:
                _cli.out("(no conversation yet)")
            for message in history:
                _cli.out(f"{message.role.value}: {message.content}")
        else:
            if name != "/help":
                _cli.err(f"unknown command {name!r}")
            for command, meaning in COMMANDS.items():
                _cli.out(f"  {command:<9} {meaning}")
