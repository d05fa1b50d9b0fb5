"""Tolerant parsing of an LLM's routing reply into route indices.

Pure Python (no LlamaIndex): the reply is untrusted text. What is understood, in this order:

1. JSON anywhere in the reply (also inside code fences or prose, also Python-style single quotes):
   ``{"routes": ["physics"], "reason": "..."}``, ``{"route": "physics"}``, ``{"choice": 2}``,
   core's ``[{"choice": 1, "reason": "..."}]``, ``["physics", "math"]``;
2. route names anywhere in the text, in any case, ``_``/``-``/space-insensitive, as whole words
   or, failing that, as a substring (the seed's ``"python_docs" in reply.lower()``);
3. a number: a bare ``2``, ``2.``, ``(2)``, ``#2``, ``Choice: 2``, ``route 2``. The prompt numbers
   routes from 1; a reply using 0 is read as 0-based — the whole reply one way or the other.

Whatever names no valid route is reported as ``invalid`` (never mapped to a guess); an explicit
"none" (``{"routes": []}``, ``none``, ``no route``) is reported as ``none``. When prose names
more routes than were asked for, the reply is ambiguous and therefore ``invalid`` too.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ParsedRouteReply", "normalize_name", "parse_route_reply", "resolve_name"]

_ROUTE_KEYS = (
    "routes",
    "route",
    "choices",
    "choice",
    "selections",
    "selection",
    "datasource",
    "datasources",
    "data_source",
    "source",
    "sources",
    "name",
    "index",
    "indices",
    "answer",
    "destination",
    "tool",
    "category",
)
_REASON_KEYS = ("reason", "reasons", "reasoning", "explanation", "why", "rationale")
_NONE_WORDS = re.compile(
    r"\b(none|no route|no suitable|no relevant|not applicable|n/a|nothing fits)\b", re.I
)
_NUMBER_PATTERNS = (
    re.compile(r"^\W*#?\(?\[?(\d{1,3})\]?\)?\W*$"),  # "2", "2.", "(2)", "#2", "[2]"
    re.compile(
        r"\b(?:choice|route|option|number|answer|source|index|selection|pick)\s*(?:is|:|=|#|no\.?)?\s*#?(\d{1,3})\b",
        re.I,
    ),
    re.compile(r"^\s*\(?(\d{1,3})[.):]\s", re.M),  # "2. physics is ..." or "2) ..."
)


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


def normalize_name(text: str) -> str:
    """Lower case, ``_``/``-``/punctuation as spaces, whitespace collapsed."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def resolve_name(ref: str, names: Sequence[str]) -> int | None:
    """Index of the route ``ref`` names (exact, normalized, or unique containment), else None."""
    if ref in names:
        return list(names).index(ref)
    norm = normalize_name(ref)
    if not norm:
        return None
    normalized = [normalize_name(n) for n in names]
    if norm in normalized:
        return normalized.index(norm)
    compact = norm.replace(" ", "")
    compacts = [n.replace(" ", "") for n in normalized]
    if compact in compacts:
        return compacts.index(compact)
    # "python docs route" contains "python docs"; "python" is contained in only "python docs"
    containing = [i for i, n in enumerate(compacts) if n and n in compact]
    if len(containing) == 1:
        return containing[0]
    if len(containing) > 1:  # the longest name wins only if it contains every other hit
        longest = max(containing, key=lambda i: len(compacts[i]))
        if all(compacts[i] in compacts[longest] for i in containing):
            return longest
        return None
    contained = [i for i, n in enumerate(compacts) if compact in n]
    return contained[0] if len(contained) == 1 else None


def _json_values(text: str) -> list[Any]:
    """Every JSON (or Python-literal) object/array found in ``text``, outermost first."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    i = 0
    while i < len(text):
        if text[i] in "{[":
            try:
                value, end = decoder.raw_decode(text, i)
            except ValueError:
                value, end = _literal_at(text, i)
            if end > i:
                found.append(value)
                i = end
                continue
        i += 1
    return found


def _literal_at(text: str, start: int) -> tuple[Any, int]:
    """Parse a Python literal (single-quoted dict/list) starting at ``start``; (None, start) if
    none."""
    opener = text[start]
    closer = "}" if opener == "{" else "]"
    depth = 0
    for j in range(start, min(len(text), start + 4000)):
        ch = text[j]
        if ch == opener:
            depth += 1
        elif ch == closer:
            depth -= 1
            if depth == 0:
                try:
                    return ast.literal_eval(text[start : j + 1]), j + 1
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    return None, start
    return None, start


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


def _dedupe(indices: list[int]) -> list[int]:
    seen: set[int] = set()
    return [i for i in indices if not (i in seen or seen.add(i))]


def _from_refs(refs: list[Any], names: Sequence[str]) -> tuple[list[int] | None, str]:
    numbers: list[int] = []
    indices: list[int] = []
    for ref in refs:
        if isinstance(ref, int):
            numbers.append(ref)
            continue
        text = str(ref).strip()
        if re.fullmatch(r"#?\d{1,3}", text):
            numbers.append(int(text.lstrip("#")))
            continue
        idx = resolve_name(text, names)
        if idx is None:
            return None, f"unknown route {text!r}"
        indices.append(idx)
    if numbers:
        from_numbers, problem = _numbers_to_indices(numbers, len(names))
        if from_numbers is None:
            return None, problem
        indices.extend(from_numbers)
    return _dedupe(indices), ""


def _names_in_text(text: str, names: Sequence[str]) -> list[int]:
    """Routes named in free text, in order of first mention; longer names shadow their parts."""
    norm = " " + normalize_name(text) + " "
    hits: list[tuple[int, int, int]] = []  # (start, end, route)
    for i, name in enumerate(names):
        n = normalize_name(name)
        if not n:
            continue
        for m in re.finditer(r"(?<= )" + re.escape(n) + r"(?= )", norm):
            hits.append((m.start(), m.end(), i))
    if not hits:  # substring fallback ("pythondocs", "physicsroute")
        compact = norm.replace(" ", "")
        for i, name in enumerate(names):
            n = normalize_name(name).replace(" ", "")
            if n and n in compact:
                start = compact.index(n)
                hits.append((start, start + len(n), i))
    kept = [
        h
        for h in hits
        if not any(o[0] <= h[0] and h[1] <= o[1] and (o[1] - o[0]) > (h[1] - h[0]) for o in hits)
    ]
    kept.sort()
    return _dedupe([h[2] for h in kept])


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
        A :class:`ParsedRouteReply`.

    Example:
        >>> parse_route_reply(
        ...     'Sure! {"route": "Physics", "reason": "black holes"}', ["math", "physics"]
        ... )
        ParsedRouteReply(status='ok', indices=[1], reason='black holes', problem='')
    """
    text = (reply or "").strip()
    if not text:
        return ParsedRouteReply("invalid", problem="empty reply")
    # 1. JSON
    refs: list[Any] = []
    reasons: list[str] = []
    saw_route_key = [False]
    for value in _json_values(text):
        if isinstance(value, (dict, list)):
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
    named = _names_in_text(text, names)
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
            return ParsedRouteReply("ok", _dedupe(indices)[:max_outputs], reason=text)
    if _NONE_WORDS.search(text):
        return ParsedRouteReply("none", reason=text)
    return ParsedRouteReply("invalid", reason=text, problem="no route name or number in the reply")
