"""Quote verification (exact → normalised → fuzzy) and tolerant parsing of quoted answers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz import fuzz

from llama_index_rag_pack.citations.quotes import (
    QuoteCheck,
    QuoteMatch,
    normalize_with_map,
    parse_quoted_answer,
    verify_quote,
)

SOURCES = [
    "Adults weigh between 21 and 72 kg (46 and 159 lb). The cheetah is capable of running at "
    "93 to 104 km/h (58 to 65 mph); it has evolved specialized adaptations for speed, including "
    "a light build.",
    "The lion is a large cat of the genus Panthera native to Africa and India. "
    "It lives in groups called prides.",
    "The abacus — a calculating tool — was used in “ancient” Sumer.",
]


class TestVerify:
    def test_exact_with_span(self) -> None:
        check = verify_quote("capable of running at 93 to 104 km/h", SOURCES, 1)
        assert check.match is QuoteMatch.EXACT and check.source_id == 1
        start, end = check.span
        assert SOURCES[0][start:end] == "capable of running at 93 to 104 km/h"

    def test_wrapping_quote_marks_and_ellipses_are_ignored(self) -> None:
        assert (
            verify_quote('"...lives in groups called prides..."', SOURCES, 2).match
            is QuoteMatch.EXACT
        )

    def test_normalised_whitespace_case_and_typography(self) -> None:
        check = verify_quote(
            'THE ABACUS - a calculating   tool - was used in "ancient" Sumer', SOURCES, 3
        )
        assert check.match is QuoteMatch.NORMALIZED
        start, end = check.span
        assert (
            SOURCES[2][start:end] == "The abacus — a calculating tool — was used in “ancient” Sumer"
        )

    def test_fuzzy_paraphrase_close_to_the_source(self) -> None:
        check = verify_quote(
            "The cheetah is capable of running at 93 to 104 km/h (58 to 64 mph); it evolved",
            SOURCES,
            1,
        )
        assert check.match is QuoteMatch.FUZZY and check.source_id == 1 and check.score >= 0.85

    def test_fuzzy_span_lies_on_the_matching_words(self) -> None:
        check = verify_quote(
            "The lion is a big cat of the genus Panthera native to Africa", SOURCES, 1
        )
        assert check.match is QuoteMatch.FUZZY and check.source_id == 2 and check.misattributed
        start, end = check.span
        assert SOURCES[1][start:end].startswith("The lion is a large cat of the genus Panthera")

    def test_a_source_padded_with_invented_text_is_not_a_fuzzy_match(self) -> None:
        # the whole source occurs in the quote, but the quote says much more than the source
        invented = SOURCES[1] + " Lions were first domesticated in Norway in 1850 by Vikings."
        check = verify_quote(invented, SOURCES, 2)
        assert check.match is QuoteMatch.UNVERIFIED and check.score < 0.85

    def test_invented_quote_is_unverified(self) -> None:
        check = verify_quote("Cheetahs were first domesticated in Norway in 1850", SOURCES, 1)
        assert (
            check.match is QuoteMatch.UNVERIFIED and not check.verified and check.source_id is None
        )
        assert check.to_dict()["match"] == "unverified"

    def test_wrong_source_is_found_and_flagged(self) -> None:
        check = verify_quote("It lives in groups called prides", SOURCES, 1)
        assert check.source_id == 2 and check.misattributed
        assert (
            verify_quote("It lives in groups called prides", SOURCES, 99).source_id == 2
        )  # bad id

    def test_degenerate_inputs(self) -> None:
        assert verify_quote("", SOURCES, 1).match is QuoteMatch.UNVERIFIED
        assert verify_quote('""', SOURCES, 1).match is QuoteMatch.UNVERIFIED
        assert verify_quote("anything", [], None).match is QuoteMatch.UNVERIFIED

    @pytest.mark.slow
    @settings(max_examples=150, deadline=None)
    @given(data=st.data())
    def test_any_substring_is_found_exactly_and_mangled_spacing_still_verifies(
        self, data: st.DataObject
    ) -> None:
        text = data.draw(st.sampled_from(SOURCES))
        start = data.draw(st.integers(0, len(text) - 12))
        end = data.draw(st.integers(start + 12, len(text)))
        quote = text[start:end]
        if quote.strip() != quote or quote.strip("\"'“”‘’«»`") != quote:
            return
        check = verify_quote(quote, SOURCES, None)
        assert check.verified and text[check.span[0] : check.span[1]] == quote
        mangled = "  ".join(quote.split()).upper()
        assert verify_quote(mangled, SOURCES, None).verified

    @pytest.mark.slow
    @settings(max_examples=150, deadline=None)
    @given(st.text(max_size=60))
    def test_normalisation_map_points_into_the_original(self, text: str) -> None:
        normalized, index = normalize_with_map(text)
        assert len(normalized) == len(index)
        assert index == sorted(index) and all(0 <= i < len(text) for i in index)
        assert "  " not in normalized and normalized == normalized.strip()


class TestParse:
    def test_dict_with_string_ids(self) -> None:
        data = {
            "answer": "Prides.",
            "citations": [
                {"source_id": "id=2", "quote": "prides"},
                {"id": "[3]", "text": "x"},
                {"source": "none", "quote": "y"},
                "junk",
                {"quote": "  "},
            ],
        }
        assert parse_quoted_answer(data) == ("Prides.", [(2, "prides"), (3, "x"), (None, "y")])

    def test_json_inside_prose_and_fences(self) -> None:
        text = (
            'Sure!\n```json\n{"answer": "1969", '
            '"quotes": [{"document": 1, "excerpt": "July 1969"}]}\n```\nDone.'
        )
        assert parse_quoted_answer(text) == ("1969", [(1, "July 1969")])

    def test_trailing_commas_and_escaped_braces(self) -> None:
        assert parse_quoted_answer(
            '{"answer": "a", "citations": [{"source_id": 1, "quote": "q"},],}'
        ) == ("a", [(1, "q")])
        echoed = '{{"answer": "1940", "citations": [{{"source_id": 1, "quote": "exact"}}]}}'
        assert parse_quoted_answer(echoed) == ("1940", [(1, "exact")])

    def test_answer_wrapped_in_a_list_and_followed_by_prose_with_braces(self) -> None:
        assert parse_quoted_answer('[{"answer": "Prides.", "citations": []}]') == ("Prides.", [])
        reply = '{"answer": "a", "citations": [{"id": 2, "quote": "q"}]}\nNote: {source 2}'
        assert parse_quoted_answer(reply) == ("a", [(2, "q")])

    def test_truncated_reply_is_not_read_from_its_inner_items(self) -> None:
        assert parse_quoted_answer('{"answer": "x", "citations": [{"id": 1, "text": "q"}') is None

    def test_hopeless_output(self) -> None:
        assert parse_quoted_answer("The answer is 42.") is None
        assert parse_quoted_answer('{"citations": []}') is None
        assert parse_quoted_answer(["not", "a", "dict"]) is None


class TestVerdictFields:
    """Every field of the verdict is what the docs promise, for each way a quote is found."""

    def test_exact_prefers_the_claimed_source_and_the_first_occurrence(self) -> None:
        sources = ["Cats purr. Cats purr.", "Cats purr. Cats purr."]
        for claimed in (1, 2):
            check = verify_quote("Cats purr.", sources, claimed)
            assert (check.quote, check.claimed_id, check.source_id) == (
                "Cats purr.",
                claimed,
                claimed,
            )
            assert check.match is QuoteMatch.EXACT and check.score == 1.0 and check.span == (0, 10)
            assert not check.misattributed

    def test_a_quote_at_the_very_start_of_a_source_is_exact(self) -> None:
        check = verify_quote(SOURCES[1][:30], SOURCES, 2)
        assert check.match is QuoteMatch.EXACT and check.span == (0, 30)

    def test_normalised_fields_and_first_occurrence(self) -> None:
        sources = ["x", "Cats  PURR. CATS purr."]
        check = verify_quote("cats purr.", sources, 1)
        assert check.match is QuoteMatch.NORMALIZED and check.score == 1.0
        assert (check.quote, check.claimed_id, check.source_id) == ("cats purr.", 1, 2)
        assert check.span == (0, 11) and check.misattributed

    def test_unicode_ellipsis_is_stripped_like_three_dots(self) -> None:
        check = verify_quote("\u2026lives in groups called prides\u2026", SOURCES, 2)
        assert check.match is QuoteMatch.EXACT

    def test_empty_pair_of_quote_marks_is_no_quote(self) -> None:
        check = verify_quote('""', ['He said "" twice.'], 1)
        assert check.match is QuoteMatch.UNVERIFIED and check.source_id is None

    def test_unverified_keeps_the_quote_and_the_claim(self) -> None:
        for quote, sources in (("", SOURCES), ("Cheetahs can fly over the moon", SOURCES)):
            check = verify_quote(quote, sources, 3)
            assert (check.quote, check.claimed_id, check.source_id) == (quote, 3, None)
            assert check.match is QuoteMatch.UNVERIFIED and 0.0 <= check.score < 0.85
        assert verify_quote("", SOURCES, 3).score == 0.0

    def test_fuzzy_fields_and_tie_goes_to_the_claimed_source(self) -> None:
        sources = [SOURCES[1], SOURCES[1]]
        quote = "The lion is a big cat of the genus Panthera native to Africa"
        for claimed in (1, 2):
            check = verify_quote(quote, sources, claimed)
            assert check.match is QuoteMatch.FUZZY
            assert (check.quote, check.claimed_id, check.source_id) == (quote, claimed, claimed)

    def test_fuzzy_span_is_exactly_the_aligned_window(self) -> None:
        source = "Intro words here. lion is a large cat of the genus Panthera. More words."
        check = verify_quote("lion is a large cat of the genvs Panthera", [source], 1)
        assert check.match is QuoteMatch.FUZZY
        assert source[check.span[0] : check.span[1]] == "lion is a large cat of the genus Panthera"

    def test_fuzzy_score_is_the_partial_ratio_and_the_threshold_is_inclusive(self) -> None:
        quote = "lion is a large cat of the genvs Panthera"
        source = "Intro. Lion is a large cat of the genus Panthera. More."
        check = verify_quote(quote, [source], 1, fuzzy_threshold=0.5)
        expected = fuzz.partial_ratio(quote.lower(), source.lower()) / 100.0
        assert check.score == pytest.approx(expected)
        at = verify_quote(quote, [source], 1, fuzzy_threshold=check.score)
        assert at.match is QuoteMatch.FUZZY

    def test_quote_a_little_longer_than_the_source_is_compared_with_all_of_it(self) -> None:
        source = "Lions live in prides."
        check = verify_quote("Lions live in large prides.", [source], 1)
        assert check.match is QuoteMatch.FUZZY and check.span == (0, len(source))
        assert check.score == pytest.approx(
            fuzz.ratio("lions live in large prides.", source.lower()) / 100
        )

    def test_to_dict(self) -> None:
        check = QuoteCheck("q", 2, 1, QuoteMatch.FUZZY, 0.123456, (3, 7))
        assert check.to_dict() == {
            "quote": "q",
            "claimed_id": 2,
            "source_id": 1,
            "match": "fuzzy",
            "score": 0.1235,
            "span": [3, 7],
        }
        assert QuoteCheck("q", None, None, QuoteMatch.UNVERIFIED, 0.5).to_dict()["span"] is None


class TestNormaliseWords:
    @settings(max_examples=150, deadline=None)
    @given(st.text(alphabet="abcXYZ \t\n", max_size=40))
    def test_ascii_text_is_lowercased_with_single_spaces(self, text: str) -> None:
        assert normalize_with_map(text)[0] == " ".join(text.lower().split())

    def test_a_character_that_decomposes_to_space_plus_mark_keeps_the_mark(self) -> None:
        assert normalize_with_map("a \u00a8")[0] == "a \u0308"


class TestParseKeys:
    def test_alternative_answer_and_list_keys(self) -> None:
        assert parse_quoted_answer(
            {"response": "r", "sources": [{"source": "2", "quote": "q"}]}
        ) == (
            "r",
            [(2, "q")],
        )
        assert parse_quoted_answer({"text": "t"}) == ("t", [])

    def test_junk_items_are_skipped_not_the_rest(self) -> None:
        data = {"answer": "a", "citations": ["junk", {"id": 2.0, "quote": "q"}, {"id": 3}]}
        assert parse_quoted_answer(data) == ("a", [(2, "q")])
