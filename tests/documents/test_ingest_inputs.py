"""Inputs that used to stop or hang `rag-pack index`: file names that are not UTF-8, FIFOs and
devices named as input, files too large, texts longer than nltk's sentence splitter handles in
time, and file paths longer than the chunk size.

Each case checks the behaviour a user sees: the good files are indexed, the bad one is skipped
(or refused) with one line naming it, and nothing is duplicated on re-indexing.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.utils import get_tokenizer

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents import ingest
from llama_index_rag_pack.documents.chunking import split_documents
from llama_index_rag_pack.documents.ingest import load_documents, read_documents
from llama_index_rag_pack.pack.rag_pack import RagPack

GOOD = "The aardvark eats ants and termites at night."
# two names that differ only in a byte that is not UTF-8 (Latin-1 é and è)
CAFE_E9, CAFE_E8 = b"caf\xe9.txt", b"caf\xe8.txt"


@pytest.fixture()
def mixed_names(tmp_path: Path) -> Path:
    """A folder with a good file and two files whose names are not UTF-8."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "good.txt").write_text(GOOD)
    try:
        for name, text in ((CAFE_E9, "Raptor builds a tree of summaries."), (CAFE_E8, "Milvus.")):
            with open(os.path.join(os.fsencode(root), name), "wb") as f:
                f.write(text.encode())
    except (OSError, UnicodeError):
        pytest.skip("this file system only takes UTF-8 file names")
    return root


def test_non_utf8_file_names_get_stable_unique_utf8_ids(mixed_names: Path) -> None:
    loaded = read_documents(mixed_names)
    assert loaded.skipped == []
    by_name = {d.metadata["file_name"]: d for d in loaded.documents}
    assert set(by_name) == {"good.txt", "caf\\xe9.txt", "caf\\xe8.txt"}
    assert by_name["caf\\xe9.txt"].text == "Raptor builds a tree of summaries."
    for doc in loaded.documents:  # everything gRPC and Milvus are sent encodes as UTF-8
        doc.doc_id.encode("utf-8")
        for value in doc.metadata.values():
            str(value).encode("utf-8")
    assert by_name["caf\\xe9.txt"].doc_id.endswith("/docs/caf\\xe9.txt")
    # valid names keep the id they always had; ids are the same on the next run
    assert by_name["good.txt"].doc_id == str(mixed_names / "good.txt")
    assert sorted(d.doc_id for d in read_documents(mixed_names).documents) == sorted(
        d.doc_id for d in loaded.documents
    )


@pytest.mark.slow
def test_rag_pack_indexes_non_utf8_names_and_reindexing_replaces(
    mixed_names: Path, tmp_path: Path, embed_model: Any
) -> None:
    pack = RagPack(
        input_dir=mixed_names,
        uri=str(tmp_path / "names.db"),
        embed_model=embed_model,
        sentence_index=False,
    )
    assert pack.count() == 3
    assert pack.insert(load_documents(mixed_names)) == 3
    assert pack.count() == 3  # replaced, not added
    (hit,) = pack.retriever("vector", similarity_top_k=1).retrieve("tree of summaries")
    assert hit.node.metadata["file_name"] == "caf\\xe9.txt"


@pytest.mark.slow
def test_cli_indexes_non_utf8_names_and_reindexing_replaces(
    mixed_names: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "cli_names.db")
    for _ in range(2):
        assert main(["--uri", uri, "index", "--no-sentence-index", str(mixed_names)]) == 0
        out = capsys.readouterr().out
        assert "3 documents" in out and "now holds 3 chunks." in out


needs_fifo = pytest.mark.skipif(
    not hasattr(os, "mkfifo") or not os.path.exists("/dev/zero"), reason="needs FIFOs, /dev/zero"
)

# Run apart, under a memory limit and a timeout: before the fix the FIFO blocked for ever and
# /dev/zero was read until memory ran out.
SPECIAL_FILES_SCRIPT = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from llama_index_rag_pack.documents.ingest import read_documents
start = time.perf_counter()
loaded = read_documents(sys.argv[1:])
print(json.dumps({"seconds": time.perf_counter() - start,
                  "documents": [d.text for d in loaded.documents],
                  "skipped": [[s.path, s.reason] for s in loaded.skipped]}))
