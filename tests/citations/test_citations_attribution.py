"""Attributed citations: answers whose sentences the LLM left without a valid marker.

The algorithms (sentence splitting with markers, lexical containment, which passages a sentence
cites) are checked against hand computations and with property tests; the engine runs with the
real bundled MiniLM embedding model and scripted LLM replies that look like what small models
write: no markers, invalid markers, markers on some sentences only, nothing at all, another
language, a sentence no passage supports.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_rag_pack.citations.annotations import split_prose_sentences
from llama_index_rag_pack.citations.attribution import (
    SentenceOrigin,
    SentenceSupport,
    answer_sentences,
    attribution_note,
    marked_answer,
)
from llama_index_rag_pack.citations.attribution_scores import (
    Passage,
    choose_sources,
    content_tokens,
    token_containment,
)
from llama_index_rag_pack.citations.citation_attribution import (
    SentenceAttributor,
    passage_sentences,
    resolve_attributor,
)
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.cli.evidence import (
    highlight,
    highlight_marks,
    passage_window,
    print_evidence,
)
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.testing import ScriptedLLM

CHEETAH_URL = "https://en.wikipedia.org/wiki/Cheetah"
LION_URL = "https://en.wikipedia.org/wiki/Lion"
ABACUS_URL = "https://en.wikipedia.org/wiki/Abacus"
PASSAGES = [
    (
        "The cheetah is a large cat native to Africa and central Iran. It is capable of running "
        "at 93 to 104 km/h (58 to 65 mph). It has a light build and long thin legs.",
        "Cheetah",
        CHEETAH_URL,
    ),
    (
        "The lion is a large cat of the genus Panthera. Lions live in groups called prides. "
        "A pride consists of a few adult males, related females and cubs.",
        "Lion",
        LION_URL,
    ),
    (
        "The abacus is a calculating tool used since ancient times. It is still used by "
        "merchants in parts of Asia and Africa.",
        "Abacus",
        ABACUS_URL,
    ),
]


class FixedRetriever(BaseRetriever):
    """Returns the three passages, in order (id=1 cheetah, id=2 lion, id=3 abacus)."""

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(text=t, metadata={"title": ti, "url": u}, id_=ti), score=1)
            for t, ti, u in PASSAGES
        ]


class AsyncOnlyEmbedding:
    """The bundled model behind a wrapper whose sync batch call raises: proves the async path
    awaits the embedding model."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.async_calls = 0

    def get_text_embedding_batch(self, texts: list[str], **kwargs: Any) -> Any:
        raise AssertionError("the async path called the sync embedding method")

    async def aget_text_embedding_batch(self, texts: list[str], **kwargs: Any) -> Any:
        self.async_calls += 1
        return self.model.get_text_embedding_batch(texts)


def engine(embed_model: Any, reply: str, **kwargs: Any) -> CitedQueryEngine:
    return CitedQueryEngine(
        FixedRetriever(),
        ScriptedLLM(default_reply=reply, **kwargs.pop("llm", {})),
        embed_model=embed_model,
        style="text",
        **kwargs,
    )


def origins(response: Any) -> list[tuple[str, list[int]]]:
    return [(v.origin.value, v.positions) for v in response.attribution.verdicts]


# --------------------------------------------------------------------------- pure functions
class TestAnswerSentences:
    def test_markers_are_read_and_a_leading_run_joins_the_sentence_before(self) -> None:
        sentences = answer_sentences("Cats run [1](id=1). [2](id=3,4) Lions roar! Done")
        assert [s.text for s in sentences] == ["Cats run .", "Lions roar!", "Done"]
        assert [s.ids for s in sentences] == [(1, 3, 4), (), ()]

    def test_a_false_marker_is_text(self) -> None:
        (sentence,) = answer_sentences("See [1](id=) and [x](y).")
        assert sentence.ids == () and sentence.text == "See [1](id=) and [x](y)."

    @pytest.mark.slow
    @given(st.text(alphabet="ab .![]()id=1,\n", max_size=80))
    @settings(max_examples=300, deadline=None)
    def test_the_raw_sentences_give_the_answer_back(self, text: str) -> None:
        sentences = answer_sentences(text)
        assert "".join(s.raw for s in sentences) == text
        unchanged = [
            SentenceSupport(i, s.text, SentenceOrigin.MODEL) for i, s in enumerate(sentences)
        ]
        assert marked_answer(sentences, unchanged) == text


