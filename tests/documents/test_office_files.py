"""Office and data files for ``rag-pack index``: .docx, .pptx, .xlsx, .csv and .epub.

Small real files are built in ``tmp_path`` with python-docx, python-pptx, openpyxl, the csv
module and EbookLib; tables must come back as Markdown rows under their header row, chunks must
end between rows, and files that cannot be read are skipped with a one-line reason while the rest
of the folder is indexed. The end-to-end test indexes a folder through ``RagPack`` (real Milvus
Lite, the bundled embedding model, a scripted LLM) and checks the cited chunk and its source.
"""

from __future__ import annotations

import datetime
import re
import zipfile
from pathlib import Path

import docx
import openpyxl
import pptx
import pytest
from ebooklib import epub
from hypothesis import given
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.schema import MetadataMode
from pptx.util import Inches

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.citations.cited_sources import unwrap_node
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.chunking import MAX_SPLIT_CHARS, split_documents
from llama_index_rag_pack.documents.ingest import find_files, load_documents, read_documents
from llama_index_rag_pack.documents.tables import find_tables, markdown_table, table_row_groups
from llama_index_rag_pack.testing import ScriptedLLM

PARTS = [["Part", "Supplier", "Price"]] + [
    [f"{name} {size}", supplier, f"{price:.2f} EUR"]
    for name, supplier, price in [
        ("hex bolt", "Acme Fasteners", 0.42),
        ("wing nut", "Borealis Metal", 0.31),
        ("washer", "Acme Fasteners", 0.05),
        ("rivet", "Cobalt Works", 0.12),
        ("hinge", "Delta Hardware", 3.80),
        ("bracket", "Cobalt Works", 1.95),
    ]
    for size in ("M6", "M8", "M10")
]


def write_docx(path: Path, rows: list[list[str]] = PARTS) -> Path:
    document = docx.Document()
    document.add_heading("Parts catalogue", 1)
    document.add_paragraph("Prices of the parts we buy, valid from March.")
    table = document.add_table(rows=len(rows), cols=len(rows[0]))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("Prices exclude VAT.", style="List Bullet")
    document.save(str(path))
    return path


def write_pptx(path: Path) -> Path:
    deck = pptx.Presentation()
    layout = deck.slide_layouts[5]  # title only
    deck.slides.add_slide(layout).shapes.title.text = "Roadmap 2025"
    budget = deck.slides.add_slide(layout)
    budget.shapes.title.text = "Budget by year"
    cells = budget.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for r, row in enumerate([["Year", "Budget"], ["2025", "4.2 M EUR"], ["2026", "5.0 M EUR"]]):
        for c, value in enumerate(row):
            cells.cell(r, c).text = value
    budget.notes_slide.notes_text_frame.text = "The 2026 figure is a forecast."
    deck.slides.add_slide(deck.slide_layouts[6])  # blank: no text at all
    closing = deck.slides.add_slide(deck.slide_layouts[1])
    closing.shapes.title.text = "Questions"
    closing.placeholders[1].text = "Write to the project office."
    deck.save(str(path))
    return path


def write_xlsx(path: Path) -> Path:
    book = openpyxl.Workbook()
    stock = book.active
    stock.title = "Stock"
    for row in [["Item", "Count", "Checked"], ["Apples", 3, datetime.datetime(2025, 3, 1)]]:
        stock.append(row)
    stock.append([None, None, None])
    stock.append(["Pears", 4.0, None])
    prices = book.create_sheet("Prices")
    prices.append(["Item", "Price"])
    prices.append(["Apples", 1.25])
    book.create_sheet("Empty")
    book.save(str(path))
    return path


def write_epub(path: Path) -> Path:
    book = epub.EpubBook()
    book.set_identifier("birds-1")
    book.set_title("Birds")
    book.set_language("en")
    owls = epub.EpubHtml(title="Owls", file_name="owls.xhtml", lang="en")
    owls.content = (
        "<h1>Owls</h1><p>Owls hunt at night.<br/>They fly <b>silently</b>.</p>"
        "<table><tr><th>Owl</th><th>Weight</th></tr><tr><td>Barn owl</td><td>0.5 kg</td></tr>"
        "</table>"
    )
    crows = epub.EpubHtml(title="Crows", file_name="crows.xhtml", lang="en")
    crows.content = "<h1>Crows</h1><div>Crows are <i>clever</i>.<p>They use tools.</p></div>"
    for item in (owls, crows, epub.EpubNcx(), epub.EpubNav()):
        book.add_item(item)
    book.toc = (crows, owls)
    book.spine = ["nav", crows, owls]  # reading order: crows first, whatever the manifest says
    epub.write_epub(str(path), book)
    return path


