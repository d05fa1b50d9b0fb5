"""CitedQueryEngine and CitationPostprocessor over real Milvus Lite and the bundled embeddings.

Only the LLM is scripted. Its replies find the document ids in the prompt the engine built (the
way a model reads them) and cite like real models do: correct ids, a hallucinated id, JSON in
prose, quotes with changed spacing, quotes attributed to the wrong document, invented quotes.
"""

from __future__ import annotations

import inspect
import logging
import re
from pathlib import Path

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.citations.annotations import (
    attach_markers,
    parse_annotations,
    split_sentences,
)
from llama_index_rag_pack.citations.citation_postprocessor import CitationPostprocessor
from llama_index_rag_pack.citations.citation_prompts import DEFAULT_CITATION_QA_PROMPT
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.citations.cited_responses import CitedResponse
from llama_index_rag_pack.citations.quotes import QuoteMatch
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.connection import flush, open_vector_store
from llama_index_rag_pack.testing import ScriptedLLM, ToolCallReply

CHEETAH_URL = "https://en.wikipedia.org/wiki/Cheetah"
LION_URL = "https://en.wikipedia.org/wiki/Lion"
CHUNKS = [
    (
        "The cheetah is capable of running at 93 to 104 km/h (58 to 65 mph). "
        "It has a light build and long thin legs.",
        {"title": "Cheetah", "url": CHEETAH_URL},
    ),
    (
        "The cheetah lives in three main social groups: females and their cubs, "
        "male coalitions, and solitary males.",
        {"title": "Cheetah", "url": CHEETAH_URL},
    ),
    (
        "The lion is a large cat of the genus Panthera. Lions live in groups called prides.",
        {"title": "Lion", "url": LION_URL},
    ),
    (
        "The abacus is a calculating tool used since ancient times.",
        {"title": "Abacus", "url": "https://en.wikipedia.org/wiki/Abacus"},
    ),
]
QUESTION = "How fast can a cheetah run, and how do lions live?"


@pytest.fixture(scope="module")
def milvus_db(tmp_path_factory: pytest.TempPathFactory, embed_model) -> str:
    """The chunks indexed once per module in a Milvus Lite database."""
    uri = str(Path(tmp_path_factory.mktemp("citations")) / "milvus.db")
    store = open_vector_store(uri, "citations", dim=384)
    nodes = [TextNode(text=t, metadata=m, id_=f"n{i}") for i, (t, m) in enumerate(CHUNKS)]
    VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
    )
    flush(store)
    return uri


@pytest.fixture(scope="module")
def shared_retriever(milvus_db: str, embed_model) -> BaseRetriever:
    store = open_vector_store(milvus_db, "citations", dim=384)
    return VectorStoreIndex.from_vector_store(store, embed_model=embed_model).as_retriever(
        similarity_top_k=3
    )


@pytest.fixture()
def retriever(
    request: pytest.FixtureRequest, milvus_db: str, embed_model, shared_retriever
) -> BaseRetriever:
    if not inspect.iscoroutinefunction(request.function):
        return shared_retriever
    # Async tests get their own store: the async Milvus client is bound to the test's event loop.
    store = open_vector_store(milvus_db, "citations", dim=384)
    return VectorStoreIndex.from_vector_store(store, embed_model=embed_model).as_retriever(
        similarity_top_k=3
    )


def doc_ids(prompt: str) -> dict[str, int]:
    """First words of each ``<document id=N>`` in the prompt → N."""
    return {
        m.group(2)[:30]: int(m.group(1))
        for m in re.finditer(r"<document id=(\d+)[^>]*>\n(.*?)\n</document>", prompt, re.S)
    }


def id_of(prompt: str, needle: str) -> int:
    for text, i in doc_ids(prompt).items():
        if text.startswith(needle[:30]):
            return i
    raise AssertionError(f"{needle!r} not in the prompt's documents: {doc_ids(prompt)}")


