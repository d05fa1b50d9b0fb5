"""The BM25 analysis helper process: it analyses each slice after the first while the pack stores
the one before, and what it makes is exactly what the pack would have made itself."""

from __future__ import annotations

import io
import logging
import pickle
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents import analysis_worker as prep_worker
from llama_index_rag_pack.documents.bm25_analysis import AnalysedChunk, ChunkToAnalyse
from llama_index_rag_pack.milvus.bm25 import bm25_rows
from llama_index_rag_pack.pack import indexing
from llama_index_rag_pack.pack.pipeline import slice_prep

pytestmark = pytest.mark.integration

TEXTS = [
    "The aardvark is a nocturnal burrowing mammal native to Africa. It eats ants and termites, "
    "which it digs out of their hills with its strong claws. Dr. Smith studied them for years.",
    "Das Erdferkel ist ein nachtaktives Säugetier aus Afrika. Es ernährt sich von Ameisen und "
    "Termiten, die es mit seinen Krallen aus ihren Bauten gräbt.",
    "大熊猫是中国特有的哺乳动物，主要栖息在四川的山区。它们每天大部分时间都在吃竹子。",
    "ツチブタはアフリカに住む夜行性の哺乳類です。アリやシロアリを食べます。",
    "Apollo 11 was the first crewed mission to land on the Moon. Neil Armstrong and Buzz Aldrin "
    "walked on the surface while Michael Collins stayed in orbit.",
    "A list: 1997, 2004, 2011. Names: Kim, Ode, Lars.",
]


def _documents() -> list[Document]:
    return [
        Document(text=f"{text} Part {n} of the set.", id_=f"doc-{n}", metadata={"title": f"t{n}"})
        for n, text in enumerate(TEXTS * 2)
    ]


def _rows(pack: Any) -> dict[str, list[dict[str, Any]]]:
    store = pack.vector_store
    out = {}
    for name in (store.collection_name, f"{store.collection_name}__sentences"):
        rows = store.client.query(name, filter='id != ""', output_fields=["*"], limit=10_000)
        out[name.rsplit("__", 1)[-1]] = sorted(rows, key=lambda row: row["id"])
    return out


def _index(monkeypatch: Any, uri: str, embed_model: Any, worker: str) -> Any:
    monkeypatch.setenv(prep_worker.WORKER_ENV, worker)
    return RagPack(
        _documents(), uri=uri, collection_name="prep", embed_model=embed_model, llm="none"
    )


@pytest.fixture()
def small_slices(monkeypatch: Any) -> None:
    monkeypatch.setattr(indexing, "SLICE_CHARS", 700)  # four or five slices


@pytest.fixture()
def results(monkeypatch: Any) -> list[Any]:
    """What the helper prepared, slice by slice (``None`` where it failed)."""
    got: list[Any] = []
    real = prep_worker.AnalysisWorker.result

    def spy(self: Any) -> Any:
        got.append(real(self))
        return got[-1]

    monkeypatch.setattr(prep_worker.AnalysisWorker, "result", spy)
    return got


@pytest.mark.slow
def test_the_helper_writes_the_rows_the_pack_writes_alone(
    tmp_path: Any, monkeypatch: Any, embed_model: Any, small_slices: None, results: list[Any]
) -> None:
    alone = _index(monkeypatch, str(tmp_path / "alone.db"), embed_model, "off")
    assert results == []  # off: no helper
    helped = _index(monkeypatch, str(tmp_path / "helped.db"), embed_model, "auto")
    assert len(results) >= 2 and all(r is not None for r in results)  # it prepared slices 2..n
    rows_alone, rows_helped = _rows(alone), _rows(helped)
    assert rows_helped == rows_alone  # chunks, BM25 copies, languages, sentences, vectors
    languages = {row["language"] for row in rows_helped["prep"]}
    assert {"en", "de", "zh", "ja"} <= languages
    hits = helped.retriever(mode="bm25").retrieve("Erdferkel Ameisen")
    assert hits and hits[0].node.ref_doc_id in {"doc-1", "doc-7"}


@pytest.mark.slow
def test_a_helper_that_dies_leaves_the_rest_to_the_pack(
    tmp_path: Any, monkeypatch: Any, embed_model: Any, small_slices: None, caplog: Any
) -> None:
    started: list[Any] = []
    real = prep_worker.start_worker

    def start_and_kill(name: str) -> Any:
        worker = real(name)
        worker._process.kill()
        started.append(worker)
        return worker

    monkeypatch.setattr(slice_prep, "start_worker", start_and_kill)
    with caplog.at_level(logging.WARNING):
        pack = _index(monkeypatch, str(tmp_path / "killed.db"), embed_model, "auto")
    assert started and started[0]._process.poll() is not None
    assert "analysis helper process" in caplog.text and "analysing the rest here" in caplog.text
    assert pack.count() == len(_documents())
    alone = _index(monkeypatch, str(tmp_path / "alone.db"), embed_model, "off")
    assert _rows(pack) == _rows(alone)


