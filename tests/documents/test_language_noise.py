"""What language identification reads: the noise taken out of a text (whole tokens holding a URL,
an address, a path, an underscore, a digit or a camelCase join, and nothing else) and its
letters counted, in every script."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llama_index_rag_pack.documents import language_analysis

_FEATURE = re.compile(r"://|www\.|@|/|\\|_|\d|[a-z][A-Z]")


def _reference(text: str) -> str:
    return re.sub(r"\S+", lambda m: " " if _FEATURE.search(m.group()) else m.group(), text)


@pytest.mark.slow
@given(st.text(alphabet="abcXYZ _/\\@1:w.\n\t北é", max_size=60))
def test_noise_is_removed_token_by_token(text: str) -> None:
    assert language_analysis._NOISE.sub(" ", text) == _reference(text)


def test_noise_examples() -> None:
    text = "See https://x.org or mail a@b.c, file_name v2 and iPhone; plain words stay."
    kept = language_analysis._NOISE.sub(" ", text).split()
    assert kept == ["See", "or", "mail", "and", "plain", "words", "stay."]


@pytest.mark.slow
@given(st.text(max_size=80))
def test_letters_are_counted_in_every_script(text: str) -> None:
    import regex

    from llama_index_rag_pack.documents.languages import count_letters

    assert count_letters(text) == len(regex.findall(r"\p{L}", text))
