"""Core's ``MetadataFilters`` compiled to Milvus expressions: the rows Milvus Lite selects are
exactly the rows a Python reading of the filter selects (hypothesis), hostile keys and values
stay literals, and bad filters get one-line errors."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from llama_index.core.vector_stores import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.metadata_filters import MAX_FILTER_DEPTH, filter_expression

GENRES = ["mystery", "romance", 'say "hi"', "back\\slash", "", "sci-fi"]
TAGS = ["x", "y", "z"]
ROWS: list[dict[str, Any]] = [
    {"genre": "mystery", "year": 2012, "score": 1.5, "flag": True, "tags": ["x", "y"]},
    {"genre": 'say "hi"', "year": 1995, "score": -0.0, "flag": False, "tags": []},
    {"genre": "romance", "year": 2020, "score": 0.25, "tags": ["y"]},
    {"genre": None, "year": 2010, "flag": True, "tags": None},
    {"year": 2012, "score": 3.0, "odd key": "v", "tags": ["z", "x"]},
    {"genre": "back\\slash", "flag": False},
    {"genre": "", "year": -5, "score": 0.0, "tags": ["x"]},
    {"genre": "sci-fi", "year": 2012, "score": 2.0, "flag": True, "tags": ["y", "z"]},
]
FIELD_VALUES = {
    "genre": st.sampled_from(GENRES),
    "year": st.sampled_from([-5, 1995, 2010, 2012, 2020, 2030]),
    "score": st.sampled_from([-0.0, 0.0, 0.25, 1.5, 2.0, 3.0]),
    "odd key": st.sampled_from(["v", "w"]),
}
SCALAR_OPS = ["==", "!=", ">", ">=", "<", "<="]


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pymilvus import MilvusClient

    client = MilvusClient(str(tmp_path_factory.mktemp("filters") / "f.db"))
    client.create_collection(
        "rows", dimension=2, enable_dynamic_field=True, id_type="string", max_length=16
    )
    client.insert(
        "rows",
        [{"id": str(i), "vector": [1.0, float(i)], **row} for i, row in enumerate(ROWS)],
    )
    yield client
    client.close()


# ----------------------------------------------------------------------------- the oracle
def _holds(f: MetadataFilter, row: dict[str, Any]) -> bool:
    op, value, have = FilterOperator(f.operator), f.value, row.get(f.key)
    if op is FilterOperator.IS_EMPTY:
        return have is None or have == []
    if have is None:
        return False
    if op is FilterOperator.CONTAINS:
        return isinstance(have, list) and value in have
    if op is FilterOperator.ANY:
        return isinstance(have, list) and any(v in have for v in value)
    if op is FilterOperator.ALL:
        return isinstance(have, list) and all(v in have for v in value)
    if op in (FilterOperator.IN, FilterOperator.NIN):
        return (have in value) == (op is FilterOperator.IN)
    compare = {
        "==": have == value, "!=": have != value, ">": have > value, ">=": have >= value,
        "<": have < value, "<=": have <= value,
    }  # fmt: skip
    return compare[op.value]


def python_selects(filters: MetadataFilters, row: dict[str, Any]) -> bool:
    results = [
        python_selects(f, row) if isinstance(f, MetadataFilters) else _holds(f, row)
        for f in filters.filters
    ]
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition is FilterCondition.OR:
        return any(results)
    if condition is FilterCondition.NOT:
        return not all(results) if results else False
    return all(results)


def milvus_selects(client: Any, filters: MetadataFilters) -> set[int]:
    expr = filter_expression(filters)
    if not expr:
        return set(range(len(ROWS)))
    rows = client.query("rows", filter=expr, output_fields=["id"])
    return {int(r["id"]) for r in rows}


# ----------------------------------------------------------------------------- strategies
@st.composite
def conditions(draw: st.DrawFn) -> MetadataFilter:
    kind = draw(st.sampled_from(["scalar", "list", "tags"]))
    if kind == "tags":
        op = draw(st.sampled_from(["contains", "any", "all", "is_empty"]))
        if op == "contains":
            value: Any = draw(st.sampled_from(TAGS))
        elif op == "is_empty":
            value = None
        else:
            value = draw(st.lists(st.sampled_from(TAGS), min_size=1, max_size=3))
        return MetadataFilter(key="tags", value=value, operator=op)
    key = draw(st.sampled_from(sorted(FIELD_VALUES)))
    if kind == "list":
        op = draw(st.sampled_from(["in", "nin"]))
        value = draw(st.lists(FIELD_VALUES[key], min_size=1, max_size=3))
    else:
        op = draw(st.sampled_from(SCALAR_OPS))
        value = draw(FIELD_VALUES[key])
    return MetadataFilter(key=key, value=value, operator=op)


def filters_tree(depth: int = 3) -> st.SearchStrategy[MetadataFilters]:
    children: st.SearchStrategy[Any] = conditions()
    if depth > 1:
        children = st.one_of(conditions(), st.deferred(lambda: filters_tree(depth - 1)))
    return st.builds(
        MetadataFilters,
        filters=st.lists(children, min_size=1, max_size=3),
        condition=st.sampled_from([FilterCondition.AND, FilterCondition.OR, FilterCondition.NOT]),
    )


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(filters=filters_tree())
def test_milvus_selects_exactly_the_rows_the_filter_describes(
    lite: Any, filters: MetadataFilters
) -> None:
    expected = {i for i, row in enumerate(ROWS) if python_selects(filters, row)}
    assert milvus_selects(lite, filters) == expected, filter_expression(filters)


# ----------------------------------------------------------------------------- hostile input
@pytest.mark.slow
@pytest.mark.parametrize(
    "key",
    ['genre" or 1 == 1 or "', "year) or (1 == 1", "odd key", "not", "in", "$meta", "exists"],
)
def test_a_hostile_key_is_a_literal_key(lite: Any, key: str) -> None:
    expr = filter_expression(MetadataFilters(filters=[MetadataFilter(key=key, value="v")]))
    rows = lite.query("rows", filter=expr, output_fields=["id"])
    assert {int(r["id"]) for r in rows} == {i for i, r in enumerate(ROWS) if r.get(key) == "v"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "value", ['" or year > 0 or genre == "', "\\", '\\" or 1 == 1 or \\"', "\n", "%", "mystery"]
)
def test_a_hostile_value_is_a_literal_value(lite: Any, value: str) -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="genre", value=value)])
    expected = {i for i, r in enumerate(ROWS) if r.get("genre") == value}
    assert milvus_selects(lite, filters) == expected


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("filters", "message"),
    [
        (MetadataFilters(filters=[MetadataFilter(key="t", value="x", operator="text_match")]),
         "not supported"),
        (MetadataFilters(filters=[MetadataFilter(key="t", value=None)]), "needs one"),
        (MetadataFilters(filters=[MetadataFilter(key="t", value=[1], operator="==")]), "needs one"),
        (MetadataFilters(filters=[MetadataFilter(key="t", value=[], operator="in")]), "non-empty"),
        (MetadataFilters(filters=[MetadataFilter(key="t", value=math.nan)]), "'t'"),
    ],
)  # fmt: skip
def test_a_filter_milvus_cannot_hold_is_refused_in_one_line(
    filters: MetadataFilters, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        filter_expression(filters)
    assert "\n" not in str(info.value)


def test_nesting_is_bounded() -> None:
    filters = MetadataFilters(filters=[MetadataFilter(key="year", value=1)])
    for _ in range(MAX_FILTER_DEPTH + 1):
        filters = MetadataFilters(filters=[filters])
    with pytest.raises(ConfigurationError, match="deeper"):
        filter_expression(filters)


def test_strings_pass_through_and_none_is_no_filter() -> None:
    assert filter_expression("  year > 1 ") == "year > 1"
    assert filter_expression(None) == filter_expression(MetadataFilters(filters=[])) == ""
    with pytest.raises(ConfigurationError, match="MetadataFilters or a Milvus expression"):
        filter_expression({"year": 1})  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- keys and ints
KEYWORD_KEYS = ["IS", "Is", "iS", "NULL", "Like", "EXISTS", "Iso", "INTERVAL", "True", "In"]


@pytest.fixture(scope="module")
def keyword_rows(lite: Any) -> Any:
    """A collection whose metadata keys are Milvus keywords in every case."""
    lite.create_collection(
        "kw", dimension=2, enable_dynamic_field=True, id_type="string", max_length=16
    )
    lite.insert(
        "kw",
        [{"id": key, "vector": [1.0, 0.0], key: "v"} for key in KEYWORD_KEYS]
        + [{"id": "none", "vector": [1.0, 1.0], "other": "v"}],
    )
    return lite


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYWORD_KEYS)
def test_a_milvus_keyword_key_in_any_case_is_quoted(keyword_rows: Any, key: str) -> None:
    expr = filter_expression(MetadataFilters(filters=[MetadataFilter(key=key, value="v")]))
    assert f"$meta[{json_quoted(key)}]" in expr
    rows = keyword_rows.query("kw", filter=expr, output_fields=["id"])
    assert {r["id"] for r in rows} == {key}


def json_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


OUT_OF_INT64 = [2**63, -(2**63) - 1, 10**30, 10**400]


@pytest.mark.parametrize("value", OUT_OF_INT64, ids=["2**63", "-2**63-1", "10**30", "10**400"])
@pytest.mark.parametrize("operator", ["==", "<", ">=", "in", "nin", "contains", "any"])
def test_an_integer_outside_int64_is_refused_in_one_line(value: int, operator: str) -> None:
    listed = operator in ("in", "nin", "any")
    filters = MetadataFilters(
        filters=[
            MetadataFilter(key="year", value=[1, value] if listed else value, operator=operator)
        ]
    )
    with pytest.raises(ConfigurationError, match="outside int64") as info:
        filter_expression(filters)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_the_int64_bounds_themselves_are_values(lite: Any) -> None:
    for value in (2**63 - 1, -(2**63)):
        expr = filter_expression(MetadataFilters(filters=[MetadataFilter(key="year", value=value)]))
        assert lite.query("rows", filter=expr, output_fields=["id"]) == []


# ----------------------------------------------------------------------------- string filters
@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("true) or (true", "closes no '('"),
        ('year > 1) or (genre == "x"', "closes no '('"),
        ("(year > 1", "expected ')'"),
        ("year > 1 -- )", "unknown operator '--'"),
        ("year > 1 /* ) */", "unknown operator '/*'"),
        ("year > 1 # )", "unknown operator '#'"),
        ('genre == "a\\q") or (true', "unknown escape"),
        ('genre == "a\n") or (true"', "line break"),
        ("genre == 'a) or (true", "not closed"),
        ("genre\x0b== 1", "cannot read"),
        ("year > 1\x00) or (true", "cannot read"),
        ("IS == 1", "keyword"),
        ("exists null", "keyword"),
        ("tRuE", "not a boolean"),
        ("{x} == 1", "cannot read"),
        ("genre in 5", "expected a list [...] after in"),  # Milvus refuses both at search time
        ('genre not in "a"', "expected a list [...] after in"),
        ("genre like 5", "expected a string pattern after like"),
    ],
)
def test_a_malformed_string_filter_is_refused_in_one_line(expression: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as info:
        filter_expression(expression)
    assert "\n" not in str(info.value) and str(info.value).startswith("Bad filter at column")


@pytest.mark.slow
@pytest.mark.parametrize(
    "expression",
    [
        'genre == "a) or (true"',
        "genre == 'x\") or (\"'",
        'genre == "back\\\\slash" or genre == "say \\"hi\\""',
        '$meta["odd key"] == "v" and not (year in [1995, 2010])',
        "true",
        "(false) or (year >= -5)",
        'json_contains(tags, "x") and array_length(tags) == 2',
        'genre like "myst%" and genre not in ["x"]',
    ],
)
def test_a_valid_string_filter_is_kept_and_selects_its_rows(lite: Any, expression: str) -> None:
    assert filter_expression(f"  {expression}\n") == expression
    scoped = f'({expression}) and (genre == "mystery")'
    rows = lite.query("rows", filter=scoped, output_fields=["id", "genre"])
    assert all(r["genre"] == "mystery" for r in rows)


# whole conditions whose literals hold parentheses and quotes, and the raw characters that could
# end a literal or a parenthesis early
_PIECES = ["(", ")", " or ", " and ", "not ", "true", ") or (", 'genre == "a) or (true"',
           "genre == 'b\") or (\"'", 'genre == "\\\\"', 'genre in ["(", ")"]', "year == 1",
           '$meta["x"] == 1', '"', "'", "\\", '\\"', "--", "/*", "\n", ')"', "'("]  # fmt: skip


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12))
@example(pieces=["true", ") or (", "true"])
@example(pieces=["genre == 'b\") or (\"'", ") or (", "year == 1"])
def test_no_accepted_string_filter_escapes_its_parentheses(lite: Any, pieces: list[str]) -> None:
    """Whatever string the check lets through, ``(it) and (scope)`` stays inside the scope."""
    from pymilvus import MilvusException

    expression = "".join(pieces)
    try:
        checked = filter_expression(expression)
    except ConfigurationError:
        return
    if not checked:
        return
    try:
        rows = lite.query(
            "rows", filter=f'({checked}) and (genre == "mystery")', output_fields=["genre"]
        )
    except MilvusException:  # a type error (year == "x") is Milvus' to refuse, in scope or not
        return
    assert all(r["genre"] == "mystery" for r in rows), checked


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(filters=filters_tree())
def test_every_compiled_filter_passes_the_string_check(filters: MetadataFilters) -> None:
    """A compiled filter is handed on as a string (to a mode's base retriever): it passes."""
    expr = filter_expression(filters)
    assert filter_expression(expr) == expr


def test_the_deepest_compiled_filter_passes_the_string_check() -> None:
    leaf = MetadataFilter(key="IS", value=[1, 2], operator="nin")
    filters = MetadataFilters(filters=[leaf, MetadataFilter(key="odd key", value=1)])
    for _ in range(MAX_FILTER_DEPTH - 1):  # each level: (not ((...) and (...))), the deepest form
        filters = MetadataFilters(filters=[filters, leaf], condition=FilterCondition.NOT)
    expr = filter_expression(filters)
    scoped = f'((({expr}) and (tenant == "acme")))'
    assert filter_expression(scoped) == scoped


@pytest.mark.parametrize(
    "expr",
    [
        "not " * 5000 + "a == 1",
        "!" * 5000 + "a == 1",
        "a in " + "[" * 5000 + "1" + "]" * 5000,
        "(" * 5000 + "a == 1" + ")" * 5000,
        "not (" * 2000 + "a == 1" + ")" * 2000,
    ],
    ids=["not", "bang", "lists", "parens", "mixed"],
)
def test_a_deeply_nested_string_filter_is_one_error_not_a_recursion_error(expr: str) -> None:
    with pytest.raises(ConfigurationError, match="nested too deeply") as info:
        filter_expression(expr)
    assert "\n" not in str(info.value)