"""


@pytest.mark.slow
@needs_fifo
def test_a_fifo_and_dev_zero_named_directly_are_skipped_at_once(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text(GOOD)
    os.mkfifo(tmp_path / "in.txt")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    names = [str(tmp_path / n) for n in ("good.txt", "in.txt", "zero.txt")]
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SPECIAL_FILES_SCRIPT), *names],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["seconds"] < 1.0
    assert result["documents"] == [GOOD]
    skipped = dict(result["skipped"])
    assert skipped.keys() == {names[1], names[2]}
    assert skipped[names[1]].startswith("not a regular file (a FIFO)")
    assert skipped[names[2]].startswith("not a regular file (a device")


@needs_fifo
@pytest.mark.timeout(300)  # before the fix: blocked for ever opening the FIFO
def test_cli_skips_a_fifo_and_refuses_one_alone_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, fifo = tmp_path / "good.txt", tmp_path / "in.txt"
    good.write_text(GOOD)
    os.mkfifo(fifo)
    uri = str(tmp_path / "fifo.db")
    assert main(["--uri", uri, "index", "--no-sentence-index", str(good), str(fifo)]) == 0
    out = capsys.readouterr().out
    assert "1 documents (1 file skipped)" in out and "Skipped 1 unreadable files." in out
    start = time.perf_counter()
    assert main(["--uri", str(tmp_path / "alone.db"), "index", str(fifo)]) == 2
    assert time.perf_counter() - start < 1.0
    err = capsys.readouterr().err
    (line,) = [e for e in err.splitlines() if e.startswith("error:")]
    assert line.startswith("error: Nothing to index") and "in.txt: not a regular file" in line
    assert "Traceback" not in err


@pytest.mark.slow
def test_a_file_over_the_size_limit_is_skipped_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(ingest, "MAX_FILE_BYTES", 2000)
    (tmp_path / "good.txt").write_text(GOOD)
    (tmp_path / "big.txt").write_text("Milvus stores vectors. " * 200)  # 4,600 bytes
    (skip,) = read_documents(tmp_path).skipped
    assert Path(skip.path).name == "big.txt"
    assert skip.reason.startswith("too large (0.0 MiB, the limit is ")
    assert "split it into smaller files" in skip.reason
    uri = str(tmp_path / "limit.db")
    assert main(["--uri", uri, "index", "--no-sentence-index", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "1 documents (1 file skipped)" in out and "now holds 1 chunks." in out


def sentences(n_chars: int, seed: int = 0) -> str:
    """Sentences of 12 words, a paragraph break after about one in ten."""
    rng = random.Random(seed)
    words = "milvus vector database retrieval raptor tree hybrid search the a of and".split()
    parts, size = [], 0
    while size < n_chars:
        s = " ".join(rng.choice(words) for _ in range(12)).capitalize() + "."
        s += "\n\n" if rng.random() < 0.1 else " "
        parts.append(s)
        size += len(s)
    return "".join(parts)


@pytest.mark.slow
def test_a_long_text_is_chunked_at_sentence_ends_without_timing_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # nltk gives its sentence regex 5 s per text: ~7 MB here, less on a slower machine. With
    # 0.5 s, 3 MB in one piece times out (as 10 MB did before the fix); 100,000 characters don't.
    import nltk.redos

    monkeypatch.setattr(nltk.redos, "DEFAULT_TIMEOUT", 0.5)
    text = sentences(3_000_000)
    nodes = split_documents([Document(text=text, id_="big")], chunk_size=256, chunk_overlap=32)
    tokenizer = get_tokenizer()
    assert all(len(tokenizer(n.get_content())) <= 256 for n in nodes)
    assert all(n.get_content().endswith(".") for n in nodes)  # whole sentences
    assert len({n.node_id for n in nodes}) == len(nodes)
    # every sentence is in a chunk, in order
    covered = " ".join(n.get_content() for n in nodes)
    assert all(s in covered for s in text.replace("\n\n", " ").split(". ")[::997])
    assert nodes[-1].end_char_idx == len(text.rstrip())


@pytest.mark.slow
def test_a_path_longer_than_the_chunk_size_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path.joinpath(*"abcdefgh")
    deep.mkdir(parents=True)
    (deep / "notes.txt").write_text(GOOD)
    with pytest.raises(ConfigurationError, match=r"notes\.txt: its metadata .* larger chunk size"):
        split_documents(load_documents(deep), chunk_size=32, chunk_overlap=4)
    uri = str(tmp_path / "deep.db")
    argv = ["--uri", uri, "index", "--chunk-size", "32", "--chunk-overlap", "4", str(deep)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    (line,) = [e for e in err.splitlines() if e.startswith("error:")]
    assert "h/notes.txt: its metadata (file path and other fields) is " in line
    assert "--chunk-size" in line and "Traceback" not in err
    # the chunk size it names works
    needed = int(line.split("chunk_size ")[1].split(" ")[0])
    assert split_documents(load_documents(deep), chunk_size=needed, chunk_overlap=4)


def test_a_token_larger_than_the_chunk_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="cannot be split into chunks of 1 tokens"):
        split_documents([Document(text="🦔🦔", id_="hedgehogs")], chunk_size=1, chunk_overlap=0)