def cheetah_marker_reply(prompt: str) -> str:
    speed = id_of(prompt, CHUNKS[0][0])
    lion = id_of(prompt, CHUNKS[2][0])
    social = id_of(prompt, CHUNKS[1][0])
    return (
        f"Cheetahs can run at 93 to 104 km/h [1](id={speed}), and they live in small groups "
        f"[2](id={social}). Lions live in prides [3](id={lion})[4](id=17)."
    )


class TestMarkersMode:
    @pytest.mark.slow
    def test_sync_answer_cites_only_supporting_chunks(self, retriever) -> None:
        llm = ScriptedLLM(replies=cheetah_marker_reply)
        engine = CitedQueryEngine(retriever, llm, style="text")
        response = engine.query(QUESTION)
        assert isinstance(response, CitedResponse)
        assert response.answer == (
            "Cheetahs can run at 93 to 104 km/h [1], and they live in small groups [1]. "
            "Lions live in prides [2]."
        )
        assert (
            response.references
            == f"\n\nSources:\n  [1] Cheetah — {CHEETAH_URL}\n  [2] Lion — {LION_URL}"
        )
        assert str(response) == response.answer + response.references
        cited = [n.node.node_id for n in response.source_nodes]
        assert sorted(cited) == ["n0", "n1", "n2"]
        assert [c.url for c in response.citations] == [CHEETAH_URL, LION_URL]
        assert response.metadata["dropped_ids"] == [17]
        assert len(response.context_nodes) == 3
        prompt = llm.prompts[0]
        assert "[N](id=ID)" in prompt and QUESTION in prompt and "93 to 104 km/h" in prompt

    @pytest.mark.slow
    def test_uncited_context_is_not_a_source(self, retriever) -> None:
        llm = ScriptedLLM(
            replies=lambda p: f"Lions live in prides [1](id={id_of(p, CHUNKS[2][0])})."
        )
        response = CitedQueryEngine(retriever, llm, style="markdown").query("Where do lions live?")
        assert [n.node.node_id for n in response.source_nodes] == ["n2"]
        assert response.answer == f"Lions live in prides <sup>[[1]({LION_URL})]</sup>."
        assert "Cheetah" not in response.references

    @pytest.mark.slow
    async def test_async_never_calls_sync_llm_methods(self, retriever) -> None:
        llm = ScriptedLLM(replies=cheetah_marker_reply, forbid_sync=True)
        response = await CitedQueryEngine(retriever, llm, style="text").aquery(QUESTION)
        assert response.answer.endswith("Lions live in prides [2].")
        assert len(response.source_nodes) == 3

    @pytest.mark.slow
    def test_streaming_rewrites_token_by_token(self, retriever) -> None:
        llm = ScriptedLLM(
            replies=cheetah_marker_reply,
            stream_splitter=lambda t: [t[i : i + 3] for i in range(0, len(t), 3)],
        )
        engine = CitedQueryEngine(retriever, llm, style="text", streaming=True)
        response = engine.query(QUESTION)
        assert response.source_nodes == []  # filled when the stream ends
        deltas = list(response.response_gen)
        assert len(deltas) > 20
        assert not any("](id=" in d for d in deltas)
        whole = CitedQueryEngine(
            retriever, ScriptedLLM(replies=cheetah_marker_reply), style="text"
        ).query(QUESTION)
        assert "".join(deltas) == str(whole)
        assert deltas[-1] == whole.references
        assert sorted(n.node.node_id for n in response.source_nodes) == ["n0", "n1", "n2"]
        assert [c.number for c in response.citations] == [1, 2]
        assert response.metadata["dropped_ids"] == [17]

    @pytest.mark.slow
    async def test_async_streaming(self, retriever) -> None:
        llm = ScriptedLLM(replies=cheetah_marker_reply, forbid_sync=True)
        engine = CitedQueryEngine(retriever, llm, style="html", streaming=True)
        response = await engine.aquery(QUESTION)
        deltas = [d async for d in response.async_response_gen()]
        text = "".join(deltas)
        assert f'<sup><a href="{CHEETAH_URL}">[1]</a></sup>' in text
        assert text.endswith("</ol>")
        assert len(response.source_nodes) == 3

    def test_no_retrieved_nodes_passes_the_answer_through(self) -> None:
        class Nothing(BaseRetriever):
            def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
                return []

        llm = ScriptedLLM(replies=["I don't know [1](id=1)."])
        response = CitedQueryEngine(Nothing(), llm, style="text").query("Anything?")
        assert str(response) == "I don't know [1](id=1)."
        assert response.source_nodes == [] and "(no documents were found)" in llm.prompts[0]

    @pytest.mark.slow
    def test_prompt_is_overridable(self, retriever) -> None:
        from llama_index.core.prompts import PromptTemplate

        llm = ScriptedLLM(replies=["ok"])
        engine = CitedQueryEngine(retriever, llm)
        assert (
            engine.get_prompts()["citation_qa_template"].template
            == DEFAULT_CITATION_QA_PROMPT.template
        )
        engine.update_prompts(
            {"citation_qa_template": PromptTemplate("CUSTOM {context_str} Q={query_str}")}
        )
        engine.query("speed?")
        assert llm.prompts[0].startswith("CUSTOM <document id=1")


