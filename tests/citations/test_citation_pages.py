"""A citation names the pages (or slides) of the chunks it cites: PDF pages and ``.pptx`` slides
carry ``page_label``, and every reference style shows it after the title."""

from __future__ import annotations

import pytest

from llama_index_rag_pack.citations.references import render_references

NODES = [
    {"metadata": {"file_path": "docs/deck.pptx", "file_name": "deck.pptx", "page_label": "2"}},
    {"metadata": {"file_path": "docs/deck.pptx", "file_name": "deck.pptx", "page_label": "5"}},
    {"metadata": {"file_path": "docs/notes.txt", "file_name": "notes.txt"}},
]


@pytest.mark.parametrize(
    ("style", "line"),
    [
        ("text", "[1] deck.pptx, pp. 2, 5 — docs/deck.pptx"),
        ("markdown", "- **1** [deck.pptx](docs/deck.pptx), pp. 2, 5"),
        ("html", '<li value="1"><a href="docs/deck.pptx">deck.pptx</a>, pp. 2, 5</li>'),
    ],
)
def test_every_style_names_the_cited_pages(style: str, line: str) -> None:
    text = render_references(
        "Slides two and five [1](id=1) [2](id=2). Notes [3](id=3).", NODES, style=style
    )
    assert line in text
    assert "notes.txt, p" not in text, "a file without pages gets none"


def test_one_page_is_p_and_only_cited_chunks_count() -> None:
    text = render_references("Slide two [1](id=1).", NODES, style="text")
    assert "[1] deck.pptx, p. 2 — docs/deck.pptx" in text
