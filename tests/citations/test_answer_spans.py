"""Short answer spans: every span is the sentence's own text, of the kind the question asks for,
never made of the question's words; the confident span is shown only when one clearly fits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.citations.answer_spans import (
    MAX_SPAN_WORDS,
    best_span,
    confident_span,
    question_kind,
    ranked_spans,
    span_candidates,
)

WORDS = st.sampled_from(
    "the Moon landed on July 20 1969 Neil Armstrong and Buzz Aldrin in Ulm 125 films about "
    'called neoteny ( ) , ; - " was born who when how many where 40,000,000 tons UTC of '
    "Kodak Theatre now known as Dolby 0.7 mA sub-Saharan Africa".split()
)
TEXT = st.lists(WORDS, min_size=0, max_size=40).map(" ".join)


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("When did the first aircraft fly?", "date"),
        ("In what year was the treaty signed?", "date"),
        ("How many colonists came when the Vikings settled?", "number"),  # earliest cue wins
        ("What percentage of voters turned out?", "number"),
        ("What is it called when a salamander never matures?", "term"),
        ("What does ASCIZ's last letter stand for?", "term"),
        ("Who built the cathedral?", "name"),
        ("Where was the film shot?", "name"),
        ("Which team won the cup?", "name"),
        ("Why did the empire fall?", "other"),
        ("What does the aardvark eat?", "other"),
    ],
)
def test_question_kinds(question: str, kind: str) -> None:
    assert question_kind(question) == kind


@pytest.mark.parametrize(
    ("question", "sentence", "answer"),
    [
        (
            "When did Apollo 11 land on the Moon?",
            "Apollo 11 landed on the Moon on July 20, 1969, after four days.",
            "July 20, 1969",
        ),
        (
            "Where was Albert Einstein born?",
            "Albert Einstein was born in Ulm, in the Kingdom of Württemberg on 14 March 1879.",
            "Ulm",
        ),
        (
            "How many films did Allan Dwan direct over his career?",
            "Over a long career spanning almost 50 years, Dwan directed 125 motion pictures.",
            "125",
        ),
        (
            "What is it called when a salamander stays a juvenile for life?",
            "It remains in the larval state, a condition known as neoteny, for life.",
            "neoteny",
        ),
        (
            "Who is the only Democrat to win Alaska for the White House?",
            "Alaska was carried by Democratic nominee Lyndon B. Johnson in 1964.",
            "Lyndon B. Johnson",
        ),
        (
            "What was the world's bitumen output in the mid-1980s?",
            "Production About 40,000,000 tons were produced in 1984.",
            "About 40,000,000 tons",
        ),
    ],
)
def test_the_span_of_the_asked_kind_near_the_questions_words(
    question: str, sentence: str, answer: str
) -> None:
    assert best_span(question, sentence) == answer
    assert confident_span(question, sentence) == answer


def test_no_short_answer_for_a_question_that_asks_for_no_kind_of_span() -> None:
    sentence = "The aardvark feeds almost exclusively on ants and termites."
    assert confident_span("What does the aardvark eat?", sentence) is None
    assert confident_span("Why did the empire fall?", "It fell for many reasons.") is None


def test_no_short_answer_when_two_spans_fit_alike() -> None:
    """Two names next to each other after the question's words: neither clearly fits."""
    sentence = "The prize went to Smith, Jones."
    assert ranked_spans("Who won the prize?", sentence)[:2] == ["Smith", "Jones"]
    assert confident_span("Who won the prize?", sentence) is None


def test_a_span_of_the_questions_own_words_is_never_offered() -> None:
    spans = span_candidates("Who wrote Animal Farm?", "Animal Farm was written by George Orwell.")
    texts = [s.text for s in spans]
    assert "Animal Farm" not in texts and "George Orwell" in texts


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(question=TEXT, sentence=TEXT)
def test_every_span_is_the_sentences_own_text(question: str, sentence: str) -> None:
    for span in span_candidates(question, sentence):
        assert span.text in sentence
        assert sentence.find(span.text) >= 0 and 0 <= span.start < max(1, len(sentence))
        assert len(span.text.split()) <= MAX_SPAN_WORDS
        assert span.kind in ("date", "number", "name", "term", "clause")
    ranked = ranked_spans(question, sentence)
    assert len(ranked) == len(set(s.lower() for s in ranked))
    best = best_span(question, sentence)
    assert best in sentence
    shown = confident_span(question, sentence)
    assert shown is None or shown == ranked[0]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(question=st.text(max_size=80), sentence=st.text(max_size=300))
def test_any_text_gives_spans_without_error(question: str, sentence: str) -> None:
    for span in span_candidates(question, sentence):
        assert span.text in sentence
    confident_span(question, sentence)
