"""Replies that cost far more to read than their length: a YAML alias bomb (424 characters
standing for 10^8 values) and runs of blanks that made a regex backtrack quadratically. Reading
a reply happens before any time-out starts, so each must be bounded by itself: checked through
``SQLQueryEngine.query``/``aquery`` and directly on the readers in ``core.llm_output``."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from peak_rss import PeakRSS

from llama_index_rag_pack import SQLQueryEngine
from llama_index_rag_pack.core import llm_output
from llama_index_rag_pack.core.llm_output import json_values, parse_list
from llama_index_rag_pack.routing.route_replies import parse_route_reply
from llama_index_rag_pack.sql.sql_safety import extract_sql
from llama_index_rag_pack.testing import ScriptedLLM

MB = 1024 * 1024
TIMEOUT_S = 0.4
# a hang guard, not a timing claim: each of these replies took 8 to 45 s before, and takes about
# 0.35 s now alone (a loaded 2-core CI machine has run one 6x slower than that)
SLOW_S = 6.0


def alias_bomb(depth: int = 8, width: int = 10) -> str:
    """``{sql: ..., a0: &a0 [1 x10], a1: &a1 [*a0 x10], ...}``: width**depth values."""
    parts = ["a0: &a0 [" + ",".join(["1"] * width) + "]"]
    parts += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    return '{sql: "SELECT p.name FROM people p", ' + ", ".join(parts) + "}"


FENCE_THEN_BLANKS = "```" + " " * 100_000 + "x\nSELECT p.name FROM people p"


needs_proc = pytest.mark.skipif(
    not os.path.exists("/proc/self/statm"), reason="measures memory on Linux"
)


@pytest.fixture
def engine_for(tmp_path: Path) -> Callable[[str], SQLQueryEngine]:
    path = tmp_path / "a.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary INT);"
            "INSERT INTO people VALUES (1, 'Ada', 'eng', 918273);"
        )
    conn.close()

    def make(reply: str) -> SQLQueryEngine:
        llm = ScriptedLLM(replies=lambda p: "Ada [1](id=2)" if p.startswith("Answer") else reply)
        return SQLQueryEngine(
            str(path), tables=["people"], columns={"people": ["id", "name", "dept"]}, llm=llm,
            style="text", timeout_s=TIMEOUT_S, repair=False,
        )  # fmt: skip

    return make


def _ask(engine: SQLQueryEngine, path: str) -> tuple[object, float, int]:
    start = time.monotonic()
    with PeakRSS() as memory:
        if path == "sync":
            response = engine.query("Who works here?")
        else:
            response = asyncio.run(engine.aquery("Who works here?"))
    return response, time.monotonic() - start, memory.growth


# ----------------------------------------------------------------------------- through the engine
@needs_proc
@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_yaml_alias_bomb_reply_is_refused_fast_and_small(engine_for, path: str) -> None:
    reply = alias_bomb()
    assert len(reply) < 500
    response, took, growth = _ask(engine_for(reply), path)
    assert took < SLOW_S, f"{len(reply)}-character reply took {took:.1f}s"
    assert growth < 64 * MB, f"{len(reply)}-character reply grew memory by {growth / MB:.0f} MB"
    assert response.metadata["error"]  # a refusal, said in the answer
    assert "918273" not in str(response.metadata)


@pytest.mark.parametrize("path", ["sync", "async"])
def test_a_code_fence_then_a_long_run_of_blanks_is_read_in_linear_time(engine_for, path) -> None:
    response, took, _ = _ask(engine_for(FENCE_THEN_BLANKS), path)
    assert took < SLOW_S, f"{len(FENCE_THEN_BLANKS)}-character reply took {took:.1f}s"
    assert response.metadata["rows"] == [["Ada"]]  # the SQL after the fence line still runs


@pytest.mark.parametrize(
    "reply",
    [
        "{sql: 'SELECT p.name FROM people p', reason: the names}",  # YAML-ish, no alias
        '{"sql": "SELECT p.name FROM people p",}',
        "```sql\nSELECT p.name FROM people p\n```",
        "Here:\n```  postgresql \t\nSELECT p.name FROM people p\n```\nDone.",
    ],
)
def test_lenient_and_fenced_replies_still_run(engine_for, reply: str) -> None:
    response = engine_for(reply).query("Who works here?")
    assert response.metadata["error"] is None
    assert response.metadata["rows"] == [["Ada"]]


# ----------------------------------------------------------------------------- the readers
@needs_proc
@pytest.mark.parametrize("reply", [alias_bomb(), "[" + alias_bomb(7) + "]"])
def test_json_values_refuses_yaml_aliases_at_once(reply: str) -> None:
    start = time.monotonic()
    with PeakRSS() as memory:
        values = json_values(reply)
        sql = extract_sql(reply)
        parse_list(reply)
        parse_route_reply(reply, ["a", "b"])
    assert time.monotonic() - start < SLOW_S
    assert memory.growth < 64 * MB
    assert values == []  # aliases are not expanded, and the text is not JSON
    assert sql.startswith("SELECT p.name FROM people p")  # then refused by the checker


@pytest.mark.parametrize(
    "reply",
    ["{a: &x 1, b: *x}", "{a: &x [1, 2], b: 3}", "{base: &b {k: 1}, c: {<<: *b}}"],
)
def test_a_yaml_anchor_or_alias_is_never_read(reply: str) -> None:
    assert json_values(reply) == []


def test_yaml_leniency_without_aliases_is_kept() -> None:
    assert json_values("{route: python_docs, 'reason': 'R&D *docs*',}") == [
        {"route": "python_docs", "reason": "R&D *docs*"}
    ]


@pytest.mark.slow
def test_a_value_too_large_to_walk_is_dropped_and_a_long_reply_is_cut() -> None:
    big = json.dumps(list(range(llm_output.MAX_JSON_NODES + 1)))
    assert json_values(big) == []
    assert json_values(json.dumps(list(range(100)))) == [list(range(100))]
    start = time.monotonic()
    assert json_values("[" + "{}," * 66_000 + "]") == []  # 200,000 characters of literals
    assert json_values(" " * llm_output.MAX_REPLY_CHARS + '{"a": 1}') == []  # past what is read
    assert json_values(("[" + "{}," * 3_000 + "] ") * 60)  # read within the budget
    assert time.monotonic() - start < SLOW_S


def test_code_fence_and_list_regexes_do_not_backtrack_on_blanks() -> None:
    start = time.monotonic()
    assert extract_sql(FENCE_THEN_BLANKS) == "SELECT p.name FROM people p"
    assert extract_sql("```sql" + "\t" * 50_000 + "x\nSELECT 1") == "SELECT 1"
    items = parse_list("q" + " " * 40_000 + "x\n2. hybrid search")
    assert items[-1] == "hybrid search"
    assert time.monotonic() - start < SLOW_S, f"took {time.monotonic() - start:.1f}s"


@pytest.mark.parametrize(
    ("line", "item"),
    [("q: x y", "x y"), ("Q2. x y", "x y"), ("Query 1: x y", "x y"), ("query #3) x y", "x y"),
     ("q#: x y", "x y"), ("search query 4 - x y", "x y"), ("q 1 : x y", "x y")],
)  # fmt: skip
def test_query_prefixes_are_still_removed(line: str, item: str) -> None:
    assert parse_list(line) == [item]