def test_a_slice_the_helper_fails_on_is_analysed_here(
    tmp_path: Any, monkeypatch: Any, small_slices: None
) -> None:
    from llama_index.core.embeddings import MockEmbedding

    class Failing:  # a helper that answers every slice with a failure
        alive = True
        submitted = 0

        def submit(self, chunks: list[ChunkToAnalyse]) -> bool:
            Failing.submitted += 1
            return True

        def result(self) -> None:
            return None

        def close(self) -> None:
            self.alive = False

    analysed: list[int] = []
    real = bm25_rows.analyse_chunks

    def spy(analysis: Any, chunks: Any) -> Any:
        analysed.append(len(chunks))
        return real(analysis, chunks)

    monkeypatch.setattr(bm25_rows, "analyse_chunks", spy)
    monkeypatch.setattr(slice_prep, "start_worker", lambda name: Failing())
    pack = RagPack(
        _documents(), uri=str(tmp_path / "f.db"), collection_name="f", embed_model=MockEmbedding(8)
    )
    assert Failing.submitted >= 2
    assert sum(analysed) == pack.count() == len(_documents())  # every chunk analysed here
    rows = _rows(pack)["f"]
    assert {row["language"] for row in rows} >= {"en", "de", "zh", "ja"}


@pytest.mark.slow
def test_the_real_helper_answers_the_next_slice_after_a_failure() -> None:
    from llama_index_rag_pack.documents.bm25_analysis import analyse_chunks, resolve_analyzer

    chunks = [ChunkToAnalyse(text) for text in TEXTS]
    with prep_worker.AnalysisWorker("auto") as worker:
        assert worker.submit([ChunkToAnalyse(None)])  # type: ignore[arg-type]
        assert worker.result() is None and worker.alive
        assert worker.submit(chunks)
        got = worker.result()
    assert got == analyse_chunks(resolve_analyzer("auto"), chunks)
    assert [c.language for c in got][:4] == ["en", "de", "zh", "ja"]
    assert not worker.alive


def test_an_unknown_worker_setting_is_one_line(monkeypatch: Any) -> None:
    monkeypatch.setenv(prep_worker.WORKER_ENV, "sometimes")
    with pytest.raises(ConfigurationError, match="RAG_PACK_INDEX_WORKER must be 'auto' or 'off'"):
        prep_worker.worker_enabled()
    monkeypatch.setenv(prep_worker.WORKER_ENV, " OFF ")
    assert prep_worker.worker_enabled() is False


def _frames(*messages: Any) -> io.BytesIO:
    out = io.BytesIO()
    for message in messages:
        prep_worker._write_frame(out, message)
    out.seek(0)
    return out


def test_the_helper_loop_answers_each_slice_with_its_logs_or_its_failure() -> None:
    def analyse(chunks: list[Any], name: str) -> Any:
        assert name == "auto"
        if chunks == ["bad"]:
            raise ConfigurationError("bad slice")
        if chunks == ["lambda"]:
            return lambda: None  # cannot be sent back
        logging.getLogger("llama_index_rag_pack.test").warning("read %d", len(chunks))
        return [AnalysedChunk(c.upper()) for c in chunks]

    stdout = io.BytesIO()
    requests = _frames(
        ("analysis", "auto", logging.WARNING), ("chunks", ["a", "b"]), ("chunks", ["bad"]),
        ("chunks", ["lambda"]),
    )  # fmt: skip
    prep_worker.serve(requests, stdout, analyse)
    stdout.seek(0)
    replies = []
    while (reply := prep_worker._read_frame(stdout)) is not None:
        replies.append(reply)
    logged = [("llama_index_rag_pack.test", 30, "read 2")]
    assert replies[0] == ("ok", [AnalysedChunk("A"), AnalysedChunk("B")], logged)
    assert replies[1] == ("error", "ConfigurationError: bad slice", [])
    assert replies[2][0] == "error" and "pickle" in replies[2][1].lower()
    assert len(replies) == 3


def test_a_cut_frame_reads_as_the_end() -> None:
    whole = _frames(("chunks", ["a"])).getvalue()
    assert prep_worker._read_frame(io.BytesIO(whole[:-3])) is None
    assert prep_worker._read_frame(io.BytesIO(whole[:4])) is None
    assert pickle.loads(whole[8:]) == ("chunks", ["a"])
