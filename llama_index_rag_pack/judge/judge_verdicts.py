"""The judge's verdict on one retrieved chunk, read tolerantly from an LLM reply, and the budget of
LLM calls a judged search may spend.

A verdict is a score, ``2`` (the chunk answers the question), ``1`` (relevant but incomplete) or
``0`` (irrelevant), and for a ``1`` a follow-up question asking for what is missing. Replies are
untrusted: JSON (``{"score": 1, "follow_up": "..."}``, fenced or inside prose), ``Score: 2/2``, a
bare number, or prose with a ``Follow-up:`` line are all read. What carries no usable score (an
empty reply, prose without a number, a number outside 0-2 such as ``7`` or ``8/10``) gets
:data:`DEFAULT_SCORE`, ``0``: the chunk is treated as irrelevant, so a garbled reply never
triggers an answer or a recursive search; ``problem`` says why, for the logs and the tree.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from llama_index_rag_pack.core.llm_output import MAX_REPLY_CHARS, json_values, strip_code_fences

__all__ = ["DEFAULT_SCORE", "CallBudget", "JudgeVerdict", "parse_judge_reply"]

#: The score of a reply that carries no usable one: irrelevant (no answer, no recursion from it).
DEFAULT_SCORE = 0

_SCORE_KEYS = ("score", "relevance", "rating", "grade", "label", "judgement", "judgment")
_FOLLOW_UP_KEYS = (
    "follow_up",
    "followup",
    "follow-up",
    "follow_up_question",
    "followup_question",
    "new_question",
    "next_question",
    "question",
)
_FRACTION = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*/\s*(\d+)\b")
# No two quantifiers of these may match the same run of text (each run is ended by a character
# the next part must start with): a reply of blanks then makes them backtrack linearly, not
# quadratically or worse. "Score: 1", "score is (2", "rating - 2", "Score ** 2".
_LABELLED = re.compile(
    r"\b(?:score|relevance|rating|grade|label|judge?ment)\b[\s*\"']*"
    r"(?:(?:is|of|:|=|-|[(\[])[\s*\"'(\[]*)?(-?\d+(?:\.\d+)?)",
    re.I,
)
_CAPITAL = re.compile(r"[A-Z]")
_SENTENCE_END = re.compile(r"(?<=[.?!\n])")
_BARE = re.compile(r"^\W*(-?\d+(?:\.\d+)?)\W*$")
# a follow-up line: its label, then the rest of the line (its tail is cut by _without_tail)
_FOLLOW_UP_LINE = re.compile(
    r"^[^\w\n]*(?:follow[\s_-]*up(?:[\s_]+question)?|new[\s_]+question|next[\s_]+question)"
    r"[\s*\"']*[:=-]\s*[\"']?([^\n]+)",
    re.I | re.M,
)


@dataclass(frozen=True)
class JudgeVerdict:
    """What the judge said about one chunk.

    Attributes:
        score: 2, 1 or 0 (:data:`DEFAULT_SCORE` when the reply had no usable score).
        follow_up: The follow-up question (only kept for a score of 1), or ``None``.
        problem: Why the reply was not read as written (empty when it was).
    """

    score: int
    follow_up: str | None = None
    problem: str = ""


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        fraction = _FRACTION.search(text)
        if fraction:
            return _from_fraction(fraction.group(1), fraction.group(2))
        bare = _BARE.match(text)
        return float(bare.group(1)) if bare else None
    return None


def _from_fraction(numerator: str, denominator: str) -> float | None:
    """``2/2`` → 2; another scale (``8/10``) is not this judge's: NaN (unusable)."""
    return float(numerator) if denominator == "2" else float("nan")


def _from_json(text: str) -> tuple[float | None, str | None, bool]:
    """(score, follow-up, found a score key) from the first JSON object with a score key."""
    for value in json_values(text):
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, dict):
                continue
            lowered = {str(k).lower(): v for k, v in item.items()}
            key = next((k for k in _SCORE_KEYS if k in lowered), None)
            if key is None:
                continue
            follow = next(
                (lowered[k] for k in _FOLLOW_UP_KEYS if isinstance(lowered.get(k), str)), None
            )
            return _number(lowered[key]), follow, True
    return None, None, False


