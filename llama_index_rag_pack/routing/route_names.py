"""Matching route names in LLM text: normalised, ``_``/``-``/space-insensitive, by containment.

Pure Python; :func:`~llama_index_rag_pack.routing.route_replies.parse_route_reply` reads routing
replies with these.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

__all__ = ["dedupe", "names_in_text", "normalize_name", "resolve_name"]


def normalize_name(text: str) -> str:
    """Lower case, ``_``/``-``/punctuation as spaces, whitespace collapsed."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


@functools.lru_cache(maxsize=64)
def _forms(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The route names normalized, and without spaces (a reply may name thousands of routes)."""
    normalized = tuple(normalize_name(n) for n in names)
    return normalized, tuple(n.replace(" ", "") for n in normalized)


def resolve_name(ref: str, names: Sequence[str]) -> int | None:
    """Index of the route ``ref`` names (exact, normalized, or unique containment), else None."""
    if ref in names:
        return list(names).index(ref)
    norm = normalize_name(ref)
    if not norm:
        return None
    normalized, compacts = _forms(tuple(names))
    if norm in normalized:
        return normalized.index(norm)
    compact = norm.replace(" ", "")
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


def dedupe(indices: list[int]) -> list[int]:
    """``indices`` without repeats, first occurrence kept."""
    seen: set[int] = set()
    return [i for i in indices if not (i in seen or seen.add(i))]


def names_in_text(text: str, names: Sequence[str]) -> list[int]:
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
    return dedupe([h[2] for h in _unshadowed(hits)])


def _unshadowed(hits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The hits no longer hit contains, by start: one sort and one sweep (n log n).

    In (start, longest first) order, a hit lies inside a longer one exactly when a hit with
    another span came before it and reached at least as far; hits with one span stand together.
    """
    hits = sorted(hits, key=lambda h: (h[0], -h[1], h[2]))
    kept: list[tuple[int, int, int]] = []
    reach, span_reach, span = -1, -1, (-1, -1)
    for start, end, route in hits:
        if (start, end) != span:
            reach, span_reach, span = max(reach, span_reach), end, (start, end)
        if reach < end:
            kept.append((start, end, route))
    return kept
