"""Query generation: tolerant parsing of real-looking LLM output, fallbacks, sync and async."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.core.llm_output import MAX_REPLY_CHARS
from llama_index_rag_pack.fusion.fusion_queries import (
    agenerate_queries,
    generate_queries,
    parse_queries,
)
from llama_index_rag_pack.testing import SyncCallError

ORIGINAL = "How does Milvus run keyword search?"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # numbered list wrapped in prose, quotes and bold
        (
            "Sure! Here are 3 search queries related to your question:\n\n"
            '1. "Milvus BM25 full text search"\n2. **sparse vectors in Milvus**\n'
            "3. Milvus keyword matching\n\nI hope these help!",
            ["Milvus BM25 full text search", "sparse vectors in Milvus", "Milvus keyword matching"],
        ),
        # bullets, blank lines and the original question echoed back
        (
            "- How does Milvus run keyword search?\n\n"
            "- milvus text match\n* Milvus analyzer tokenizer\n",
            ["milvus text match", "Milvus analyzer tokenizer"],
        ),
        # code fence
        (
            "```\nmilvus bm25 function\nmilvus sparse index\n```",
            ["milvus bm25 function", "milvus sparse index"],
        ),
        # JSON array (with prose around it)
        (
            'Queries: ["milvus bm25", "milvus hybrid search"]',
            ["milvus bm25", "milvus hybrid search"],
        ),
        # "Query 1:" labels, parenthesised numbers, single quotes
        (
            "Query 1: milvus full-text search\n"
            "Query 2: 'BM25 in vector databases'\n(3) milvus tokenizer",
            ["milvus full-text search", "BM25 in vector databases", "milvus tokenizer"],
        ),
        # duplicates differing only by case and punctuation
        (
            "milvus keyword search.\nMilvus Keyword Search\nmilvus lexical search",
            ["milvus keyword search.", "milvus lexical search"],
        ),
        # too many lines: trimmed to what was asked
        ("1) a one\n2) b two\n3) c three\n4) d four\n5) e five", ["a one", "b two", "c three"]),
        # nothing usable
        ("   \n\n", []),
        ("Here are the queries:", []),
    ],
)
def test_parse_real_model_output(reply, expected):
    assert parse_queries(reply, original=ORIGINAL, num_queries=3) == expected


def test_parse_keeps_words_that_start_like_preamble():
    assert parse_queries("Okapi BM25 explained\nNotebook search tips") == [
        "Okapi BM25 explained",
        "Notebook search tips",
    ]


@pytest.mark.slow
def test_parse_reads_only_the_lines_that_end_within_the_bound():
    long_line = "milvus " * (MAX_REPLY_CHARS // 7)  # crosses the bound: not read, even in part
    assert parse_queries("milvus bm25\n" + long_line + "\nmilvus sparse") == ["milvus bm25"]
    lines = "milvus bm25\n" + "1.\n" * (MAX_REPLY_CHARS // 3 - 10) + "milvus sparse\n"
    assert parse_queries(lines) == ["milvus bm25", "milvus sparse"]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300), n=st.integers(0, 6))
def test_property_parse_never_echoes_duplicates_or_overflows(text, n):
    out = parse_queries(text, original=ORIGINAL, num_queries=n)
    assert len(out) <= n
    keys = [" ".join("".join(c if c.isalnum() else " " for c in q.lower()).split()) for q in out]
    assert len(keys) == len(set(keys))
    assert "how does milvus run keyword search" not in keys
    assert all(q and q == q.strip() and "\n" not in q for q in out)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(
    queries=st.lists(
        st.from_regex(r"[a-z]{3,8}( [a-z]{3,8}){1,4}", fullmatch=True),
        min_size=1,
        max_size=5,
        unique=True,
    ),
    style=st.sampled_from(["{i}. {q}", "- {q}", '"{q}"', "{i}) **{q}**", "{q}"]),
)
def test_property_formatted_lists_round_trip(queries, style):
    text = "Here are some queries:\n" + "\n".join(
        style.format(i=i, q=q) for i, q in enumerate(queries, start=1)
    )
    assert parse_queries(text) == queries


def test_generate_queries_sync_and_async(scripted_llm):
    reply = "1. milvus bm25\n2. milvus sparse index\n3. milvus analyzers"
    llm = scripted_llm([reply, reply])
    assert generate_queries(llm, ORIGINAL, 3) == [
        "milvus bm25",
        "milvus sparse index",
        "milvus analyzers",
    ]
    assert "3" in llm.prompts[0] and ORIGINAL in llm.prompts[0]


async def test_agenerate_queries_never_calls_sync(scripted_llm):
    llm = scripted_llm(["1. milvus bm25\n2. milvus sparse index"], forbid_sync=True)
    assert await agenerate_queries(llm, ORIGINAL, 2) == ["milvus bm25", "milvus sparse index"]
    with pytest.raises(SyncCallError):
        generate_queries(scripted_llm(["x"], forbid_sync=True), ORIGINAL, 2, raise_on_failure=True)


async def test_fallbacks_warn_and_return_nothing(scripted_llm, caplog):
    caplog.set_level(logging.WARNING)
    assert (
        generate_queries(scripted_llm(["I'm sorry, I cannot help with that:"]), ORIGINAL, 3) == []
    )
    assert "nothing usable" in caplog.text
    caplog.clear()
    assert (
        await agenerate_queries(scripted_llm([TimeoutError("model timed out")]), ORIGINAL, 3) == []
    )
    assert "TimeoutError" in caplog.text
    with pytest.raises(TimeoutError):
        await agenerate_queries(
            scripted_llm([TimeoutError("x")]), ORIGINAL, 3, raise_on_failure=True
        )


def test_generate_queries_bad_input(scripted_llm):
    llm = scripted_llm([])
    # a blank query has no variants: nothing is asked (pack retrievers refuse it on entry)
    assert generate_queries(llm, "  ", 3) == [] and llm.call_count == 0
    assert generate_queries(llm, ORIGINAL, 0) == [] and llm.call_count == 0
