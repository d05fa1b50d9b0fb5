"""``index_files`` / ``rag-pack index``: folders indexed in batches, unchanged documents skipped,
a killed run resumed to exactly the rows of an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from llama_index_rag_pack.core.errors import EmptyCorpusError
from llama_index_rag_pack.pack import file_indexing
from llama_index_rag_pack.pack.file_indexing import index_files
from llama_index_rag_pack.pack.indexing import CONTENT_HASH_KEY, DOC_CHUNKS_KEY

pytestmark = pytest.mark.slow

TOPICS = ["rivers", "mountains", "deserts", "forests", "oceans", "glaciers", "islands"]


def _folder(root: Path, count: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        body = " ".join(
            f"Note {i} sentence {k} is about {topic} and the number {i * 7 + k}." for k in range(12)
        )
        (root / f"note_{i:04d}.txt").write_text(body, encoding="utf-8")
    return root


def _rows(uri: str, collection: str) -> dict[str, Any]:
    """Every chunk row and sentence row, by id, as stored (vectors rounded)."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri)
    out: dict[str, Any] = {}
    for name in (collection, f"{collection}__sentences"):
        client.load_collection(name)
        iterator = client.query_iterator(name, batch_size=1000, filter="", output_fields=["*"])
        while batch := iterator.next():
            for row in batch:
                key = str(row["id"])
                vector = row.get("embedding") or row.get("vector") or []
                kept = {k: v for k, v in row.items() if k not in ("embedding", "vector")}
                out[f"{name}/{key}"] = (
                    str(sorted(kept.items())),
                    tuple(round(float(x), 4) for x in vector),
                )
        iterator.close()
    client.close()
    return out


def test_a_second_run_embeds_nothing_and_a_changed_file_is_replaced(
    tmp_path, embed_model, monkeypatch
) -> None:
    from llama_index_rag_pack.pack import indexing

    folder = _folder(tmp_path / "notes", 12)
    uri = str(tmp_path / "files.db")
    monkeypatch.setattr(file_indexing, "BATCH_FILES", 5)  # three batches
    lookups: list[str] = []
    for module, name in (
        (file_indexing, "unchanged_documents"),
        (indexing, "delete_document_rows"),
    ):
        real = getattr(module, name)
        monkeypatch.setattr(
            module,
            name,
            lambda *a, _real=real, _name=name, **k: lookups.append(_name) or _real(*a, **k),
        )
    first = index_files(folder, uri=uri, collection_name="notes", embed_model=embed_model)
    assert (first.files, first.indexed, first.unchanged) == (12, 12, 0)
    assert lookups == []  # a collection this run made: nothing looked up, batch after batch
    assert first.chunks == first.pack.count() > 0
    hit = first.pack.retriever().retrieve("note 7 about rivers")[0].node
    assert hit.metadata[CONTENT_HASH_KEY] and hit.metadata[DOC_CHUNKS_KEY] >= 1
    assert CONTENT_HASH_KEY not in hit.get_content(metadata_mode="embed")  # hidden
    assert CONTENT_HASH_KEY not in hit.get_content(metadata_mode="llm")

    calls: list[int] = []
    original = embed_model.get_text_embedding_batch
    monkeypatch.setattr(
        type(embed_model),
        "get_text_embedding_batch",
        lambda self, texts, **kw: calls.append(len(texts)) or original(texts, **kw),
    )
    again = index_files(folder, uri=uri, collection_name="notes", embed_model=embed_model)
    assert (again.indexed, again.unchanged, again.chunks) == (0, 12, 0)
    assert calls == []

    assert lookups == ["unchanged_documents"] * 3  # one read per batch, nothing deleted
    lookups.clear()
    (folder / "note_0003.txt").write_text("Note 3 is now about volcanoes only.", encoding="utf-8")
    changed = index_files(folder, uri=uri, collection_name="notes", embed_model=embed_model)
    assert (changed.indexed, changed.unchanged) == (1, 11)
    assert lookups.count("delete_document_rows") == 1  # only the changed file's batch
    top = changed.pack.retriever().retrieve("volcanoes")[0].node
    assert top.ref_doc_id.endswith("note_0003.txt")
    texts = [n.node.get_content() for n in changed.pack.retriever(mode="bm25").retrieve("note 3")]
    assert not any("sentence 0 is about" in t and "Note 3 " in t for t in texts)


def test_a_partly_stored_document_is_indexed_again(tmp_path, embed_model) -> None:
    folder = _folder(tmp_path / "notes", 4)
    (folder / "long.txt").write_text(
        " ".join(f"Paragraph {k} about long rivers and wide valleys." for k in range(400)),
        encoding="utf-8",
    )
    uri = str(tmp_path / "files.db")
    report = index_files(folder, uri=uri, collection_name="notes", embed_model=embed_model)
    store = report.pack.vector_store
    long_id = next(d for d in _doc_ids(store) if d.endswith("long.txt"))
    chunks = store.client.query(
        store.collection_name, filter=f'doc_id == "{long_id}"', output_fields=["id"]
    )
    assert len(chunks) > 2
    store.client.delete(store.collection_name, ids=[chunks[0]["id"]])  # as if killed mid-write
    resumed = index_files(folder, uri=uri, collection_name="notes", embed_model=embed_model)
    assert (resumed.indexed, resumed.unchanged) == (1, 4)
    assert resumed.pack.count() == report.pack.count()


