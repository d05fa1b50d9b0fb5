"""Core's ``MetadataFilters`` compiled to Milvus expressions: the rows Milvus Lite selects are
exactly the rows a Python reading of the filter selects (hypothesis), hostile keys and values
stay literals, and bad filters get one-line errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.vector_stores import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_rag_pack.components.metadata_filters import MAX_FILTER_DEPTH, filter_expression
from llama_index_rag_pack.core.errors import ConfigurationError

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
@pytest.mark.parametrize(
    "key",
    ['genre" or 1 == 1 or "', "year) or (1 == 1", "odd key", "not", "in", "$meta", "exists"],
)
def test_a_hostile_key_is_a_literal_key(lite: Any, key: str) -> None:
    expr = filter_expression(MetadataFilters(filters=[MetadataFilter(key=key, value="v")]))
    rows = lite.query("rows", filter=expr, output_fields=["id"])
    assert {int(r["id"]) for r in rows} == {i for i, r in enumerate(ROWS) if r.get(key) == "v"}


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
