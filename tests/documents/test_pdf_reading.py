"""PDFs as users have them, read with PDFium: reading order across columns, running heads and
feet, page numbers and line-number gutters dropped, words hyphenated across lines joined,
headings and outlines as section paths, tables kept as rows (rotated pages too), and bad files
skipped with one line each while the rest of the folder is read."""

from __future__ import annotations

import io
import resource
import shutil
import threading
import time
import zlib
from pathlib import Path

import pytest
from llama_index.core.schema import MetadataMode
from pdf_factory import Page, Text, pdf_bytes, prose_lines, write_pdf

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.chunking import split_documents
from llama_index_rag_pack.documents.ingest import load_documents, read_documents
from llama_index_rag_pack.documents.pdf.ocr_pages import OcrOptions
from llama_index_rag_pack.documents.pdf.text_layer import MAX_RENDER_PIXELS, render_page
from llama_index_rag_pack.documents.sections import SECTION_KEY

LEFT = (
    "Alpine meadows hold more than two hundred species of flowering plants. Gentians open "
    "only in full sunlight and close when clouds pass over the slope."
)
RIGHT = (
    "Glaciers in the valley retreated four hundred metres since the survey. Meltwater now "
    "feeds a lake that did not exist when the first maps were drawn."
)


def _read(tmp_path, pages, name="doc.pdf", **kwargs):
    write_pdf(tmp_path / name, pages, **kwargs)
    return read_documents(tmp_path / name, ocr="off")


def test_two_columns_are_read_column_by_column(tmp_path):
    texts = prose_lines(LEFT, 72, 700, width_chars=40) + prose_lines(RIGHT, 330, 700, 40)
    docs = _read(tmp_path, [Page(texts)]).documents
    text = " ".join(docs[0].text.split())
    assert LEFT in text and RIGHT in text
    assert text.index(LEFT) < text.index(RIGHT)


def test_running_heads_feet_and_page_numbers_are_dropped(tmp_path):
    pages = []
    for n in range(1, 5):
        head = Text(f"Annual Report 2024 / Chapter {n} / page {n}", 72, 760, 8)
        if n % 2 == 0:  # the number moves to the other side on even pages
            head = Text(f"{n} / Annual Report 2024 / Chapter {n}", 72, 760, 8)
        foot = Text(str(n), 300, 30, 8)
        body = prose_lines(f"Body text of page {n} about river discharge in spring.", 72, 600)
        pages.append(Page([head, foot, *body]))
    docs = _read(tmp_path, pages).documents
    assert len(docs) == 4
    for n, doc in enumerate(docs, 1):
        assert "Annual Report" not in doc.text
        assert doc.text.strip() == f"Body text of page {n} about river discharge in spring."
        assert doc.metadata["page_label"] == str(n)


def test_a_line_number_gutter_is_dropped_and_numbers_in_text_kept(tmp_path):
    said = [f"THE WITNESS: I saw {n} boats leave the harbour that morning." for n in range(1, 9)]
    texts = [Text(str(n), 60, 700 - 20 * n, 10) for n in range(1, 9)]
    texts += [Text(line, 100, 700 - 20 * n, 10) for n, line in enumerate(said, 1)]
    text = _read(tmp_path, [Page(texts)]).documents[0].text
    assert text.split()[0] == "THE"  # no gutter number first
    for n in range(1, 9):
        assert f"I saw {n} boats" in text
    assert text.count("THE WITNESS") == 8


def test_words_hyphenated_across_lines_are_joined(tmp_path):
    lines = ["The council met for ninety min-", "utes and approved the FAA-", "approved plan."]
    texts = [Text(line, 72, 700 - 12 * i) for i, line in enumerate(lines)]
    text = _read(tmp_path, [Page(texts)]).documents[0].text
    assert "ninety minutes and approved" in text
    assert "FAA- approved" in text or "FAA-approved" in text  # a capital before: kept


