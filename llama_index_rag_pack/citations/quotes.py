"""Verbatim quotes: check that a quote an LLM attributes to a source is really in it.

No LlamaIndex. A quote is looked up in its claimed source first, then in the others, in three
steps: exact substring → whitespace/case/quote-mark normalised substring → fuzzy alignment
(rapidfuzz's best-matching window, similarity ≥ ``fuzzy_threshold``). Quotes found nowhere are
flagged ``unverified``. Also here: reading the structured answers
(``{"answer": ..., "citations": [{"source_id": 2, "quote": ...}]}``) that models return, with
string ids (``"id=2"``, ``"[2]"``); the JSON itself is found by
:func:`~llama_index_rag_pack.core.llm_output.json_values` (code fences, prose around it, slightly
broken JSON).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rapidfuzz import fuzz

from llama_index_rag_pack.core.llm_output import json_values

__all__ = [
    "QuoteCheck",
    "QuoteMatch",
    "normalize_with_map",
    "parse_quoted_answer",
    "verify_quote",
]

DEFAULT_FUZZY_THRESHOLD = 0.85
_TRANSLATE = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2212": "-",
        "\u00a0": " ",
        "\u2026": "...",
    }
)
_WRAPPERS = "\"'“”‘’«»`"


class QuoteMatch(str, Enum):
    """How a quote was found in its source."""

    EXACT = "exact"
    NORMALIZED = "normalized"
    FUZZY = "fuzzy"
    UNVERIFIED = "unverified"


@dataclass
class QuoteCheck:
    """The verdict on one quote.

    Attributes:
        quote: The quote as the LLM wrote it.
        claimed_id: The 1-based source id the LLM gave (``None`` if it gave none or garbage).
        source_id: The 1-based id of the source where the quote was found (may differ from the
            claimed one: the quote was attributed to the wrong chunk), ``None`` when unverified.
        match: exact / normalized / fuzzy / unverified.
        score: 1.0 for exact and normalised matches, the alignment ratio for fuzzy ones, the best
            ratio seen for unverified ones.
        span: ``(start, end)`` character offsets of the match in the source text.
    """

    quote: str
    claimed_id: int | None
    source_id: int | None
    match: QuoteMatch
    score: float
    span: tuple[int, int] | None = None

    @property
    def verified(self) -> bool:
        return self.match != QuoteMatch.UNVERIFIED

    @property
    def misattributed(self) -> bool:
        """Found, but in another source than the one claimed."""
        return self.verified and self.claimed_id is not None and self.source_id != self.claimed_id

    def to_dict(self) -> dict[str, Any]:
        return {
            "quote": self.quote,
            "claimed_id": self.claimed_id,
            "source_id": self.source_id,
            "match": self.match.value,
            "score": round(self.score, 4),
            "span": list(self.span) if self.span else None,
        }


def normalize_with_map(text: str) -> tuple[str, list[int]]:
    """Case-folded text with unified quote marks/dashes and collapsed whitespace.

    Returns:
        The normalised text and, for each of its characters, the index of the original character
        it came from (to map a match back to the source).
    """
    out: list[str] = []
    index: list[int] = []
    space = True  # drop leading whitespace
    for i, ch in enumerate(text):
        piece = unicodedata.normalize("NFKC", ch).translate(_TRANSLATE).casefold()
        for c in piece:
            if c.isspace():
                if space:
                    continue
                c = " "
                space = True
            else:
                space = False
            out.append(c)
            index.append(i)
    if out and out[-1] == " ":
        out.pop()
        index.pop()
    return "".join(out), index


def _clean_quote(quote: str) -> str:
    quote = quote.strip()
    while len(quote) >= 2 and quote[0] in _WRAPPERS and quote[-1] in _WRAPPERS:
        quote = quote[1:-1].strip()
    for ellipsis in ("...", "…"):
        quote = quote.removeprefix(ellipsis).removesuffix(ellipsis).strip()
    return quote


def _fuzzy(q: str, t: str) -> tuple[float, int, int]:
    """Best similarity (0..1) of ``q`` with a window of ``t``, and that window's offsets.

    The window is as long as ``q`` (rapidfuzz's ``partial_ratio_alignment``); a quote longer
    than the text is compared with the whole text, never the text with a part of the quote.
    """
    if not q or not t:
        return 0.0, 0, 0
    if len(q) > len(t):
        return fuzz.ratio(q, t) / 100.0, 0, len(t)
    best = fuzz.partial_ratio_alignment(q, t)
    return best.score / 100.0, best.dest_start, best.dest_end


def verify_quote(
    quote: str,
    sources: Sequence[str],
    claimed_id: int | None = None,
    *,
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
) -> QuoteCheck:
    """Find ``quote`` in ``sources`` (claimed source first): exact → normalised → fuzzy.

    Args:
        quote: The quote the LLM wrote (surrounding quote marks and ``...`` are ignored).
        sources: Source texts; ids are 1-based positions.
        claimed_id: The id the LLM attributed the quote to.
        fuzzy_threshold: Minimum similarity for a fuzzy match (0..1, rapidfuzz's ratio / 100).

    Example:
        >>> texts = ["The cheetah can run at 93 to 104 km/h.", "Lions live in prides."]
        >>> verify_quote("can  run at 93 to 104 km/h", texts, 1).match.value
        'normalized'
        >>> verify_quote("Lions live in prides", texts, 1).source_id
        2
        >>> verify_quote("Cheetahs can fly", texts, 1).match.value
        'unverified'
    """
    cleaned = _clean_quote(quote)
    valid_claim = claimed_id if claimed_id is not None and 1 <= claimed_id <= len(sources) else None
    order = ([valid_claim] if valid_claim else []) + [
        i for i in range(1, len(sources) + 1) if i != valid_claim
    ]
    if not cleaned or not order:
        return QuoteCheck(quote, claimed_id, None, QuoteMatch.UNVERIFIED, 0.0)
    for sid in order:
        pos = sources[sid - 1].find(cleaned)
        if pos >= 0:
            return QuoteCheck(
                quote, claimed_id, sid, QuoteMatch.EXACT, 1.0, (pos, pos + len(cleaned))
            )
    nq, _ = normalize_with_map(cleaned)
    normalized = {sid: normalize_with_map(sources[sid - 1]) for sid in order}
    for sid in order:
        text, index = normalized[sid]
        pos = text.find(nq) if nq else -1
        if pos >= 0:
            span = (index[pos], index[pos + len(nq) - 1] + 1)
            return QuoteCheck(quote, claimed_id, sid, QuoteMatch.NORMALIZED, 1.0, span)
    best: tuple[float, int | None, tuple[int, int] | None] = (0.0, None, None)
    for sid in order:
        text, index = normalized[sid]
        ratio, lo, hi = _fuzzy(nq, text)
        if ratio > best[0] + 1e-9 and hi > lo:
            best = (ratio, sid, (index[lo], index[hi - 1] + 1))
    ratio, sid, span = best
    if sid is not None and ratio >= fuzzy_threshold:
        return QuoteCheck(quote, claimed_id, sid, QuoteMatch.FUZZY, ratio, span)
    return QuoteCheck(quote, claimed_id, None, QuoteMatch.UNVERIFIED, ratio)


# --------------------------------------------------------------------------- parsing
_INT = re.compile(r"-?\d+")


def _as_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        found = _INT.search(value)
        return int(found.group()) if found else None
    return None


def parse_quoted_answer(data: Any) -> tuple[str, list[tuple[int | None, str]]] | None:
    """``(answer, [(source_id, quote), ...])`` from a dict or model text; ``None`` if hopeless.

    Accepts the keys ``answer``/``response``/``text`` and ``citations``/``quotes``/``sources``,
    with ``source_id``/``id``/``source``/``document`` and ``quote``/``text``/``excerpt`` inside.

    Example:
        >>> reply = '{"answer": "93 km/h", "citations": [{"source_id": "id=2", "quote": "93"}]}'
        >>> parse_quoted_answer("Sure! ```json\\n" + reply + "\\n```")
        ('93 km/h', [(2, '93')])
    """
    if isinstance(data, str):
        for value in json_values(data):
            for candidate in value if isinstance(value, list) else [value]:  # [{"answer": ...}]
                parsed = parse_quoted_answer(candidate)
                if parsed is not None:
                    return parsed
        return None
    if not isinstance(data, dict):
        return None
    answer = next(
        (data[k] for k in ("answer", "response", "text") if isinstance(data.get(k), str)), None
    )
    raw = next(
        (data[k] for k in ("citations", "quotes", "sources") if isinstance(data.get(k), list)), []
    )
    if answer is None:
        return None
    quotes: list[tuple[int | None, str]] = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        sid = next(
            (_as_id(item[k]) for k in ("source_id", "id", "source", "document") if k in item), None
        )
        quote = next(
            (item[k] for k in ("quote", "text", "excerpt") if isinstance(item.get(k), str)), None
        )
        if quote and quote.strip():
            quotes.append((sid, quote))
    return answer, quotes
