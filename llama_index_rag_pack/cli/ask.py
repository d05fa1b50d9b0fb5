"""``rag-pack ask`` (one or more questions) and ``rag-pack chat`` (a REPL over one index): the
models load once per session, then every question is answered with the same pack.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator

from llama_index_rag_pack.cli import checks
from llama_index_rag_pack.cli import output as _cli
from llama_index_rag_pack.cli.session import Session, open_session
from llama_index_rag_pack.core.errors import RagPackError

__all__ = ["cmd_ask", "cmd_chat"]

logger = logging.getLogger(__name__)


def answer_one(session: Session, question: str) -> bool:
    """Print the answer to ``question`` (routed when the session routes); False when no route
    fits and there was nothing to answer from."""
    if session.routed:
        from llama_index_rag_pack.cli.route import answer_routed

        return bool(session.time_answer(question, lambda: answer_routed(session, question)))
    options = session.answer_options()
    session.time_answer(
        question,
        lambda: _cli.answer(session.pack, question, mode=session.args.mode, **options),
    )
    return True


def cmd_ask(args: argparse.Namespace) -> int:
    """``rag-pack ask Q [Q ...]`` (``-`` reads one question per line from stdin). Exit status 1
    when a routed question found no route."""
    questions = checks.questions_from(args.questions, sys.stdin)
    session = open_session(args)
    answered = True
    try:
        for question in questions:
            _cli.out(f"\nQ: {question}" if len(questions) > 1 else "")
            answered = answer_one(session, question) and answered
    finally:
        if len(questions) > 1:
            session.print_timings()
    return 0 if answered else 1


def cmd_chat(args: argparse.Namespace) -> int:
    """``rag-pack chat``: a conversation over stdin's lines until ``exit``, ``quit`` or the end
    of input (:mod:`~llama_index_rag_pack.cli.chat`); with ``--route`` or ``--no-citations``,
    each line answered on its own.

    A failing question prints its one-line error and the session goes on.
    """
    session = open_session(args)
    interactive = sys.stdin.isatty()
    conversation = None
    if not (session.routed or args.no_citations):
        from llama_index_rag_pack.cli.chat import ChatSession

        conversation = ChatSession(session)
    if interactive:
        hint = ", /help for commands" if conversation is not None else ""
        _cli.err(f"Ask a question (exit, quit or Ctrl-D to leave{hint}).")
    try:
        for line in checks.lines_until_exit(_prompted_lines(interactive)):
            if conversation is not None:
                conversation.handle(line)
                continue
            _cli.out(f"\nQ: {line}")
            try:
                answer_one(session, line)
            except RagPackError as e:
                if args.verbose:
                    logger.exception("question failed")
                _cli.err(f"error: {e}")
    finally:
        session.print_timings()
    return 0


def _prompted_lines(interactive: bool) -> Iterator[str]:
    """Lines of stdin, each after a ``> `` prompt on stderr when a person is typing."""
    while True:
        if interactive:
            sys.stderr.write("\n> ")
            sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:
            return
        yield line
