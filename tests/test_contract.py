"""One contract over every retrieval mode in the registry, on real Milvus Lite and the bundled
embedding model. A mode added with ``register_mode`` is checked here without editing this file
(the ``route`` mode runs on a pack over two sources; the RAPTOR modes on a tree built with
``pack.build_raptor_tree()``).

For each mode:
- sync and async give the same nodes;
- ``similarity_top_k`` holds, scores are finite and sorted, node ids survive a reopen;
- an empty or whitespace query raises the same one-line error before any model or search runs;
- every instrumentation span of one query descends from that query's root span;
- two ``aretrieve`` calls run at the same time (a gate lets each through only once both are
  inside an embedding, LLM or Milvus call; a mode that blocks the event loop or serialises
  them never gets there);
- sequence arguments (lists or tuples) are accepted where a mode takes a sequence.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pymilvus
import pytest
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.core.errors import EMPTY_QUERY_MESSAGE, ConfigurationError
from llama_index_rag_pack.pack.modes import get_mode, mode_names
from llama_index_rag_pack.pack.routed import RoutedRagPack, RouteSource
from llama_index_rag_pack.testing import ScriptedLLM

# every mode on packs built at module scope (a RAPTOR tree, routed collections): seconds
pytestmark = pytest.mark.slow

TOP_K = 3
QUESTIONS = (
    "Which ranking function do search engines use for keyword matches?",
    "Why does bread dough rise?",
)
TOPICS = {
    "search": [
        "Okapi BM25 is a ranking function search engines use to score keyword matches.",
        "Milvus is an open-source vector database built for similarity search at scale.",
        "An inverted index maps every word to the documents that contain it.",
        "Dense retrieval embeds queries and passages into one vector space.",
    ],
    "food": [
        "Bread dough rises because yeast ferments sugar and releases carbon dioxide.",
        "Caramelising onions takes about forty minutes over low heat with butter.",
        "Fresh pasta needs only flour and eggs, kneaded until the dough is smooth.",
        "A sourdough starter is a culture of wild yeast and lactic acid bacteria.",
    ],
    "space": [
        "The Moon orbits the Earth every 27 days and its gravity drives the tides.",
        "Jupiter is the largest planet in the Solar System, a gas giant.",
        "A light year is the distance light travels in one year, about 9.46 trillion km.",
        "Mars has the tallest volcano in the Solar System, Olympus Mons.",
    ],
}
DOCS = [
    Document(id_=f"{topic}-{i}", text=text, metadata={"title": f"{topic} {i}", "topic": topic})
    for topic, texts in TOPICS.items()
    for i, text in enumerate(texts)
]
# Tree traversal keeps ``similarity_top_k`` nodes per level it walks down (the RAPTOR paper's
# algorithm, documented on RaptorRetriever), so its budget holds per level.
TOP_K_PER_LEVEL = {"raptor_traversal"}
# Arguments that take a sequence, given as a list (tuples are the defaults).
SEQUENCE_ARGS: dict[str, dict[str, Any]] = {
    "fusion": {"weights": [1.0, 0.5]},
    "hybrid_weighted": {"weights": [0.6, 0.4]},
}


def reply(prompt: str) -> str:
    """Replies shaped like a small model's, for every prompt the modes send."""
    lowered = prompt.lower()
    if "summary" in lowered:
        return "Summary: these passages cover ranking, cooking and astronomy facts."
    if "search queries" in lowered:
        return "1. keyword ranking function\n2. how search engines score matches\n3. BM25"
    if "passage" in lowered:
        return "Passage: search engines rank keyword matches with BM25; yeast makes dough rise."
    return "Search query: BM25 ranking function and bread dough rising"


# ----------------------------------------------------------------------------- a gate on calls
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("caller", default=None)