def by_name(docs: list[Document]) -> dict[str, list[Document]]:
    out: dict[str, list[Document]] = {}
    for doc in docs:
        out.setdefault(doc.metadata["file_name"], []).append(doc)
    return out


# --------------------------------------------------------------------------- readers
def test_docx_keeps_headings_paragraphs_and_the_table_in_body_order(tmp_path) -> None:
    rows = [["Part", "Colour"], ["Bolt", "red"], ["Nut | small", "blue"]]
    (doc,) = load_documents(write_docx(tmp_path / "parts.docx", rows))
    assert doc.text == (
        "# Parts catalogue\n\nPrices of the parts we buy, valid from March.\n\n"
        "| Part | Colour |\n|---|---|\n| Bolt | red |\n| Nut \\| small | blue |\n\n"
        "- Prices exclude VAT."
    )
    assert doc.id_ == str(tmp_path / "parts.docx")
    assert doc.metadata["file_name"] == "parts.docx"
    assert "page_label" not in doc.metadata


def test_pptx_gives_one_document_per_slide_with_its_number(tmp_path) -> None:
    docs = load_documents(write_pptx(tmp_path / "deck.pptx"))
    assert [d.metadata["page_label"] for d in docs] == ["1", "2", "4"]  # slide 3 is blank
    assert [d.metadata["slide"] for d in docs] == [1, 2, 4]
    assert docs[1].text == (
        "# Budget by year\n\n| Year | Budget |\n|---|---|\n| 2025 | 4.2 M EUR |\n"
        "| 2026 | 5.0 M EUR |\n\nNotes: The 2026 figure is a forecast."
    )
    assert docs[2].text == "# Questions\n\nWrite to the project office."
    assert docs[1].id_ == f"{tmp_path / 'deck.pptx'}_part_1"
    # the slide number is in what is embedded once (page_label), like a PDF's page
    embedded = docs[1].get_metadata_str(MetadataMode.EMBED)
    assert "page_label: 2" in embedded and "slide:" not in embedded


def test_xlsx_gives_one_document_per_sheet_named_in_metadata(tmp_path) -> None:
    docs = load_documents(write_xlsx(tmp_path / "stock.xlsx"))
    assert [d.metadata["sheet"] for d in docs] == ["Stock", "Prices"]  # "Empty" has no cells
    assert docs[0].text == (
        "| Item | Count | Checked |\n|---|---|---|\n| Apples | 3 | 2025-03-01 |\n| Pears | 4 |  |"
    )
    assert docs[1].text == "| Item | Price |\n|---|---|\n| Apples | 1.25 |"
    assert "sheet: Prices" in docs[1].get_metadata_str(MetadataMode.EMBED)


@pytest.mark.parametrize(
    ("content", "encoding"),
    [
        ("name;city\nZoë;Malmö\nRené;Liège\n", "cp1252"),
        ("name\tcity\nZoë\tMalmö\nRené\tLiège\n", "utf-8-sig"),
        ('name,city\nZoë,"Malmö, Skåne"\nRené,Liège\n', "utf-16"),
    ],
)
def test_csv_sniffs_the_delimiter_and_detects_the_encoding(tmp_path, content, encoding) -> None:
    path = tmp_path / "people.csv"
    path.write_bytes(content.encode(encoding))
    (doc,) = load_documents(path)
    city = "Malmö, Skåne" if "," in content.splitlines()[0] else "Malmö"
    assert doc.text == (f"| name | city |\n|---|---|\n| Zoë | {city} |\n| René | Liège |")


def test_epub_gives_its_chapters_in_reading_order(tmp_path) -> None:
    docs = load_documents(write_epub(tmp_path / "birds.epub"))
    assert [d.metadata["chapter_title"] for d in docs] == ["Crows", "Owls"]  # not the nav page
    assert [d.metadata["chapter"] for d in docs] == [1, 2]
    assert docs[0].text == "# Crows\n\nCrows are clever.\n\nThey use tools."
    assert docs[1].text == (
        "# Owls\n\nOwls hunt at night. They fly silently.\n\n"
        "| Owl | Weight |\n|---|---|\n| Barn owl | 0.5 kg |"
    )


# --------------------------------------------------------------------------- chunking
ROW = re.compile(r"^\| [^|]+ \| [^|]+ \| [^|]+ \|$")  # a whole row of PARTS (no escaped pipes)


