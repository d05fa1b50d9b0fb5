"""Reading LLM text: JSON values (core's parser first, our fallbacks for what it misses), lists of
strings and code fences. Route replies are tested in test_routing_pure.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.output_parsers.utils import parse_json_markdown

from llama_index_rag_pack.core.llm_output import json_values, parse_list, strip_code_fences
from llama_index_rag_pack.routing.route_replies import parse_route_reply


# =========================================================================== JSON
@pytest.mark.parametrize(
    ("reply", "first"),
    [
        # what core's parse_json_markdown reads: fences, prose around, trailing commas, quotes
        ('Sure!\n```json\n{"answer": "1969",}\n```\nDone.', {"answer": "1969"}),
        ("{'datasource': 'js_docs'}", {"datasource": "js_docs"}),
        ('{route: python_docs, "reason": "pip"}', {"route": "python_docs", "reason": "pip"}),
        ('Queries: ["milvus bm25", "hybrid search"]', ["milvus bm25", "hybrid search"]),
    ],
)
def test_core_parser_reads_the_usual_replies(reply: str, first: object) -> None:
    assert json_values(reply)[0] == first


@pytest.mark.parametrize(
    ("reply", "values"),
    [
        # two objects in prose: core's outermost span is not JSON
        (
            '{"route": "math"} or maybe {"route": "physics"}',
            [{"route": "math"}, {"route": "physics"}],
        ),
        # braces in prose after the JSON
        ('{"route": "physics"} is my pick {because}', [{"route": "physics"}]),
        # a template echoed with its escaped braces
        (
            '{{"answer": "1940", "citations": [{{"source_id": 1, "quote": "exact"}}]}}',
            [{"answer": "1940", "citations": [{"source_id": 1, "quote": "exact"}]}],
        ),
        # a citation marker before the JSON
        ('See [1]. {"answer": "x", "ok": true,}', [[1], {"answer": "x", "ok": True}]),
    ],
)
def test_what_core_misses_is_read_here(reply: str, values: list[object]) -> None:
    try:
        core = parse_json_markdown(reply)
    except Exception:  # OutputParserException
        core = None
    assert core is None or (core == values[0] and len(values) > 1)  # failed, or read only part
    assert json_values(reply) == values


@pytest.mark.parametrize(
    "reply",
    [
        "The answer is 42.",
        "",
        # truncated: the reply stopped inside the object; its inner items are not top level
        'Truncated {"answer": "x", "citations": [{"id": 1, "text": "q"}',
        "[2020-13-45]",  # PyYAML raises ValueError on the date
        "[&a [*a]]",  # a self-referencing YAML alias
        "{{}} {{",  # escaped braces around nothing (this crashed the route parser before)
    ],
)
def test_no_json_gives_an_empty_list(reply: str) -> None:
    assert [v for v in json_values(reply) if v] == []


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    value=st.lists(_json, max_size=3) | st.dictionaries(st.text(max_size=5), _json, max_size=3),
    wrap=st.sampled_from(["{}", "Sure! {} Done.", "```json\n{}\n```", "Here:\n```\n{}\n```"]),
)
def test_property_json_round_trips_through_prose_and_fences(value: object, wrap: str) -> None:
    assert json_values(wrap.format(json.dumps(value)))[0] == value


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_property_never_raises_and_finds_only_objects_and_arrays(text: str) -> None:
    assert all(isinstance(v, (dict, list)) for v in json_values(text))
    parse_route_reply(text, ["a", "b"])


# =========================================================================== lists
@pytest.mark.parametrize(
    ("reply", "items"),
    [
        ('```json\n["milvus bm25", "hybrid search",]\n```', ["milvus bm25", "hybrid search"]),
        ("{'queries': ['milvus bm25', 'hybrid  search']}", ["milvus bm25", "hybrid search"]),
        # a bracketed word in a list line is not an array (core's YAML reads "[BM25]" as one)
        ("1. Milvus [BM25] search\n2. hybrid search", ["Milvus [BM25] search", "hybrid search"]),
        ('["BM25 \\"exact\\" match", "hybrid"]', ['BM25 "exact" match', "hybrid"]),
        ("Here are the queries:\n- a b\n- A, B!\n- c d", ["a b", "c d"]),
    ],
)
def test_parse_list(reply: str, items: list[str]) -> None:
    assert parse_list(reply) == items


def test_parse_list_excludes_and_limits() -> None:
    reply = "1. What is BM25?\n2. bm25 ranking\n3. sparse vectors\n4. dense vectors"
    assert parse_list(reply, exclude=["what is bm25"], limit=2) == [
        "bm25 ranking",
        "sparse vectors",
    ]
    assert parse_list(reply, limit=0) == []


# =========================================================================== fences
@pytest.mark.parametrize(
    ("reply", "text"),
    [
        ("```\nThe Seine flows.\n```", "The Seine flows."),
        ("```markdown\nThe Seine flows.\n```", "The Seine flows."),
        (
            "Sure:\n```python\nsorted(x)\n```\nIt returns a list.",
            "Sure:\nsorted(x)\nIt returns a list.",
        ),
        ("```The Seine flows.```", "The Seine flows."),
        ("No fence here.", "No fence here."),
    ],
)
def test_strip_code_fences(reply: str, text: str) -> None:
    assert strip_code_fences(reply) == text


# ----------------------------------------------------------------------------- prose replies
PROSE = st.lists(
    st.sampled_from(["Aardvarks eat ants.", "The Seine flows: west.", "BM25 ranks 3 docs!",
                     "Okapi is a model.", "Surely not.", "Heresy spreads."]),
    min_size=1, max_size=4,
).map(" ".join)  # fmt: skip
LEADS = ["", "Sure! ", "Certainly, I can help with that.\n", "Of course: ", "Okay, ",
         "Here is a summary of the text:\n\n", "Sure! Here's a short passage:\n"]  # fmt: skip


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    prose=PROSE,
    lead=st.sampled_from(LEADS),
    label=st.sampled_from(["", "Summary: ", "summary:\n"]),
    quotes=st.sampled_from([("", ""), ('"', '"'), ("\u201c", "\u201d"), ("'", "'")]),
    fence=st.booleans(),
)
def test_unwrap_prose_removes_exactly_the_wrapping(prose, lead, label, quotes, fence):
    from llama_index_rag_pack.core.prose_replies import unwrap_prose

    reply = f"{lead}{label}{quotes[0]}{prose}{quotes[1]}"
    if fence:
        reply = f"```\n{reply}\n```"
    assert unwrap_prose(reply, label="summary") == prose
    assert unwrap_prose(prose, label="summary") == prose  # plain prose is kept whole


@pytest.mark.parametrize(
    ("reply", "label", "expected"),
    [
        ("Passage: The Seine flows.", "passage", "The Seine flows."),
        ("Summary: The Seine flows.", "passage", "Summary: The Seine flows."),
        ("Okay, the text is about ants.", "summary", "the text is about ants."),
        ("Okapi BM25 ranks documents.", "passage", "Okapi BM25 ranks documents."),
        ('""', "summary", ""),
        ("", "summary", ""),
    ],
)
def test_unwrap_prose_cases(reply, label, expected):
    from llama_index_rag_pack.core.prose_replies import unwrap_prose

    assert unwrap_prose(reply, label=label) == expected
