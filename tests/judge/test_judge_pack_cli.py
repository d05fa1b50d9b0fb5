"""Judge-driven RAG over a real RagPack (Milvus Lite, the bundled embedding model) and through
``rag-pack judge``, with a scripted judge."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import Document

from llama_index_rag_pack import RagPack, SearchTree, judge_query_engine
from llama_index_rag_pack.cli import main
from llama_index_rag_pack.testing import ScriptedLLM

DOCS = [
    Document(
        text="Animal Farm is a novella written by George Orwell.",
        metadata={"title": "Animal Farm", "url": "https://en.wikipedia.org/wiki/Animal_Farm"},
    ),
    Document(
        text="George Orwell's birthplace is Motihari, in Bengal, British India.",
        metadata={"title": "George Orwell", "url": "https://en.wikipedia.org/wiki/George_Orwell"},
    ),
    Document(
        text="The aardvark eats ants and termites.",
        metadata={"title": "Aardvark", "url": "https://en.wikipedia.org/wiki/Aardvark"},
    ),
]
QUESTION = "Where was the author of Animal Farm born?"
FOLLOW_UP = "Where was George Orwell born?"


def judge(prompt: str) -> str:
    if "<document id=" in prompt:
        if "Motihari" in prompt:
            return "The author, George Orwell, was born in Motihari [1](id=1)."
        return "I don't know."
    passage = re.search(r"Passage:\n(.*?)\n\n", prompt, re.S)
    text = passage.group(1) if passage else ""
    if "Motihari" in text:
        return "Score: 2/2"
    if "written by George Orwell" in text and "author" in prompt:
        return f'{{"score": 1, "follow_up": "{FOLLOW_UP}"}}'
    return '{"score": 0}'


@pytest.fixture(scope="module")
def index_uri(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("judge") / "milvus.db")
    RagPack(DOCS, uri=uri, embed_model=embed_model, llm=ScriptedLLM(replies=[]))
    return uri


def _pack(uri: str, embed_model: Any) -> RagPack:
    return RagPack.open(uri=uri, embed_model=embed_model, llm=ScriptedLLM(replies=judge))


def _check(tree: SearchTree) -> None:
    orwell = next(c for c in tree.root.chunks if c.source == "Animal Farm")
    assert (orwell.score, orwell.follow_up) == (1, FOLLOW_UP)
    assert orwell.child is not None and "Motihari" in orwell.child.answer
    assert any(c.score == 2 and c.source == "George Orwell" for c in orwell.child.chunks)


@pytest.mark.slow
def test_pack_engine_sync_and_async(index_uri: str, embed_model: Any) -> None:
    pack = _pack(index_uri, embed_model)
    engine = judge_query_engine(pack, "vector", similarity_top_k=1, style="text")
    response = engine.query(QUESTION)
    _check(response.search_tree)
    assert "Motihari" in response.response and "Sources:" in response.response
    assert asyncio.run(engine.aquery(QUESTION)).search_tree == response.search_tree
    method = pack.make_judge_query_engine("vector", similarity_top_k=1, style="text")
    assert method.query(QUESTION).search_tree == response.search_tree


@pytest.mark.slow
def test_cli_judge_shows_saves_and_reopens_the_tree(
    index_uri: str, embed_model: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys
) -> None:
    llm = ScriptedLLM(replies=judge)
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding", lambda *a: embed_model
    )
    monkeypatch.delenv("RAG_PACK_EMBED_MODEL", raising=False)
    saved = tmp_path / "tree.json"
    argv = ["--uri", index_uri, "judge", QUESTION, "--mode", "vector", "--top-k", "1"]
    assert main([*argv, "--show-tree", "--save-tree", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "born in Motihari [1]" in out
    assert f"Q: {QUESTION}  (followed_up" in out
    assert "├── [1 partial]" in out or "└── [1 partial]" in out
    assert f"↳ Q: {FOLLOW_UP}  (answered" in out
    assert "[2 answers]" in out
    tree = SearchTree.load(saved)
    _check(tree)
    assert json.loads(saved.read_text())["llm_calls"] == llm.call_count

    assert main(["judge", "--open", str(saved)]) == 0
    assert capsys.readouterr().out.strip() == tree.render_text()
    assert main(["judge", "--open", str(saved), "--tree-format", "mermaid"]) == 0
    mermaid = capsys.readouterr().out
    assert mermaid.startswith("flowchart TD") and "follow-up: " + FOLLOW_UP in mermaid


def test_cli_judge_errors_are_one_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["judge", "--open", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"error: Cannot read a search tree from {bad}")
    assert main(["judge"]) == 2
    assert "Give a question" in capsys.readouterr().err
