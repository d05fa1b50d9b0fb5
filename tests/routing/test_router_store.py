"""Saved routers: a SemanticSelector (and a RoutedRagPack's router) written to a file and read
back in a new process selects exactly as before, keeps its fitted thresholds and embeds no route
text again; another embedding model is refused unless asked to re-embed; bad files are one line.

The routes and questions are the routing benchmark's (benchmarks/data/routing_queries.jsonl),
with the real bundled embedding model.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.embeddings import MockEmbedding

from llama_index_rag_pack.cli import main
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.pack.routed import RoutedRagPack
from llama_index_rag_pack.pack.sources import RouteSource
from llama_index_rag_pack.routing.routes import Route
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_routing import DATA, ROUTES  # noqa: E402

ROWS = [json.loads(line) for line in DATA.read_text().splitlines()[1:] if line.strip()]
CALIB = [{"query": r["query"], "route": r["route"]} for r in ROWS if r["split"] == "calib"]
QUERIES = [r["query"] for r in ROWS]


@pytest.fixture(scope="module")
def fitted(embed_model: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    selector = SemanticSelector(ROUTES, embed_model=embed_model, top_k=2)
    selector.fit_thresholds(CALIB)
    path = selector.save(tmp_path_factory.mktemp("router") / "router.json")
    return selector, path


def _names(selector: SemanticSelector) -> list[list[str]]:
    return [selector.route(q).names for q in QUERIES]


LOADER = """
import json, sys
from llama_index_rag_pack.routing.routes import Route
from llama_index_rag_pack.routing.semantic_selector import SemanticSelector
from llama_index_rag_pack.models.settings import resolve_embed_model
model = resolve_embed_model(None)
calls = []
original = model.get_text_embedding_batch
def counted(texts, **kw):
    calls.append(len(texts))
    return original(texts, **kw)
object.__setattr__(model, "get_text_embedding_batch", counted)
selector = SemanticSelector.load(sys.argv[1], embed_model=model)
before_any_query = list(calls)
queries = json.loads(sys.stdin.read())
names = [selector.route(q).names for q in queries]
print(json.dumps({"before": before_any_query, "route_texts": selector.text_embedding_count,
                  "thresholds": selector.thresholds, "names": names}))
