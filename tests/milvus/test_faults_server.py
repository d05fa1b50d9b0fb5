"""Faults with a real ``milvus-lite server`` on 127.0.0.1: the server dies during a query, and a
RAPTOR build is killed with SIGKILL part-way.

No timing assertions: every wait polls for readiness (a port that answers, a line a child
process prints, rows that appear) with a generous deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lite_server import LiteServer, wait_for
from llama_index.core import Document

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import MilvusUnavailableError
from llama_index_rag_pack.milvus.connection import count_entities, open_vector_store
from llama_index_rag_pack.pack.rag_pack import RagPack
from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[LiteServer]:
    srv = LiteServer(tmp_path / "server-data")
    srv.start()
    yield srv
    srv.kill()


DOCS = [
    Document(text="Milvus is an open-source vector database built for AI.", doc_id="milvus"),
    Document(text="The aardvark eats ants and termites at night.", doc_id="aardvark"),
]
ANSWER = "Milvus is an open-source vector database [1](id=1)."


@pytest.mark.integration
def test_server_killed_during_a_query_then_back(
    server: LiteServer,
    embed_model: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    llm = ScriptedLLM(default_reply=ANSWER)
    pack = RagPack(DOCS, uri=server.uri, collection_name="faults", embed_model=embed_model, llm=llm)
    assert pack.retriever("vector").retrieve("What is Milvus?")

    # the server dies while the question is being embedded, before its searches are sent
    embed_class = type(embed_model)
    original = embed_class._get_query_embedding

    def kill_then_embed(self: Any, query: str) -> Any:
        server.kill()
        return original(self, query)

    monkeypatch.setattr(embed_class, "_get_query_embedding", kill_then_embed)
    with pytest.raises(
        MilvusUnavailableError, match=f"Lost the connection to Milvus at {server.uri}"
    ):
        pack.run("What is Milvus?")

    # back: the same pack answers again (its released collection is loaded again)
    monkeypatch.setattr(embed_class, "_get_query_embedding", original)
    server.start()
    hits = wait_for(lambda: _retrieve_or_none(pack), "the pack to answer again")
    assert hits[0].node.ref_doc_id == "milvus"
    assert "Milvus is an open-source vector database" in str(pack.run("What is Milvus?"))

    # the CLI: the same fault is one line on stderr and exit status 2, then the next ask works
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    monkeypatch.setattr(embed_class, "_get_query_embedding", kill_then_embed)
    argv = ["--uri", server.uri, "--collection", "faults", "ask", "What is Milvus?", "--no-stream"]
    capfd.readouterr()
    assert main(argv) == 2
    err = capfd.readouterr().err
    # stderr holds the model-loading progress lines, then exactly one error line, no traceback
    errors = [line for line in err.splitlines() if not line.startswith(("loading ", "opening "))]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"error: Lost the connection to Milvus at {server.uri}"), err
    assert "Traceback" not in err
    monkeypatch.setattr(embed_class, "_get_query_embedding", original)
    server.start()
    code = main(argv)
    assert code == 0, capfd.readouterr().err
    assert "open-source vector database" in capfd.readouterr().out


def _retrieve_or_none(pack: RagPack) -> Any:
    try:
        return pack.retriever("vector").retrieve("What is Milvus?")
    except MilvusUnavailableError:
        return None  # the client reconnects within about a second


# ----------------------------------------------------------------------------- RAPTOR
TREE_OPTIONS = dict(
    reduction_dim=4,
    chunk_size=128,
    chunk_overlap=16,
    max_length_in_cluster=400,  # several level-1 clusters, so there is a level 2 to kill
    max_retries=1,
    retry_backoff=0.01,
)
BUILDER = """
import sys, time
sys.path.insert(0, sys.argv[2])  # this test module's folder
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
from llama_index_rag_pack.testing import ScriptedLLM
sys.path.insert(1, sys.argv[2] + "/..")  # tests/, for lite_server
from test_faults_server import TREE_OPTIONS, raptor_docs, summary

store = open_vector_store(sys.argv[1], "killed_raptor", dim=384)
tree = None

def slow_summary(prompt):
    # level 1 answers at once; once its summaries are stored (level 2 began), calls never end
    if tree.store.levels().get(1):
        print("level 2 started", flush=True)
        time.sleep(3600)
    return summary(prompt)

tree = RaptorTree(store, llm=ScriptedLLM(replies=slow_summary), **TREE_OPTIONS)
tree.build(raptor_docs())
print("finished", flush=True)
"""


def raptor_docs() -> list[Document]:
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

    docs = load_wikipedia_documents(["Aardvark", "Apollo 11", "Alchemy"])
    return [Document(text=d.text[:1500], doc_id=d.doc_id, metadata=d.metadata) for d in docs]


def summary(prompt: str) -> str:
    """A deterministic summary: the first words of the prompt's last chunk of text."""
    body = prompt.rsplit("Summary:", 1)[0].strip().split()
    return "Summary: " + " ".join(body[-25:])


@pytest.mark.integration
def test_raptor_build_killed_part_way_resumes_without_loss_or_duplicates(
    server: LiteServer, embed_model: Any
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILDER, server.uri, str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # readiness: the child says when level 2 has begun
        assert line.startswith("level 2 started"), f"builder: {line!r}, exit {proc.poll()}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    store = open_vector_store(server.uri, "killed_raptor", dim=384)
    before = RaptorTree(store, embed_model=embed_model, llm=ScriptedLLM(replies=[]), **TREE_OPTIONS)
    level1 = {n.node_id for n in before.store.level(1)}
    assert level1 and not before.store.level(2), "killed after level 1, before level 2 was stored"

    tree = RaptorTree(
        store, embed_model=embed_model, llm=ScriptedLLM(replies=summary), **TREE_OPTIONS
    )
    stats = tree.resume()
    assert stats.summaries_reused == len(level1), "every stored summary kept, none redone"
    assert stats.llm_calls == stats.summaries_written > 0
    nodes = tree.store.tree_nodes()
    ids = [n.node_id for n in nodes]
    assert len(ids) == len(set(ids)) == count_entities(store), "0 duplicated"
    assert level1 <= {n.node_id for n in tree.store.level(1)}
    by_id = {n.node_id: n for n in nodes}
    for node in nodes:  # 0 lost: every summary's children are stored
        for child in node.metadata.get("raptor_child_ids", []):
            assert child in by_id
    # finished: resuming again has nothing left to do (an LLM call would fail the script)
    again = RaptorTree(
        store, embed_model=embed_model, llm=ScriptedLLM(replies=[]), **TREE_OPTIONS
    ).resume()
    assert again.llm_calls == 0 and again.summaries_written == 0
    assert again.summaries_reused == sum(n for lvl, n in tree.levels().items() if lvl > 0)
