"""Tracing: the pack's steps as LlamaIndex instrumentation spans, and what an OpenTelemetry
exporter (Phoenix, Langfuse) gets through ``openinference-instrumentation-llama-index``.

* one ``pack.run``, exported with OpenTelemetry's in-memory exporter: one tree under the query,
  the search legs, the fusion, the rerank and the LLM (with its token counts) in it;
* every registered retrieval mode (but the RAPTOR ones, traced by their own tests), sync and
  async: its component spans, all under the one root of the query;
* the judge and text-to-SQL engines: their steps;
* work handed to a thread pool runs in the caller's context (spans keep their parent there).
"""

from __future__ import annotations

import asyncio
import contextvars
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.pack.modes import get_mode, mode_names
from llama_index_rag_pack.pack.routed import RoutedRagPack, RouteSource
from llama_index_rag_pack.rerank.reranker_base import PackReranker
from llama_index_rag_pack.sql.sql_execution import run_before
from llama_index_rag_pack.testing import ScriptedLLM

QUESTION = "Which ranking function do search engines use for keyword matches?"
TOPICS = {
    "search": [
        "Okapi BM25 is a ranking function search engines use to score keyword matches.",
        "An inverted index maps every word to the documents that contain it.",
        "Dense retrieval embeds queries and passages into one vector space.",
    ],
    "food": [
        "Bread dough rises because yeast ferments sugar and releases carbon dioxide.",
        "Fresh pasta needs only flour and eggs, kneaded until the dough is smooth.",
    ],
}
USAGE = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}


def reply(prompt: str) -> str:
    """Replies shaped like a small model's, for every prompt the modes send."""
    lowered = prompt.lower()
    if "search queries" in lowered:
        return "1. keyword ranking function\n2. how search engines score matches\n3. BM25"
    if "passage" in lowered:
        return "Passage: search engines rank keyword matches with BM25."
    if "filter" in lowered or "json" in lowered:
        return '{"query": "ranking function", "filter": null}'
    return "BM25 ranks keyword matches [1](id=1)."


class UsageLLM(CustomLLM):
    """An LLM that reports its token usage the way OpenAI-compatible clients do (``raw``'s
    ``usage``, and the counts in ``additional_kwargs``)."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="usage-llm", is_chat_model=False)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return CompletionResponse(
            text=reply(prompt), raw={"usage": dict(USAGE)}, additional_kwargs=dict(USAGE)
        )

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError


class LengthReranker(PackReranker):
    """Longer chunks first (a reranker without a model)."""

    def _score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [float(len(t)) for t in texts]


def _documents() -> list[Any]:
    from llama_index.core import Document

    return [
        Document(id_=f"{topic}-{i}", text=text, metadata={"title": f"{topic} {i}", "topic": topic})
        for topic, texts in TOPICS.items()
        for i, text in enumerate(texts)
    ]


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    uri = str(Path(tmp_path_factory.mktemp("tracing")) / "milvus.db")
    return RagPack(
        _documents(),
        uri=uri,
        collection_name="tracing",
        embed_model=embed_model,
        llm=ScriptedLLM(replies=reply),
        similarity_top_k=3,
    )


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RoutedRagPack:
    uri = str(Path(tmp_path_factory.mktemp("tracing_routed")) / "milvus.db")
    docs = _documents()
    sources = [
        RouteSource(
            topic,
            f"Documents about {topic}",
            (texts[0],),
            collection_name=f"tracing_{topic}",
            documents=[d for d in docs if d.doc_id.startswith(topic)],
        )
        for topic, texts in TOPICS.items()
    ]
    return RoutedRagPack(sources, uri=uri, embed_model=embed_model, similarity_top_k=3)


# ----------------------------------------------------------------------------- span trees
def _traced(call: Callable[[], Any]) -> list[Any]:
    """The spans ``call`` opened, seen by a handler on the root dispatcher."""
    dispatcher = get_dispatcher()
    handler = SimpleSpanHandler()
    dispatcher.add_span_handler(handler)
    try:
        call()
    finally:
        dispatcher.span_handlers.remove(handler)
    return handler.completed_spans + handler.dropped_spans


def _name(span: Any) -> str:
    return span.id_.partition("-")[0]


def _one_tree(spans: list[Any]) -> Any:
    """The root of ``spans``, checked to be the only one and every span's ancestor."""
    by_id = {s.id_: s for s in spans}
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1, [_name(r) for r in roots]
    for span in spans:
        chain = span
        while chain.parent_id is not None:
            assert chain.parent_id in by_id, f"{_name(span)} has a parent outside this query"
            chain = by_id[chain.parent_id]
    return roots[0]