class TestQuotesMode:
    def tool_reply(self, prompt: str) -> ToolCallReply:
        speed = id_of(prompt, CHUNKS[0][0])
        lion = id_of(prompt, CHUNKS[2][0])
        return ToolCallReply(
            "QuotedAnswer",
            {
                "answer": "Cheetahs reach 93 to 104 km/h; lions live in prides.",
                "citations": [
                    {"source_id": speed, "quote": '"capable of running at 93 to 104 km/h"'},
                    {"source_id": str(lion), "quote": "Lions  live in\ngroups called Prides"},
                    {
                        "source_id": f"id={speed}",
                        "quote": "The lion is a large cat of the genus Panthera",
                    },
                    {"source_id": speed, "quote": "Cheetahs can fly over the savanna at night"},
                    {"source_id": speed, "quote": "It has a light built and long thin leg."},
                ],
            },
        )

    @pytest.mark.slow
    def test_function_calling_quotes_are_verified(self, retriever, caplog) -> None:
        llm = ScriptedLLM(replies=self.tool_reply, function_calling=True)
        engine = CitedQueryEngine(retriever, llm, style="text", mode="quotes")
        with caplog.at_level(logging.WARNING):
            response = engine.query(QUESTION)
        matches = [q.match for q in response.quotes]
        assert matches == [
            QuoteMatch.EXACT,
            QuoteMatch.NORMALIZED,
            QuoteMatch.EXACT,
            QuoteMatch.UNVERIFIED,
            QuoteMatch.FUZZY,
        ]
        assert response.quotes[2].misattributed
        assert not response.quotes[3].verified and "Cheetahs can fly" in caplog.text
        assert response.answer == "Cheetahs reach 93 to 104 km/h; lions live in prides [1][2]."
        assert sorted(n.node.node_id for n in response.source_nodes) == ["n0", "n2"]
        assert response.metadata["quotes"][3]["match"] == "unverified"

    @pytest.mark.slow
    async def test_async_function_calling(self, retriever) -> None:
        llm = ScriptedLLM(replies=self.tool_reply, function_calling=True, forbid_sync=True)
        response = await CitedQueryEngine(retriever, llm, style="text", mode="quotes").aquery(
            QUESTION
        )
        assert len(response.source_nodes) == 2

    @pytest.mark.slow
    def test_json_prompt_without_function_calling(self, retriever) -> None:
        def reply(prompt: str) -> str:
            i = id_of(prompt, CHUNKS[0][0])
            return (
                "Here is the answer in JSON:\n```json\n"
                f'{{"answer": "About 100 km/h.", "citations": [{{"source_id": "[{i}]", '
                '"quote": "93 to 104 km/h (58 to 65 mph)"},]}'
                "\n```\nHope this helps!"
            )

        llm = ScriptedLLM(replies=reply)
        response = CitedQueryEngine(retriever, llm, style="text", mode="quotes").query(
            "How fast is a cheetah?"
        )
        assert "Reply with JSON only" in llm.prompts[0]
        assert response.answer == "About 100 km/h [1]."
        assert [n.node.node_id for n in response.source_nodes] == ["n0"]

    @pytest.mark.slow
    def test_unparseable_reply_falls_back_to_plain_text(self, retriever, caplog) -> None:
        llm = ScriptedLLM(
            replies=[
                '```json\n{"answer": "Fast, about 100 km/h", "citations": [{"source_id": 1, \n```'
            ]
        )
        with caplog.at_level(logging.WARNING):
            response = CitedQueryEngine(retriever, llm, style="text", mode="quotes").query("speed?")
        assert "could not read an answer" in caplog.text
        assert "Fast, about 100 km/h" in str(response) and response.source_nodes == []

    @pytest.mark.slow
    def test_tool_model_answering_in_text(self, retriever) -> None:
        llm = ScriptedLLM(
            replies=[
                '{"answer": "Prides.", "citations": '
                '[{"id": 99, "quote": "Lions live in groups called prides"}]}'
            ],
            function_calling=True,
        )
        response = CitedQueryEngine(retriever, llm, style="text", mode="quotes").query(
            "How do lions live?"
        )
        assert response.quotes[0].source_id == id_of(
            llm.prompts[0], CHUNKS[2][0]
        )  # found despite the bad id
        assert [n.node.node_id for n in response.source_nodes] == ["n2"]


