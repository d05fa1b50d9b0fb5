"""EvalHarness over real Milvus Lite and the real embedding model, with scripted LLMs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import Document, NodeWithScore, QueryBundle
from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.evaluation.answers import clean_prediction
from llama_index_rag_pack.evaluation.harness import EvalHarness
from llama_index_rag_pack.evaluation.labelled import LabelledExample, LabelledSet
from llama_index_rag_pack.evaluation.scoring import evidence_in_text, node_doc_ids
from llama_index_rag_pack.evaluation.strategies import register_strategy, resolve_strategies
from llama_index_rag_pack.pack.modes import RetrievalMode, register_mode, unregister_mode
from llama_index_rag_pack.pack.rag_pack import RagPack

DOCS = {
    "doc:aardvark": (
        "The aardvark is a burrowing nocturnal mammal native to Africa. It feeds almost "
        "exclusively on ants and termites, which it digs out with strong claws."
    ),
    "doc:apollo": (
        "Apollo 11 was the spaceflight that first landed humans on the Moon. Neil Armstrong "
        "and Buzz Aldrin landed the lunar module Eagle on 20 July 1969."
    ),
    "doc:abacus": (
        "The abacus is a calculating tool used in Europe, China and Russia centuries before "
        "the adoption of the Hindu-Arabic numeral system."
    ),
    "doc:alchemy": (
        "Alchemy is a philosophical and protoscientific tradition. The writings attributed "
        "to Hermes Trismegistus are a primary source of alchemical theory."
    ),
    "doc:asphalt": (
        "Asphalt is a sticky, black and highly viscous liquid form of petroleum, used mainly "
        "in road construction as the glue for aggregate particles."
    ),
    "doc:aikido": (
        "Aikido is a Japanese martial art developed by Morihei Ueshiba as a synthesis of his "
        "martial studies, philosophy and religious beliefs."
    ),
}

QUESTIONS = [
    (
        "q1",
        "Which nocturnal African mammal digs out termites with its claws?",
        "aardvark",
        "doc:aardvark",
        "It feeds almost exclusively on ants and termites, which it digs out with strong claws.",
    ),
    (
        "q2",
        "In what year did the lunar module Eagle land on the Moon?",
        "1969",
        "doc:apollo",
        "Neil Armstrong and Buzz Aldrin landed the lunar module Eagle on 20 July 1969.",
    ),
    (
        "q3",
        "What calculating tool was used in China before Hindu-Arabic numerals?",
        "abacus",
        "doc:abacus",
        "The abacus is a calculating tool used in Europe, China and Russia centuries before the "
        "adoption of the Hindu-Arabic numeral system.",
    ),
    (
        "q4",
        "The writings attributed to whom are a primary source of alchemical theory?",
        "Hermes Trismegistus",
        "doc:alchemy",
        "The writings attributed to Hermes Trismegistus are a primary source of alchemical theory.",
    ),
    (
        "q5",
        "What black viscous petroleum liquid is used in road construction?",
        "asphalt",
        "doc:asphalt",
        "Asphalt is a sticky, black and highly viscous liquid form of petroleum, used mainly in "
        "road construction as the glue for aggregate particles.",
    ),
    (
        "q6",
        "Who developed the Japanese martial art aikido?",
        "Morihei Ueshiba",
        "doc:aikido",
        "Aikido is a Japanese martial art developed by Morihei Ueshiba as a synthesis of his "
        "martial studies, philosophy and religious beliefs.",
    ),
]


def make_set() -> LabelledSet:
    return LabelledSet(
        "tiny",
        [
            LabelledExample(
                id=i, question=q, answers=(a,), relevant_ids=(d,), evidence=(e,), type="t"
            )
            for i, q, a, d, e in QUESTIONS
        ],
        corpus="custom",
    )


def documents() -> list[Document]:
    return [Document(id_=k, text=v, metadata={"title": k}) for k, v in DOCS.items()]


@pytest.fixture(scope="module")
def index_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One index of the tiny corpus for the whole module (result caches stay per test)."""
    return tmp_path_factory.mktemp("eval-index")


