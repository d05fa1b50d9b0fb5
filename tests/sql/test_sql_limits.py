"""``SQLLimits`` (``sql/sql_limits.py``): the bound on how many subqueries one statement holds.

SQLite evaluates an uncorrelated scalar subquery once and keeps its result for the whole
statement, and materialises a derived table or CTE it cannot flatten: each may keep a value of
up to ``max_result_bytes``, so the value-length limit alone let 260 copies of a ~960 KB value
grow the process by 251 MB. ``max_subqueries`` counts scalar, ``IN`` and ``EXISTS`` subqueries,
derived tables and CTE reads, each CTE or derived table again wherever it is read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from peak_rss import HAS_PROC, PeakRSS

from llama_index_rag_pack import (
    SafeSQLDatabase,
    SQLLimits,
    SQLQueryEngine,
    UnsafeSQLError,
    check_sql,
)
from llama_index_rag_pack.testing import ScriptedLLM

VISIBLE = {"people": ["id", "name", "dept"]}
BIG = (  # a ~960 KB text built from literals, each step within every limit
    "WITH a AS (SELECT replace('" + "a" * 1000 + "', 'a', '" + "b" * 64 + "') AS x), "
    "b AS (SELECT replace(a.x, 'bb', '" + "a" * 30 + "') AS x FROM a), c AS (SELECT b.x FROM b)"
)
IN_LIST = BIG + " SELECT 1 AS k WHERE '' IN (" + ",".join(["(SELECT x FROM c)"] * 260) + ")"
LENGTHS = BIG + " SELECT " + " + ".join(["length((SELECT x FROM c))"] * 190) + " AS k"


def scalars(n: int) -> str:
    """``n`` scalar subqueries, each counted once."""
    items = ", ".join(f"(SELECT q{i}.name FROM people q{i} WHERE q{i}.id = {i})" for i in range(n))
    return f"SELECT p.name FROM people p WHERE p.name IN ({items})"


def exists(n: int) -> str:
    return "SELECT p.name FROM people p WHERE " + " AND ".join(
        f"EXISTS (SELECT 1 FROM people q{i} WHERE q{i}.id = p.id + {i})" for i in range(n)
    )


def in_subqueries(n: int) -> str:
    return "SELECT p.name FROM people p WHERE " + " OR ".join(
        f"p.id IN (SELECT q{i}.id FROM people q{i} WHERE q{i}.dept = 'd{i}')" for i in range(n)
    )


def derived(n: int) -> str:
    sources = ", ".join(f"(SELECT DISTINCT q{i}.dept AS d FROM people q{i}) t{i}" for i in range(n))
    return f"SELECT count(*) AS n FROM {sources}"


def cte_reads(n: int) -> str:
    """One CTE holding an IN subquery, read ``n`` times: 2 per read."""
    reads = ", ".join(f"e e{i}" for i in range(n))
    return (
        "WITH e AS (SELECT p.id FROM people p WHERE p.id IN (SELECT q.id FROM people q)) "
        f"SELECT count(*) AS n FROM {reads}"
    )


def refusal(sql: str, limits: SQLLimits | None = None) -> str:
    with pytest.raises(UnsafeSQLError) as caught:
        check_sql(sql, VISIBLE, limits=limits)
    return str(caught.value)


def test_the_default_bound_is_16() -> None:
    assert SQLLimits().max_subqueries == 16


@pytest.mark.slow
@pytest.mark.parametrize("form", [scalars, exists, in_subqueries, derived])
def test_accepted_at_the_limit_refused_one_past_it(form) -> None:
    check_sql(form(16), VISIBLE)  # accepted at the default
    message = refusal(form(17))
    assert "max_subqueries" in message and "16" in message
    assert "\n" not in message
    check_sql(form(3), VISIBLE, limits=SQLLimits(max_subqueries=3))
    assert "more than 3 subqueries" in refusal(form(4), SQLLimits(max_subqueries=3))


def test_a_cte_counts_wherever_it_is_read_with_what_it_holds() -> None:
    check_sql(cte_reads(8), VISIBLE)  # 8 reads x (the read + its IN subquery) = 16
    assert "max_subqueries" in refusal(cte_reads(9))
    check_sql(cte_reads(2), VISIBLE, limits=SQLLimits(max_subqueries=4))
    assert "max_subqueries" in refusal(cte_reads(2), SQLLimits(max_subqueries=3))


def test_nested_subqueries_and_set_operations_add_up() -> None:
    inner = "SELECT q.id FROM people q WHERE q.id IN (SELECT r.id FROM people r)"
    sql = (  # the derived table, the IN subquery of each of its branches, the scalar one: 4
        f"SELECT t.id FROM ({inner} UNION ALL {inner.replace('q', 's').replace('r', 'u')}) t "
        "WHERE t.id = (SELECT max(v.id) FROM people v)"
    )
    check_sql(sql, VISIBLE, limits=SQLLimits(max_subqueries=4))
    assert "max_subqueries" in refusal(sql, SQLLimits(max_subqueries=3))


@pytest.mark.slow
def test_the_red_team_forms_are_refused_before_running() -> None:
    for sql in (IN_LIST, LENGTHS):
        assert "max_subqueries" in refusal(sql)


@pytest.fixture
def people_db(tmp_path: Path) -> str:
    path = tmp_path / "p.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, dept TEXT, salary INT);"
            "INSERT INTO people VALUES (1,'Ada','eng',9),(2,'Bo','ops',8),(3,'Cy','eng',7);"
        )
    conn.close()
    return str(path)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="measures memory on Linux")
@pytest.mark.parametrize("sql", [IN_LIST, LENGTHS], ids=["in-list", "lengths"])
def test_the_engine_answers_without_holding_the_value_many_times(people_db: str, sql: str) -> None:
    """Through ``query`` with the default 5 s time-out: 251 and 239 MB before the bound."""
    llm = ScriptedLLM(replies=lambda p: "ok [1](id=2)." if p.startswith("Answer") else sql)
    engine = SQLQueryEngine(people_db, tables=["people"], llm=llm, style="text", repair=False)
    with PeakRSS() as memory:
        response = engine.query("Tell me about the people")
    assert memory.growth < 64 * 2**20, f"memory grew by {memory.growth / 2**20:.0f} MB"
    assert "max_subqueries" in response.metadata["error"]


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "16"])
def test_max_subqueries_is_validated(value: object) -> None:
    with pytest.raises(ValueError, match="max_subqueries must be a positive int"):
        SQLLimits(max_subqueries=value)  # type: ignore[arg-type]


def test_a_reporting_query_with_a_few_subqueries_still_runs(people_db: str) -> None:
    db = SafeSQLDatabase(people_db, tables=["people"], columns=VISIBLE)
    sql = (
        "WITH e AS (SELECT p.id, p.name FROM people p WHERE p.dept IN "
        "(SELECT q.dept FROM people q WHERE q.id < 3)), m AS (SELECT max(e.id) AS top FROM e) "
        "SELECT e.name, (SELECT count(*) FROM people r WHERE r.dept = 'eng') AS n, m.top "
        "FROM e JOIN m ON e.id <= m.top WHERE EXISTS (SELECT 1 FROM people s WHERE s.id = e.id) "
        "ORDER BY e.name"
    )
    assert [tuple(r) for r in db.run(sql).rows] == [("Ada", 2, 3), ("Bo", 2, 3), ("Cy", 2, 3)]


# ---------------------------------------------------------------- aggregate and window calls
def aggregates(n: int) -> str:
    return (
        "SELECT "
        + " + ".join(f"length(max(p.name || '{i}'))" for i in range(n))
        + " AS k FROM people p"
    )


def windows(n: int) -> str:
    """``n`` windows over aggregates: each window counts once, not twice."""
    items = " + ".join(f"length(max(p.name || '{i}') OVER ())" for i in range(n))
    return f"SELECT {items} AS k FROM people p"


@pytest.mark.slow
@pytest.mark.parametrize("form", [aggregates, windows])
def test_aggregate_and_window_calls_are_bounded(form) -> None:
    assert SQLLimits().max_aggregates == 32
    check_sql(form(32), VISIBLE)
    message = refusal(form(33))
    assert "more than 32 aggregate and window calls" in message and "max_aggregates" in message
    assert "\n" not in message
    check_sql(form(3), VISIBLE, limits=SQLLimits(max_aggregates=3))
    refusal(form(4), SQLLimits(max_aggregates=3))


def test_an_aggregate_in_a_cte_counts_where_the_cte_is_read() -> None:
    def reads(n: int) -> str:
        return (
            "WITH e AS (SELECT max(p.name) AS m, min(p.dept) AS d FROM people p) "
            f"SELECT {', '.join(f'e{i}.m AS m{i}' for i in range(n))} FROM "
            + ", ".join(f"e e{i}" for i in range(n))
        )

    limits = SQLLimits(max_aggregates=8, max_subqueries=64)
    check_sql(reads(4), VISIBLE, limits=limits)  # 2 per read
    assert "max_aggregates" in refusal(reads(5), limits)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="measures memory on Linux")
def test_windows_over_one_megabyte_values_are_refused_before_they_run(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, dept TEXT);")
    db = SafeSQLDatabase(path, tables=["people"], timeout_s=5)
    sql = (
        BIG
        + " SELECT "
        + " + ".join(f"length(max(c.x || 'i{i}') OVER ())" for i in range(120))
        + " AS n FROM c"
    )
    with PeakRSS() as memory, pytest.raises(UnsafeSQLError, match="max_aggregates"):
        db.run(sql)
    assert memory.growth < 64 * 2**20