"""


@pytest.mark.slow
@pytest.mark.integration
def test_a_saved_router_selects_the_same_in_a_new_process_without_embedding_its_routes(
    fitted: tuple[Any, Path],
) -> None:
    selector, path = fitted
    assert selector.fitted_thresholds  # the fit moved some thresholds off the default
    done = subprocess.run(
        [sys.executable, "-c", LOADER, str(path)],
        input=json.dumps(QUERIES),
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded["before"] == [] and loaded["route_texts"] == 0  # no route text embedded
    assert loaded["thresholds"] == pytest.approx(selector.thresholds, abs=0)
    assert loaded["names"] == _names(selector)  # all 154 questions, exactly as before


@pytest.mark.slow
def test_loading_keeps_settings_and_vectors_exactly(fitted: tuple[Any, Path], embed_model) -> None:
    selector, path = fitted
    loaded = SemanticSelector.load(path, embed_model=embed_model)
    assert loaded.text_embedding_count == 0
    assert (loaded.top_k, loaded.threshold, loaded.fallback) == (2, selector.threshold, None)
    assert loaded.routes == selector.routes
    assert loaded.thresholds == selector.thresholds
    query = embed_model.get_text_embedding("Why is the sky blue?")
    assert list(loaded.scores(query)) == list(selector.scores(query))


@pytest.mark.slow
def test_another_embedding_model_is_refused_unless_reembedding(fitted: tuple[Any, Path]) -> None:
    _, path = fitted
    other = MockEmbedding(embed_dim=8)
    with pytest.raises(ConfigurationError, match="route vectors of 'all-MiniLM-L6-v2"):
        SemanticSelector.load(path, embed_model=other)
    again = SemanticSelector.load(path, embed_model=other, reembed=True)
    assert again.fitted_thresholds == {}  # fitted on the other model's scores: dropped
    again.route("What is a black hole?")
    assert again.text_embedding_count == sum(len(r.texts()) for r in ROUTES)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "No saved router at"),
        ("{not json", "not valid JSON"),
        ('{"format": "something-else"}', "is not a saved router"),
        ('{"format": "llama-index-rag-pack/semantic-router", "version": 9}', "version 9"),
        ('{"format": "llama-index-rag-pack/semantic-router", "version": 1}', "damaged"),
        (None, "no vector for route text 'Physics'"),
        (None, "damaged saved router: .*not a list of finite numbers"),
    ],
    ids=["missing", "not-json", "foreign", "version", "no-fields", "no-vector", "bad-vector"],
)
def test_bad_files_are_one_clear_error(tmp_path: Path, content: str | None, match: str) -> None:
    path = tmp_path / "router.json"
    model = MockEmbedding(embed_dim=8)
    if content is not None:
        path.write_text(content)
    elif "vector" in match or "finite" in match:  # a saved router, then damaged
        SemanticSelector(
            [Route("physics", "Physics"), Route("math", "Math")], embed_model=model
        ).save(path)
        data = json.loads(path.read_text())
        if "finite" in match:
            data["vectors"]["Math"] = ["x"] * 8
        else:
            del data["vectors"]["Physics"]
        path.write_text(json.dumps(data))
    with pytest.raises(ConfigurationError, match=match):
        SemanticSelector.load(path, embed_model=model)


def _sources() -> list[RouteSource]:
    from llama_index.core import Document

    return [
        RouteSource(
            "space",
            "Astronomy: planets, stars, the Moon",
            ("Which planet is the biggest?",),
            documents=[Document(text="Jupiter is the largest planet in the Solar System.")],
        ),
        RouteSource(
            "food",
            "Cooking: recipes, bread, onions",
            ("How do I bake bread?",),
            collection_name="food_docs",
            documents=[Document(text="Bread dough rises because yeast ferments sugar.")],
        ),
    ]


@pytest.mark.slow
def test_a_routed_pack_saves_and_loads_its_router_and_the_cli_too(
    tmp_path: Path, embed_model: Any, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding", lambda *a: embed_model
    )
    uri = str(tmp_path / "routed.db")
    pack = RoutedRagPack(_sources(), uri=uri, embed_model=embed_model, threshold=0.3)
    path = pack.save_router(tmp_path / "router.json")
    pack.load_router(path)
    assert pack.selector.text_embedding_count == 0
    assert pack.retriever("route").select("How long do onions take?").names == ["food"]
    foreign = SemanticSelector(ROUTES, embed_model=embed_model).save(tmp_path / "foreign.json")
    with pytest.raises(ConfigurationError, match="but this pack's sources are"):
        pack.load_router(foreign)
    del pack  # the CLI reopens the database in this process

    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(
        '{"_meta": "two routes"}\n'
        '{"query": "How do I knead dough?", "route": "food_docs"}\n'
        '{"query": "What is a comet?", "route": "space"}\n'
        '{"query": "Who won the 1998 world cup?", "route": null}\n'
    )
    saved = tmp_path / "cli_router.json"
    args = ["--uri", uri, "route", "How do I knead dough?"]
    assert main([*args, "--fit", str(labelled), "--save-router", str(saved)]) == 0
    first = capsys.readouterr().out
    assert "fitted thresholds on 3 queries" in first and f"router saved to {saved}" in first
    assert main([*args, "--router", str(saved)]) == 0
    second = capsys.readouterr().out
    assert "route     : food_docs" in second
    assert first.split("Q: ", 1)[1] == second.split("Q: ", 1)[1]  # the same decision and scores
    assert main([*args, "--fit", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    from llama_index_rag_pack.testing import ScriptedLLM

    llm = ScriptedLLM(default_reply="Knead it for ten minutes [1](id=1).")
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    ask = ["--uri", uri, "ask", "How do I knead dough?", "--no-stream", "--router"]
    assert main([*ask, str(saved)]) == 0  # --router alone routes
    assert "route     : food_docs" in capsys.readouterr().out
    assert main([*ask, str(tmp_path / "nowhere.json")]) == 2
    assert capsys.readouterr().err.startswith("error: No saved router at")