@pytest.mark.slow
def test_a_long_table_is_chunked_between_rows_under_its_header(tmp_path) -> None:
    docs = load_documents(write_docx(tmp_path / "parts.docx"))
    # 80 tokens: room for the metadata (a long temporary path, the section) and a few rows
    nodes = split_documents(docs, chunk_size=80, chunk_overlap=8)
    table_chunks = [n.text for n in nodes if "|---|" in n.text]
    assert len(table_chunks) >= 3  # the table is longer than a chunk
    seen = []
    for text in table_chunks:
        lines = text.splitlines()
        start = lines.index("| Part | Supplier | Price |")
        # the text before the table (title, caption) may share the first group's chunk
        assert start == 0 or (text is table_chunks[0] and not ROW.match(lines[start - 1]))
        lines = lines[start:]
        assert lines[:2] == ["| Part | Supplier | Price |", "|---|---|---|"]
        assert all(ROW.match(line) for line in lines[2:]), text
        seen += lines[2:]
    assert seen == [markdown_table(PARTS).splitlines()[i] for i in range(2, len(PARTS) + 1)]
    assert all(
        not line.startswith("|")
        for n in nodes
        if "|---|" not in n.text
        for line in n.text.splitlines()
    )


def test_a_short_table_inside_prose_is_never_cut_mid_row() -> None:
    table = markdown_table(PARTS[:5])
    prose = " ".join(f"Sentence number {i} talks about supply chains." for i in range(12))
    text = f"{prose}\n\n{table}\n\n{prose}"
    nodes = split_documents([Document(id_="d", text=text)], chunk_size=90, chunk_overlap=20)
    assert len(nodes) > 2
    for node in nodes:
        for line in node.text.splitlines():
            if line.startswith("|"):
                assert ROW.match(line) or line == "|---|---|---|", node.text
    assert any(table in n.text for n in nodes)  # it fits a chunk, so one chunk holds it whole


@pytest.mark.slow
def test_a_table_longer_than_the_pre_cut_keeps_its_header_in_every_chunk(tmp_path) -> None:
    path = tmp_path / "big.csv"
    lines = "".join(f"{i},item {i},a note about item {i}. Fine.\n" for i in range(3000))
    path.write_text(f"id,name,notes\n{lines}")
    (doc,) = load_documents(path)
    assert len(doc.text) > MAX_SPLIT_CHARS  # longer than the texts the splitter is given
    nodes = split_documents([doc])
    assert all(n.text.startswith("| id | name | notes |\n|---|---|---|\n") for n in nodes)
    rows = [line for n in nodes for line in n.text.splitlines()[2:]]
    assert rows == [f"| {i} | item {i} | a note about item {i}. Fine. |" for i in range(3000)]


def test_a_title_shares_the_first_chunk_of_its_long_table() -> None:
    text = f"# Parts catalogue\n\n{markdown_table(PARTS[:9])}\n\nPrices exclude VAT."
    nodes = split_documents([Document(id_="d", text=text)], chunk_size=50, chunk_overlap=0)
    texts = [n.text for n in nodes]
    header = "| Part | Supplier | Price |\n|---|---|---|\n"
    assert texts[0] == f"# Parts catalogue\n\n{header}| hex bolt M6 | Acme Fasteners | 0.42 EUR |"
    assert all(t.startswith(header) for t in texts[1:-1])
    assert texts[-1] == "Prices exclude VAT."


@pytest.mark.slow
@given(
    st.lists(st.lists(st.text("ab |\n", max_size=6), min_size=1, max_size=4), min_size=2),
    st.integers(min_value=1, max_value=12),
    st.one_of(st.none(), st.integers(min_value=0, max_value=12)),
)
def test_row_groups_hold_every_row_once_in_order_under_the_header(rows, budget, first) -> None:
    (table,) = find_tables(markdown_table(rows))
    lines = lambda text: text.count("\n")  # noqa: E731 - tokens, here: lines
    groups = table_row_groups(table, budget, lines, first_budget=first)
    got = []
    for i, group in enumerate(groups):
        assert group.startswith(table.header)
        group_rows = group.splitlines(keepends=True)[2:]
        limit = first if i == 0 and first is not None and first >= 3 else budget
        assert len(group_rows) == 1 or lines(group) <= limit
        got += group_rows
    assert tuple(got) == table.rows