#: The pack's own spans each mode opens (sync names; the async path's are ``a``-prefixed where
#: the step has an async twin).
EXPECTED = {
    "vector": {"CheckedVectorIndexRetriever.retrieve"},
    "bm25": {"MilvusHybridRetriever.bm25_search"},
    "hybrid": {"MilvusHybridRetriever.hybrid_search"},
    "hybrid_weighted": {"MilvusHybridRetriever.hybrid_search"},
    "hybrid_convex": {
        "MilvusScoreFusionRetriever.bm25_search",
        "MilvusScoreFusionRetriever.dense_search",
        "MilvusScoreFusionRetriever.sentence_search",
        "MilvusScoreFusionRetriever.fuse_scores",
        "MilvusScoreFusionRetriever.read_chunks",
    },
    "fusion": {
        "FusionRetriever.generate_queries",
        "MilvusHybridRetriever.retrieve",
        "MilvusHybridRetriever.dense_search",
        "MilvusHybridRetriever.bm25_search",
        "FusionRetriever.fuse_ranks",
    },
    "hyde": {"HyDERetriever.write_passages", "MilvusScoreFusionRetriever.fuse_scores"},
    "rewrite": {"RewriteRetriever.rewrite", "MilvusScoreFusionRetriever.fuse_scores"},
    "self_query": {"SelfQueryRetriever.parse", "MilvusScoreFusionRetriever.fuse_scores"},
    "route": {"FusionRouterRetriever.select", "FusionRouterRetriever.fuse_routes"},
}
ASYNC_TWINS = {
    "retrieve", "generate_queries", "write_passages", "rewrite", "parse", "select"
}  # fmt: skip
MODES = [m for m in mode_names() if not get_mode(m).needs_tree]


def _async_names(names: set[str]) -> set[str]:
    out = set()
    for name in names:
        cls, _, method = name.partition(".")
        out.add(f"{cls}.a{method}" if method in ASYNC_TWINS else name)
    return out


def test_every_mode_but_raptor_has_its_expected_spans() -> None:
    assert set(MODES) >= set(EXPECTED)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_each_mode_opens_its_component_spans_under_one_root(
    mode: str, path: str, request: pytest.FixtureRequest
) -> None:
    chosen = request.getfixturevalue("routed" if get_mode(mode).needs_sources else "pack")
    retriever = chosen.retriever(mode)
    retriever.retrieve(QUESTION)  # built and read into memory outside the trace
    if path == "sync":
        spans = _traced(lambda: retriever.retrieve(QUESTION))
    else:
        spans = _traced(lambda: asyncio.run(retriever.aretrieve(QUESTION)))
    root = _one_tree(spans)
    entry = "retrieve" if path == "sync" else "aretrieve"
    assert _name(root) == f"{type(retriever).__name__}.{entry}"
    expected = EXPECTED.get(mode, set())
    names = {_name(s) for s in spans}
    missing = (expected if path == "sync" else _async_names(expected)) - names
    assert not missing, sorted(names)


@pytest.mark.slow
def test_a_rag_fusion_variant_searched_in_a_worker_thread_keeps_its_parent(pack: RagPack) -> None:
    retriever = pack.retriever("fusion")
    assert retriever.max_concurrency > 1  # the variants are searched in a thread pool
    spans = _traced(lambda: retriever.retrieve(QUESTION))
    by_id = {s.id_: s for s in spans}
    variants = [s for s in spans if _name(s) == "MilvusHybridRetriever.retrieve"]
    assert len(variants) == retriever.num_queries * len(retriever.retrievers)
    assert {_name(by_id[s.parent_id]) for s in variants} == {"FusionRetriever._retrieve"}


def test_the_sql_worker_thread_runs_in_the_callers_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")
    token = var.set("question")
    try:
        seen = run_before(time.monotonic() + 10, lambda handle: var.get())
    finally:
        var.reset(token)
    assert seen == "question"