class TestLexical:
    def test_containment_is_fuzzy_per_word(self) -> None:
        tokens = content_tokens("The astronauts landed in 1969.", {"the", "in"})
        assert tokens == ["astronauts", "landed", "1969"]
        groups = [["astronaut", "landed", "1968"], ["moon"], []]
        assert token_containment(tokens, groups).tolist() == [2 / 3, 0.0, 0.0]

    @pytest.mark.slow
    @given(st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=8), min_size=1, max_size=8))
    @settings(max_examples=200, deadline=None)
    def test_every_token_is_found_in_its_own_sentence(self, tokens: list[str]) -> None:
        values = token_containment(tokens, [tokens, []])
        assert values[0] == 1.0 and values[1] == 0.0

    def test_passage_spans_point_at_the_sentences(self) -> None:
        passage = Passage.from_sentences("One  two.\nThree four.", ["One two.", "Three four."])
        assert [passage.sentence(k) for k in range(2)] == ["One two.", "Three four."]


class TestChooseSources:
    @pytest.mark.slow
    @given(
        st.lists(st.floats(0, 1, allow_nan=False), max_size=8),
        st.floats(0.05, 1),
        st.floats(0, 0.5),
        st.integers(1, 4),
    )
    @settings(max_examples=300, deadline=None)
    def test_properties(self, values: list[float], threshold: float, margin: float, k: int) -> None:
        chosen = choose_sources(values, threshold=threshold, margin=margin, max_sources=k)
        assert len(chosen) <= k and len(set(chosen)) == len(chosen)
        assert (chosen == []) == (not values or max(values) < threshold)
        if chosen:
            assert values[chosen[0]] == max(values)
            assert all(
                values[i] >= threshold and values[i] >= max(values) - margin - 1e-9 for i in chosen
            )
            assert [values[i] for i in chosen] == sorted((values[i] for i in chosen), reverse=True)

    def test_reference_case(self) -> None:
        values = [0.2, 0.71, 0.65, 0.8]
        assert choose_sources(values, threshold=0.5, margin=0.1, max_sources=2) == [3, 1]
        assert choose_sources(values, threshold=0.5) == [3]  # default: the best passage only
        assert choose_sources([0.49, 0.3], threshold=0.5) == []


def test_note_names_unsupported_sentences_and_is_empty_when_all_is_the_models() -> None:
    model = SentenceSupport(0, "A.", SentenceOrigin.MODEL, [1])
    skipped = SentenceSupport(1, "Sure!", SentenceOrigin.SKIPPED)
    assert attribution_note([model, skipped]) == ""
    unsupported = SentenceSupport(2, "Made up.", SentenceOrigin.UNSUPPORTED)
    note = attribution_note([model, skipped, unsupported])
    assert note.startswith("Note: ") and "“Made up.”" in note and "attributed" not in note


def test_bad_options_are_one_line_errors(embed_model) -> None:
    with pytest.raises(ConfigurationError, match="threshold must be in"):
        SentenceAttributor(embed_model, threshold=0)
    with pytest.raises(ConfigurationError, match="max_sources"):
        SentenceAttributor(embed_model, max_sources=0)
    with pytest.raises(ConfigurationError, match="embedding model"):
        SentenceAttributor("minilm")
    with pytest.raises(ConfigurationError, match="attribution must be"):
        resolve_attributor("yes", embed_model)
    assert resolve_attributor(True, None) is None and resolve_attributor(False, embed_model) is None


# --------------------------------------------------------------------------- the engine
NO_MARKERS = (
    "The cheetah can run at up to 104 km/h. Lions live in groups called prides. "
    "The abacus was invented on the Moon in 2011 by robots."
)


