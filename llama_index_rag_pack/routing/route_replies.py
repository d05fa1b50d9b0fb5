"""Route indices from an LLM's routing reply (untrusted input).

:func:`parse_route_reply` reads them from (1) JSON anywhere in the reply
(``{"routes": ["physics"], "reason": "..."}``, ``{"choice": 2}``, core's
``[{"choice": 1, "reason": "..."}]``, ``["physics", "math"]``), else (2) route names in the
text, in any case, ``_``/``-``/space-insensitive, as whole words or else as a substring, else
(3) a number (``2``, ``(2)``, ``#2``, ``Choice: 2``): 1-based as the prompt numbers routes, or
0-based when the reply uses 0 — the whole reply one way or the other. What names no valid route
is ``invalid`` (never mapped to a guess), an explicit "none" (``{"routes": []}``, ``no route``)
is ``none``, and prose naming more routes than were asked for is ambiguous, so ``invalid``.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index_rag_pack.core.llm_output import MAX_REPLY_CHARS, json_values
from llama_index_rag_pack.routing.route_names import dedupe, names_in_text, resolve_name

__all__ = ["ParsedRouteReply", "parse_route_reply"]

# --------------------------------------------------------------------------- route replies
_ROUTE_KEYS = """
routes route choices choice selections selection datasource datasources data_source source
sources name index indices answer destination tool category
""".split()
_REASON_KEYS = ("reason", "reasons", "reasoning", "explanation", "why", "rationale")
_NONE_WORDS = re.compile(
    r"\b(none|no route|no suitable|no relevant|not applicable|n/a|nothing fits)\b", re.I
)
_NUMBER_PATTERNS = (
    re.compile(r"^\W*#?\(?\[?(\d{1,3})\]?\)?\W*$"),  # "2", "2.", "(2)", "#2", "[2]"
    re.compile(  # "Choice: 2", "route is #2"
        r"\b(?:choice|route|option|number|answer|source|index|selection|pick)"
        r"\s*(?:(?:is|:|=|#|no\.?)\s*)?#?(\d{1,3})\b",
        re.I,
    ),
    re.compile(r"^[^\S\n]*\(?(\d{1,3})[.):]\s", re.M),  # "2. physics is ..." or "2) ..."
)  # no two quantifiers match the same run of text: backtracking stays linear in the reply


@dataclass
class ParsedRouteReply:
    """What a routing reply said.

    Attributes:
        status: ``"ok"`` (``indices`` are valid routes), ``"none"`` (explicitly no route) or
            ``"invalid"`` (nothing usable; see ``problem``).
        indices: 0-based route indices, best first, no duplicates.
        reason: The reason given in the reply (JSON field) or the reply itself.
        problem: Why the reply was not usable (for logs and errors).
    """

    status: str
    indices: list[int] = field(default_factory=list)
    reason: str = ""
    problem: str = ""


def _collect(value: Any, refs: list[Any], reasons: list[str], saw_route_key: list[bool]) -> None:
    if isinstance(value, dict):
        lowered = {str(k).lower(): v for k, v in value.items()}
        for key in _REASON_KEYS:
            if isinstance(lowered.get(key), str) and lowered[key].strip():
                reasons.append(lowered[key].strip())
            elif isinstance(lowered.get(key), list):
                reasons.extend(str(r) for r in lowered[key] if r)
        for key in _ROUTE_KEYS:
            if key in lowered:
                saw_route_key[0] = True
                _collect(lowered[key], refs, reasons, saw_route_key)
                break
    elif isinstance(value, list):
        for item in value:
            _collect(item, refs, reasons, saw_route_key)
    elif isinstance(value, bool):
        return
    elif isinstance(value, (int, str)):
        refs.append(value)
    elif isinstance(value, float) and value.is_integer():
        refs.append(int(value))


def _numbers_to_indices(numbers: list[int], n: int) -> tuple[list[int] | None, str]:
    """Read numbers as 1-based (the prompt's numbering) unless one of them is 0."""
    if not numbers:
        return None, "no number"
    zero_based = 0 in numbers
    indices = [k if zero_based else k - 1 for k in numbers]
    bad = [k for k, i in zip(numbers, indices, strict=True) if not 0 <= i < n]
    if bad:
        base = "0-based" if zero_based else "1-based"
        return None, f"number(s) {bad} out of range for {n} routes ({base})"
    return indices, ""


def _from_refs(refs: list[Any], names: Sequence[str]) -> tuple[list[int] | None, str]:
    numbers: list[int] = []
    indices: list[int] = []
    resolved: dict[str, int | None] = {}  # a JSON list may repeat one name thousands of times
    for ref in refs:
        if isinstance(ref, int):
            numbers.append(ref)
            continue
        text = str(ref).strip()
        if re.fullmatch(r"#?\d{1,3}", text):
            numbers.append(int(text.lstrip("#")))
            continue
        if text not in resolved:
            resolved[text] = resolve_name(text, names)
        idx = resolved[text]
        if idx is None:
            return None, f"unknown route {text!r}"
        indices.append(idx)
    if numbers:
        from_numbers, problem = _numbers_to_indices(numbers, len(names))
        if from_numbers is None:
            return None, problem
        indices.extend(from_numbers)
    return dedupe(indices), ""


def parse_route_reply(
    reply: str, names: Sequence[str], *, max_outputs: int = 1
) -> ParsedRouteReply:
    """Parse an LLM's routing reply against the route ``names`` (in prompt order).

    Args:
        reply: The raw reply text.
        names: Route names, in the order they were numbered (from 1) in the prompt.
        max_outputs: How many routes were asked for: a JSON list longer than that is cut to its
            first ``max_outputs``; prose naming more routes than that is ambiguous (``invalid``).

    Returns:
        A :class:`ParsedRouteReply`. Only the first
        :data:`~llama_index_rag_pack.core.llm_output.MAX_REPLY_CHARS` characters are read, in
        time linear in their number (n log n for the names found).

    Example:
        >>> parse_route_reply(
        ...     'Sure! {"route": "Physics", "reason": "black holes"}', ["math", "physics"]
        ... )
        ParsedRouteReply(status='ok', indices=[1], reason='black holes', problem='')
    """
    text = (reply or "")[:MAX_REPLY_CHARS].strip()
    if not text:
        return ParsedRouteReply("invalid", problem="empty reply")
    # 1. JSON
    refs: list[Any] = []
    reasons: list[str] = []
    saw_route_key = [False]
    for value in json_values(text):
        _collect(value, refs, reasons, saw_route_key)
        if refs or saw_route_key[0]:
            break
    reason = "; ".join(reasons) or text
    if refs:
        indices, problem = _from_refs(refs, names)
        if indices is None:
            return ParsedRouteReply("invalid", reason=reason, problem=problem)
        return ParsedRouteReply("ok", indices[:max_outputs], reason=reason)
    if saw_route_key[0]:  # {"routes": []} or {"route": null}
        return ParsedRouteReply("none", reason=reason)
    # 2. names in prose
    named = names_in_text(text, names)
    if named:
        if len(named) > max_outputs:
            mentioned = [names[i] for i in named]
            return ParsedRouteReply(
                "invalid",
                reason=text,
                problem=f"ambiguous: names {mentioned} but at most {max_outputs} wanted",
            )
        return ParsedRouteReply("ok", named, reason=text)
    # 3. numbers
    for pattern in _NUMBER_PATTERNS:
        numbers = [int(m) for m in pattern.findall(text)]
        if numbers:
            indices, problem = _numbers_to_indices(numbers, len(names))
            if indices is None:
                return ParsedRouteReply("invalid", reason=text, problem=problem)
            return ParsedRouteReply("ok", dedupe(indices)[:max_outputs], reason=text)
    if _NONE_WORDS.search(text):
        return ParsedRouteReply("none", reason=text)
    return ParsedRouteReply("invalid", reason=text, problem="no route name or number in the reply")
