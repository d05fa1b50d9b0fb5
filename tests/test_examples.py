"""Every script in examples/ runs as a user would run it (offline, its default scripted LLM, a
fresh data directory) and prints what it promises. ``quickstart.py`` resolves the LLM itself: it
gets LlamaIndex's ``Settings.llm``, a scripted one here."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))

EXPECTED = {
    "pack_contract.py": [r"^modules: .*query_engine", r"^bm25: Sourdough$", r"milvus\.io"],
    "stock_pipeline.py": [r"routed to: 1\n.*Sourdough bread rises", r"routed to: 0\n.*Milvus is"],
    "citation_postprocessor.py": [r"^Sourdough bread rises", r"^  \[Sourdough\] "],
    "chat_with_citations.py": [
        r"\(searched: Which kinds of search does Milvus support\?\)",
        r"^history: 4 messages$",
    ],
    "raptor_folder.py": [
        r"summaries_written=[1-9]",
        r"^raptor_traversal: \d+ nodes from levels \[0, 1",
    ],
    "routing_two_sources.py": [r"route: food \(", r"route: tech \("],
    "quickstart.py": [r"^A: ", r"^  - Milvus: "],
    "serve_clients.py": [
        r"^models: hybrid_convex, ",
        r"^answer: Milvus is an open-source vector database",
        r"^cited \[1\]: Milvus$",
        r"^mcp search: Sourdough, ",
    ],
    "chinese_documents.py": [
        r"^bm25: auto v1 \(chunks per language: zh 3, ",
        r"^RAPTOR 为什么要先降维再聚类？ -> RAPTOR 树状检索 \(zh\)$",
        r"^Milvus 怎么把两路检索结果融合起来？ -> Milvus 混合检索 \(zh\)$",
        r"^ツチブタは何を食べますか？ -> ツチブタ \(ja\)$",
        r"^What do aardvarks eat\? -> Aardvark \(en\)$",
        r"RAPTOR 先把文档切成文本块.*\[1\]",
    ],
}


def test_every_example_is_checked() -> None:
    assert set(SCRIPTS) == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs_offline(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, embed_model: Any
) -> None:
    from llama_index.core import Settings

    from llama_index_rag_pack.testing import ScriptedLLM

    monkeypatch.syspath_prepend(str(EXAMPLES))  # the scripts import their _common.py
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [script, "--data-dir", str(tmp_path / "data")])
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding", lambda *a: embed_model
    )
    monkeypatch.setattr(Settings, "_llm", ScriptedLLM(default_reply="Milvus is a database."))
    if script == "quickstart.py":
        monkeypatch.setattr(sys, "argv", [script])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capsys.readouterr().out
    for pattern in EXPECTED[script]:
        assert re.search(pattern, out, flags=re.M), f"{pattern!r} not in:\n{out}"