class TestAnnotateMode:
    @staticmethod
    def replies(answer: str):
        def reply(prompt: str) -> str:
            if "Answer sentences:" not in prompt:
                return answer
            speed, lion = id_of(prompt, CHUNKS[0][0]), id_of(prompt, CHUNKS[2][0])
            return (
                f"Sure! Here are the sources:\nS1: {speed}\nSentence 2 -> [{lion}, 42]\nS3: none\n"
            )

        return reply

    @pytest.mark.slow
    def test_second_call_maps_sentences_to_sources(self, retriever) -> None:
        llm = ScriptedLLM(
            replies=self.replies(
                "Cheetahs run at 100 km/h. Lions live in prides! I am not sure about the rest."
            )
        )
        response = CitedQueryEngine(retriever, llm, style="text", mode="annotate").query(QUESTION)
        assert llm.call_count == 2
        assert "S2: Lions live in prides!" in llm.prompts[1]
        assert response.answer == (
            "Cheetahs run at 100 km/h [1]. Lions live in prides [2]! I am not sure about the rest."
        )
        assert response.metadata["dropped_ids"] == [42]
        assert response.metadata["raw_answer"].startswith("Cheetahs run at 100 km/h.")

    @pytest.mark.slow
    async def test_async_and_streaming(self, retriever) -> None:
        llm = ScriptedLLM(
            replies=self.replies("Cheetahs run at 100 km/h. Lions live in prides."),
            forbid_sync=True,
        )
        engine = CitedQueryEngine(retriever, llm, style="text", mode="annotate", streaming=True)
        response = await engine.aquery(QUESTION)
        text = "".join([d async for d in response.async_response_gen()])
        assert text.startswith(
            "Cheetahs run at 100 km/h [1]. Lions live in prides [2].\n\nSources:"
        )
        assert len(response.source_nodes) == 2

    @pytest.mark.slow
    def test_garbage_annotation_gives_no_citations(self, retriever, caplog) -> None:
        llm = ScriptedLLM(replies=["Cheetahs are fast.", "I cannot help with that."])
        with caplog.at_level(logging.WARNING):
            response = CitedQueryEngine(retriever, llm, style="text", mode="annotate").query(
                "speed?"
            )
        assert str(response) == "Cheetahs are fast." and "no 'S<n>: ids' line" in caplog.text


class TestHelpers:
    def test_split_sentences_round_trips(self) -> None:
        text = "One. Two!  Three?\nFour"
        assert split_sentences(text) == ["One. ", "Two!  ", "Three?\n", "Four"]
        assert "".join(split_sentences(text)) == text

    def test_attach_markers(self) -> None:
        assert (
            attach_markers("Paris is in France. ", [3, 1])
            == "Paris is in France [1](id=3)[2](id=1). "
        )
        assert attach_markers("No punctuation", [2]) == "No punctuation [1](id=2)"
        assert attach_markers("Unchanged.", []) == "Unchanged."

    def test_parse_annotations(self) -> None:
        text = "S1: 1, 2\n- Sentence 2: [3]\n3) none\nS9: 1\nnoise"
        assert parse_annotations(text, 3) == {1: [1, 2], 2: [3], 3: []}