@pytest.fixture()
def harness_factory(tmp_path: Path, index_cache: Path, embed_model: Any):
    def make(dataset: LabelledSet | None = None, **kwargs: Any) -> EvalHarness:
        kwargs.setdefault("cache_dir", index_cache)
        kwargs.setdefault("results_dir", tmp_path / "results")
        kwargs.setdefault("top_k", 5)
        kwargs.setdefault("ks", (1, 3, 5))
        kwargs.setdefault("llm", "none")
        return EvalHarness(
            dataset or make_set(), documents=documents(), embed_model=embed_model, **kwargs
        )

    return make


class WorstFirstRetriever(BaseRetriever):
    """Dense search, then the ranking reversed: relevant documents end up last."""

    def __init__(self, inner: BaseRetriever) -> None:
        super().__init__()
        self._inner = inner

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return list(reversed(self._inner.retrieve(query_bundle)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return list(reversed(await self._inner.aretrieve(query_bundle)))


@pytest.fixture
def worst_first_mode() -> Iterator[str]:
    """A mode added through the registry: the vector ranking, reversed."""

    def build(pack: RagPack, similarity_top_k: int | None = None) -> BaseRetriever:
        return WorstFirstRetriever(pack.index.as_retriever(similarity_top_k=6))

    register_mode("worst_first", build, description="vector, worst first")
    yield "worst_first"
    unregister_mode("worst_first")


@pytest.mark.slow
def test_dense_and_bm25_find_the_relevant_documents(harness_factory) -> None:
    report = harness_factory().run("dense,sparse")
    rows = {r.strategy.name: r for r in report.rows}
    assert set(rows) == {"vector", "bm25"}
    for row in rows.values():
        assert row.status == "ok", row.note
        assert row.n == 6
        assert (
            row.metrics["recall@5"] == 1.0
        )  # 6 documents, top 5: every question finds its document
        assert row.metrics["recall@1"] >= 5 / 6
        assert row.metrics["mrr@5"] >= row.metrics["recall@1"]
        assert row.metrics["evidence@5"] == 1.0  # each document is one chunk holding its sentence
        assert row.metrics["answer_in_context@5"] == 1.0
        assert row.metrics["latency_ms"] > 0


@pytest.mark.slow
def test_a_worse_ranking_scores_worse_and_is_not_served_from_cache(
    harness_factory, worst_first_mode: str
) -> None:
    good = harness_factory().run("vector").rows[0]
    bad = harness_factory().run(worst_first_mode).rows[0]
    assert bad.status == "ok", bad.note
    assert bad.cached == 0  # another retriever builder: another cache key
    assert bad.metrics["recall@1"] < good.metrics["recall@1"]
    assert bad.metrics["mrr@5"] < 0.5 < good.metrics["mrr@5"]


@pytest.mark.slow
def test_results_are_cached_per_strategy_and_question(harness_factory) -> None:
    first = harness_factory().run("vector,bm25")
    assert [r.cached for r in first.rows] == [0, 0]
    again = harness_factory().run("vector,bm25")
    assert [r.cached for r in again.rows] == [6, 6]
    assert [r.metrics for r in again.rows] == [r.metrics for r in first.rows]
    # throughput of the run that computed them is kept with the cached results
    assert again.rows[0].metrics["ms_per_query"] == first.rows[0].metrics["ms_per_query"] > 0

    # one question edited: only it is recomputed
    data = make_set()
    edited = data.examples[0]
    data.examples[0] = LabelledExample(
        id=edited.id,
        question="Which African mammal eats ants?",
        answers=edited.answers,
        relevant_ids=edited.relevant_ids,
        evidence=edited.evidence,
    )
    changed = harness_factory(data).run("vector")
    assert changed.rows[0].cached == 5

    # another configuration of the same mode has its own cache entry
    register_strategy("hybrid_rrf1", "hybrid", rrf_k=1.0)
    base, variant = harness_factory().run("hybrid,hybrid_rrf1").rows
    assert base.cached == 0 and variant.cached == 0
    assert harness_factory().run("hybrid_rrf1").rows[0].cached == 6

    assert harness_factory(force=True).run("vector").rows[0].cached == 0


@pytest.mark.slow
async def test_async_path_matches_sync_path(harness_factory) -> None:
    sync = harness_factory(force=True).run("vector,hybrid")
    asyn = await harness_factory(force=True, concurrency=3).arun("vector,hybrid")
    for a, b in zip(sync.rows, asyn.rows, strict=True):
        for key in ("recall@1", "recall@5", "mrr@5", "ndcg@5", "evidence@5"):
            assert a.metrics[key] == pytest.approx(b.metrics[key])


FUSION_REPLY = (
    "Sure! Here are some search queries:\n"
    '1. "african mammal that eats termites"\n'
    "2. lunar module Eagle landing year\n"
    "3) Hermes Trismegistus alchemy"
)


@pytest.mark.slow
async def test_llm_strategy_uses_async_llm_and_llm_limit(harness_factory, scripted_llm) -> None:
    llm = scripted_llm(lambda prompt: FUSION_REPLY, forbid_sync=True)
    harness = harness_factory(llm=llm, llm_limit=3, concurrency=2)
    report = await harness.arun("vector,fusion")
    vector, fusion = report.rows
    assert fusion.status == "ok", fusion.note
    assert fusion.llm.startswith("ScriptedLLM")
    assert fusion.n == 3 and vector.n == 6
    assert llm.call_count >= 3  # the query variants came from the (async) LLM
    assert fusion.metrics["recall@5"] == 1.0
    md = report.to_markdown()
    assert "fusion [LLM: ScriptedLLM" in md
    assert "Same 3 questions for every strategy" in md
    shared = report.shared_metrics()
    assert set(shared) == {"vector", "fusion"}


@pytest.mark.slow
def test_llm_strategies_are_skipped_without_an_llm(harness_factory) -> None:
    report = harness_factory(llm="none", limit=2).run("all")
    names = [r.strategy.name for r in report.rows]
    assert names[: len(RetrievalMode)] == [m.value for m in RetrievalMode]
    rows = {r.strategy.name: r for r in report.rows}
    assert rows["vector"].status == "ok"
    for name in ("fusion", "hyde", "rewrite"):
        assert rows[name].status == "skipped"
        assert "needs an LLM" in rows[name].note and "RAG_PACK_LLM=none" in rows[name].note
    for name in ("raptor", "raptor_traversal"):
        # no tree was built over the evaluation index: skipped, with the command that builds one
        assert rows[name].status == "skipped"
        assert "raptor build" in rows[name].note and "--collection eval_custom_" in rows[name].note
    skipped = {"fusion", "hyde", "rewrite", "raptor", "raptor_traversal"}
    assert all(rows[name].status == "ok" for name in ("bm25", "hybrid", "hybrid_weighted"))
    md = report.to_markdown()
    assert "Not run:" in md
    for name in skipped:
        assert f"- `{name}` (skipped): " in md


@pytest.mark.slow
def test_answers_are_scored_with_em_and_f1(harness_factory, scripted_llm) -> None:
    answers = {
        "mammal": "Answer: The aardvark.",
        "lunar": "1969",
        "calculating": '"abacus"',
        "alchemical": "Hermes",
        "petroleum": "bitumen",
        "martial": "It was Morihei Ueshiba",
    }

    def reply(prompt: str) -> str:
        question = prompt.rsplit("Question:", 1)[1]
        return next(v for k, v in answers.items() if k in question)

    llm = scripted_llm(reply)
    row = harness_factory(llm=llm, answers=True, answer_top_k=2).run("vector").rows[0]
    assert llm.call_count == 6
    # exact: aardvark, 1969, abacus -> 3/6; F1 adds Hermes (2/3) and Ueshiba (2 of 4 tokens: 2/3)
    assert row.metrics["em"] == pytest.approx(3 / 6)
    assert row.metrics["f1"] == pytest.approx((3 + 2 / 3 + 0 + 2 * (2 / 4) / (2 / 4 + 1)) / 6)
    prompts = llm.prompts
    assert "Context:" in prompts[0] and "Question:" in prompts[0]


def _outcome(report: Any) -> dict[str, Any]:
    """Per strategy: what each question retrieved (ids, documents, scores) and the metrics,
    leaving out timings."""
    timings = {"latency_ms", "ms_per_query"}
    return {
        row.strategy.name: (
            {
                qid: [(n["node_id"], n["doc_ids"], n["score"]) for n in result["retrieved"]]
                for qid, result in row.results.items()
            },
            {k: v for k, v in row.metrics.items() if k not in timings},
        )
        for row in report.rows
    }


@pytest.mark.slow
async def test_two_fresh_builds_give_identical_results(tmp_path: Path, embed_model: Any) -> None:
    """Two evaluations from scratch (new cache directories, so new indexes) agree exactly.

    Hybrid (RRF) search gives equal scores to a chunk ranked r-th by one retriever only and one
    ranked r-th by the other only; Milvus orders such ties by primary key. The tiny corpus has
    such ties under the exact-word (``standard``) BM25 analysis, so the ranking is only
    reproducible when a rebuild gives chunks the same ids.
    """

    def standard_bm25_pack(docs: Any, **kwargs: Any) -> Any:
        if docs is None:
            return RagPack.open(**kwargs)
        return RagPack(docs, bm25_analyzer="standard", **kwargs)

    outcomes = []
    for build in ("first", "second"):
        harness = EvalHarness(
            make_set(),
            documents=documents(),
            embed_model=embed_model,
            pack_factory=standard_bm25_pack,
            cache_dir=tmp_path / build,
            top_k=5,
            ks=(1, 3, 5),
            llm="none",
        )
        report = await harness.arun("vector,bm25,hybrid,hybrid_weighted")
        outcomes.append(_outcome(report))
    hybrid_scores = [
        [score for _, _, score in ranked] for ranked in outcomes[0]["hybrid"][0].values()
    ]
    assert any(len(set(scores)) < len(scores) for scores in hybrid_scores)  # the tiny set has ties
    assert outcomes[0] == outcomes[1]


@pytest.mark.slow
def test_report_files(harness_factory, tmp_path: Path) -> None:
    report = harness_factory().run("vector,bm25")
    paths = report.write(tmp_path / "out")
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(paths["json"].read_text())
    assert [s["name"] for s in data["strategies"]] == ["vector", "bm25"]
    assert data["strategies"][0]["metrics"]["recall@5"] == 1.0
    md = paths["markdown"].read_text()
    assert md.splitlines()[2].startswith("| strategy | R@1 | R@5")
    assert "| vector |" in md and "| bm25 |" in md


def test_corpus_limit_keeps_questions_about_indexed_documents(
    harness_factory, tmp_path: Path
) -> None:
    harness = harness_factory(corpus_limit=2, cache_dir=tmp_path / "small")
    assert {ex.id for ex in harness.examples()} == {"q1", "q2"}
    assert harness.prepare().count() == 2


def test_validation_messages(harness_factory) -> None:
    with pytest.raises(ConfigurationError, match="top_k must be an integer >= 1, got 0"):
        harness_factory(top_k=0)
    with pytest.raises(ConfigurationError, match=r"largest k \(10\) exceeds top_k \(5\)"):
        harness_factory(ks=(1, 10))
    with pytest.raises(
        ConfigurationError, match="llm_limit must be an integer >= 1 or None, got -1"
    ):
        harness_factory(llm_limit=-1)
    with pytest.raises(ConfigurationError, match=r"Unknown strategy 'nope'; valid: all, vector"):
        resolve_strategies("vector,nope")
    with pytest.raises(ConfigurationError, match="Unknown retrieval mode 'nope'"):
        register_strategy("x", "nope")
    bad = LabelledSet("x", [LabelledExample(id="a", question="q", relevant_ids=("doc:missing",))])
    with pytest.raises(
        ConfigurationError, match="None of the 1 questions has its relevant documents"
    ):
        harness_factory(bad).prepare()


def test_helpers() -> None:
    from llama_index.core.schema import TextNode

    assert node_doc_ids(TextNode(text="x", metadata={"source_doc_ids": ["a", "b"]})) == ["a", "b"]
    assert node_doc_ids(TextNode(text="x", metadata={"doc_id": "c"})) == ["c"]
    sentence = "Neil Armstrong and Buzz Aldrin landed the lunar module Eagle on 20 July 1969."
    assert evidence_in_text("Before. " + sentence + " After.", [sentence])
    # split across chunks: this half holds the answer and most of the words
    assert evidence_in_text(
        "Buzz Aldrin landed the lunar module Eagle on 20 July 1969.", [sentence], ["1969"]
    )
    assert not evidence_in_text("Neil Armstrong and Buzz", [sentence], ["1969"])
    assert clean_prediction('Answer: "Hermes Trismegistus".\nBecause...') == "Hermes Trismegistus"
    assert clean_prediction("") == ""


def _write_corpus_and_set(
    tmp_path: Path, splits: dict[str, str] | None = None
) -> tuple[Path, Path]:
    """The tiny corpus as text files and its questions as ``mine.jsonl`` (ids are file paths)."""
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for key, text in DOCS.items():
        (corpus / f"{key.split(':')[1]}.txt").write_text(text, encoding="utf-8")
    lines = []
    for qid, question, answer, doc, _evidence in QUESTIONS:
        path = str((corpus / f"{doc.split(':')[1]}.txt").resolve())
        record = {"id": qid, "question": question, "answers": [answer], "relevant_ids": [path]}
        if splits:
            record["split"] = splits[qid]
        lines.append(json.dumps(record))
    dataset = tmp_path / "mine.jsonl"
    dataset.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return corpus, dataset


@pytest.mark.slow
def test_cli_eval_writes_table_json_and_chart(tmp_path: Path, capsys) -> None:
    from llama_index_rag_pack.cli import main

    corpus, dataset = _write_corpus_and_set(tmp_path)
    args = [
        "--llm",
        "none",
        "eval",
        "--dataset",
        str(dataset),
        "--corpus",
        str(corpus),
        "--strategies",
        "vector",
        "--top-k",
        "5",
        "--cache-dir",
        str(tmp_path / "cache"),
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| vector |"))
    header = next(line for line in out.splitlines() if line.startswith("| strategy |"))
    cells = dict(
        zip(
            [c.strip() for c in header.strip("|").split("|")],
            [c.strip() for c in row.strip("|").split("|")],
            strict=True,
        )
    )
    assert cells["R@5"] == "1.000"  # 6 documents, top 5: every question finds its document
    assert float(cells["R@1"]) >= 5 / 6 - 1e-3
    assert (tmp_path / "out" / "mine.png").exists() and (tmp_path / "out" / "mine.json").exists()
    result = json.loads((tmp_path / "out" / "mine.json").read_text())
    assert result["strategies"][0]["metrics"]["recall@5"] == 1.0
    assert main(args) == 0
    assert "vector: 6/6 questions from the cache" in capsys.readouterr().out
    assert main(["eval", "--dataset", str(tmp_path / "missing.jsonl")]) == 2
    assert "No labelled set" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_eval_split_evaluates_one_part_of_the_set(tmp_path: Path, capsys) -> None:
    from llama_index_rag_pack.cli import main

    splits = {"q1": "dev", "q2": "test", "q3": "dev", "q4": "test", "q5": "dev", "q6": "test"}
    corpus, dataset = _write_corpus_and_set(tmp_path, splits)
    args = ["--llm", "none", "eval", "--dataset", str(dataset), "--corpus", str(corpus)]
    args += ["--strategies", "bm25", "--top-k", "5", "--no-chart"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    assert main([*args, "--split", "test"]) == 0
    assert "rag-pack eval: mine-test (3 questions" in capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "mine-test.json").read_text())
    assert result["dataset"] == "mine-test" and result["n_questions"] == 3
    assert main([*args, "--split", "train"]) == 2
    assert "its splits are one of: dev, test" in capsys.readouterr().err


KEPT = ("doc:apollo", "doc:abacus", "doc:aikido")


@pytest.mark.slow
@pytest.mark.parametrize(
    "filters",
    [
        f"title in {json.dumps(list(KEPT))}",
        MetadataFilters(
            filters=[MetadataFilter(key="title", value=list(KEPT), operator=FilterOperator.IN)]
        ),
    ],
    ids=["expression", "MetadataFilters"],
)
def test_a_filtered_evaluation_asks_only_answerable_questions_and_searches_under_the_filter(
    harness_factory, filters: Any
) -> None:
    assert harness_factory().run("vector").rows[0].n == 6  # unfiltered: all, and cached
    harness = harness_factory(filters=filters)
    assert {ex.id for ex in harness.examples()} == {"q2", "q3", "q6"}
    report = harness.run("vector,bm25")
    for row in report.rows:
        assert row.status == "ok", row.note
        assert row.n == 3 and row.cached == 0  # the unfiltered results are not reused
        retrieved = [hit for r in row.results.values() for hit in r["retrieved"]]
        assert retrieved and all(set(hit["doc_ids"]) <= set(KEPT) for hit in retrieved)
        assert row.metrics["recall@3"] == 1.0  # 3 documents left: each question finds its own
    assert 'title in ["doc:apollo", "doc:abacus", "doc:aikido"]' in report.config["filters"]


def test_a_filter_that_keeps_no_question_or_names_no_field_is_one_error(harness_factory) -> None:
    with pytest.raises(ConfigurationError, match="keeps 0 documents and none of the 6"):
        harness_factory(filters='title == "doc:nowhere"').examples()
    with pytest.raises(ConfigurationError, match="The filter names 'colour', which no chunk"):
        harness_factory(filters='colour == "red"').examples()


@pytest.mark.slow
def test_cli_eval_filter(tmp_path: Path, capsys) -> None:
    from llama_index_rag_pack.cli import main

    corpus, dataset = _write_corpus_and_set(tmp_path)
    args = ["--llm", "none", "eval", "--dataset", str(dataset), "--corpus", str(corpus)]
    args += ["--strategies", "bm25,vector", "--top-k", "5", "--no-chart"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")]
    assert main([*args, "--filter", 'file_name in ["apollo.txt", "abacus.txt"]']) == 0
    out = capsys.readouterr().out
    assert "2 questions to evaluate" in out and "filter: file_name in" in out
    result = json.loads((tmp_path / "out" / "mine.json").read_text())
    assert result["n_questions"] == 2 and "file_name in" in result["config"]["filters"]
    assert main([*args, "--filter", "file_name == 'x"]) == 2  # malformed: before any model
    malformed = capsys.readouterr()
    assert "loading the corpus" not in malformed.out and len(malformed.err.splitlines()) == 1
    assert main([*args, "--filter", "colour == 'red'"]) == 2
    assert "The filter names 'colour'" in capsys.readouterr().err
