"""The pure parts of PDF reading: reading order, joining lines, tables from text positions, page
furniture, and section paths, checked on generated layouts (hypothesis) and small pages."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from llama_index_rag_pack.documents.pdf.layout import Run, block_text, join_lines, reading_order
from llama_index_rag_pack.documents.pdf.page_text import PageContent, furniture_keys, page_markdown
from llama_index_rag_pack.documents.pdf.stream_tables import find_tables
from llama_index_rag_pack.documents.sections import (
    format_section,
    heading_positions,
    parse_section,
    section_after,
    section_at,
)

runs = st.builds(
    lambda i, x, y, w, h: Run(f"w{i}", x, y, x + w, y + h, 10.0),
    st.integers(0, 10_000),
    st.floats(0, 550),
    st.floats(0, 750),
    st.floats(2, 200),
    st.floats(4, 14),
)


@given(st.lists(runs, max_size=60))
def test_reading_order_keeps_every_run_once(page):
    blocks = reading_order(page)
    assert Counter(r for b in blocks for r in b.runs) == Counter(page)


@given(st.lists(runs, max_size=40))
def test_tables_hold_only_runs_of_the_page(page):
    words = Counter(r.text for r in page)
    for table in find_tables(page, 10.0):
        assert len({len(row) for row in table.rows}) == 1  # a rectangle
        cells = Counter(w for row in table.rows for cell in row for w in cell.split())
        assert not cells - words


@given(st.lists(st.text("abcdefgh -", min_size=1, max_size=12), max_size=8))
def test_joined_lines_lose_no_letters(lines):
    joined = join_lines(lines)
    assert Counter(c for c in joined if c.isalpha()) == Counter(
        c for line in lines for c in line if c.isalpha()
    )


def test_lines_of_a_block_read_left_to_right_then_down():
    block = reading_order(
        [
            Run("world", 60, 0, 100, 10, 10),
            Run("hello", 0, 0, 50, 10, 10),
            Run("again", 0, 12, 50, 22, 10),
        ]
    )
    assert [block_text(b) for b in block] == ["hello world again"]


def test_footnotes_go_after_the_body_and_a_page_number_is_dropped():
    body = [
        Run(f"Body line {i} of the report.", 72, 100 + 12 * i, 400, 110 + 12 * i, 10)
        for i in range(5)
    ]
    note = Run("1 A footnote in small type.", 72, 700, 300, 707, 7)
    number = Run("17", 300, 760, 310, 768, 10)
    text = page_markdown(PageContent([note, number, *body]))
    assert text.endswith("1 A footnote in small type.")
    assert "17" not in text


def test_a_running_head_needs_half_the_pages():
    def page(head):
        return PageContent([Run(head, 72, 20, 400, 30, 8), Run("Body.", 72, 300, 120, 310, 10)])

    pages = [page(f"Annual report {n}") for n in range(4)]
    pages += [page(f"Other head {chr(65 + n)}") for n in range(4)]
    assert furniture_keys(pages) == {"# annual report"}
    assert furniture_keys(pages[:1]) == set()  # one page: nothing repeats


markdown = st.lists(
    st.one_of(
        st.tuples(st.integers(1, 6), st.text("abc XY", min_size=1, max_size=8)).map(
            lambda h: f"{'#' * h[0]} {h[1]}"
        ),
        st.text("abc .", min_size=1, max_size=20),
    ),
    max_size=12,
)


@given(markdown)
def test_the_section_at_the_end_is_the_section_after(lines):
    text = "\n\n".join(lines)
    positions = heading_positions(text)
    assert section_at(positions, (), len(text)) == section_after(text, ())
    for _, path in [(0, section_after(text, ()))]:
        levels = [level for level, _ in path]
        assert levels == sorted(set(levels))  # a path only goes deeper


@given(st.lists(st.text("abc é", min_size=1, max_size=10).map(str.strip).filter(bool), max_size=5))
def test_a_section_line_reads_back_to_its_titles(titles):
    path = tuple(enumerate(titles, 1))
    line = format_section(path)
    assert [t for _, t in parse_section(line)] == [t for t in titles if t] or len(line) >= 200


# --- where section paths go --------------------------------------------------------------------


def _chunks(text):
    from llama_index.core import Document

    from llama_index_rag_pack.documents.chunking import split_documents

    return split_documents([Document(text=text, id_="guide")], chunk_size=48, chunk_overlap=0)


GUIDE = "# Guide\n\nWelcome.\n\n## Install\n\n" + "Run the installer as an administrator. " * 6


def test_a_chunk_that_starts_with_headings_sits_under_them():
    chunks = _chunks("# Guide\n\n## Install\n\n" + "Run the installer as an administrator. " * 6)
    assert chunks[0].metadata["section"] == "Guide > Install"


def test_captions_and_run_in_headings_open_no_section():
    text = "# Report\n\n###### Figure 3. A flow chart\n\n" + "The flow goes left to right. " * 8
    assert {c.metadata["section"] for c in _chunks(text)} == {"Report"}


def test_section_paths_are_embedded_and_kept_out_of_bm25_unless_asked(monkeypatch):
    from llama_index.core.schema import MetadataMode

    from llama_index_rag_pack.documents.bm25_analysis import document_headings

    chunk = _chunks(GUIDE)[-1]
    assert "section: Guide > Install" in chunk.get_content(MetadataMode.EMBED)
    assert "Guide > Install" not in document_headings(chunk.metadata)
    monkeypatch.setenv("RAG_PACK_SECTION_PATHS", "all")
    assert "Guide > Install" in document_headings(chunk.metadata)
    monkeypatch.setenv("RAG_PACK_SECTION_PATHS", "off")
    assert all("section" not in c.metadata for c in _chunks(GUIDE))


def test_an_unknown_section_paths_setting_is_one_clear_error(monkeypatch):
    import pytest

    from llama_index_rag_pack.core.errors import ConfigurationError

    monkeypatch.setenv("RAG_PACK_SECTION_PATHS", "sometimes")
    with pytest.raises(ConfigurationError, match="valid values: embed, all, off"):
        _chunks(GUIDE)
