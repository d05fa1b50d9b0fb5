"""``--show-sources``: every cited passage, with the sentence that supports the answer
highlighted, so an answer (even a weak local model's) can be checked at a glance.

The highlight is ANSI bold on a terminal and ``>>``/``<<`` otherwise (pipes, files, tests).
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.citations.cited_sources import (
    evidence_spans,
    is_extractive,
    passage_text,
)

#: Passages longer than this are cut to a window around the highlighted sentences.
MAX_PASSAGE_CHARS = 700
CONTEXT_CHARS = 220
WIDTH = 100
INDENT = "      "


def out(text: str = "") -> None:
    print(text)  # noqa: T201 - the CLI prints


def highlight_marks(tty: bool) -> tuple[str, str]:
    """Opening and closing marks of a highlighted sentence."""
    return ("\033[1m", "\033[0m") if tty else (">>", "<<")


def highlight(text: str, spans: Sequence[tuple[int, int]], tty: bool = False) -> str:
    """``text`` with each span wrapped in the highlight marks (overlapping spans merged).

    Example:
        >>> highlight("One. Two. Three.", [(5, 9)])
        'One. >>Two.<< Three.'
    """
    opening, closing = highlight_marks(tty)
    merged: list[list[int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    pieces, cursor = [], 0
    for start, end in merged:
        pieces += [text[cursor:start], opening, text[start:end], closing]
        cursor = end
    return "".join(pieces) + text[cursor:]


def passage_window(
    text: str, spans: Sequence[tuple[int, int]]
) -> tuple[str, list[tuple[int, int]]]:
    """The part of a long passage around its highlighted spans (``…`` where cut), spans shifted.

    Example:
        >>> passage_window("a " * 500 + "KEY." + " b" * 500, [(1000, 1004)])[0][:3]
        '… a'
    """
    real = [s for s in spans if s[1] > s[0]]
    if len(text) <= MAX_PASSAGE_CHARS or not real:
        return (text if len(text) <= MAX_PASSAGE_CHARS else text[:MAX_PASSAGE_CHARS] + " …"), real
    lo = max(0, min(s[0] for s in real) - CONTEXT_CHARS)
    hi = min(len(text), max(s[1] for s in real) + CONTEXT_CHARS)
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    prefix = "… " if lo > 0 else ""
    shifted = [(s - lo + len(prefix), e - lo + len(prefix)) for s, e in real]
    return prefix + text[lo:hi] + (" …" if hi < len(text) else ""), shifted


def _wrap(text: str) -> str:
    return textwrap.fill(
        text, width=WIDTH, initial_indent=INDENT, subsequent_indent=INDENT, break_on_hyphens=False
    )


def print_evidence(response: Any, *, tty: bool | None = None) -> None:
    """Print each cited passage with its supporting sentences highlighted, then the answer's
    sentences that no passage supports."""
    tty = sys.stdout.isatty() if tty is None else tty
    citations = list(getattr(response, "citations", None) or [])
    attribution = getattr(response, "attribution", None)
    unsupported = [
        v.text
        for v in (attribution.verdicts if attribution else [])
        if v.origin.value == "unsupported"
    ]
    if not citations and not unsupported:
        return
    opening, closing = highlight_marks(tty)
    out(f"\nEvidence ({opening}marked{closing}: the passage sentence supporting the answer):")
    extracted = is_extractive(response)
    for citation in citations:
        how = (
            "attributed by similarity" if citation.origin == "attributed" else "cited by the model"
        )
        if citation.origin == "both":
            how = "cited by the model and attributed"
        if extracted:
            how = "quoted from the passage"
        link = f" — {citation.url}" if citation.url and citation.url != citation.title else ""
        out(f"  [{citation.number}] {citation.title}{link} ({how})")
        for position in citation.positions:
            _print_passage(response, position, tty)
    for text in unsupported:
        out(f"  unsupported: “{text}” (no retrieved passage supports it)")


def _print_passage(response: Any, position: int, tty: bool) -> None:
    supports = evidence_spans(response, position)
    for sentence, _ in supports if not is_extractive(response) else []:
        out(
            textwrap.fill(
                f"answer: “{sentence}”", WIDTH, initial_indent="    ", subsequent_indent=INDENT
            )
        )
    spans = [span for _, span in supports if span is not None]
    text, shifted = passage_window(passage_text(response, position), spans)
    out(f"    passage {position}:")
    out(_wrap(highlight(text, shifted, tty)))