class TestEngine:
    def test_answer_without_markers_is_attributed_sentence_by_sentence(self, embed_model) -> None:
        response = engine(embed_model, NO_MARKERS).query("cheetah speed and lions?")
        assert response.answer == (
            "The cheetah can run at up to 104 km/h [1]. Lions live in groups called prides [2]. "
            "The abacus was invented on the Moon in 2011 by robots."
        )
        assert origins(response) == [("attributed", [1]), ("attributed", [2]), ("unsupported", [])]
        assert response.references == (
            f"\n\nSources:\n  [1] Cheetah — {CHEETAH_URL}\n  [2] Lion — {LION_URL}"
        )
        assert response.note.startswith("\n\nNote: citations on 2 of 3 sentences were attributed")
        assert "“The abacus was invented on the Moon in 2011 by robots.”" in response.note
        assert str(response) == response.answer + response.note + response.references
        meta = response.metadata
        assert meta["citation_origin"] == "attributed"
        assert [c["origin"] for c in meta["citations"]] == ["attributed", "attributed"]
        assert meta["attribution"]["unsupported"] == [2]
        assert [n.node.node_id for n in response.source_nodes] == ["Cheetah", "Lion"]

    def test_evidence_points_at_the_supporting_passage_sentence(self, embed_model) -> None:
        response = engine(embed_model, NO_MARKERS).query("q")
        passages = response.attribution.passages
        speed, prides = (v.evidence[0] for v in response.attribution.verdicts[:2])
        text = passages[0].text[speed.start : speed.end]
        assert text == "It is capable of running at 93 to 104 km/h (58 to 65 mph)."
        assert passages[1].text[prides.start : prides.end] == "Lions live in groups called prides."

    def test_valid_model_markers_are_kept_untouched(self, embed_model) -> None:
        # The model cites the lion passage for a cheetah sentence: wrong, but its own choice.
        reply = "Cheetahs run at 104 km/h [1](id=2). Lions live in prides."
        response = engine(embed_model, reply).query("q")
        assert response.answer == "Cheetahs run at 104 km/h [1]. Lions live in prides [1]."
        assert origins(response) == [("model", [2]), ("attributed", [2])]
        assert response.metadata["citation_origin"] == "mixed"
        assert response.metadata["citations"][0]["origin"] == "both"
        assert "1 of 2 sentences" in response.note

    def test_all_sentences_cited_by_the_model_needs_no_note(self, embed_model) -> None:
        reply = "Cheetahs run at 104 km/h [1](id=1). Lions live in prides [2](id=2)."
        response = engine(embed_model, reply).query("q")
        assert response.note == "" and response.metadata["citation_origin"] == "model"
        assert [c["origin"] for c in response.metadata["citations"]] == ["model", "model"]

    def test_invalid_markers_are_dropped_and_the_sentence_attributed(self, embed_model) -> None:
        reply = "Lions live in prides [1](id=9). The cheetah runs at 104 km/h [2](id=)."
        response = engine(embed_model, reply).query("q")
        assert response.answer == (
            "Lions live in prides [1]. The cheetah runs at 104 km/h [2](id=) [2]."
        )
        assert response.metadata["dropped_ids"] == [9]
        assert origins(response) == [("attributed", [2]), ("attributed", [1])]

    @pytest.mark.parametrize("reply", ["", "   ", "\n"])
    def test_empty_answer(self, embed_model, reply: str) -> None:
        response = engine(embed_model, reply).query("q")
        assert response.citations == [] and response.note == ""
        assert response.metadata["citation_origin"] == "none"

    def test_answer_in_another_language_is_flagged_not_cited(self, embed_model) -> None:
        reply = "狮子生活在被称为狮群的群体中。Les guépards sont rapides."
        response = engine(embed_model, reply).query("q")
        assert response.citations == []
        assert {o for o, _ in origins(response)} == {"unsupported"}
        assert "no passage supports" in response.note

    def test_attribution_off(self, embed_model) -> None:
        response = engine(embed_model, NO_MARKERS, attribution=False).query("q")
        assert response.citations == [] and response.attribution is None
        assert response.metadata["citation_origin"] == "none"

    def test_streaming_lists_the_attributed_sources_after_the_answer(self, embed_model) -> None:
        response = engine(embed_model, NO_MARKERS, streaming=True).query("q")
        text = "".join(response.response_gen)
        assert text.startswith(NO_MARKERS + "\n\nNote: citations on 2 of 3 sentences")
        assert text.endswith(f"Sources:\n  [1] Cheetah — {CHEETAH_URL}\n  [2] Lion — {LION_URL}")
        assert [c.title for c in response.citations] == ["Cheetah", "Lion"]
        assert response.metadata["citation_origin"] == "attributed"
        assert origins(response)[:2] == [("attributed", [1]), ("attributed", [2])]

    async def test_async_awaits_the_llm_and_the_embedding_model(self, embed_model) -> None:
        wrapped = AsyncOnlyEmbedding(embed_model)
        eng = engine(wrapped, NO_MARKERS, llm={"forbid_sync": True})
        response = await eng.aquery("q")
        sync = engine(embed_model, NO_MARKERS).query("q")
        assert response.answer == sync.answer and origins(response) == origins(sync)
        assert wrapped.async_calls == 1

    async def test_async_streaming(self, embed_model) -> None:
        wrapped = AsyncOnlyEmbedding(embed_model)
        eng = engine(wrapped, NO_MARKERS, streaming=True, llm={"forbid_sync": True})
        response = await eng.aquery("q")
        text = "".join([t async for t in response.async_response_gen()])
        assert f"[2] Lion — {LION_URL}" in text and response.metadata["attribution"]
        assert origins(response)[2] == ("unsupported", [])

    @pytest.mark.parametrize("mode", ["annotate", "quotes"])
    def test_other_modes_fill_the_gaps_too(self, embed_model, mode: str) -> None:
        # annotate: the second call maps nothing; quotes: the model ignored the JSON format.
        replies = [NO_MARKERS, "I cannot map these."] if mode == "annotate" else [NO_MARKERS]
        eng = CitedQueryEngine(
            FixedRetriever(),
            ScriptedLLM(replies=replies),
            embed_model=embed_model,
            mode=mode,
            style="text",
        )
        response = eng.query("q")
        assert [c.title for c in response.citations] == ["Cheetah", "Lion"]
        assert response.metadata["citation_origin"] == "attributed"


