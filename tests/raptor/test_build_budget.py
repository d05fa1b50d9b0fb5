"""A RAPTOR build's spend: the estimate made without the LLM, the call and token budgets that stop
a build cleanly (and the resume that ends with the tree of a build never stopped), the tokens in
``BuildStats``, and one instrumentation span per level. Real Milvus Lite and the bundled
embedding model; the LLM is scripted (its tokens are counted with the tokenizer)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.schema import TextNode
from test_build_progress import OPTIONS, _links, documents, shape, summary, tree_at

from llama_index_rag_pack import cli
from llama_index_rag_pack.core.errors import CollectionNotFoundError, ConfigurationError
from llama_index_rag_pack.pack.raptor import open_raptor_store
from llama_index_rag_pack.raptor.build_budget import (
    BudgetReachedError,
    SpendGate,
    Spent,
    check_prices,
)
from llama_index_rag_pack.raptor.raptor_summaries import (
    DEFAULT_SUMMARY_PROMPT,
    Summariser,
    SummaryJob,
)
from llama_index_rag_pack.raptor.spend_estimate import report_lines, spend_ceiling
from llama_index_rag_pack.testing import ScriptedLLM


# ---------------------------------------------------------------------- the gate, pure
def test_the_call_budget_is_exact_under_concurrent_requests() -> None:
    gate = SpendGate(max_llm_calls=37)
    with ThreadPoolExecutor(8) as pool:
        admitted = list(pool.map(lambda _: gate.admit(), range(200)))
    assert sum(admitted) == 37 and gate.started == 37 and gate.reached


def test_the_token_budget_refuses_once_the_spent_tokens_reach_it() -> None:
    spent = [Spent()]
    gate = SpendGate(max_tokens=100, spent=lambda: spent[0])
    assert gate.admit()
    spent[0] = Spent(1, 60, 39)
    assert gate.admit(), "99 tokens spent: one more may start"
    spent[0] = Spent(2, 70, 30)
    assert not gate.admit() and gate.reached


@pytest.mark.parametrize(
    ("calls", "tokens"), [(0, None), (-1, None), (None, 0), ("3", None), (True, None), (2.5, None)]
)
def test_budgets_must_be_positive_integers(tmp_path: Any, calls: Any, tokens: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_llm_calls|max_tokens"):
        tree_at(tmp_path / "x.db", "no-such-model", None, max_llm_calls=calls, max_tokens=tokens)


@pytest.mark.parametrize("price", [-1.0, float("nan"), "1", True])
def test_prices_must_be_numbers_at_least_zero(price: Any) -> None:
    with pytest.raises(ConfigurationError, match="price_in"):
        check_prices(price, None)


def test_the_ceiling_halves_each_level() -> None:
    assert spend_ceiling(1, max_levels=5, min_compression=2.0, per_call_input=10) == (0, 0)
    assert spend_ceiling(8, max_levels=2, min_compression=2.0, per_call_input=10) == (6, 60)


def test_a_refused_request_is_not_sent_nor_retried() -> None:
    llm = ScriptedLLM(replies=lambda p: "A summary.")
    summariser = Summariser(
        llm,
        DEFAULT_SUMMARY_PROMPT,
        max_concurrency=2,
        max_retries=3,
        retry_backoff=0.0,
        rng=random.Random(0),
        gate=SpendGate(max_llm_calls=2),
    )
    jobs = [SummaryJob(f"s{i}", 1, [TextNode(text=f"Text {i}.")] * 2, i) for i in range(5)]
    batch = summariser.summarise(jobs)
    outcomes = list(batch.outcomes.values())
    assert batch.llm_calls == 2 == llm.call_count
    assert sum(isinstance(o, str) for o in outcomes) == 2
    assert sum(isinstance(o, BudgetReachedError) for o in outcomes) == 3


# ---------------------------------------------------------------------- builds
@pytest.mark.slow
@pytest.mark.parametrize("run_async", [False, True])
async def test_a_build_stopped_at_its_call_budget_resumes_to_the_uninterrupted_tree(
    tmp_path: Any, embed_model: Any, run_async: bool
) -> None:
    whole = tree_at(tmp_path / "whole.db", embed_model, ScriptedLLM(replies=summary))
    estimate = whole.estimate(documents())
    stats = await whole.abuild(documents()) if run_async else whole.build(documents())
    assert stats.complete and not stats.stopped_at_budget
    assert stats.estimate is estimate and estimate.calls == stats.llm_calls
    assert stats.prompt_tokens > 0 and stats.completion_tokens > 0 and stats.tokens_counted
    assert sum(lv.calls for lv in stats.per_level.values()) == stats.llm_calls

    budget = max(1, stats.llm_calls // 2)
    llm = ScriptedLLM(replies=summary)
    tree = tree_at(tmp_path / "stopped.db", embed_model, llm, max_llm_calls=budget)
    first = await tree.abuild(documents()) if run_async else tree.build(documents())
    assert first.stopped_at_budget and not first.complete
    assert first.llm_calls == budget == llm.call_count, "no call past the budget"
    assert first.summaries_written >= budget, "what was written is stored"

    left = tree.estimate()
    assert left.calls == stats.llm_calls - budget, "the estimate counts only what is left"
    assert left.levels[0].reused >= 1
    assert llm.call_count == budget, "estimating calls no LLM"

    tree.max_llm_calls = None
    resumed = await tree.aresume() if run_async else tree.resume()
    assert resumed.complete and resumed.llm_calls == stats.llm_calls - budget
    assert shape(tree) == shape(whole)
    assert _links(tree) == _links(whole)


@pytest.mark.slow
def test_a_build_right_after_an_estimate_clusters_the_chunks_once(
    tmp_path: Any, embed_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_index_rag_pack.raptor import level_clustering

    clustered: list[int] = []
    real = level_clustering.cluster_embeddings

    def counted(embeddings: Any, **kwargs: Any) -> Any:
        clustered.append(len(embeddings))
        return real(embeddings, **kwargs)

    monkeypatch.setattr(level_clustering, "cluster_embeddings", counted)
    tree = tree_at(tmp_path / "once.db", embed_model, ScriptedLLM(replies=summary))
    tree.estimate(documents())
    chunks = clustered[0]
    tree.build(documents())
    assert clustered.count(chunks) == 1, clustered


@pytest.mark.slow
def test_the_packs_estimate_writes_nothing_and_its_first_level_is_what_the_build_spends(
    tmp_path: Any, embed_model: Any
) -> None:
    from llama_index_rag_pack import RagPack

    llm = ScriptedLLM(replies=summary)
    uri = str(tmp_path / "pack.db")
    pack = RagPack(documents(), uri=uri, collection_name="p", embed_model=embed_model, llm=llm)
    estimate = pack.estimate_raptor_tree(**OPTIONS)
    assert estimate.calls >= 1 and llm.call_count == 0
    with pytest.raises(CollectionNotFoundError):  # no tree collection was created
        open_raptor_store(uri, "p", dim=384, must_exist=True)
    stats = pack.build_raptor_tree(**OPTIONS)
    assert (
        stats.per_level[1].calls
        == estimate.levels[0].calls
        == llm.call_count - sum(lv.calls for level, lv in stats.per_level.items() if level > 1)
    )


def test_a_budget_set_after_construction_is_checked_when_the_build_starts(
    tmp_path: Any, embed_model: Any
) -> None:
    llm = ScriptedLLM(replies=summary)
    tree = tree_at(tmp_path / "late.db", embed_model, llm)
    tree.max_llm_calls = "5"
    with pytest.raises(ConfigurationError, match="max_llm_calls"):
        tree.build(documents())
    assert llm.call_count == 0


@pytest.mark.slow
def test_the_token_budget_stops_the_build_once_reached(tmp_path: Any, embed_model: Any) -> None:
    llm = ScriptedLLM(replies=summary)
    tree = tree_at(tmp_path / "t.db", embed_model, llm, max_tokens=150, max_concurrency=1)
    stats = tree.build(documents())
    assert stats.stopped_at_budget
    # one request at a time: the last one started below the cap, and none after it
    per_call = stats.total_tokens / stats.llm_calls
    assert stats.total_tokens >= 150 and stats.total_tokens - per_call * 1.5 < 150
    assert "tokens" in "\n".join(report_lines(stats))


class _Spans(SimpleSpanHandler):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("run_async", [False, True])
async def test_each_level_built_opens_one_span_under_the_build(
    tmp_path: Any, embed_model: Any, run_async: bool
) -> None:
    handler = _Spans()
    root = get_dispatcher()
    root.add_span_handler(handler)
    try:
        tree = tree_at(tmp_path / "s.db", embed_model, ScriptedLLM(replies=summary))
        stats = await tree.abuild(documents()) if run_async else tree.build(documents())
    finally:
        root.span_handlers.remove(handler)
    spans = handler.completed_spans
    levels = [s for s in spans if s.id_.startswith("LevelBuilder.build_level-")]
    builds = [s for s in spans if s.id_.startswith("RaptorTree._build-")]
    assert len(levels) == len(stats.levels) - 1 >= 1
    assert len(builds) == 1 and all(s.parent_id == builds[0].id_ for s in levels)


# ---------------------------------------------------------------------- the command line
def test_cli_budget_errors_come_before_any_model_loads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was loaded")

    monkeypatch.setattr("llama_index_rag_pack.models.settings.resolve_llm", no_model)
    for flags, name in (
        (["--max-llm-calls", "0"], "max_llm_calls"),
        (["--max-tokens", "-5"], "max_tokens"),
        (["--estimate", "--price-out", "-1"], "price_out"),
    ):
        code = cli.main(["raptor", "build", *flags])
        err = capsys.readouterr().err
        assert code == 2 and name in err, err
    with pytest.raises(SystemExit):
        cli.main(["raptor", "build", "--max-llm-calls", "many"])


@pytest.mark.slow
def test_cli_estimate_then_a_build_stopped_at_its_budget(
    tmp_path: Any,
    embed_model: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = ScriptedLLM(replies=summary)
    monkeypatch.setattr("llama_index_rag_pack.models.settings.resolve_llm", lambda spec=None: llm)
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings.resolve_embed_model", lambda spec=None: embed_model
    )
    folder = tmp_path / "docs"
    folder.mkdir()
    for doc in documents():
        (folder / f"{doc.doc_id}.txt").write_text(doc.text)
    base = ["--uri", str(tmp_path / "m.db"), "--collection", "c", "raptor", "build", str(folder)]
    estimate = [*base, "--estimate", "--price-in", "0.15", "--price-out", "0.6"]
    code = cli.main([*estimate, "--max-llm-calls", "2"])
    out = capsys.readouterr().out
    assert code == 0 and llm.call_count == 0
    assert "clustering of the 24 chunks" in out and "cost" in out and "ceiling" in out
    assert "budget  : 2 of the" in out  # where the budget would stop the build
    with pytest.raises(CollectionNotFoundError):  # the estimate created no tree
        open_raptor_store(str(tmp_path / "m.db"), "c", dim=384, must_exist=True)
    code = cli.main([*base, "--max-llm-calls", "2"])
    out = capsys.readouterr().out
    assert code == 0 and llm.call_count == 2
    assert "Budget reached: 2 LLM calls" in out and "rag-pack raptor build" in out
    assert "actual / estimate" in out
    code = cli.main(base)
    out = capsys.readouterr().out
    assert code == 0 and "Budget reached" not in out and "Ask with" in out