def _from_text(text: str) -> float | None:
    for pattern in (_LABELLED, _FRACTION):
        match = pattern.search(text)
        if match:
            if pattern is _FRACTION:
                return _from_fraction(match.group(1), match.group(2))
            rest = text[match.end() :].lstrip()
            denominator = re.match(r"/\s*(\d+)", rest)
            if denominator:
                return _from_fraction(match.group(1), denominator.group(1))
            return float(match.group(1))
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    bare = _BARE.match(first_line)
    return float(bare.group(1)) if bare else None


def _questions(text: str) -> list[str]:
    """Each sentence ending in ``?``, from its first capital letter (one pass over ``text``)."""
    found = []
    for sentence in _SENTENCE_END.split(text):
        capital = _CAPITAL.search(sentence) if sentence.endswith("?") else None
        if capital:
            found.append(sentence[capital.start() :])
    return found


def _without_tail(line: str) -> str:
    """``line`` less a closing quote, ``,`` or ``}`` and blanks at its end (one character kept)."""
    end = len(line.rstrip())
    if end and line[end - 1] in ",}":
        end = len(line[: end - 1].rstrip())
    if end and line[end - 1] in "\"'":
        end -= 1
    return line[: max(end, 1)]


def _follow_up_from_text(text: str, question: str) -> str | None:
    match = _FOLLOW_UP_LINE.search(text)
    if match:
        return _without_tail(match.group(1))
    asked = " ".join(question.lower().split())
    for found in reversed(_questions(text)):
        if " ".join(found.lower().split()) != asked:
            return found
    return None


def _clean_question(text: str | None, question: str) -> str | None:
    if not text:
        return None
    cleaned = " ".join(text.replace("**", "").split()).strip(" \"'`“”")
    if len(cleaned) < 3 or cleaned.lower() == " ".join(question.lower().split()):
        return None
    return cleaned


def parse_judge_reply(reply: str | None, question: str = "") -> JudgeVerdict:
    """Read the judge's score (and follow-up question) from an LLM reply.

    Args:
        reply: The raw reply.
        question: The question that was judged (a follow-up that merely repeats it is dropped).

    Returns:
        The verdict; an unusable score becomes :data:`DEFAULT_SCORE` with ``problem`` set. Only
        the first :data:`~llama_index_rag_pack.core.llm_output.MAX_REPLY_CHARS` characters of
        the reply are read, in time linear in their number.

    Example:
        >>> parse_judge_reply('```json\\n{"score": 1, "follow_up": "Where was she born?"}\\n```')
        JudgeVerdict(score=1, follow_up='Where was she born?', problem='')
        >>> parse_judge_reply("Score: 2/2 - the passage states it.")
        JudgeVerdict(score=2, follow_up=None, problem='')
        >>> parse_judge_reply("Relevance: 7").problem
        'score 7 is outside 0-2'
    """
    text = strip_code_fences((reply or "")[:MAX_REPLY_CHARS])
    if not text:
        return JudgeVerdict(DEFAULT_SCORE, problem="empty reply")
    value, follow, found = _from_json(text)
    if not found:
        value = _from_text(text)
    if value is None:
        return JudgeVerdict(DEFAULT_SCORE, problem="no score in the reply")
    if value != value or value not in (0, 1, 2):  # NaN: another scale
        shown = "on another scale" if value != value else f"{value:g} is outside 0-2"
        return JudgeVerdict(DEFAULT_SCORE, problem=f"score {shown}")
    score = int(value)
    if score != 1:
        return JudgeVerdict(score)
    follow = _clean_question(follow or _follow_up_from_text(text, question), question)
    return JudgeVerdict(1, follow, "" if follow else "score 1 without a new follow-up question")


class CallBudget:
    """A thread-safe count of LLM calls that can never go over ``limit``.

    Example:
        >>> budget = CallBudget(2)
        >>> budget.take(), budget.take(), budget.take(), budget.used
        (True, True, False, 2)
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int = 1) -> bool:
        """Spend ``n`` calls if that many are left (all or nothing)."""
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def release(self, n: int = 1) -> None:
        """Give back ``n`` reserved calls that were not made."""
        with self._lock:
            self.used = max(self.used - n, 0)

    @property
    def left(self) -> int:
        return self.limit - self.used
