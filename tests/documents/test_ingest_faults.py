"""Bad input files: binaries, legacy encodings, corrupt PDFs, and failed first ingests.

Each case checks the one-line message, that the good files are indexed whole, and that nothing
(no garbage chunks, no half-created database) is left behind.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import EmptyCorpusError
from llama_index_rag_pack.core.text_decoding import detect_text_encoding
from llama_index_rag_pack.documents.ingest import read_documents
from llama_index_rag_pack.milvus.connection import count_entities
from llama_index_rag_pack.pack.rag_pack import RagPack

TEXTS = {
    "english.txt": ("The aardvark eats ants and termites at night.", "utf-8"),
    "chinese.md": ("土豚在夜间吃蚂蚁和白蚁。向量数据库存储嵌入。", "utf-8"),
    "french.txt": ("L'oryctérope mange des fourmis; il creuse à Noël, déjà.", "latin-1"),
    "quotes.txt": ("“Smart quotes” — and a euro € sign, in Windows-1252.", "cp1252"),
    "russian.txt": ("Трубкозуб питается муравьями и термитами по ночам. " * 3, "cp1251"),
    "bom16.txt": ("UTF-16 text with a byte order mark: naïve.", "utf-16"),
}


def random_bytes(n: int, seed: int = 15) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    for name, (text, encoding) in TEXTS.items():
        (root / name).write_bytes(text.encode(encoding))
    return root


def test_text_in_any_encoding_is_read_whole(corpus: Path) -> None:
    loaded = read_documents(corpus)
    assert loaded.skipped == []
    got = {Path(d.doc_id).name: d.text for d in loaded.documents}
    assert got == {name: text for name, (text, _) in TEXTS.items()}


def test_binary_renamed_to_txt_is_skipped_with_one_warning(
    corpus: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (corpus / "random.txt").write_bytes(random_bytes(200_000))
    (corpus / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n" + random_bytes(5000, seed=2))
    loaded = read_documents(corpus)
    assert sorted(Path(s.path).name for s in loaded.skipped) == ["image.md", "random.txt"]
    assert all(s.reason.startswith("not text (binary") for s in loaded.skipped)
    assert loaded.summary() == f"{len(TEXTS)} documents (2 files skipped)"
    # nothing lost: every text file is there, whole
    assert {Path(d.doc_id).name for d in loaded.documents} == set(TEXTS)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len([w for w in warnings if "random.txt" in w]) == 1
    assert all("\n" not in w for w in warnings)


@pytest.mark.slow
def test_cli_index_counts_the_skipped_binary_and_stores_no_garbage(
    corpus: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    clean = tmp_path / "clean.db"
    assert main(["--uri", str(clean), "index", "--no-sentence-index", str(corpus)]) == 0
    expected = capsys.readouterr().out.split("now holds ")[1].split(" chunks")[0]
    (corpus / "random.txt").write_bytes(random_bytes(200_000))
    mixed = tmp_path / "mixed.db"
    assert main(["--uri", str(mixed), "index", "--no-sentence-index", str(corpus)]) == 0
    captured = capsys.readouterr()
    assert f"{len(TEXTS)} documents (1 file skipped)" in captured.out
    assert f"now holds {expected} chunks. Skipped 1 unreadable files." in captured.out
    # the warning (printed by the CLI's logging on stderr) is one line
    lines = [r.getMessage() for r in caplog.records if "random.txt" in r.getMessage()]
    assert len(lines) == 1 and "not text (binary or undecodable bytes)" in lines[0]
    assert "\n" not in lines[0]


@pytest.mark.slow
def test_a_corrupt_pdf_is_named_with_what_to_do(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = corpus / "report.pdf"
    broken.write_bytes(b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog" + random_bytes(2000))
    loaded = read_documents(corpus)
    (skip,) = loaded.skipped
    assert Path(skip.path).name == "report.pdf"
    assert "the PDF cannot be read" in skip.reason and "re-save" in skip.reason
    assert len(loaded.documents) == len(TEXTS)
    # alone, it is a one-line error naming the file, and no database is created
    uri = tmp_path / "data" / "milvus.db"
    assert main(["--uri", str(uri), "index", str(broken)]) == 2
    err = capsys.readouterr().err
    (line,) = [e for e in err.splitlines() if e.startswith("error:")]
    assert "report.pdf: the PDF cannot be read" in line and "Traceback" not in err
    assert not uri.parent.exists()


def test_only_binaries_is_an_empty_corpus(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(random_bytes(3000))
    with pytest.raises(EmptyCorpusError, match=r"a\.txt: not text"):
        read_documents(tmp_path)


def failing_embed_model(embed_model: Any) -> Any:
    model = embed_model.model_copy()

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # an interrupted first ingest, the worst case

    object.__setattr__(model, "get_text_embedding_batch", boom)
    return model


@pytest.mark.slow
def test_a_failed_first_ingest_leaves_no_database(tmp_path: Path, embed_model: Any) -> None:
    uri = tmp_path / "rag_pack_data" / "milvus.db"
    docs = [Document(text="Milvus is a vector database.", doc_id="a")]
    with pytest.raises(KeyboardInterrupt):
        RagPack(docs, uri=str(uri), embed_model=failing_embed_model(embed_model))
    assert not uri.exists() and not uri.parent.exists()
    # the same path works afterwards (its lock was released with it)
    pack = RagPack(docs, uri=str(uri), embed_model=embed_model, sentence_index=False)
    assert pack.count() == 1


@pytest.mark.slow
def test_a_failed_ingest_into_an_existing_database_keeps_it(
    tmp_path: Path, embed_model: Any
) -> None:
    uri = str(tmp_path / "kept.db")
    first = RagPack(
        [Document(text="Milvus is a vector database.", doc_id="a")],
        uri=uri,
        embed_model=embed_model,
        sentence_index=False,
    )
    with pytest.raises(KeyboardInterrupt):
        RagPack(
            [Document(text="The aardvark eats ants.", doc_id="b")],
            uri=uri,
            embed_model=failing_embed_model(embed_model),
            sentence_index=False,
        )
    assert Path(uri).is_dir() and count_entities(first.vector_store) == 1


def test_a_failed_first_ask_creates_no_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = tmp_path / "rag_pack_data" / "milvus.db"
    assert main(["--uri", str(uri), "ask", "What is Milvus?"]) == 2
    assert capsys.readouterr().err.startswith("error: No collection 'rag_pack'")
    assert not uri.parent.exists()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"])))
def test_utf8_text_always_decodes_to_itself(text: str) -> None:
    found = detect_text_encoding(text.encode("utf-8"))
    assert found is not None and found.decode(text.encode("utf-8")) == text


@pytest.mark.parametrize("size", [64, 1000, 200_000])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_bytes_are_not_text(size: int, seed: int) -> None:
    assert detect_text_encoding(random_bytes(size, seed)) is None