# --------------------------------------------------------------------------- --show-sources
class TestEvidenceRendering:
    def test_highlight_merges_overlaps_and_uses_ansi_on_a_terminal(self) -> None:
        text = "One. Two. Three."
        assert highlight(text, [(5, 9), (7, 16), (0, 0)]) == "One. >>Two. Three.<<"
        assert highlight(text, [(0, 4)], tty=True) == "\033[1mOne.\033[0m Two. Three."

    def test_long_passages_are_cut_around_the_highlight(self) -> None:
        text = "a " * 500 + "KEY." + " b" * 500
        window, spans = passage_window(text, [(1000, 1004)])
        assert window.startswith("… ") and window.endswith(" …") and len(window) < 600
        assert [window[s:e] for s, e in spans] == ["KEY."]

    @pytest.mark.parametrize("tty", [False, True])
    def test_print_evidence(self, embed_model, capsys, tty: bool) -> None:
        print_evidence(engine(embed_model, NO_MARKERS).query("q"), tty=tty)
        out = capsys.readouterr().out
        opening, closing = highlight_marks(tty)
        assert f"[1] Cheetah — {CHEETAH_URL} (attributed by similarity)" in out
        assert "answer: “The cheetah can run at up to 104 km/h.”" in out
        speed = "It is capable of running at 93 to 104 km/h (58 to 65 mph)."
        assert f"{opening}{speed}{closing}" in " ".join(out.split())
        assert "unsupported: “The abacus was invented on the Moon in 2011 by robots.”" in out

    def test_model_citations_are_labelled_as_the_models(self, embed_model, capsys) -> None:
        reply = "Lions live in groups called prides [1](id=2)."
        print_evidence(engine(embed_model, reply).query("q"), tty=False)
        out = capsys.readouterr().out
        assert f"[1] Lion — {LION_URL} (cited by the model)" in out
        assert ">>Lions live in groups called prides.<<" in out and "unsupported" not in out


