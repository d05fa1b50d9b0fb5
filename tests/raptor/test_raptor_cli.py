"""RAPTOR inside RagPack and the CLI: ``rag-pack raptor build|show|plot``, ``--mode raptor``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document

from llama_index_rag_pack import cli
from llama_index_rag_pack.cli.raptor_plot import legend_groups
from llama_index_rag_pack.core.errors import CollectionNotFoundError
from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents
from llama_index_rag_pack.pack.rag_pack import RagPack, RetrievalMode
from llama_index_rag_pack.raptor.raptor_nodes import LEVEL_KEY
from llama_index_rag_pack.raptor.raptor_retriever import RaptorRetriever
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

TITLES = ["Aardvark", "Apollo 11", "Abacus", "Alchemy"]


def docs() -> list[Document]:
    return [
        Document(text=d.text[:1500], doc_id=d.doc_id, metadata=d.metadata)
        for d in load_wikipedia_documents(TITLES)
    ]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> dict[str, Any]:
    uri = str(tmp_path_factory.mktemp("cli") / "milvus.db")
    pack = RagPack(
        docs(),
        uri=uri,
        collection_name="wiki",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=[]),
    )
    return {"uri": uri, "chunks": pack.count()}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_raptor_mode_without_a_tree_says_how_to_build_it(
    indexed: dict[str, Any], embed_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = RagPack.open(
        uri=indexed["uri"],
        collection_name="wiki",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=[]),
    )
    with pytest.raises(CollectionNotFoundError, match="rag-pack --collection wiki raptor build"):
        pack.retriever(RetrievalMode.RAPTOR)
    assert "raptor_retriever" not in pack.get_modules()
    code, _, err = run(capsys, "--uri", indexed["uri"], "--collection", "wiki", "raptor", "show")
    assert code == 2 and "raptor build" in err


def test_build_from_indexed_chunks_then_show_plot_and_ask(
    indexed: dict[str, Any],
    embed_model: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    llm = ScriptedLLM(
        replies=lambda p: (
            "Here is a summary:\nAardvarks, the Apollo 11 landing, abacuses and alchemy."
        )
    )
    monkeypatch.setattr("llama_index_rag_pack.models.settings.resolve_llm", lambda spec=None: llm)
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings.resolve_embed_model",
        lambda spec=None: embed_model,
    )
    base = ("--uri", indexed["uri"], "--collection", "wiki")

    code, out, _ = run(capsys, *base, "raptor", "build")
    assert code == 0, out
    assert f"{indexed['chunks']} chunks (their embeddings are reused)" in out
    assert "levels" in out and llm.call_count >= 1

    code, out, _ = run(capsys, *base, "raptor", "build")  # again: resumes, nothing to do
    assert code == 0 and f"({llm.call_count} summaries reused)" in out

    code, out, _ = run(capsys, *base, "raptor", "show", "--format", "mermaid")
    assert code == 0 and out.startswith("graph TD") and "-->" in out and "L1 · Aardvarks" in out
    code, out, _ = run(capsys, *base, "raptor", "show", "--format", "dot")
    assert code == 0 and out.startswith("digraph raptor") and "->" in out
    code, out, _ = run(capsys, *base, "raptor", "show")
    assert code == 0 and out.startswith("levels: L0=")

    code, out, _ = run(capsys, *base, "raptor", "plot", "--out", str(tmp_path / "plots"))
    assert code == 0
    png = tmp_path / "plots" / "level_0.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "plots" / "tree.mmd").read_text().startswith("graph TD")

    pack = RagPack.open(
        uri=indexed["uri"], collection_name="wiki", embed_model=embed_model, llm=llm
    )
    for mode in (RetrievalMode.RAPTOR, RetrievalMode.RAPTOR_TRAVERSAL):
        retriever = pack.retriever(mode)
        assert isinstance(retriever, RaptorRetriever)
        hits = retriever.retrieve("What do aardvarks eat?")
        assert hits and all(LEVEL_KEY in h.node.metadata for h in hits)
    assert pack.retriever("raptor_traversal").mode.value == "tree_traversal"
    assert isinstance(pack.get_modules()["raptor_retriever"], RaptorRetriever)


@settings(max_examples=50, deadline=None)
@given(
    clusters=st.lists(st.lists(st.integers(0, 30), max_size=3), min_size=1, max_size=80),
    top_n=st.integers(1, 15),
)
def test_plot_legend_names_the_largest_clusters_and_groups_the_rest(
    clusters: list[list[int]], top_n: int
) -> None:
    groups = legend_groups(clusters, top_n)
    rows = sorted(int(i) for _, members in groups for i in members)
    assert rows == list(range(len(clusters))), "every node is drawn exactly once"
    named = [(label, members) for label, members in groups if label.startswith("cluster ")]
    assert len(named) <= top_n
    sizes = [len(members) for _, members in named]
    assert sizes == sorted(sizes, reverse=True), "largest clusters first"
    for label, members in named:
        cid = int(label.split()[1])
        assert all(clusters[i][0] == cid for i in members)
        assert f"· {len(members)} node" in label
    others = [members for label, members in groups if label.startswith("other")]
    first_ids = {c[0] for c in clusters if c}
    assert bool(others) == (len(first_ids) > top_n)
    if others:
        assert min(sizes) >= max(
            sum(1 for c in clusters if c and c[0] == cid)
            for cid in {clusters[i][0] for i in others[0]}
        )
    no_parent = [members for label, members in groups if label.startswith("top level")]
    assert [list(m) for m in no_parent] == (
        [[i for i, c in enumerate(clusters) if not c]] if any(not c for c in clusters) else []
    )
