"""Section paths: which headings a place in a document sits under.

Every reader writes headings as Markdown ``#`` lines (Markdown files as written, HTML ``h1`` to
``h6``, ``.docx`` heading styles, ``.pptx`` slide titles, EPUB chapters, PDF outlines and
large type). A chunk's section path (``Plan directeur > 2. Méthodologie > 2.2 Consultation``)
is the stack of headings open where the chunk starts: a heading closes every heading of its
level or deeper. The path goes into what is embedded and into the BM25 text, so a chunk that
never names its topic is still found by it; it stays out of the chunk's text, and so out of
the quotes of citations.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from llama_index_rag_pack.core.choices import Choice

__all__ = [
    "SECTION_KEY",
    "Heading",
    "SectionPaths",
    "format_section",
    "heading_positions",
    "outline_headings",
    "parse_section",
    "section_after",
    "section_at",
]

#: The metadata key of a chunk's section path (and of a document's section at its start).
SECTION_KEY = "section"
SEPARATOR = " > "
#: A longer path keeps its innermost headings (``… > 4.2 Costs > Table 3``).
MAX_SECTION_CHARS = 200
MAX_HEADING_CHARS = 120
#: Deeper headings (``#####``, ``######``: captions, run-in titles) open no section.
MAX_SECTION_LEVEL = 4
Heading = tuple[int, str]  # level (1 = outermost) and title
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")


class SectionPaths(Choice):
    """Where a chunk's section path goes (``RAG_PACK_SECTION_PATHS``).

    ``embed`` (the default): into what is embedded and what the LLM reads; ``all``: into the
    BM25 text as well; ``off``: nowhere (no ``section`` metadata). Measured
    (``benchmarks/results/section_paths_quality.md``): in the BM25 text the path lifts whole
    sections for a question that names their heading, and costs 4 of 60 ``zh_qa`` dev
    questions at evidence@1, so only ``all`` puts it there.
    """

    EMBED = "embed"
    ALL = "all"
    OFF = "off"

    @classmethod
    def from_env(cls) -> SectionPaths:
        """The setting of ``RAG_PACK_SECTION_PATHS`` (``embed`` when unset).

        Raises:
            ConfigurationError: a value that is none of ``embed``, ``all``, ``off``.
        """
        return cls.parse(os.environ.get("RAG_PACK_SECTION_PATHS", "").strip() or "embed")

    @classmethod
    def label(cls) -> str:
        return "RAG_PACK_SECTION_PATHS setting"


def heading_positions(text: str) -> list[tuple[int, Heading]]:
    """The ``#`` headings of ``text`` (outside fenced code) with the offset of each line.

    Example:
        >>> text = "# Guide\\n\\nIntro.\\n\\n## Install\\n\\n```\\n# not a heading\\n```"
        >>> heading_positions(text)
        [(0, (1, 'Guide')), (17, (2, 'Install'))]
    """
    out: list[tuple[int, Heading]] = []
    offset = 0
    fenced = False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            match = _HEADING.match(line.rstrip("\r\n"))
            if match and match.group(2).strip() and len(match.group(1)) <= MAX_SECTION_LEVEL:
                title = " ".join(match.group(2).split())[:MAX_HEADING_CHARS]
                out.append((offset, (len(match.group(1)), title)))
        offset += len(line)
    return out


def _push(stack: Sequence[Heading], heading: Heading) -> tuple[Heading, ...]:
    level = heading[0]
    return (*[h for h in stack if h[0] < level], heading)


def section_at(
    positions: Sequence[tuple[int, Heading]], start: Sequence[Heading], offset: int
) -> tuple[Heading, ...]:
    """The headings open at ``offset`` of a text whose headings are ``positions``
    (:func:`heading_positions`) and which starts under ``start``."""
    stack = tuple(start)
    for position, heading in positions:
        if position > offset:
            break
        stack = _push(stack, heading)
    return stack


def section_after(text: str, start: Sequence[Heading]) -> tuple[Heading, ...]:
    """The headings still open at the end of ``text`` (which starts under ``start``)."""
    return section_at(heading_positions(text), start, len(text))


def format_section(path: Iterable[Heading]) -> str:
    """A section path as one line, outer first; a long one keeps its inner headings.

    Example:
        >>> format_section([(1, "Plan directeur"), (2, "2. Méthodologie")])
        'Plan directeur > 2. Méthodologie'
    """
    titles = [title for _, title in path]
    text = SEPARATOR.join(titles)
    while len(text) > MAX_SECTION_CHARS and len(titles) > 1:
        titles = titles[1:]
        text = SEPARATOR.join(["…", *titles])
    return text[:MAX_SECTION_CHARS]


def parse_section(value: object) -> tuple[Heading, ...]:
    """A section path read back from :func:`format_section`'s line (levels by position)."""
    if not isinstance(value, str) or not value.strip():
        return ()
    titles = [t.strip() for t in value.split(SEPARATOR) if t.strip() and t.strip() != "…"]
    return tuple((level, title) for level, title in enumerate(titles, 1))


def outline_headings(entries: Iterable[tuple[int, str, int]]) -> dict[int, list[Heading]]:
    """A PDF outline's entries (level from 0, title, page index) as the headings each page
    starts, levels from 1 (at most 6).

    Example:
        >>> outline_headings([(0, "Intro", 0), (1, "Scope", 0), (0, "Method", 3)])
        {0: [(1, 'Intro'), (2, 'Scope')], 3: [(1, 'Method')]}
    """
    out: dict[int, list[Heading]] = {}
    for level, title, page in entries:
        clean = " ".join(title.split())[:MAX_HEADING_CHARS]
        if clean:
            out.setdefault(page, []).append((min(level + 1, 6), clean))
    return out