def test_headings_by_size_give_every_chunk_its_section(tmp_path):
    body = "The consultation ran for six weeks and drew answers from residents. " * 12
    pages = [
        Page(
            [
                Text("Plan directeur", 72, 740, 20),
                Text("2. Methodologie", 72, 700, 15),
                *prose_lines(body, 72, 670),
            ]
        ),
        Page(prose_lines(body, 72, 740)),
    ]
    docs = _read(tmp_path, pages).documents
    assert docs[0].text.startswith("# Plan directeur\n\n## 2. Methodologie")
    assert docs[1].metadata[SECTION_KEY] == "Plan directeur > 2. Methodologie"
    chunks = split_documents(docs, chunk_size=64, chunk_overlap=0)
    assert len(chunks) > 4
    for chunk in chunks[1:]:
        assert chunk.metadata[SECTION_KEY] == "Plan directeur > 2. Methodologie"
        assert "Plan directeur" not in chunk.get_content(MetadataMode.NONE)
        assert "section: Plan directeur > 2. Methodologie" in chunk.get_content(MetadataMode.EMBED)


def test_a_pdf_outline_gives_the_section_path(tmp_path):
    pages = [
        Page(prose_lines(f"Findings of part {n} on water quality.", 72, 700)) for n in range(3)
    ]
    docs = _read(tmp_path, pages, outline=[("Introduction", 0), ("Results", 2)]).documents
    assert docs[0].text.startswith("# Introduction")
    assert docs[1].metadata[SECTION_KEY] == "Introduction"
    assert docs[2].text.startswith("# Results")
    chunk = split_documents([docs[2]])[0]
    assert chunk.metadata[SECTION_KEY] == "Results"


def _table_texts(rows, x=72, top=700, widths=(0, 150, 250, 350)):
    return [
        Text(cell, x + widths[j], top - 14 * i, 9)
        for i, row in enumerate(rows)
        for j, cell in enumerate(row)
    ]


STATES = [["State", "Permit", "Handgun", "Totals"]] + [
    [name, f"{1000 + 37 * i:,}", f"{500 + 11 * i:,}", f"{2000 + 53 * i:,}"]
    for i, name in enumerate(["Alabama", "Alaska", "Arizona", "Arkansas", "Colorado", "Kentucky"])
]


def test_a_table_is_written_as_rows_under_its_header(tmp_path):
    texts = [Text("Background checks by state", 72, 730, 12), *_table_texts(STATES)]
    text = _read(tmp_path, [Page(texts)]).documents[0].text
    assert "| State | Permit | Handgun | Totals |\n|---|---|---|---|" in text
    assert "| Kentucky | 1,185 | 555 | 2,265 |" in text


def test_a_table_on_a_rotated_page_keeps_its_rows(tmp_path):
    # a landscape table set sideways on a portrait page shown turned (/Rotate 90)
    texts = [
        Text(t.text, 612 - (t.y - 400), t.x, t.size, angle=90)
        for t in _table_texts(STATES, top=700)
    ]
    text = _read(tmp_path, [Page(texts, rotate=90)]).documents[0].text
    assert "| Kentucky | 1,185 | 555 | 2,265 |" in text
    assert "| State | Permit | Handgun | Totals |" in text


def test_a_table_continued_on_the_next_page_keeps_its_header(tmp_path):
    first = _table_texts(STATES[:5], top=200)
    rest = _table_texts(STATES[5:] + [["Georgia", "1,400", "600", "2,400"]], top=740)
    rest += [Text("Notes follow here.", 72, 600, 9)]
    docs = _read(tmp_path, [Page(first), Page(rest)]).documents
    assert "| State | Permit | Handgun | Totals |\n|---|---|---|---|\n| Colorado |" in docs[1].text


def test_multi_column_prose_is_not_taken_for_a_table(tmp_path):
    words = "The committee reviewed the annual accounts and found them in order. " * 4
    texts = prose_lines(words, 40, 700, 28) + prose_lines(words, 220, 700, 28)
    texts += prose_lines(words, 400, 700, 28)
    assert "|---" not in _read(tmp_path, [Page(texts)]).documents[0].text


# --- bad PDFs: one line each, the rest of the folder is read ---------------------------------

GOOD = [Page(prose_lines("A readable page about tide tables.", 72, 700))]