# --------------------------------------------------------------------------- the real local model
APOLLO = (
    "Apollo 11 was the spaceflight that first landed humans on the Moon. Commander Neil "
    "Armstrong and lunar module pilot Buzz Aldrin landed the Apollo Lunar Module Eagle on July "
    "20, 1969. Michael Collins flew the command module Columbia alone in lunar orbit while they "
    "were on the Moon's surface."
)
AARDVARK = (
    "The aardvark is a medium-sized, burrowing, nocturnal mammal native to Africa. It feeds "
    "almost exclusively on ants and termites, which it digs out of their hills with its claws."
)


class TwoPassages(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [
            NodeWithScore(node=TextNode(text=t, metadata={"title": ti}, id_=ti), score=1.0)
            for t, ti in ((AARDVARK, "Aardvark"), (APOLLO, "Apollo 11"))
        ]


@pytest.mark.slow
def test_the_bundled_local_model_gets_cited_answers(local_llm, embed_model, capsys) -> None:
    """SmolLM2-135M writes no marker; its answer still cites the passage its words come from (it
    may well be the wrong passage for the question: that is what the evidence shows)."""
    eng = CitedQueryEngine(
        TwoPassages(), local_llm, embed_model=embed_model, style="text", answer_style="generative"
    )
    response = eng.query("Who were the astronauts of Apollo 11?")
    assert "](id=" not in response.raw_answer
    assert response.metadata["citation_origin"] == "attributed", response.raw_answer
    assert response.citations and all(c.origin == "attributed" for c in response.citations)
    attribution = response.attribution
    for verdict in attribution.verdicts:
        for evidence in verdict.evidence:
            passage = attribution.passages[evidence.position - 1].text
            highlighted = set(passage[evidence.start : evidence.end].lower().split())
            assert highlighted & set(verdict.text.lower().split()), (verdict.text, passage)
    print_evidence(response, tty=False)
    out = capsys.readouterr().out
    assert "(attributed by similarity)" in out and ">>" in out and "<<" in out


@pytest.mark.slow
def test_attribution_splits_passages_without_importing_nltk() -> None:
    code = (
        "import sys\n"
        "from llama_index.core.schema import NodeWithScore, TextNode\n"
        "from llama_index_rag_pack.citations.citation_attribution import SentenceAttributor\n"
        "from llama_index_rag_pack.models.settings import resolve_embed_model\n"
        "text = 'Neil Armstrong walked on the Moon in 1969. Dr. Aldrin followed him.'\n"
        "node = NodeWithScore(node=TextNode(text=text), score=1.0)\n"
        "attributor = SentenceAttributor(resolve_embed_model())\n"
        "result = attributor.attribute('Armstrong walked on the Moon.', [node])\n"
        "print(result.marked, 'nltk' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["Armstrong", "walked", "on", "the", "Moon", "[1](id=1).", "False"]
    text = "Neil Armstrong walked first. Dr. Aldrin followed him, and J. R. Smith too."
    assert passage_sentences(text) == [  # where punkt cuts it
        "Neil Armstrong walked first.",
        "Dr. Aldrin followed him, and J. R. Smith too.",
    ]


@pytest.mark.slow
@given(st.text(alphabet="Ab. J?!U\n", max_size=60))
def test_prose_sentences_give_the_text_back(text: str) -> None:
    assert "".join(split_prose_sentences(text)) == text


def test_a_runaway_answer_is_scored_up_to_the_bound_and_the_rest_skipped(embed_model) -> None:
    from llama_index_rag_pack.citations.citation_attribution import MAX_SCORED_SENTENCES

    node = NodeWithScore(node=TextNode(text="Milvus is a vector database."), score=1.0)
    answer = "Milvus is a vector database. " * (MAX_SCORED_SENTENCES + 50)
    attribution = SentenceAttributor(embed_model).attribute(answer, [node])
    origins = [v.origin for v in attribution.verdicts]
    assert len(origins) == MAX_SCORED_SENTENCES + 50
    assert SentenceOrigin.SKIPPED not in origins[:MAX_SCORED_SENTENCES]
    assert set(origins[MAX_SCORED_SENTENCES:]) == {SentenceOrigin.SKIPPED}
    assert origins[0] == SentenceOrigin.ATTRIBUTED