class CallerGate:
    """Counts distinct callers (``CALLER``) inside gated calls; a gated call waits until
    ``target`` callers were inside at once, or gives up after ``timeout`` (then ``reached`` stays
    False and the test fails instead of hanging)."""

    def __init__(self, target: int = 2, timeout: float = 20.0) -> None:
        self.target, self.timeout = target, timeout
        self.inside: dict[str, int] = {}
        self.reached = self.timed_out = False
        self._cond = threading.Condition()

    def enter(self) -> str | None:
        caller = CALLER.get()
        if caller is not None:
            with self._cond:
                self.inside[caller] = self.inside.get(caller, 0) + 1
                if sum(1 for n in self.inside.values() if n) >= self.target:
                    self.reached = True
                self._cond.notify_all()
        return caller

    def exit(self, caller: str | None) -> None:
        if caller is not None:
            with self._cond:
                self.inside[caller] -= 1

    def hold(self) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.reached or self.timed_out, self.timeout):
                self.timed_out = True

    async def ahold(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not (self.reached or self.timed_out):
            if time.monotonic() > deadline:
                self.timed_out = True
            await asyncio.sleep(0.001)


GATE: list[CallerGate | None] = [None]


def _gated(call: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gate = GATE[0]
        if gate is None:
            return call(*args, **kwargs)
        caller = gate.enter()
        try:
            if caller is not None:
                gate.hold()
            return call(*args, **kwargs)
        finally:
            gate.exit(caller)

    return wrapper


async def _agated(call: Awaitable[Any]) -> Any:
    gate = GATE[0]
    caller = gate.enter() if gate else None
    try:
        if caller is not None:
            await gate.ahold()
        return await call
    finally:
        if gate:
            gate.exit(caller)


class GatedEmbedding(BaseEmbedding):
    """The real embedding model (whose async calls run in a worker thread), its calls gated and
    counted. A sync call waits at the gate in its thread: made on the event loop, it blocks the
    loop and the other query can never reach the gate."""

    _inner: Any = PrivateAttr()
    _calls: list[str] = PrivateAttr(default_factory=list)

    def __init__(self, inner: BaseEmbedding) -> None:
        super().__init__(model_name=inner.model_name, embed_batch_size=inner.embed_batch_size)
        self._inner = inner

    @property
    def calls(self) -> list[str]:
        return self._calls

    def _get_query_embedding(self, query: str) -> list[float]:
        self._calls.append(query)
        return _gated(self._inner._get_query_embedding)(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        self._calls.append(query)
        return await _agated(self._inner._aget_query_embedding(query))

    async def _aget_text_embedding(self, text: str) -> list[float]:
        self._calls.append(text)
        return await _agated(self._inner._aget_text_embedding(text))

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._calls.extend(texts)
        return await _agated(self._inner._aget_text_embeddings(texts))

    def _get_text_embedding(self, text: str) -> list[float]:
        self._calls.append(text)
        return _gated(self._inner._get_text_embedding)(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._calls.extend(texts)
        return _gated(self._inner._get_text_embeddings)(texts)


@pytest.fixture(scope="module", autouse=True)
def gated_milvus() -> Iterator[None]:
    """Milvus searches and queries wait at the gate too (class level: every client)."""
    patch = pytest.MonkeyPatch()
    for name in ("search", "hybrid_search", "query"):
        patch.setattr(pymilvus.MilvusClient, name, _gated(getattr(pymilvus.MilvusClient, name)))
    yield
    patch.undo()


# ----------------------------------------------------------------------------- packs
@pytest.fixture(scope="module")
def embed(embed_model: Any) -> GatedEmbedding:
    return GatedEmbedding(embed_model)


@pytest.fixture(scope="module")
def llm() -> ScriptedLLM:
    return ScriptedLLM(replies=reply)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(Path(tmp_path_factory.mktemp("contract")) / "milvus.db")


@pytest.fixture(scope="module")
def single(uri: str, embed: GatedEmbedding, llm: ScriptedLLM) -> RagPack:
    pack = RagPack(
        DOCS,
        uri=uri,
        collection_name="contract",
        embed_model=embed,
        llm=llm,
        similarity_top_k=TOP_K,
    )
    pack.build_raptor_tree(max_concurrency=4)
    return pack


def _sources(with_docs: bool) -> list[RouteSource]:
    return [
        RouteSource(
            topic,
            f"Documents about {topic}",
            (texts[0],),
            collection_name=f"contract_{topic}",
            documents=[d for d in DOCS if d.doc_id.startswith(topic)] if with_docs else None,
        )
        for topic, texts in TOPICS.items()
    ]


@pytest.fixture(scope="module")
def routed(uri: str, embed: GatedEmbedding, llm: ScriptedLLM) -> RoutedRagPack:
    return RoutedRagPack(
        _sources(True), uri=uri, embed_model=embed, llm=llm, similarity_top_k=TOP_K
    )


def _pack_for(mode: str, request: pytest.FixtureRequest) -> RagPack:
    return request.getfixturevalue("routed" if get_mode(mode).needs_sources else "single")


def _reopen(mode: str, pack: RagPack, embed: GatedEmbedding, llm: ScriptedLLM) -> RagPack:
    common = {"uri": pack.uri, "embed_model": embed, "llm": llm, "similarity_top_k": TOP_K}
    if get_mode(mode).needs_sources:
        return RoutedRagPack.open_sources(_sources(False), **common)
    return RagPack.open(collection_name=pack.vector_store.collection_name, **common)


def _ids(nodes: list[Any]) -> list[str]:
    return [n.node.node_id for n in nodes]


MODES = mode_names()


# ----------------------------------------------------------------------------- the contract
def test_every_registered_mode_is_checked() -> None:
    assert set(MODES) >= {
        "vector", "bm25", "hybrid", "hybrid_weighted", "fusion", "hyde", "rewrite",
        "raptor", "raptor_traversal", "route",
    }  # fmt: skip


@pytest.mark.parametrize("mode", MODES)
def test_sync_and_async_agree_and_respect_top_k(
    mode: str, request: pytest.FixtureRequest, assert_same_ranking: Callable[..., None]
) -> None:
    retriever = _pack_for(mode, request).retriever(mode)
    for question in QUESTIONS:
        nodes = retriever.retrieve(question)
        assert nodes
        if mode in TOP_K_PER_LEVEL:
            levels = Counter(n.node.metadata["raptor_level"] for n in nodes)
            assert max(levels.values()) <= TOP_K, levels
        else:
            assert len(nodes) <= TOP_K
        scores = [n.score for n in nodes]
        assert all(s is not None and math.isfinite(s) for s in scores), scores
        assert scores == sorted(scores, reverse=True), scores
        assert len(set(_ids(nodes))) == len(nodes), "no node twice"
        assert_same_ranking(asyncio.run(retriever.aretrieve(question)), nodes)


@pytest.mark.parametrize("mode", MODES)
def test_node_ids_are_stable_across_a_reopen(
    mode: str,
    request: pytest.FixtureRequest,
    embed: GatedEmbedding,
    llm: ScriptedLLM,
    assert_same_ranking: Callable[..., None],
) -> None:
    pack = _pack_for(mode, request)
    before = pack.retriever(mode).retrieve(QUESTIONS[0])
    after = _reopen(mode, pack, embed, llm).retriever(mode).retrieve(QUESTIONS[0])
    assert_same_ranking(after, before)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
@pytest.mark.parametrize("mode", MODES)
def test_an_empty_query_fails_the_same_way_before_any_work(
    mode: str, query: str, request: pytest.FixtureRequest, embed: GatedEmbedding, llm: ScriptedLLM
) -> None:
    retriever = _pack_for(mode, request).retriever(mode)
    embedded, asked = len(embed.calls), llm.call_count
    with pytest.raises(ConfigurationError) as sync_error:
        retriever.retrieve(query)
    with pytest.raises(ConfigurationError) as async_error:
        asyncio.run(retriever.aretrieve(query))
    assert str(sync_error.value) == str(async_error.value) == EMPTY_QUERY_MESSAGE
    assert (len(embed.calls), llm.call_count) == (embedded, asked), "no model call for it"


@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_every_span_of_a_query_descends_from_its_root(
    mode: str, path: str, request: pytest.FixtureRequest
) -> None:
    retriever = _pack_for(mode, request).retriever(mode)
    dispatcher = get_dispatcher()
    handler = SimpleSpanHandler()
    dispatcher.add_span_handler(handler)
    try:
        if path == "sync":
            retriever.retrieve(QUESTIONS[0])
        else:
            asyncio.run(retriever.aretrieve(QUESTIONS[0]))
    finally:
        dispatcher.span_handlers.remove(handler)
    spans = handler.completed_spans + handler.dropped_spans
    by_id = {s.id_: s for s in spans}
    roots = [s for s in spans if s.parent_id is None]
    assert [r.id_.split(".")[0] for r in roots] == [type(retriever).__name__], [
        s.id_ for s in roots
    ]
    for span in spans:
        chain = span
        while chain.parent_id is not None:
            assert chain.parent_id in by_id, f"{span.id_} has a parent outside this query"
            chain = by_id[chain.parent_id]
        assert chain is roots[0]


@pytest.mark.parametrize("mode", MODES)
def test_two_async_queries_run_at_the_same_time(mode: str, request: pytest.FixtureRequest) -> None:
    retriever = _pack_for(mode, request).retriever(mode)

    async def ask(caller: str, question: str) -> list[Any]:
        CALLER.set(caller)
        return await retriever.aretrieve(question)

    async def both() -> list[list[Any]]:
        return await asyncio.gather(ask("first", QUESTIONS[0]), ask("second", QUESTIONS[1]))

    gate = GATE[0] = CallerGate(target=2)
    try:
        first, second = asyncio.run(both())
    finally:
        GATE[0] = None
    assert first and second
    assert gate.reached and not gate.timed_out, (
        f"{mode}: the two queries never were inside a model or Milvus call at the same time"
    )


@pytest.mark.parametrize("mode", sorted(SEQUENCE_ARGS))
def test_sequence_arguments_are_accepted_as_lists_and_tuples(
    mode: str, request: pytest.FixtureRequest
) -> None:
    pack = _pack_for(mode, request)
    as_list = pack.retriever(mode, **SEQUENCE_ARGS[mode])
    as_tuple = pack.retriever(mode, **{k: tuple(v) for k, v in SEQUENCE_ARGS[mode].items()})
    assert as_tuple is as_list, "the same arguments give the same (cached) retriever"
    assert _ids(as_list.retrieve(QUESTIONS[0]))


def test_a_mode_added_through_the_registry_gets_the_contract(
    single: RagPack, assert_same_ranking: Callable[..., None]
) -> None:
    from llama_index_rag_pack.pack.modes import register_mode, unregister_mode

    register_mode(
        "vector_top2",
        lambda pack, similarity_top_k=None: pack.retriever("vector", similarity_top_k=2),
    )
    try:
        assert "vector_top2" in mode_names()
        nodes = single.retriever("vector_top2").retrieve(QUESTIONS[0])
        assert len(nodes) == 2
        assert_same_ranking(nodes, single.retriever("vector").retrieve(QUESTIONS[0])[:2])
    finally:
        unregister_mode("vector_top2")
    with pytest.raises(ConfigurationError, match="Unknown retrieval mode 'vector_top2'"):
        single.retriever("vector_top2")


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_checks_its_query_in_the_pack_retriever_base(
    mode: str, request: pytest.FixtureRequest
) -> None:
    from llama_index_rag_pack.core.query_bases import PackRetriever

    retriever = _pack_for(mode, request).retriever(mode)
    assert isinstance(retriever, PackRetriever), type(retriever).__mro__
    # the template is the base's own: a subclass that overrode it would skip the check
    for name in ("_retrieve", "_aretrieve"):
        own = inspect.unwrap(getattr(type(retriever), name))
        assert own is inspect.unwrap(getattr(PackRetriever, name)), (mode, name)


@pytest.mark.parametrize("query_mode", ["hyde", "rewrite", "self_query"])
def test_a_registered_base_mode_serves_the_query_side_modes(
    single: RagPack, query_mode: str
) -> None:
    from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
    from llama_index_rag_pack.pack.modes import base_modes, register_mode, unregister_mode

    def build_dense_top3(pack: RagPack, similarity_top_k: int | None = None) -> Any:
        return MilvusHybridRetriever(
            pack.vector_store,
            embed_model=pack.embed_model,
            search_type="dense",
            similarity_top_k=similarity_top_k or 3,
        )

    register_mode("dense_top3", build_dense_top3, base=True)
    register_mode("not_a_base", build_dense_top3)
    try:
        assert "dense_top3" in base_modes(embeds_query=True)
        retriever = single.retriever(query_mode, base="dense_top3")
        inner = retriever.retriever
        assert isinstance(inner, MilvusHybridRetriever) and inner.similarity_top_k == 3
        nodes = retriever.retrieve(QUESTIONS[0])
        assert 0 < len(nodes) <= 3
        with pytest.raises(ConfigurationError, match="not_a_base"):
            single.retriever(query_mode, base="not_a_base")
    finally:
        unregister_mode("dense_top3")
        unregister_mode("not_a_base")


def _passes(node: Any, topics: set[str], store: Any) -> bool:
    """A leaf passes when its topic is one of ``topics``; a summary when every leaf below does."""
    children = node.metadata.get("raptor_child_ids") or []
    if node.metadata.get("raptor_level", 0) == 0 or not children:
        return node.metadata.get("topic") in topics
    return all(_passes(child, topics, store) for child in store.get(children))


SPACE = MetadataFilters(filters=[MetadataFilter(key="topic", value="space")])
# about food and space: unfiltered, food chunks rank high too, and BM25 finds both
MIXED = "Why does bread dough rise, and which planet is the largest?"
NOTHING = MetadataFilters(filters=[MetadataFilter(key="topic", value="none of them")])


@pytest.mark.parametrize("path", ["sync", "async"])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_returns_only_what_the_filters_let_through(
    mode: str, path: str, request: pytest.FixtureRequest
) -> None:
    pack = _pack_for(mode, request)
    retriever = pack.retriever(mode, filters=SPACE)
    run = retriever.retrieve if path == "sync" else lambda q: asyncio.run(retriever.aretrieve(q))
    nodes = run(MIXED)
    store = getattr(getattr(retriever, "tree", None), "store", None)
    assert nodes or mode == "route", "the space chunks match: some must come back"
    assert all(_passes(n.node, {"space"}, store) for n in nodes), [
        (n.node.node_id, n.node.metadata.get("topic")) for n in nodes
    ]
    assert run_nothing(pack, mode, path) == [], "a filter that matches nothing returns nothing"


def run_nothing(pack: RagPack, mode: str, path: str) -> list[Any]:
    retriever = pack.retriever(mode, filters=NOTHING)
    if path == "sync":
        return retriever.retrieve(QUESTIONS[0])
    return asyncio.run(retriever.aretrieve(QUESTIONS[0]))


@pytest.mark.parametrize("mode", ["vector", "bm25"])
def test_a_filtered_search_is_the_unfiltered_ranking_restricted(single: RagPack, mode: str) -> None:
    everything = single.retriever(mode, similarity_top_k=len(DOCS)).retrieve(MIXED)
    assert {n.node.metadata["topic"] for n in everything[:TOP_K]} != {"space"}
    restricted = [n for n in everything if n.node.metadata["topic"] == "space"][:TOP_K]
    filtered = single.retriever(mode, filters=SPACE).retrieve(MIXED)
    assert filtered
    assert _ids(filtered) == _ids(restricted)
    assert [n.score for n in filtered] == pytest.approx([n.score for n in restricted])


def test_a_string_expression_filters_like_metadata_filters(single: RagPack) -> None:
    by_object = single.retriever("hybrid_convex", filters=SPACE).retrieve(MIXED)
    by_string = single.retriever("hybrid_convex", filters='topic == "space"').retrieve(MIXED)
    assert _ids(by_object) == _ids(by_string) and by_object


def test_tree_modes_offer_their_build_step_from_the_pack(
    uri: str, embed: GatedEmbedding, llm: ScriptedLLM
) -> None:
    pack = RagPack(DOCS[:4], uri=uri, collection_name="contract_tree", embed_model=embed, llm=llm)
    tree_modes = [m for m in MODES if get_mode(m).needs_tree]
    assert tree_modes
    for mode in tree_modes:
        with pytest.raises(Exception, match="build_raptor_tree"):
            pack.retriever(mode)
    stats = asyncio.run(pack.abuild_raptor_tree())
    assert stats.levels and stats.levels[0] == 4
    for mode in tree_modes:
        assert pack.retriever(mode).retrieve(QUESTIONS[0])
