"""Extractive answers: with a model too small to be believed, the answer is the passages' own
sentences under a short answer line, every line cited, nothing invented; any other LLM answers
as before.

Real Milvus Lite and the bundled embedding model; the small model is the bundled SmolLM2-135M
where its choice matters, else a scripted LLM that says it is a small GGUF file and fails the test
if it is ever called.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack import RagPack
from llama_index_rag_pack.citations.answer_spans import ranked_spans
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.citations.extractive_answers import (
    NOTHING_TO_QUOTE,
    QUOTED_SENTENCES,
    ExtractiveAnswerer,
)
from llama_index_rag_pack.citations.sentence_ranking import quotable_pieces
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.connection import flush, open_vector_store
from llama_index_rag_pack.models.answer_style import (
    SMALL_MODEL_PARAMETERS,
    describe_answer_style,
    resolve_answer_style,
)
from llama_index_rag_pack.models.gguf_file import GGUFInfo
from llama_index_rag_pack.testing import ScriptedLLM

APOLLO = "https://en.wikipedia.org/wiki/Apollo_11"
EINSTEIN = "https://en.wikipedia.org/wiki/Albert_Einstein"
AARDVARK = "https://en.wikipedia.org/wiki/Aardvark"
CHUNKS = [
    (
        "Apollo 11 was the first spaceflight that landed humans on the Moon. Commander Neil "
        "Armstrong and lunar module pilot Buzz Aldrin landed the lunar module Eagle on July 20, "
        "1969. Michael Collins flew the command module Columbia alone in lunar orbit.",
        {"title": "Apollo 11", "url": APOLLO},
    ),
    (
        "Albert Einstein was born in Ulm, in the Kingdom of Württemberg, on 14 March 1879. His "
        "family moved to Munich a year later. He developed the theory of relativity.",
        {"title": "Albert Einstein", "url": EINSTEIN},
    ),
    (
        "The aardvark is nocturnal and feeds almost exclusively on ants and termites. It digs "
        "burrows with its strong claws. Aardvarks live in sub-Saharan Africa.",
        {"title": "Aardvark", "url": AARDVARK},
    ),
]
_LINE = re.compile(r'^(?:- "(?P<quote>.*)"|(?P<short>.*?)) \[(?P<k>\d+)\]\(id=(?P<id>\d+)\)$')


class SmallGGUF(ScriptedLLM):
    """A scripted LLM that reads like a small local GGUF model (135M weights)."""

    parameters: int = 135_000_000

    @property
    def gguf_info(self) -> GGUFInfo:
        return GGUFInfo("llama", 8192, None, "tiny", parameters=self.parameters)


def silent_small_llm(parameters: int = 135_000_000) -> SmallGGUF:
    """Raises ``ScriptExhaustedError`` on any call: extractive answers never call the LLM."""
    return SmallGGUF(replies=[], parameters=parameters)


@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> BaseRetriever:
    uri = str(Path(tmp_path_factory.mktemp("extractive")) / "milvus.db")
    store = open_vector_store(uri, "extractive", dim=384)
    nodes = [TextNode(text=t, metadata=m, id_=f"n{i}") for i, (t, m) in enumerate(CHUNKS)]
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
    )
    flush(store)
    return index.as_retriever(similarity_top_k=3)


def engine(retriever: BaseRetriever, embed_model: Any, llm: Any = None, **kw: Any) -> Any:
    return CitedQueryEngine(
        retriever, llm or silent_small_llm(), embed_model=embed_model, style="text", **kw
    )


def lines_hold_their_passages(response: Any) -> list[tuple[str, str]]:
    """Every line of the marked answer: its text, and the passage it cites (which must hold
    it verbatim)."""
    marked = response.metadata["marked_answer"]
    texts = [n.node.get_content() for n in response.context_nodes]
    out = []
    for line in filter(None, marked.splitlines()):
        m = _LINE.match(line)
        assert m, f"an uncited line: {line!r}"
        text = m.group("quote") if m.group("quote") is not None else m.group("short")
        passage = texts[int(m.group("id")) - 1]
        assert text in passage, (text, passage)
        out.append((text, passage))
    return out


# --------------------------------------------------------------------------- which style
def test_auto_is_extractive_for_a_small_local_model_and_generative_for_any_other() -> None:
    from llama_index.llms.openai_like import OpenAILike

    assert resolve_answer_style("auto", silent_small_llm()) == "extractive"
    assert resolve_answer_style("auto", silent_small_llm(SMALL_MODEL_PARAMETERS)) == "generative"
    assert resolve_answer_style("auto", silent_small_llm(7_000_000_000)) == "generative"
    assert resolve_answer_style("auto", ScriptedLLM(replies=["x"])) == "generative"
    remote = OpenAILike(model="served", api_base="http://127.0.0.1:9/v1", api_key="none")
    assert resolve_answer_style("auto", remote) == "generative"
    assert resolve_answer_style("extractive", remote) == "extractive"
    assert resolve_answer_style("generative", silent_small_llm()) == "generative"
    assert describe_answer_style("auto", silent_small_llm()) == (
        "extractive (auto: 135M weights, below 1B)"
    )
    assert "not a local GGUF model" in describe_answer_style("auto", remote)


@pytest.mark.slow
def test_the_bundled_model_is_small(local_llm: Any) -> None:
    assert 100_000_000 < local_llm.gguf_info.parameters < SMALL_MODEL_PARAMETERS
    assert resolve_answer_style("auto", local_llm) == "extractive"


@pytest.mark.slow
def test_unknown_styles_and_short_answers_are_one_line_errors(retriever, embed_model) -> None:
    with pytest.raises(ConfigurationError, match="unknown answer_style 'short'"):
        engine(retriever, embed_model, answer_style="short")
    with pytest.raises(ConfigurationError, match="unknown short_answer 'llm'"):
        engine(retriever, embed_model, short_answer="llm")
    with pytest.raises(ConfigurationError, match="at least 1"):
        ExtractiveAnswerer(quoted=0)


# --------------------------------------------------------------------------- the answers
@pytest.mark.slow
@pytest.mark.parametrize(
    ("question", "short", "holds"),
    [
        ("Where was Albert Einstein born?", "Ulm", "Ulm"),
        ("When did the lunar module land?", "July 20, 1969", "July 20, 1969"),
        ("What does the aardvark eat?", None, "ants and termites"),  # no kind asked: no line
    ],
)
def test_the_answer_is_the_passages_own_sentences_each_cited(
    retriever, embed_model, question: str, short: str | None, holds: str
) -> None:
    response = engine(retriever, embed_model).query(question)
    assert response.metadata["answer_style"] == "extractive"
    assert response.metadata["citation_origin"] == "extracted"
    assert response.metadata["short_answer"] == short
    assert holds in response.answer
    lines = lines_hold_their_passages(response)
    assert len(lines) == QUOTED_SENTENCES + (short is not None)
    if short is not None:
        assert response.answer.startswith(short + " [1]")
    assert response.citations and response.source_nodes
    assert "Sources:" in str(response) or "[1]" in str(response)


@pytest.mark.slow
def test_three_astronauts_are_quoted(retriever, embed_model) -> None:
    answer = engine(retriever, embed_model).query("Who were the astronauts of Apollo 11?").answer
    for name in ("Armstrong", "Aldrin", "Collins"):
        assert name in answer


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["markers", "quotes", "annotate"])
async def test_every_citation_mode_sync_and_async_alike(retriever, embed_model, mode) -> None:
    eng = engine(retriever, embed_model, mode=mode)
    question = "Where was Albert Einstein born?"
    sync = eng.query(question)
    asynchronous = await eng.aquery(question)
    assert sync.response == asynchronous.response
    lines = lines_hold_their_passages(sync)
    if mode == "quotes":  # the quotes verified where they stand: exactly
        assert [q.match.value for q in sync.quotes] == ["exact"] * QUOTED_SENTENCES
        assert all(q.source_id == q.claimed_id for q in sync.quotes)
    if mode == "annotate":  # each line mapped to the passage it comes from
        annotations = sync.metadata["annotations"]
        assert len(annotations) == len(lines)
        texts = [n.node.get_content() for n in sync.context_nodes]
        for (text, _), ids in zip(lines, annotations.values(), strict=True):
            assert text in texts[ids[0] - 1]


@pytest.mark.slow
async def test_streaming_gives_the_same_answer_sync_and_async(retriever, embed_model) -> None:
    eng = engine(retriever, embed_model)
    question = "When did the lunar module land?"
    whole = eng.query(question).response
    streamed = eng.respond(eng.retrieve(QueryBundle(question)), question, streaming=True)
    assert "".join(streamed.response_gen) == whole
    astreamed = await eng.arespond(
        await eng.aretrieve(QueryBundle(question)), question, streaming=True
    )
    assert "".join([d async for d in astreamed.async_response_gen()]) == whole


def test_nothing_retrieved_says_so_without_a_citation(embed_model) -> None:
    eng = engine(_Empty(), embed_model)
    response = eng.query("Where was Albert Einstein born?")
    assert response.answer.strip() == NOTHING_TO_QUOTE
    assert not response.citations and not response.source_nodes


@pytest.mark.slow
def test_a_question_not_in_latin_letters_gets_quotes_without_a_short_line(
    retriever, embed_model
) -> None:
    response = engine(retriever, embed_model).query("爱因斯坦出生在哪里？Einstein")
    assert response.metadata["short_answer"] is None
    assert lines_hold_their_passages(response)


@pytest.mark.slow
def test_without_an_embedding_model_sentences_rank_by_terms(retriever) -> None:
    eng = CitedQueryEngine(retriever, silent_small_llm(), style="text")
    response = eng.query("Where was Albert Einstein born?")
    assert "Ulm" in response.answer
    lines_hold_their_passages(response)


def test_a_run_together_list_is_quoted_item_by_item() -> None:
    crew = "Support crew - " + " - ".join(
        f"Person Number{i} (CAPCOM), flight staff" for i in range(20)
    )
    pieces = quotable_pieces(crew)
    assert len(pieces) == 20 and all(p in crew for p in pieces)
    assert quotable_pieces("A short sentence.") == ["A short sentence."]


# --------------------------------------------------------------------------- the short line
@pytest.mark.slow
def test_the_local_model_picks_the_short_line_among_the_rules_spans(
    retriever, embed_model, local_llm
) -> None:
    eng = engine(retriever, embed_model, llm=local_llm, short_answer="model")
    response = eng.query("Where was Albert Einstein born?")
    first_quote = response.metadata["extracted_quotes"][0]["text"]
    short = response.metadata["short_answer"]
    assert short in ranked_spans("Where was Albert Einstein born?", first_quote)[:3]
    assert response.metadata["short_answer_by"] == "model"
    lines_hold_their_passages(response)


@pytest.mark.slow
def test_an_llm_that_cannot_hold_to_a_schema_leaves_the_rules_line(retriever, embed_model) -> None:
    eng = engine(retriever, embed_model, short_answer="model")  # never called: no schema
    assert eng.query("Where was Albert Einstein born?").metadata["short_answer"] == "Ulm"


@pytest.mark.slow
def test_short_answer_none_quotes_only(retriever, embed_model) -> None:
    response = engine(retriever, embed_model, short_answer="none").query(
        "Where was Albert Einstein born?"
    )
    assert response.metadata["short_answer"] is None
    assert response.answer.startswith('- "Albert Einstein was born in Ulm')


# --------------------------------------------------------------------------- generative
@pytest.mark.slow
def test_any_other_llm_answers_generatively_exactly_as_before(retriever, embed_model) -> None:
    def reply(prompt: str) -> str:
        ids = re.findall(r'<document id=(\d+) title="Albert Einstein"', prompt)
        return f"Einstein was born in Ulm [7](id={ids[0]})."

    auto = engine(retriever, embed_model, llm=ScriptedLLM(replies=reply))
    before = engine(
        retriever, embed_model, llm=ScriptedLLM(replies=reply), answer_style="generative"
    )
    assert auto.answer_style == "generative"
    question = "Where was Albert Einstein born?"
    a, b = auto.query(question), before.query(question)
    assert a.response == b.response and a.answer == "Einstein was born in Ulm [1]."
    assert "answer_style" not in a.metadata and a.metadata["citation_origin"] == "model"


@pytest.mark.slow
def test_extractive_can_be_chosen_for_any_llm(retriever, embed_model) -> None:
    eng = engine(retriever, embed_model, llm=ScriptedLLM(replies=[]), answer_style="extractive")
    assert eng.query("Where was Albert Einstein born?").metadata["short_answer"] == "Ulm"


# --------------------------------------------------------------------------- the pack
@pytest.mark.slow
def test_the_pack_answers_extractively_with_a_small_model_and_says_so(
    tmp_path: Path, embed_model
) -> None:
    from llama_index.core import Document

    docs = [Document(text=t, metadata=m) for t, m in CHUNKS]
    pack = RagPack(
        docs, uri=str(tmp_path / "p.db"), embed_model=embed_model, llm=silent_small_llm()
    )
    assert pack.describe()["answer_style"] == "extractive (auto: 135M weights, below 1B)"
    response = pack.run("Where was Albert Einstein born?")
    assert response.metadata["short_answer"] == "Ulm"
    with pytest.raises(Exception, match="ScriptExhaustedError|no reply left"):
        pack.run("Where was Albert Einstein born?", answer_style="generative")
    with pytest.raises(ConfigurationError, match="needs citations=True"):
        pack.make_query_engine(citations=False, answer_style="extractive")
    with pytest.raises(ConfigurationError, match="unknown answer_style"):
        pack.run("Where was Albert Einstein born?", answer_style="terse")


class _Empty(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return []