def _encrypt(data: bytes, user: str, owner: str) -> bytes:
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user, owner_password=owner, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _bad_folder(tmp_path):
    folder = tmp_path / "pdfs"
    folder.mkdir()
    write_pdf(folder / "good.pdf", GOOD)
    (folder / "locked.pdf").write_bytes(_encrypt(pdf_bytes(GOOD), "secret", "owner"))
    (folder / "owner_only.pdf").write_bytes(_encrypt(pdf_bytes(GOOD), "", "owner"))
    data = pdf_bytes(GOOD)
    (folder / "bad_xref.pdf").write_bytes(data.replace(b"xref\n0 ", b"xref\n9 "))
    (folder / "truncated.pdf").write_bytes(data[: len(data) // 3])
    (folder / "not_a_pdf.pdf").write_bytes(b"PK\x03\x04 this is a zip, not a PDF" * 10)
    (folder / "empty.pdf").write_bytes(b"")
    return folder


def test_bad_pdfs_are_skipped_with_one_line_each_and_the_rest_read(tmp_path):
    loaded = read_documents(_bad_folder(tmp_path), ocr="off")
    names = {d.metadata["file_name"] for d in loaded.documents}
    assert {"good.pdf", "owner_only.pdf"} <= names  # no user password: read as usual
    assert "bad_xref.pdf" in names  # PDFium rebuilds a damaged cross-reference table
    skipped = {s.path.rsplit("/", 1)[-1]: s.reason for s in loaded.skipped}
    assert "encrypted with a password" in skipped["locked.pdf"]
    for name in ("truncated.pdf", "not_a_pdf.pdf", "empty.pdf"):
        assert name in skipped or name in names
    for reason in skipped.values():
        assert "\n" not in reason and len(reason) < 300


def test_a_decompression_bomb_page_stays_bounded(tmp_path):
    # 400 MB of content stream (a space repeated) in 400 KB of Flate data
    bomb = zlib.compressobj(9)
    data = b"".join(bomb.compress(b" " * 2**20) for _ in range(400)) + bomb.flush()
    page = Page(raw_content=b"")
    raw = pdf_bytes([page, *GOOD])
    empty = zlib.compress(b"")
    marker = b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(empty) + empty
    raw = raw.replace(
        marker, b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data, 1
    )
    # the xref offsets are now wrong: PDFium rebuilds them, as for any damaged file
    (tmp_path / "bomb.pdf").write_bytes(raw)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    loaded = read_documents(tmp_path / "bomb.pdf", ocr="off")
    assert time.perf_counter() - start < 60
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 1500
    assert [d.metadata["page_label"] for d in loaded.documents] == ["2"]


@pytest.mark.parametrize("width,height,dpi", [(14400, 14400, 72), (612, 792, 2400)])
def test_an_enormous_page_renders_within_the_pixel_cap(tmp_path, width, height, dpi):
    import pypdfium2 as pdfium

    write_pdf(tmp_path / "big.pdf", [Page(prose_lines("Huge.", 10, height - 20), width, height)])
    document = pdfium.PdfDocument(str(tmp_path / "big.pdf"))
    image = render_page(document[0], dpi)
    assert image.width * image.height <= MAX_RENDER_PIXELS * 1.01
    assert abs(image.width / image.height - width / height) < 0.01


def test_a_bad_ocr_mode_fails_before_any_file_is_read(tmp_path):
    with pytest.raises(ConfigurationError, match="auto"):
        load_documents(tmp_path, ocr="sometimes")


def test_reading_is_thread_safe_for_separate_files(tmp_path):
    for n in range(4):
        write_pdf(tmp_path / f"{n}.pdf", [Page(prose_lines(f"File number {n} here.", 72, 700))])
    results, errors = {}, []

    def read(n):
        try:
            results[n] = load_documents(tmp_path / f"{n}.pdf", ocr="off")[0].text
        except Exception as e:  # pragma: no cover - the failure is the assertion below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {n: f"File number {n} here." for n in range(4)}


# --- scanned pages: image encodings, OCR modes, the cache ------------------------------------

DATA = Path(__file__).resolve().parents[1] / "data" / "pdfs"


@pytest.mark.parametrize("name", ["jbig2_mmr", "ccitt_fax", "jpeg2000"])
def test_scanner_image_encodings_render_for_ocr(name):
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(str(DATA / f"{name}.pdf"))
    image = render_page(document[0], 100)
    low, high = image.getextrema()
    assert low < 64 and high > 192  # ink on paper: the image was decoded


def test_a_scanned_page_with_ocr_off_is_skipped_saying_how_to_read_it(tmp_path):
    shutil.copy(DATA / "ccitt_fax.pdf", tmp_path / "fax.pdf")
    write_pdf(tmp_path / "text.pdf", GOOD)
    loaded = read_documents(tmp_path, ocr="off")
    assert [d.metadata["file_name"] for d in loaded.documents] == ["text.pdf"]
    (skip,) = loaded.skipped
    assert "no text layer" in skip.reason and "--ocr auto" in skip.reason


def test_without_an_ocr_engine_the_skip_reason_names_the_extra(tmp_path, monkeypatch):
    from llama_index_rag_pack.documents.pdf import ocr

    monkeypatch.setattr(ocr, "available_engines", lambda: ())
    shutil.copy(DATA / "ccitt_fax.pdf", tmp_path / "fax.pdf")
    write_pdf(tmp_path / "text.pdf", GOOD)
    (skip,) = read_documents(tmp_path).skipped
    assert "llama-index-rag-pack[ocr]" in skip.reason


@pytest.fixture
def ocr_calls(monkeypatch, tmp_path):
    """Counts the pages the OCR engine reads (the real engine), with an empty cache."""
    from llama_index_rag_pack.documents.pdf import ocr

    if not ocr.available_engines():
        pytest.skip("no OCR engine installed (the [ocr] extra or Tesseract)")
    monkeypatch.setenv("RAG_PACK_OCR_CACHE", str(tmp_path / "ocr-cache"))
    calls = []
    real = ocr.ocr_image

    def counted(image, **kwargs):
        calls.append(image.size)
        return real(image, **kwargs)

    monkeypatch.setattr(ocr, "ocr_image", counted)
    return calls


def test_a_scanned_fax_page_is_read_by_ocr_and_cached(tmp_path, ocr_calls):
    shutil.copy(DATA / "ccitt_fax.pdf", tmp_path / "fax.pdf")
    (doc,) = load_documents(tmp_path / "fax.pdf")
    assert doc.text.strip()  # the fax's low-resolution "/K -1" boxes: read as something
    assert doc.metadata["page_label"] == "1" and doc.metadata["ocr"]
    assert "ocr" not in doc.get_content(MetadataMode.EMBED)
    assert len(ocr_calls) == 1
    (again,) = load_documents(tmp_path / "fax.pdf")  # a re-index reads the cache
    assert again.text == doc.text and len(ocr_calls) == 1
    load_documents(tmp_path / "fax.pdf", ocr="force")  # the same page and settings: cached
    assert len(ocr_calls) == 1
    load_documents(tmp_path / "fax.pdf", ocr=OcrOptions(dpi=150))  # another dpi: read again
    assert len(ocr_calls) == 2


def test_an_image_file_is_read_by_ocr_like_a_page(tmp_path, ocr_calls):
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("L", (900, 160), 255)
    font = ImageFont.load_default(size=48)
    ImageDraw.Draw(image).text((30, 50), "Invoice total 4,250 EUR", fill=0, font=font)
    image.save(tmp_path / "invoice.png")
    (doc,) = load_documents(tmp_path / "invoice.png")
    assert "4,250" in doc.text or "4250" in doc.text
    assert doc.id_.endswith("invoice.png_part_0") and doc.metadata["page_label"] == "1"


def test_a_long_pdf_is_read_in_blocks_that_keep_sections_and_furniture(tmp_path, monkeypatch):
    from llama_index_rag_pack.documents.pdf import pdf_reader

    monkeypatch.setattr(pdf_reader, "BLOCK_PAGES", 3)
    pages = [Page([Text("Handbook", 72, 700, 20), *prose_lines("Intro text here.", 72, 660)])]
    for n in range(2, 8):
        head = Text(f"Staff handbook, page {n}", 72, 770, 8)
        pages.append(Page([head, *prose_lines(f"Rule number {n} of the handbook.", 72, 600)]))
    docs = _read(tmp_path, pages).documents
    assert [d.metadata["page_label"] for d in docs] == [str(n) for n in range(1, 8)]
    assert all("Staff handbook" not in d.text for d in docs)
    assert all(d.metadata.get(SECTION_KEY) == "Handbook" for d in docs[1:])