class TestValidation:
    @pytest.mark.slow
    def test_bad_arguments_say_what_to_do(self, retriever) -> None:
        llm = ScriptedLLM()
        with pytest.raises(ConfigurationError, match="markers, quotes, annotate"):
            CitedQueryEngine(retriever, llm, mode="footnotes")
        with pytest.raises(ConfigurationError, match="empty, text, markdown, html"):
            CitedQueryEngine(retriever, llm, style="latex")
        with pytest.raises(ConfigurationError, match="BaseRetriever"):
            CitedQueryEngine(object(), llm)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="needs an LLM"):
            CitedQueryEngine(retriever, "gpt-4")  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="fuzzy_threshold"):
            CitedQueryEngine(retriever, llm, fuzzy_threshold=0)


class TestFromArgs:
    """``from_args`` follows core's ``RetrieverQueryEngine``/``CitationQueryEngine.from_args``."""

    @pytest.fixture(autouse=True)
    def _isolated_settings(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from llama_index.core import Settings

        monkeypatch.setattr(Settings, "_callback_manager", None)

    @pytest.fixture()
    def index(self, milvus_db: str, embed_model) -> VectorStoreIndex:
        # a store per test: the async Milvus client is bound to the test's event loop
        store = open_vector_store(milvus_db, "citations", dim=384)
        return VectorStoreIndex.from_vector_store(store, embed_model=embed_model)

    @pytest.mark.slow
    def test_from_an_index(self, index: VectorStoreIndex) -> None:
        llm = ScriptedLLM(replies=lambda p: f"93 to 104 km/h [4](id={id_of(p, CHUNKS[0][0])}).")
        engine = CitedQueryEngine.from_args(index, llm, similarity_top_k=2, style="text")
        response = engine.query("How fast can a cheetah run?")
        assert len(response.context_nodes) == 2 and len(doc_ids(llm.prompts[0])) == 2
        assert response.answer == "93 to 104 km/h [1]."
        assert [n.node.node_id for n in response.source_nodes] == ["n0"]

    @pytest.mark.slow
    async def test_from_an_index_async(self, index: VectorStoreIndex) -> None:
        llm = ScriptedLLM(replies=cheetah_marker_reply, forbid_sync=True)
        engine = CitedQueryEngine.from_args(
            index, llm, similarity_top_k=3, style="text", streaming=True
        )
        response = await engine.aquery(QUESTION)
        text = "".join([d async for d in response.async_response_gen()])
        assert text.startswith("Cheetahs can run at 93 to 104 km/h [1]")
        assert len(response.context_nodes) == 3
        assert sorted(n.node.node_id for n in response.source_nodes) == ["n0", "n1", "n2"]

    @pytest.mark.slow
    def test_from_a_retriever_with_settings_llm(
        self, retriever: BaseRetriever, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from llama_index.core import Settings

        llm = ScriptedLLM(replies=cheetah_marker_reply)
        monkeypatch.setattr(Settings, "_llm", llm)
        engine = CitedQueryEngine.from_args(retriever, mode="markers", style="text")
        assert engine.retriever is retriever
        assert engine.callback_manager is Settings.callback_manager
        assert "93 to 104 km/h [1]" in str(engine.query(QUESTION))
        assert llm.call_count == 1

    @pytest.mark.slow
    async def test_from_a_retriever_with_settings_llm_async(
        self, retriever: BaseRetriever, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from llama_index.core import Settings

        llm = ScriptedLLM(replies=cheetah_marker_reply, forbid_sync=True)
        monkeypatch.setattr(Settings, "_llm", llm)
        response = await CitedQueryEngine.from_args(retriever, style="text").aquery(QUESTION)
        assert response.answer.endswith("Lions live in prides [2].")
        assert llm.call_count == 1

    @pytest.mark.slow
    def test_bad_arguments(self, retriever: BaseRetriever, index: VectorStoreIndex) -> None:
        llm = ScriptedLLM()
        with pytest.raises(ConfigurationError, match="set it on the retriever"):
            CitedQueryEngine.from_args(retriever, llm, similarity_top_k=2)
        with pytest.raises(ConfigurationError, match="similarity_top_k must be > 0, got 0"):
            CitedQueryEngine.from_args(index, llm, similarity_top_k=0)
        with pytest.raises(ConfigurationError, match="BaseRetriever"):
            CitedQueryEngine.from_args(object(), llm)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="markers, quotes, annotate"):
            CitedQueryEngine.from_args(index, llm, mode="footnotes")


class TestPostprocessor:
    @staticmethod
    def nodes() -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(text=t, metadata=m, id_=f"n{i}"), score=1.0 - i / 10)
            for i, (t, m) in enumerate(CHUNKS)
        ]

    def test_sentences_keep_source_metadata_and_link_back(self) -> None:
        out = CitationPostprocessor(granularity="sentence").postprocess_nodes(self.nodes())
        assert [n.node.text for n in out[:2]] == [
            "The cheetah is capable of running at 93 to 104 km/h (58 to 65 mph).",
            "It has a light build and long thin legs.",
        ]
        assert [n.node.metadata["citation_id"] for n in out] == list(range(1, len(out) + 1))
        assert out[1].node.metadata["url"] == CHEETAH_URL
        assert out[1].node.relationships[NodeRelationship.SOURCE].node_id == "n0"
        assert out[1].node.metadata["citation_parent_id"] == "n0"

    def test_chunks(self) -> None:
        long = NodeWithScore(
            node=TextNode(text=" ".join(f"Sentence number {i} is here." for i in range(60)))
        )
        out = CitationPostprocessor(granularity="chunk", chunk_size=40).postprocess_nodes([long])
        assert len(out) > 3 and all(len(n.node.text) < 300 for n in out)

    @pytest.mark.slow
    async def test_embedding_filter_keeps_the_relevant_sentences(self, embed_model) -> None:
        post = CitationPostprocessor(granularity="sentence", embed_model=embed_model, top_n=2)
        out = post.postprocess_nodes(self.nodes(), query_str="How fast does a cheetah run in km/h?")
        assert out[0].node.text.startswith("The cheetah is capable of running")
        assert len(out) == 2 and out[0].score >= out[1].score
        assert [n.node.metadata["citation_id"] for n in out] == [1, 2]
        async_out = await post.apostprocess_nodes(
            self.nodes(), query_str="How fast does a cheetah run in km/h?"
        )
        assert [n.node.text for n in async_out] == [n.node.text for n in out]
        cut = CitationPostprocessor(
            granularity="sentence", embed_model=embed_model, similarity_cutoff=0.99
        )
        assert cut.postprocess_nodes(self.nodes(), query_str="cheetah speed") == []

    @pytest.mark.slow
    def test_in_a_core_query_engine(self, retriever) -> None:
        llm = ScriptedLLM(default_reply="About 100 km/h.")
        engine = RetrieverQueryEngine.from_args(
            retriever, llm=llm, node_postprocessors=[CitationPostprocessor(granularity="sentence")]
        )
        response = engine.query("How fast is a cheetah?")
        assert all("citation_id" in n.node.metadata for n in response.source_nodes)
        assert "citation_id: 1" in llm.prompts[0]

    @pytest.mark.slow
    def test_with_cited_engine_cites_sentences(self, retriever) -> None:
        def reply(prompt: str) -> str:
            return f"About 100 km/h [1](id={id_of(prompt, 'The cheetah is capable of running')})."

        engine = CitedQueryEngine(
            retriever,
            ScriptedLLM(replies=reply),
            style="text",
            node_postprocessors=[CitationPostprocessor(granularity="sentence")],
        )
        response = engine.query("How fast is a cheetah?")
        assert [n.node.text for n in response.source_nodes] == [
            "The cheetah is capable of running at 93 to 104 km/h (58 to 65 mph)."
        ]

    def test_bad_arguments(self, embed_model) -> None:
        with pytest.raises(ConfigurationError, match="node, chunk, sentence"):
            CitationPostprocessor(granularity="word")
        with pytest.raises(ConfigurationError, match="needs an embed_model"):
            CitationPostprocessor(similarity_cutoff=0.5)
        with pytest.raises(ConfigurationError, match="top_n must be > 0"):
            CitationPostprocessor(top_n=0)
        with pytest.raises(ConfigurationError, match="chunk_overlap"):
            CitationPostprocessor(granularity="chunk", chunk_size=10, chunk_overlap=10)
        with pytest.raises(ConfigurationError, match=r"\[-1, 1\]"):
            CitationPostprocessor(embed_model=embed_model, similarity_cutoff=2.0)