# --------------------------------------------------------------------------- bad files
@pytest.mark.slow
def test_unreadable_files_are_skipped_with_a_reason_and_the_rest_is_indexed(tmp_path) -> None:
    write_docx(tmp_path / "good.docx")
    (tmp_path / "notes.docx").write_text("Just a text file with the wrong name.\n")
    (tmp_path / "cut.pptx").write_bytes(write_pptx(tmp_path / "x.pptx").read_bytes()[:700])
    (tmp_path / "x.pptx").unlink()
    (tmp_path / "secret.xlsx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(1000))
    (tmp_path / "empty.epub").write_bytes(b"")
    (tmp_path / "bytes.csv").write_bytes(bytes(range(256)) * 8)
    with zipfile.ZipFile(tmp_path / "hollow.docx", "w") as archive:  # a zip, but no document
        archive.writestr("[Content_Types].xml", "<Types/>")
    loaded = read_documents(tmp_path)
    assert {d.metadata["file_name"] for d in loaded.documents} == {"good.docx"}
    reasons = {Path(s.path).name: s.reason for s in loaded.skipped}
    assert set(reasons) == {
        "notes.docx",
        "cut.pptx",
        "secret.xlsx",
        "empty.epub",
        "bytes.csv",
        "hollow.docx",
    }
    assert reasons["notes.docx"].startswith("not a real Word (.docx) file (not a zip archive")
    assert reasons["cut.pptx"].startswith("not a real PowerPoint (.pptx) file")
    assert reasons["secret.xlsx"].startswith("encrypted (password-protected)")
    assert reasons["empty.epub"].startswith("empty (0 bytes)")
    assert reasons["bytes.csv"].startswith("not text")
    assert reasons["hollow.docx"].startswith("the Word (.docx) file cannot be read (")
    for reason in reasons.values():
        assert "\n" not in reason and "Traceback" not in reason
    assert loaded.summary() == "1 documents (6 files skipped)"


def test_office_types_are_listed_where_types_are_named(tmp_path) -> None:
    write_xlsx(tmp_path / "stock.xlsx")
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0")
    assert find_files(tmp_path) == [tmp_path / "stock.xlsx"]
    with pytest.raises(ConfigurationError, match=r"'\.doc'.*supported: .*\.docx.*\.epub"):
        find_files(tmp_path / "old.doc")


# --------------------------------------------------------------------------- end to end
def cite_the_row(prompt: str) -> str:
    """Answers from the context document that holds the asked-for cell, citing it as a model
    would (``[1](id=N)``)."""
    cell, answer = ("5.0 M EUR", "5.0 M EUR") if "2026" in prompt else ("wing nut M8", "0.31 EUR")
    documents = re.findall(r"<document id=(\d+)[^>]*>\n(.*?)</document>", prompt, re.S)
    ids = [i for i, text in documents if cell in text]
    return f"It is {answer} [1](id={ids[0] if ids else 99})."


@pytest.fixture(scope="module")
def office_pack(tmp_path_factory, embed_model) -> RagPack:
    folder = tmp_path_factory.mktemp("office")
    write_docx(folder / "parts.docx")
    write_pptx(folder / "deck.pptx")
    return RagPack(
        input_dir=folder,
        uri=str(tmp_path_factory.mktemp("office_db") / "m.db"),
        collection_name="office",
        llm=ScriptedLLM(replies=cite_the_row),
        embed_model=embed_model,
        chunk_size=64,
        chunk_overlap=8,
        similarity_top_k=3,
    )


@pytest.mark.slow
def test_a_question_about_a_cell_finds_its_row_and_cites_the_file(office_pack) -> None:
    hits = office_pack.retriever().retrieve("What is the price of the wing nut M8?")
    top = hits[0].node
    assert "| wing nut M8 | Borealis Metal | 0.31 EUR |" in top.text
    assert top.text.startswith("| Part | Supplier | Price |\n|---|---|---|\n")
    response = office_pack.run("What is the price of the wing nut M8?")
    (citation,) = response.citations
    assert citation.title == "parts.docx"
    assert citation.url is not None and citation.url.endswith("parts.docx")
    assert any("| wing nut M8 |" in unwrap_node(n).text for n in citation.nodes)


@pytest.mark.slow
def test_a_question_about_a_slide_cites_the_deck_and_its_slide(office_pack) -> None:
    response = office_pack.run("What is the budget for 2026?")
    (citation,) = response.citations
    assert citation.title == "deck.pptx"
    (node,) = [unwrap_node(n) for n in citation.nodes]
    assert node.metadata["page_label"] == "2" and node.metadata["slide"] == 2
    # the row asked about, under its header (how many rows share the chunk depends on the
    # metadata's length: the temporary path counts against chunk_size=64)
    assert "| Year | Budget |\n|---|---|\n" in node.text and "| 2026 | 5.0 M EUR |" in node.text