def _doc_ids(store: Any) -> set[str]:
    rows = store.client.query(store.collection_name, filter="", output_fields=["doc_id"], limit=999)
    return {r["doc_id"] for r in rows}


def test_unreadable_files_are_reported_and_an_empty_folder_is_one_error(
    tmp_path, embed_model
) -> None:
    folder = _folder(tmp_path / "notes", 2)
    (folder / "blank.txt").write_text("   \n", encoding="utf-8")
    (folder / "binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    report = index_files(
        folder, uri=str(tmp_path / "f.db"), collection_name="n", embed_model=embed_model
    )
    assert (report.files, report.indexed, len(report.skipped)) == (4, 2, 2)
    assert "4 files: 2 documents (2 files skipped); 2 indexed" in report.summary()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "blank.md").write_text("", encoding="utf-8")
    with pytest.raises(EmptyCorpusError):
        index_files(empty, uri=str(tmp_path / "g.db"), collection_name="n", embed_model=embed_model)


#: A deterministic embedding of hashed words (the same vectors in every process, no model to
#: load): what is resumed is the rows, whichever model made them.
_WORD_HASH_EMBEDDING = textwrap.dedent(
    """
    import zlib

    from llama_index.core.embeddings import BaseEmbedding


    def _vector(text):
        out = [0.0] * 64
        for word in text.lower().split():
            out[zlib.crc32(word.encode()) % 64] += 1.0
        norm = sum(x * x for x in out) ** 0.5 or 1.0
        return [x / norm for x in out]


    class WordHashEmbedding(BaseEmbedding):
        def _get_text_embedding(self, text):
            return _vector(text)

        def _get_query_embedding(self, query):
            return _vector(query)

        async def _aget_query_embedding(self, query):
            return _vector(query)
    """
)

_KILLABLE = _WORD_HASH_EMBEDDING + textwrap.dedent(
    """
    import sys, time
    from llama_index_rag_pack.pack import file_indexing, pack_base

    file_indexing.BATCH_FILES = 4
    original = pack_base.RagPackBase.insert

    def slow(self, documents, **kwargs):
        written = original(self, documents, **kwargs)
        print("BATCH", flush=True)
        time.sleep(0.2)
        return written

    pack_base.RagPackBase.insert = slow
    report = file_indexing.index_files(
        sys.argv[1], uri=sys.argv[2], collection_name="notes",
        embed_model=WordHashEmbedding(model_name="word-hash-64"),
    )
    print("DONE", report.indexed, report.unchanged, flush=True)
    """
)


def test_a_killed_run_resumes_to_the_rows_of_an_uninterrupted_one(tmp_path, monkeypatch) -> None:
    folder = _folder(tmp_path / "notes", 20)
    script = tmp_path / "run_index.py"
    script.write_text(_KILLABLE, encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    whole = str(tmp_path / "whole.db")  # the uninterrupted run: here, with the same model
    monkeypatch.setattr(file_indexing, "BATCH_FILES", 4)
    embedding: dict[str, Any] = {}
    exec(_WORD_HASH_EMBEDDING, embedding)  # noqa: S102  (the script's own class, here)
    model = embedding["WordHashEmbedding"](model_name="word-hash-64")
    index_files(folder, uri=whole, collection_name="notes", embed_model=model)

    killed = str(tmp_path / "killed.db")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(folder), killed],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    batches = 0
    deadline = time.monotonic() + 240
    while batches < 2 and time.monotonic() < deadline:  # two batches written, then killed
        line = proc.stdout.readline() if proc.stdout else ""
        batches += line.startswith("BATCH")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert batches == 2

    done = subprocess.run(
        [sys.executable, str(script), str(folder), killed],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    indexed, unchanged = map(int, done.split("DONE", 1)[1].split())
    assert unchanged >= 8 and indexed + unchanged == 20
    assert _rows(killed, "notes") == _rows(whole, "notes")


def test_batches_are_flushed_once_so_the_bm25_copy_scores_as_lite(
    tmp_path, embed_model, monkeypatch
) -> None:
    """Lite seals a segment at every flush and scores BM25 per segment; a collection flushed
    once per batch would keep BM25 out of memory (its copy would not score as Lite does)."""
    from llama_index_rag_pack.milvus import vector_memory

    folder = _folder(tmp_path / "notes", 12)
    monkeypatch.setattr(file_indexing, "BATCH_FILES", 4)
    report = index_files(
        folder, uri=str(tmp_path / "f.db"), collection_name="notes", embed_model=embed_model
    )
    assert report.indexed == 12
    assert report.pack.retriever(mode="bm25").retrieve("rivers number")
    store = report.pack.vector_store
    copies = vector_memory._COPIES.get(store.client, {})
    bm25 = [v for (name, slot), v in copies.items() if name == "notes" and slot.startswith("bm25")]
    assert bm25 and bm25[0] is not None