@pytest.mark.slow
def test_local_llm_stream_is_rewritten_consistently(retriever, local_llm) -> None:
    """Whatever the real local model writes, no well-formed marker survives and citations are
    valid."""
    from llama_index_rag_pack.citations.citation_markers import MATCH, scan_marker

    engine = CitedQueryEngine(retriever, local_llm, style="text", streaming=True)
    response = engine.query("How fast can a cheetah run?")
    text = "".join(response.response_gen)
    assert text.strip()
    assert not any(scan_marker(text, i)[0] == MATCH for i, ch in enumerate(text) if ch == "[")
    context_ids = {n.node.node_id for n in response.context_nodes}
    assert {n.node.node_id for n in response.source_nodes} <= context_ids
    assert all(
        1 <= p <= len(response.context_nodes) for c in response.citations for p in c.positions
    )


@pytest.mark.slow
def test_without_llm_the_engine_uses_llamaindex_settings(
    shared_retriever: BaseRetriever, monkeypatch: pytest.MonkeyPatch
) -> None:
    # like core's CitationQueryEngine: llm=None falls back to Settings.llm
    from llama_index.core import Settings

    llm = ScriptedLLM(replies=cheetah_marker_reply)
    monkeypatch.setattr(Settings, "_llm", llm)
    engine = CitedQueryEngine(shared_retriever, style="text")
    response = engine.query("How fast can a cheetah run?")
    assert llm.call_count == 1
    assert "93 to 104 km/h [1]" in str(response) and CHEETAH_URL in str(response)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["sync", "async", "stream"])