# ----------------------------------------------------------------------------- engines
@pytest.fixture
def shop_db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE items (name TEXT, price REAL);"
            "INSERT INTO items VALUES ('pen', 1.5), ('ink', 4.0);"
        )
    conn.close()
    return path


@pytest.mark.parametrize("path", ["sync", "async"])
def test_the_sql_engine_traces_generation_check_execution_and_answer(
    shop_db: Path, path: str
) -> None:
    from llama_index_rag_pack.sql.sql_query_engine import SQLQueryEngine

    llm = ScriptedLLM(replies=["SELECT max(price) AS top FROM items", "4.0 [1](id=1)"])
    engine = SQLQueryEngine(shop_db, ["items"], llm=llm, sample_rows=0)
    engine.descriptions()  # the schema is read before the question
    if path == "sync":
        spans = _traced(lambda: engine.query("Most expensive item?"))
    else:
        spans = _traced(lambda: asyncio.run(engine.aquery("Most expensive item?")))
    _one_tree(spans)
    a = "" if path == "sync" else "a"
    names = {_name(s) for s in spans}
    assert {
        f"SQLQueryEngine.{a}generate_sql",
        "SafeSQLDatabase.run",
        "SafeSQLDatabase.check",
        f"SQLQueryEngine.{a}write_answer",
    } <= names, sorted(names)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["sync", "async"])
def test_the_judge_engine_traces_each_step(pack: RagPack, path: str) -> None:
    def judge(prompt: str) -> str:
        if "<document id=" in prompt:
            return "BM25 ranks keyword matches [1](id=1)."
        if "BM25" in prompt:
            return '{"score": 2}'
        return '{"score": 1, "follow_up": "What is Okapi BM25?"}'

    engine = pack.make_judge_query_engine("bm25", max_depth=1)
    engine._llm = ScriptedLLM(replies=judge)  # noqa: SLF001 - a test's scripted judge
    if path == "sync":
        spans = _traced(lambda: engine.query(QUESTION))
    else:
        spans = _traced(lambda: asyncio.run(engine.aquery(QUESTION)))
    _one_tree(spans)
    a = "" if path == "sync" else "a"
    names = [_name(s) for s in spans]
    for step in ("search_step", "judge_chunk", "write_answer"):
        assert f"JudgeQueryEngine.{a}{step}" in names, sorted(set(names))


# ----------------------------------------------------------------------------- OpenTelemetry
@pytest.fixture
def exported() -> Iterator[Any]:
    """Spans exported by OpenTelemetry's in-memory exporter through the OpenInference
    instrumentor (uninstrumented after the test)."""
    pytest.importorskip("openinference.instrumentation.llama_index")
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


@pytest.mark.slow
def test_one_question_exports_one_tree_with_legs_fusion_rerank_and_token_counts(
    pack: RagPack, exported: Any
) -> None:
    llm = UsageLLM()
    traced = RagPack.open(
        uri=pack.uri,
        collection_name="tracing",
        embed_model=pack.embed_model,
        llm=llm,
        rerank=LengthReranker(),
        similarity_top_k=3,
    )
    traced.retriever().retrieve(QUESTION)  # built and read into memory outside the trace
    exported.clear()
    response = traced.run(QUESTION, answer_style="generative")
    assert "BM25" in str(response)
    spans = exported.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    ids = {s.context.span_id for s in spans}
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["CitedQueryEngine.query"]
    assert all(s.parent.span_id in ids for s in spans if s.parent is not None)
    names = {s.name for s in spans}
    assert {
        "MilvusScoreFusionRetriever.bm25_search",
        "MilvusScoreFusionRetriever.dense_search",
        "MilvusScoreFusionRetriever.sentence_search",
        "MilvusScoreFusionRetriever.fuse_scores",
        "LengthReranker._postprocess_nodes",
        "LocalEmbedding.get_query_embedding",
    } <= names, sorted(names)
    counted = [s for s in spans if s.attributes.get("llm.token_count.total") is not None]
    assert counted, sorted(names)
    attributes = counted[0].attributes
    assert counted[0].name.startswith("UsageLLM.")
    assert (
        attributes["llm.token_count.prompt"],
        attributes["llm.token_count.completion"],
        attributes["llm.token_count.total"],
    ) == (42, 7, 49)
