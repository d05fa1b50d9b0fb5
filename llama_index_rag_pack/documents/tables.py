"""Tables as Markdown text, and cutting them into chunks between rows.

Readers of office and data files (:mod:`~llama_index_rag_pack.documents.office_files`) write a
table as Markdown rows under its header row; the chunker
(:mod:`~llama_index_rag_pack.documents.chunking`) then treats every row as one unit, so a chunk
ends between rows, and cuts a table longer than a chunk into groups of whole rows, each under the
header row again (:func:`table_row_groups`).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "MarkdownTable",
    "find_tables",
    "markdown_table",
    "split_table_rows",
    "table_row_groups",
]

#: A Markdown table: a header row, a separator row (``|---|---|``), then any number of rows;
#: every line starts and ends with ``|``.
_TABLE = re.compile(
    r"^[ \t]*\|[^\n]*\|[ \t]*\n"  # header row
    r"[ \t]*\|(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*(?:\n|\Z)"  # separator row
    r"(?:[ \t]*\|[^\n]*\|[ \t]*(?:\n|\Z))*",  # rows
    re.M,
)


def _cell(value: object) -> str:
    """A cell's text on one line, its ``|`` escaped (so it cannot start a new column)."""
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(rows: Sequence[Sequence[object]]) -> str:
    """``rows`` (the first is the header) as a Markdown table, one line per row.

    Rows are padded to the widest; ``None`` is an empty cell; line breaks inside a cell become
    spaces and ``|`` is escaped. No rows give ``""``.

    Example:
        >>> print(markdown_table([["city", "people"], ["Oslo", 709_000], ["Bergen"]]))
        | city | people |
        |---|---|
        | Oslo | 709000 |
        | Bergen |  |
    """
    if not rows:
        return ""
    width = max(len(row) for row in rows) or 1
    lines = []
    for i, row in enumerate(rows):
        cells = [_cell(v) for v in row] + [""] * (width - len(row))
        lines.append("| " + " | ".join(cells) + " |")
        if i == 0:
            lines.append("|" + "---|" * width)
    return "\n".join(lines)


@dataclass(frozen=True)
class MarkdownTable:
    """A Markdown table found in a text: ``text[start:end]``, its header (the header and
    separator rows, ending with a line break) and its rows (each ending with a line break, but
    perhaps the last)."""

    start: int
    end: int
    header: str
    rows: tuple[str, ...]


def find_tables(text: str) -> Iterator[MarkdownTable]:
    """The Markdown tables of ``text`` with a header and a separator row, in order.

    Example:
        >>> [t.rows for t in find_tables("Prices:\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\n")]
        [('| 1 | 2 |\\n',)]
    """
    for match in _TABLE.finditer(text):
        lines = match.group(0).splitlines(keepends=True)
        header = "".join(lines[:2])
        if not header.endswith("\n"):
            header += "\n"
        yield MarkdownTable(match.start(), match.end(), header, tuple(lines[2:]))


def split_table_rows(sentences: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """A sentence splitter that keeps each table row whole: a table's header with its separator
    row is one piece and each row is one, the text around tables goes to ``sentences``.

    The pieces join back into the text (what LlamaIndex's ``SentenceSplitter`` expects of its
    ``chunking_tokenizer_fn``, apart from the whitespace ``sentences`` drops).

    Example:
        >>> split = split_table_rows(lambda text: [text] if text else [])
        >>> split("Prices:\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\n| 3 | 4 |")
        ['Prices:\\n', '| a | b |\\n|---|---|\\n', '| 1 | 2 |\\n', '| 3 | 4 |']
    """

    def split(text: str) -> list[str]:
        pieces: list[str] = []
        position = 0
        for table in find_tables(text):
            if table.start > position:
                pieces += sentences(text[position : table.start])
            pieces += [table.header, *table.rows]
            position = table.end
        if position < len(text):
            pieces += sentences(text[position:])
        return pieces

    return split


def table_row_groups(
    text: str, budget: int, count_tokens: Callable[[str], int]
) -> Iterator[tuple[bool, str]]:
    """``text`` in order as ``(False, other_text)`` and ``(True, rows)`` pieces: each table
    longer than ``budget`` tokens is cut into groups of whole rows, each under the table's
    header row and at most ``budget`` tokens (a row too long for that is a group alone, header
    included: the chunker cuts it). Shorter tables stay in the other text.

    Example:
        >>> table = "| k | v |\\n|---|---|\\n" + "".join(f"| {i} | x |\\n" for i in range(4))
        >>> lines = lambda text: text.count("\\n")  # tokens, here: lines
        >>> for is_table, piece in table_row_groups("Intro.\\n" + table, 4, lines):
        ...     print(is_table, repr(piece))
        False 'Intro.\\n'
        True '| k | v |\\n|---|---|\\n| 0 | x |\\n| 1 | x |\\n'
        True '| k | v |\\n|---|---|\\n| 2 | x |\\n| 3 | x |\\n'
    """
    position = 0
    for table in find_tables(text):
        if count_tokens(text[table.start : table.end]) <= budget:
            continue
        if table.start > position:
            yield False, text[position : table.start]
        head = count_tokens(table.header)
        group: list[str] = []
        size = head
        for row in table.rows:
            row_size = count_tokens(row)
            if group and size + row_size > budget:
                yield True, table.header + "".join(group)
                group, size = [], head
            group.append(row)
            size += row_size
        if group:
            yield True, table.header + "".join(group)
        position = table.end
    if position < len(text):
        yield False, text[position:]