def test_callback_handlers_see_the_query_and_the_retrieval(retriever, path: str) -> None:
    """Like core's CitationQueryEngine: a LlamaDebugHandler on Settings.callback_manager records
    one QUERY and one RETRIEVE event per question, the retrieved nodes and the response."""
    import asyncio

    from llama_index.core import Settings
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler

    debug = LlamaDebugHandler()
    previous = Settings.callback_manager
    Settings.callback_manager = CallbackManager([debug])
    try:
        llm = ScriptedLLM(replies=cheetah_marker_reply)
        engine = CitedQueryEngine.from_args(retriever, llm=llm, streaming=path == "stream")
        if path == "async":
            response = asyncio.run(engine.aquery(QUESTION))
        else:
            response = engine.query(QUESTION)
        if path == "stream":
            "".join(response.response_gen)
    finally:
        Settings.callback_manager = previous
    queries = debug.get_event_pairs(CBEventType.QUERY)
    retrievals = debug.get_event_pairs(CBEventType.RETRIEVE)
    assert len(queries) == 1 and len(retrievals) == 1
    assert queries[0][0].payload["query_str"] == QUESTION
    assert retrievals[0][1].payload["nodes"], "the retrieved nodes reach the handler"
    assert queries[0][1].payload["response"] is response


@pytest.mark.slow
def test_from_args_passes_every_engine_option_and_refuses_unknown_ones(retriever) -> None:
    llm = ScriptedLLM(replies=cheetah_marker_reply)
    engine = CitedQueryEngine.from_args(retriever, llm=llm, mode="quotes", style="text")
    assert engine.mode.value == "quotes" and engine.attributor is not None
    with pytest.raises(ConfigurationError, match="unknown options \\['colour'\\]"):
        CitedQueryEngine.from_args(retriever, llm=llm, colour="red")
