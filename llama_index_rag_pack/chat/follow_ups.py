"""Follow-ups that survive a small model: tell when a condensed question lost the
conversation's subject, and search the follow-up joined to the previous question instead.

A condensed question is meant to carry over what a follow-up leaves out ("When was its database
first released?" after "What is Milvus?" should become "When was Milvus first released?"). A
small model often drops it ("When was the Acme Corporation founded?"). The check is measurable:
the follow-up *needs* the conversation (it has a referring pronoun such as *it*, *its*, *they*,
*this*, or it is a fragment such as "and the population?"), yet the condensed question holds
no content word of the last turn (the previous question and answer) beyond the follow-up's own.
Then the search is ``"<previous question> <follow-up>"``, which keeps the subject by
construction.

Example:
    >>> lost_subject("When was the Acme Corporation founded?", "When was its database released?",
    ...              ["What is Milvus?", "Milvus is a vector database."])
    True
    >>> lost_subject("When was Milvus first released?", "When was its database released?",
    ...              ["What is Milvus?", "Milvus is a vector database."])
    False
    >>> joined_question("What is Milvus?", "When was its database released?")
    'What is Milvus? When was its database released?'
"""

# Pure module: no LlamaIndex, no pymilvus

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from llama_index_rag_pack.documents.bm25_analysis import resolve_analyzer
from llama_index_rag_pack.documents.stop_words import (
    CHINESE_STOP_WORDS,
    ENGLISH_FUNCTION_WORDS,
    JAPANESE_STOP_WORDS,
)

__all__ = ["joined_question", "lost_subject", "needs_context", "searched_question"]

#: Words that point back into the conversation.
REFERRING_WORDS = frozenset(
    "it its it's itself they them their theirs themselves he him his himself she her hers "
    "herself this these those former latter".split()
)
#: The same in Chinese and Japanese (matched as substrings).
_CJK_REFERRING = re.compile(r"它|他|她|这|那|该|其|此|それ|これ|あれ|その|この|あの|彼")
#: A follow-up that opens like this continues the last question.
_FRAGMENT_START = re.compile(
    r"^\s*(and|also|but|or|what about|how about|and what about|same for|then)\b", re.I
)
_WORD = re.compile(r"[\w'’]+")
_FUNCTION_WORDS = ENGLISH_FUNCTION_WORDS | CHINESE_STOP_WORDS | JAPANESE_STOP_WORDS


def needs_context(message: str) -> bool:
    """Whether ``message`` cannot be understood alone: it has a referring word (*it*, *its*,
    *they*, *this*, 它, それ, ...) or opens as a fragment (*and ...*, *what about ...*).

    Example:
        >>> needs_context("And the population?"), needs_context("What is RAPTOR?")
        (True, False)
    """
    words = {w.lower().replace("’", "'") for w in _WORD.findall(message)}
    return bool(
        words & REFERRING_WORDS or _FRAGMENT_START.search(message) or _CJK_REFERRING.search(message)
    )


@functools.lru_cache(maxsize=1)
def _function_terms() -> frozenset[str]:
    analysis = resolve_analyzer("auto")
    terms = {t for w in _FUNCTION_WORDS for t in analysis.query_text(w).split()}
    return frozenset(terms | _FUNCTION_WORDS)


def _content_terms(text: str) -> set[str]:
    """The analysed terms of ``text`` without function words (stemmed, in its language)."""
    return set(resolve_analyzer("auto").query_text(text).split()) - _function_terms()


def lost_subject(condensed: str, message: str, last_turn: Sequence[str]) -> bool:
    """Whether the ``condensed`` question lost what the follow-up ``message`` asks about:
    ``message`` :func:`needs_context`, yet ``condensed`` shares no content word with
    ``last_turn`` (the previous question and answer) that ``message`` does not hold itself, or
    it keeps fewer than half of ``message``'s own content words (a small model's condensation
    often answers the last question again instead)."""
    if not last_turn or not needs_context(message):
        return False
    own = _content_terms(message)
    condensed_terms = _content_terms(condensed)
    carried = condensed_terms - own
    previous = set().union(*(_content_terms(text) for text in last_turn))
    return not carried & previous or len(own & condensed_terms) * 2 < len(own)


def joined_question(previous: str, message: str) -> str:
    """What is searched instead of a condensed question that lost the subject."""
    return f"{previous.strip()} {message.strip()}"


def searched_question(
    condensed: str, message: str, last_turn: Sequence[str], subject_question: str | None
) -> tuple[str, dict[str, str]]:
    """What a chat turn searches, and what its metadata records about it: ``condensed``, or,
    when it :func:`lost_subject`, the follow-up joined to ``subject_question`` (the last
    question searched that named its subject; default: the last turn's question), with
    ``condensed_reply`` (the condensation set aside) and ``follow_up="joined"``."""
    if not lost_subject(condensed, message, last_turn):
        return condensed, {}
    subject = subject_question or last_turn[0]
    return joined_question(subject, message), {"condensed_reply": condensed, "follow_up": "joined"}
