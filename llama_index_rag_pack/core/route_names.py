"""Matching route names in LLM text: normalised, ``_``/``-``/space-insensitive, by containment.

Pure Python; :func:`~llama_index_rag_pack.core.route_replies.parse_route_reply` reads routing
replies with these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["dedupe", "names_in_text", "normalize_name", "resolve_name"]


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
    kept = [
        h
        for h in hits
        if not any(o[0] <= h[0] and h[1] <= o[1] and (o[1] - o[0]) > (h[1] - h[0]) for o in hits)
    ]
    kept.sort()
    return dedupe([h[2] for h in kept])
