"""Self-query filters: validation, compilation and the no-injection property.

Any LLM reply compiles to an empty expression or to one that (1) a strict grammar of what the
compiler may emit accepts, (2) names only declared fields, and (3) Milvus Lite runs, selecting
exactly the rows a Python evaluation of the validated conditions selects (so every quote and
backslash of a value was escaped right).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.metadata_fields import (
    Condition,
    FieldSpec,
    field_specs,
    load_field_specs,
    validate_condition,
)
from llama_index_rag_pack.milvus.milvus_filter import compile_conditions, milvus_literal
from llama_index_rag_pack.self_query.replies import parse_self_query

TRICKY = ['my"st\\ery', "it's", ") or (1 == 1", 'a" or "1" == "1', "\\", "ünï 😀", "tab\there"]
GENRES = ("mystery", "sci-fi", *TRICKY)
FIELDS = field_specs(
    [
        {"name": "genre", "type": "string", "description": "genre", "allowed": list(GENRES)},
        {"name": "title", "type": "string", "description": "free text"},
        {"name": "year", "type": "int", "minimum": 1800, "maximum": 2100},
        {"name": "rating", "type": "float", "minimum": 0, "maximum": 10},
        {"name": "ok", "type": "bool"},
    ]
)
NAMES = {f.name for f in FIELDS}
ROWS = [
    {"id": f"r{i}", "genre": g, "title": t, "year": y, "rating": r, "ok": ok}
    for i, (g, t, y, r, ok) in enumerate(
        [
            ("mystery", "memory lost", 2012, 8.5, True),
            ("sci-fi", TRICKY[0], 1999, 7.0, False),
            (TRICKY[0], TRICKY[1], 2020, 9.25, True),
            (TRICKY[1], TRICKY[2], 1850, 0.0, False),
            (TRICKY[2], TRICKY[3], 2011, 10.0, True),
            (TRICKY[3], TRICKY[4], 2100, 3.5, False),
            (TRICKY[4], TRICKY[5], 1800, 5.0, True),
            (TRICKY[5], TRICKY[6], 2000, 6.0, False),
            (TRICKY[6], "plain", 2001, 6.5, True),
        ]
    )
]


# ----------------------------------------------------------------------- strict grammar
_TOKEN = re.compile(
    r'\s*(?:(?P<str>"(?:[^"\\\n]|\\[\\"nrt])*")|(?P<num>-?\d+(?:\.\d+)?(?:e[+-]\d+)?)'
    r"|(?P<op>==|!=|>=|<=|>|<)|(?P<punct>[()\[\],])|(?P<word>[A-Za-z_][A-Za-z0-9_]*))"
)
_OPS = {"==", "!=", ">=", "<=", ">", "<"}


def tokens(expr: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        assert m and m.end() > pos, f"bad character at {pos} in {expr!r}"
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def check_grammar(expr: str) -> set[str]:
    """Parse ``(cond) and (cond) ...``; return the field names used. Fails on anything else."""
    toks = tokens(expr)
    names: set[str] = set()
    i = 0

    def take(kind: str | None = None, value: str | None = None) -> str:
        nonlocal i
        assert i < len(toks), f"unexpected end of {expr!r}"
        k, v = toks[i]
        assert (kind is None or k == kind) and (value is None or v == value), (toks[i], expr)
        i += 1
        return v

    def literal() -> None:
        k, v = toks[i]
        assert k in ("str", "num") or v in ("true", "false"), (toks[i], expr)
        take()

    def comparison() -> None:
        name = take("word")
        assert name not in {"and", "or", "not", "in", "true", "false"}, expr
        names.add(name)
        if toks[i][1] == "not":
            take("word", "not")
            take("word", "in")
        elif toks[i][1] == "in":
            take("word", "in")
        else:
            assert take("op") in _OPS
            literal()
            return
        take("punct", "[")
        literal()
        while toks[i][1] == ",":
            take("punct", ",")
            literal()
        take("punct", "]")

    def condition() -> None:
        take("punct", "(")
        comparison()
        if toks[i][1] == "and":  # between: f >= lo and f <= hi
            take("word", "and")
            comparison()
        take("punct", ")")

    condition()
    while i < len(toks):
        take("word", "and")
        condition()
    return names


# ----------------------------------------------------------------------- Python semantics
def holds(cond: Condition, row: dict[str, Any]) -> bool:
    x, v = row[cond.field], cond.value
    return {
        "==": lambda: x == v,
        "!=": lambda: x != v,
        ">": lambda: x > v,
        ">=": lambda: x >= v,
        "<": lambda: x < v,
        "<=": lambda: x <= v,
        "in": lambda: x in v,
        "not in": lambda: x not in v,
        "between": lambda: v[0] <= x <= v[1],
    }[cond.op]()


@pytest.fixture(scope="module")
def milvus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from pymilvus import MilvusClient

    client = MilvusClient(str(Path(tmp_path_factory.mktemp("sqf")) / "f.db"))
    client.create_collection(
        "rows", dimension=2, enable_dynamic_field=True, id_type="string", max_length=16
    )
    client.insert("rows", [{**row, "vector": [1.0, 0.5]} for row in ROWS])
    yield client
    client.close()


def milvus_ids(client: Any, expr: str) -> set[str]:
    return {r["id"] for r in client.query("rows", filter=expr, output_fields=["id"])}


# ----------------------------------------------------------------------- unit behaviour
def test_literals_escape_quotes_backslashes_and_newlines() -> None:
    assert milvus_literal('a"b\\c') == '"a\\"b\\\\c"'
    assert milvus_literal("x\ny\tz\r") == '"x\\ny\\tz\\r"'
    assert milvus_literal("it's") == '"it\'s"'
    assert milvus_literal(False) == "false" and milvus_literal(-3) == "-3"
    with pytest.raises(ValueError):
        milvus_literal(float("nan"))
    with pytest.raises(ValueError):
        milvus_literal([1])


@pytest.mark.parametrize(
    ("name", "op", "value", "why"),
    [
        ("author", "==", "x", "unknown field"),
        ("year) or (1 == 1", "==", 1, "unknown field"),
        ("year", "LIKE", 2000, "unknown operator"),
        ("year", ") or (", 2000, "unknown operator"),
        ("year", ">", "soon", "not a number"),
        ("year", ">", 2010.5, "not an integer"),
        ("year", ">", 3000, "above the maximum"),
        ("rating", "<", float("inf"), "not finite"),
        ("genre", "==", "romance", "not one of the allowed"),
        ("genre", ">", "mystery", "needs a number field"),
        ("ok", "==", "maybe", "not a boolean"),
        ("title", "==", "nul\x00byte", "control character"),
        ("title", "==", {"$ne": 1}, "not a string"),
        ("year", "between", [2020, 2000], "empty range"),
        ("year", "in", [], "needs 1 to"),
    ],
)
def test_invalid_conditions_are_dropped_with_a_reason(name, op, value, why) -> None:
    cond, problem = validate_condition(FIELDS, name, op, value)
    assert cond is None and why in problem


def test_valid_conditions_are_coerced_to_the_field_type() -> None:
    assert validate_condition(FIELDS, "year", "$gte", "2010")[0] == Condition("year", ">=", 2010)
    assert validate_condition(FIELDS, "ok", "eq", "TRUE")[0] == Condition("ok", "==", True)
    assert validate_condition(FIELDS, "rating", "range", {"min": 7, "max": 9})[0] == Condition(
        "rating", "between", (7.0, 9.0)
    )
    assert validate_condition(FIELDS, "genre", "nin", "mystery")[0] == Condition(
        "genre", "not in", ("mystery",)
    )


def test_ugly_replies_keep_what_is_valid() -> None:
    reply = (
        "Sure! Here is the filter you asked for:\n```json\n"
        "{'query': 'books about memory', 'filter': {'genre': 'mystery', "
        "'year': {'$gt': '2010', '$lte': 2100}, 'author': 'Poe', 'rating': {'~=': 3}},}\n```\n"
        "Hope this helps."
    )
    sq = parse_self_query(reply, FIELDS, "mystery novels after 2010 about memory")
    assert sq.query == "books about memory"
    assert sq.expression == '(genre == "mystery") and (year > 2010) and (year <= 2100)'
    assert sorted(sq.dropped) == ["unknown field 'author'", "unknown operator '~=' on 'rating'"]


def test_a_reply_without_json_searches_the_question_unfiltered() -> None:
    sq = parse_self_query("I think you want mystery books.", FIELDS, "mystery books")
    assert (sq.query, sq.expression, sq.dropped) == (
        "mystery books",
        "",
        ["no JSON object in the reply"],
    )
    assert parse_self_query("", FIELDS, "q").dropped == []


def test_field_declarations_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="identifier"):
        FieldSpec("year) or (x")
    with pytest.raises(ConfigurationError, match="keyword"):
        FieldSpec("and")
    with pytest.raises(ConfigurationError, match="unknown type"):
        FieldSpec("year", "date")
    with pytest.raises(ConfigurationError, match="must be numbers"):
        FieldSpec("genre", "string", minimum=1)
    with pytest.raises(ConfigurationError, match="minimum 5 > maximum 1"):
        FieldSpec("year", "int", minimum=5, maximum=1)
    with pytest.raises(ConfigurationError, match="allowed value"):
        FieldSpec("year", "int", allowed=("soon",))
    with pytest.raises(ConfigurationError, match="unique"):
        field_specs([{"name": "a"}, {"name": "a"}])
    path = tmp_path / "fields.json"
    path.write_text(json.dumps({"fields": [f.to_dict() for f in FIELDS]}))
    assert load_field_specs(path) == FIELDS
    path.write_text("not json")
    with pytest.raises(ConfigurationError, match="Cannot read field declarations"):
        load_field_specs(path)


@pytest.mark.slow
def test_compiled_tricky_values_select_the_right_rows(milvus: Any) -> None:
    for value in TRICKY:
        cond = Condition("title", "==", value)
        expr = compile_conditions([cond])
        assert milvus_ids(milvus, expr) == {r["id"] for r in ROWS if holds(cond, r)} != set()


# ----------------------------------------------------------------------- the property
_names = st.sampled_from([*sorted(NAMES), "author", "year) or (1 == 1", 'genre"', "$meta", ""])
_ops = st.sampled_from(
    ["==", "=", "eq", "!=", "ne", ">", "gt", "$gte", "<", "lte", "in", "nin", "not in",
     "between", "range", "like", ") or (", "; drop", "||", "or", "", "in ["]
)  # fmt: skip
_scalars = st.one_of(
    st.sampled_from([*GENRES, "true", "2010", "7.5", "', '", '"]', '\\"', "' or '1'='1"]),
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
_values = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=4),
    st.dictionaries(st.sampled_from(["min", "max", "$gt", "x"]), _scalars, max_size=2),
)
_condition = st.one_of(
    st.fixed_dictionaries({"field": _names, "op": _ops, "value": _values}),
    st.fixed_dictionaries({"attribute": _names, "comparator": _ops, "value": _values}),
)
_typed = {
    "genre": st.sampled_from(GENRES),
    "title": st.one_of(st.sampled_from(TRICKY), st.text(max_size=10)),
    "year": st.one_of(st.integers(1800, 2100), st.integers(1800, 2100).map(str)),
    "rating": st.floats(0, 10),
    "ok": st.booleans(),
}


@st.composite
def _plausible(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(sorted(_typed)))
    numeric = name in ("year", "rating")
    op = draw(st.sampled_from(["==", "!=", "in", "not in"] + (["<", ">=", "between"] * numeric)))
    if op in ("in", "not in"):
        value: Any = draw(st.lists(_typed[name], min_size=1, max_size=3))
    elif op == "between":
        value = sorted(draw(st.lists(_typed[name].map(float), min_size=2, max_size=2)))
    else:
        value = draw(_typed[name])
    return {"field": name, "op": op, "value": value}


_filter = st.one_of(
    st.lists(st.one_of(_plausible(), _condition), max_size=5),
    st.lists(_plausible(), min_size=1, max_size=3),
    st.lists(_plausible(), min_size=1, max_size=3),
    st.lists(_plausible(), min_size=1, max_size=3),
    st.dictionaries(_names, _values, max_size=4),
    _condition,
    _scalars,
)


@st.composite
def replies(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=80))
    obj = {"query": draw(st.one_of(st.text(max_size=20), st.none())), "filter": draw(_filter)}
    style = draw(st.sampled_from(["json", "json", "repr", "fenced", "prose", "trailing", "cut"]))
    body = json.dumps(obj, ensure_ascii=draw(st.booleans())) if style != "repr" else repr(obj)
    if style == "fenced":
        return f"```json\n{body}\n```"
    if style == "prose":
        return f"Sure! Here you go: {body} Let me know."
    if style == "trailing":
        return body[:-1] + ",}"
    if style == "cut":
        return body[: draw(st.integers(0, len(body)))]
    return body


@pytest.mark.slow
@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(reply=replies())
def test_any_reply_gives_no_expression_or_a_valid_one_on_declared_fields(
    reply: str, milvus: Any
) -> None:
    sq = parse_self_query(reply, FIELDS, "question")
    assert sq.query.strip()
    event(f"{len(sq.conditions)} valid, {min(len(sq.dropped), 3)}+ dropped")
    if not sq.expression:
        assert not sq.conditions
        return
    assert check_grammar(sq.expression) <= NAMES
    assert sq.expression == compile_conditions(sq.conditions)
    for cond in sq.conditions:
        assert cond.field in NAMES
        values = cond.value if isinstance(cond.value, tuple) else (cond.value,)
        assert all(not (isinstance(v, float) and not math.isfinite(v)) for v in values)
    expected = {r["id"] for r in ROWS if all(holds(c, r) for c in sq.conditions)}
    assert milvus_ids(milvus, sq.expression) == expected, sq.expression


# ----------------------------------------------------------------------- hostile shapes
@pytest.mark.slow
@pytest.mark.parametrize("depth", [9, 500, 100_000])
@pytest.mark.parametrize("wrap", ["[{}]", '{{"and": {}}}'])
def test_deeply_nested_replies_never_raise(depth: int, wrap: str) -> None:
    inner = '{"field": "year", "op": ">", "value": 2000}'
    for _ in range(depth):
        inner = wrap.format(inner)
    sq = parse_self_query('{"query": "memory", "filter": ' + inner + "}", FIELDS, "q")
    assert sq.expression == ""  # nothing that deep is used
    assert sq.dropped and sq.query in ("memory", "q")


def test_nesting_within_the_bound_is_still_read() -> None:
    inner = '{"field": "year", "op": ">", "value": 2000}'
    for _ in range(4):
        inner = "[" + inner + "]"
    sq = parse_self_query('{"query": "x", "filter": ' + inner + "}", FIELDS, "q")
    assert sq.expression == "(year > 2000)"


@pytest.mark.slow
def test_in_and_not_in_treat_signed_zeros_like_equality(tmp_path: Path) -> None:
    """A row stored as -0.0 is matched by ``in [0.0]`` exactly when ``== 0.0`` matches it."""
    from pymilvus import MilvusClient

    client = MilvusClient(str(tmp_path / "z.db"))
    client.create_collection("z", dimension=2, enable_dynamic_field=True, id_type="string",
                             max_length=8)  # fmt: skip
    rows = [("neg", -0.0), ("pos", 0.0), ("one", 1.0)]
    client.insert("z", [{"id": i, "score": v, "vector": [1.0, 0.0]} for i, v in rows])

    def ids(expr: str) -> set[str]:
        return {r["id"] for r in client.query("z", filter=expr, output_fields=["id"])}

    try:
        for zero in (0.0, -0.0):
            equal = ids(compile_conditions([Condition("score", "==", zero)]))
            assert equal == {"neg", "pos"}
            assert ids(compile_conditions([Condition("score", "in", (zero,))])) == equal
            assert ids(compile_conditions([Condition("score", "not in", (zero,))])) == {"one"}
    finally:
        client.close()


@pytest.mark.slow
def test_field_inference_skips_values_it_cannot_use(tmp_path: Path, caplog: Any) -> None:
    from pymilvus import MilvusClient

    from llama_index_rag_pack.self_query.metadata_filter import infer_field_specs

    client = MilvusClient(str(tmp_path / "c.db"))
    client.create_collection("c", dimension=2, enable_dynamic_field=True, id_type="string",
                             max_length=8)  # fmt: skip
    values = ["mystery", "poetry", "bad\x07bell", "mystery"]
    client.insert(
        "c",
        [{"id": str(i), "genre": g, "year": 2000 + i, "vector": [1.0, 0.0]}
         for i, g in enumerate(values)],
    )  # fmt: skip
    try:
        specs = {s.name: s for s in infer_field_specs(client, "c")}
    finally:
        client.close()
    assert specs["genre"].allowed == ("mystery", "poetry")  # the bell character is skipped
    assert specs["year"].type == "int"
    assert "1 of 4 sampled values skipped" in caplog.text


# ----------------------------------------------------------------------- numbers beyond a float
HUGE = 10**400  # float(HUGE) raises OverflowError
OK = {"field": "ok", "op": "==", "value": True}
HUGE_FILTERS: dict[str, Any] = {
    "list": [{"field": "rating", "op": ">", "value": HUGE}, OK],
    "negative": [{"field": "rating", "op": "<", "value": -HUGE}, OK],
    "mapping": {"rating": {"$gt": HUGE}, "ok": True},
    "between": [{"field": "rating", "op": "between", "value": [1, HUGE]}, OK],
    "range mapping": [{"field": "rating", "op": "range", "value": {"min": 1, "max": HUGE}}, OK],
    "in": [{"field": "rating", "op": "in", "value": [1.5, HUGE]}, OK],
    "int field": {"year": HUGE, "ok": True},
}


@pytest.mark.parametrize("python_literal", [False, True])
@pytest.mark.parametrize("form", sorted(HUGE_FILTERS))
def test_a_number_beyond_a_float_is_a_dropped_condition(form: str, python_literal: bool) -> None:
    data = {"query": "q", "filter": HUGE_FILTERS[form]}
    reply = repr(data) if python_literal else json.dumps(data)
    sq = parse_self_query(reply, FIELDS, "q")
    assert sq.expression == "(ok == true)", sq  # the valid condition is kept
    assert len(sq.dropped) == 1 and len(sq.dropped[0]) < 120, sq.dropped


@pytest.mark.parametrize("value", [10**400, -(10**400), 10**5000], ids=["e400", "-e400", "e5000"])
def test_validation_never_raises_on_a_huge_integer(value: int) -> None:
    for name in ("rating", "year", "ok", "genre"):
        for op in ("==", ">", "between", "in"):
            listed = [1, value] if op in ("between", "in") else value
            cond, problem = validate_condition(FIELDS, name, op, listed)
            assert cond is None and problem
    unknown = validate_condition(FIELDS, value, "==", 1)[1]
    assert unknown.startswith("unknown field") and "number of over 30 digits" in unknown
    assert "unknown operator" in validate_condition(FIELDS, "year", value, 1)[1]
    with pytest.raises(ConfigurationError, match="must be numbers"):
        FieldSpec("rating", "float", minimum=value)
