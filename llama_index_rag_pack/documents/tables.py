"""Tables as Markdown text, and cutting them into chunks between rows.

Readers of office and data files (:mod:`~llama_index_rag_pack.documents.office_files`) write a
table as Markdown rows under its header row; the chunker
(:mod:`~llama_index_rag_pack.documents.chunking`) then treats every row as one unit, so a chunk
ends between rows, and a table that would not fit whole in one chunk is cut into groups of whole
rows, each under the header row again (:func:`table_row_groups`).
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
    table: MarkdownTable,
    budget: int,
    count_tokens: Callable[[str], int],
    first_budget: int | None = None,
) -> list[str]:
    """``table`` cut into groups of whole rows, each under the table's header row and at most
    ``budget`` tokens (a row too long for that is a group alone, header included: the chunker
    cuts it). With ``first_budget``, the first group is at most that many tokens where the
    header and the first row fit in it (room left beside the text before the table).

    Example:
        >>> text = "| k | v |\\n|---|---|\\n" + "".join(f"| {i} | x |\\n" for i in range(5))
        >>> (table,) = find_tables(text)
        >>> lines = lambda text: text.count("\\n")  # tokens, here: lines
        >>> for group in table_row_groups(table, 4, lines, first_budget=3):
        ...     print(repr(group))
        '| k | v |\\n|---|---|\\n| 0 | x |\\n'
        '| k | v |\\n|---|---|\\n| 1 | x |\\n| 2 | x |\\n'
        '| k | v |\\n|---|---|\\n| 3 | x |\\n| 4 | x |\\n'
    """
    head = count_tokens(table.header)
    sizes = [count_tokens(row) for row in table.rows]
    limit = budget
    if first_budget is not None and sizes and head + sizes[0] <= first_budget:
        limit = first_budget
    groups: list[str] = []
    group: list[str] = []
    size = head
    for row, row_size in zip(table.rows, sizes, strict=True):
        if group and size + row_size > limit:
            groups.append(table.header + "".join(group))
            group, size, limit = [], head, budget
        group.append(row)
        size += row_size
    groups.append(table.header + "".join(group))
    return groups
