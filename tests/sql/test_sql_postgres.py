"""Text-to-SQL on a real PostgreSQL cluster (started by the tests): the role check, the role
set-up statements, ``%`` in SQL, time-outs, the database's own column privileges behind the
checker, and the command line. Skipped, with the reason, where no PostgreSQL can be had."""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import pytest
from peak_rss import PeakRSS

from llama_index_rag_pack import SafeSQLDatabase, SQLExecutionError, SQLQueryEngine
from llama_index_rag_pack.cli.app import main
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.sql.sql_postgres import row_guard
from llama_index_rag_pack.sql.sql_safety import CheckedSQL
from llama_index_rag_pack.testing import ScriptedLLM

VISIBLE = {"staff": ["id", "name"]}


@pytest.fixture(scope="module")
def shop(postgres: Any) -> Any:
    """Database ``shop`` owned by ``owner``: ``staff(id, name, salary)`` and ``payroll``; role
    ``reader`` made from ``role_setup_sql`` (SELECT on staff.id, staff.name only)."""
    postgres.execute(
        "postgres",
        "CREATE ROLE owner LOGIN PASSWORD 'owner-pw'",
        "CREATE DATABASE shop OWNER owner",
    )
    postgres.execute(
        "shop",
        "SET ROLE owner",
        "CREATE TABLE staff (id INT PRIMARY KEY, name TEXT, salary INT)",
        "INSERT INTO staff VALUES (1, 'Ann', 5000), (2, 'Abe', 6000), (3, 'Bob', 7000)",
        "CREATE TABLE payroll (month TEXT, total INT)",
        "INSERT INTO payroll VALUES ('jan', 18000)",
    )
    as_owner = SafeSQLDatabase(
        postgres.url("shop", "owner", "owner-pw"), tables=["staff"], columns=VISIBLE,
        role_check="off",
    )  # fmt: skip
    statements = as_owner.role_setup_sql("reader", password="reader-pw")
    postgres.execute("shop", *[s for s in statements if "ROLE" in s.split(" ")[1]])
    postgres.execute("shop", "SET ROLE owner", *[s for s in statements if s.startswith("GRANT")])
    return postgres


def reader_db(shop: Any, **kwargs: Any) -> SafeSQLDatabase:
    return SafeSQLDatabase(
        shop.url("shop", "reader", "reader-pw"), tables=["staff"], columns=VISIBLE, **kwargs
    )


@pytest.mark.slow
def test_percent_signs_and_braces_in_the_sql_reach_the_server_as_written(shop: Any) -> None:
    llm = ScriptedLLM(
        replies=["```sql\nSELECT name FROM staff WHERE name LIKE 'A%' OR name = '{0}{x}' "
                 "ORDER BY name\n```",
                 "Abe [1](id=2) and Ann [2](id=3)."]
    )  # fmt: skip
    response = SQLQueryEngine(reader_db(shop), llm=llm, style="text").query("Who starts with A?")
    assert response.metadata["error"] is None
    assert response.metadata["rows"] == [["Abe"], ["Ann"]]
    assert "LIKE 'A%'" in response.metadata["sql"] and "'{0}{x}'" in response.metadata["sql"]


@pytest.mark.slow
def test_the_role_set_up_statements_grant_only_the_visible_columns(shop: Any) -> None:
    db = reader_db(shop)
    assert db.role_problems() == []
    assert db.run("SELECT * FROM staff ORDER BY id").columns == ["id", "name"]
    statements = db.role_setup_sql("analyst", password="it's")
    assert 'GRANT SELECT ("id", "name") ON "public"."staff" TO "analyst";' in statements
    assert "CREATE ROLE \"analyst\" LOGIN PASSWORD 'it''s';" in statements


@pytest.mark.slow
def test_a_role_that_can_read_hidden_data_is_refused_in_one_line(shop: Any, caplog: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        SafeSQLDatabase(shop.url("shop", "owner", "owner-pw"), tables=["staff"], columns=VISIBLE)
    message = str(caught.value)
    assert "\n" not in message
    assert "staff.salary" in message and "table payroll" in message
    assert "--setup-role" in message and "role_check='warn'" in message
    with pytest.raises(ConfigurationError, match=r"everything \(superuser\)"):
        SafeSQLDatabase(shop.url("shop"), tables=["staff"], columns=VISIBLE)
    with caplog.at_level(logging.WARNING):
        db = SafeSQLDatabase(
            shop.url("shop", "owner", "owner-pw"), tables=["staff"], columns=VISIBLE,
            role_check="warn",
        )  # fmt: skip
    assert "staff.salary" in caplog.text
    assert db.run("SELECT * FROM staff WHERE id = 1").rows == [(1, "Ann")]  # the checker holds


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELECT salary FROM staff", "permission denied for table staff"),
        ("SELECT * FROM payroll", "permission denied for table payroll"),
        ("SELECT s FROM staff s", "permission denied for table staff"),
        ("DELETE FROM staff", "syntax error"),  # wrapped in a SELECT, then read-only anyway
    ],
)
def test_the_database_refuses_hidden_reads_even_past_the_checker(
    shop: Any, monkeypatch: pytest.MonkeyPatch, sql: str, message: str
) -> None:
    db = reader_db(shop)
    monkeypatch.setattr(db, "check", lambda _, **__: CheckedSQL(sql, sql, ()))
    with pytest.raises(SQLExecutionError, match=message):
        db.run(sql)
    assert shop.execute("shop", "SELECT count(*), sum(salary) FROM staff") == [(3, 18000)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("writes", "message"),
    [
        ("SELECT pg_catalog.nextval('staff_seq') AS name", "read-only transaction"),
        (  # refused when the cursor over it is declared, before the transaction is asked
            "WITH d AS (DELETE FROM staff RETURNING name) SELECT name FROM d",
            "data-modifying|read-only transaction",
        ),
    ],
)
def test_a_read_only_transaction_even_for_the_owner(
    shop: Any, monkeypatch: Any, writes: str, message: str
) -> None:
    shop.execute("shop", "SET ROLE owner", "CREATE SEQUENCE IF NOT EXISTS staff_seq")
    db = SafeSQLDatabase(
        shop.url("shop", "owner", "owner-pw"), tables=["staff"], columns=VISIBLE, role_check="off"
    )
    monkeypatch.setattr(db, "check", lambda _, **__: CheckedSQL(writes, writes, ()))
    monkeypatch.setattr(db, "_row_guard", lambda checked: writes)
    with pytest.raises(SQLExecutionError, match=message):
        db.run("SELECT name FROM staff")
    assert shop.execute("shop", "SELECT count(*) FROM staff") == [(3,)]
    assert shop.execute("shop", "SELECT last_value, is_called FROM staff_seq") == [(1, False)]


@pytest.mark.slow
def test_an_expensive_query_stops_at_the_time_out(shop: Any) -> None:
    # the time-out also bounds checking the SQL: 2 s leaves that room on a busy 2-core machine
    # (checking took over 0.5 s there once), while the query itself would run for hours
    db = reader_db(shop, timeout_s=2.0)
    joins = ", ".join(f"staff AS s{i}" for i in range(20))  # 3**20 rows: hours unstopped
    start = time.monotonic()
    with pytest.raises(SQLExecutionError, match=r"ran past the 2s time-out"):
        db.run(f"SELECT count(*) FROM {joins}")
    assert time.monotonic() - start < 15.0  # stopped by the server, even on a busy machine


@pytest.mark.slow
def test_a_huge_result_row_fails_on_the_server(shop: Any) -> None:
    db = reader_db(shop, max_result_bytes=1000)
    doubled = "WITH a AS (SELECT s.name || s.name AS x FROM staff AS s)" + "".join(
        f", a{i} AS (SELECT a{i - 1 if i else ''}.x || a{i - 1 if i else ''}.x AS x "
        f"FROM a{i - 1 if i else ''})"
        for i in range(9)
    )
    with pytest.raises(SQLExecutionError, match="larger than 1,000 bytes"):
        db.run(doubled + " SELECT a8.x FROM a8")


MB = 1024 * 1024
#: 64 MB of text from a 1,000-character literal, one REPLACE per CTE (≈50 ms on the server).
HUGE_VALUE = (
    "WITH a AS (SELECT replace('" + "a" * 1000 + "', 'a', '" + "b" * 64 + "') AS x), "
    "b AS (SELECT replace(a.x, 'b', '" + "c" * 64 + "') AS x FROM a), "
    "c AS (SELECT replace(b.x, 'cccc', '" + "d" * 64 + "') AS x FROM b) "
)


def role_db(shop: Any, role: str, **kwargs: Any) -> SafeSQLDatabase:
    if role == "reader":
        return reader_db(shop, **kwargs)
    url = shop.url("shop", "owner", "owner-pw")
    return SafeSQLDatabase(url, tables=["staff"], columns=VISIBLE, role_check="off", **kwargs)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="measures memory on Linux")
@pytest.mark.parametrize("role", ["reader", "owner"])
def test_an_output_column_named_like_the_guard_cannot_switch_it_off(shop: Any, role: str) -> None:
    """Rows of 128 MB whose first column is named ``_limited`` (the guard's old alias, which a
    bare whole-row reference then read instead of the row) fail on the server, unsent."""
    db = role_db(shop, role, timeout_s=30)  # building the row takes seconds on a busy machine
    attack = f"{HUGE_VALUE}SELECT 1 AS _limited, c.x AS x1, c.x AS x2 FROM c"  # 128 MB a row
    with PeakRSS() as memory, pytest.raises(SQLExecutionError, match="larger than 1,000,000"):
        db.run(attack)
    assert memory.growth < 64 * MB, f"one query grew the process by {memory.growth / MB:.0f} MB"
    small = db.run("SELECT s.name AS _limited, s.id AS x FROM staff AS s ORDER BY s.id")
    assert small.columns == ["_limited", "x"] and small.rows[0] == ("Ann", 1)


def test_the_guard_alias_is_drawn_afresh_and_never_one_the_query_uses() -> None:
    first, second = row_guard("SELECT 1 AS a", 10, 5), row_guard("SELECT 1 AS a", 10, 5)
    assert first != second and '"_limited"' not in first
    alias = first.split(" ")[1].removesuffix(".*")
    assert row_guard(f"SELECT 1 AS {alias}", 10, 5).split(" ")[1] != first.split(" ")[1]


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="measures memory on Linux")
def test_many_rows_each_under_the_limit_are_never_all_held_by_the_client(shop: Any) -> None:
    """500 rows of 0.9 MB each pass the row guard; they are fetched a few at a time, so the
    client stops at the byte limit holding a few MB (not the 450 MB result)."""
    db = reader_db(shop, max_rows=500)
    value = (
        "WITH a AS (SELECT replace('" + "a" * 900 + "', 'a', '" + "b" * 64 + "') AS x), "
        "b AS (SELECT replace(a.x, 'b', '" + "c" * 16 + "') AS x FROM a) "
    )  # 921,600 characters
    joins = ", ".join(f"staff AS s{i}" for i in range(6))  # 729 rows
    with PeakRSS() as memory, pytest.raises(SQLExecutionError, match="larger than 1,000,000"):
        db.run(f"{value}SELECT b.x FROM b, {joins}")
    assert memory.growth < 64 * MB, f"grew by {memory.growth / MB:.0f} MB"
    rows = reader_db(shop, max_rows=500).run(f"SELECT s0.id FROM {joins}").rows
    assert len(rows) == 500  # a result of many small rows still comes back whole


@pytest.mark.slow
def test_a_plain_postgresql_url_uses_psycopg_3(shop: Any) -> None:
    url = shop.url("shop", "reader", "reader-pw").replace("postgresql+psycopg://", "postgresql://")
    db = SafeSQLDatabase(url, tables=["staff"], columns=VISIBLE)
    assert db.engine.url.drivername == "postgresql+psycopg"
    assert db.run("SELECT count(*) FROM staff").rows == [(3,)]


def test_an_unreachable_server_is_a_quick_one_line_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    start = time.monotonic()
    with pytest.raises(ConfigurationError, match="cannot open") as caught:
        SafeSQLDatabase(f"postgresql+psycopg://u:p@127.0.0.1:{port}/x", tables=["t"], timeout_s=1)
    assert "\n" not in str(caught.value) and "p@" not in str(caught.value)  # no password shown
    assert time.monotonic() - start < 10


def test_servers_without_database_guarantees_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="allow_unguarded=True"):
        SafeSQLDatabase("mysql+pymysql://u:p@127.0.0.1:1/x", tables=["t"])


def _cli(monkeypatch: Any, capsys: Any, llm: Any, argv: list[str]) -> tuple[int, str, str]:
    monkeypatch.setattr("llama_index_rag_pack.models.settings.resolve_llm", lambda spec=None: llm)
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.slow
def test_cli_prints_the_role_and_answers_as_that_role(
    shop: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    owner = shop.url("shop", "owner", "owner-pw")
    columns = ["--tables", "staff", "--columns", "staff.id,staff.name"]
    status, out, _ = _cli(
        monkeypatch, capsys, None, ["sql", "--db", owner, *columns, "--setup-role", "clerk"]
    )
    assert status == 0
    assert 'GRANT SELECT ("id", "name") ON "public"."staff" TO "clerk";' in out
    shop.execute("shop", *[line for line in out.splitlines() if "ROLE" in line.split(" ")[1]])
    shop.execute("shop", "SET ROLE owner", *[x for x in out.splitlines() if x.startswith("GRANT")])
    shop.execute("shop", "ALTER ROLE clerk PASSWORD 'clerk-pw'")

    refused = _cli(monkeypatch, capsys, ScriptedLLM(), ["sql", "--db", owner, *columns, "q?"])
    assert refused[0] == 2 and "staff.salary" in refused[2]

    llm = ScriptedLLM(replies=["SELECT count(*) AS n FROM staff", "3 [1](id=2)"])
    clerk = shop.url("shop", "clerk", "clerk-pw")
    status, out, _ = _cli(monkeypatch, capsys, llm, ["sql", "--db", clerk, *columns, "How many?"])
    assert status == 0 and out.startswith("3 [1]")
    assert "salary" not in llm.prompts[0]

    llm = ScriptedLLM(replies=["SELECT count(*) AS n FROM staff", "3 [1](id=2)"])
    argv = ["sql", "--db", owner, *columns, "--allow-broad-role", "How many?"]
    assert _cli(monkeypatch, capsys, llm, argv)[0] == 0


@pytest.mark.slow
def test_a_second_statement_is_refused_by_the_protocol(shop: Any, monkeypatch: Any) -> None:
    """Even text the checker never saw cannot chain statements: one prepared statement each."""
    db = reader_db(shop)
    chained = "SELECT 1; COMMIT; SET statement_timeout = 0"
    monkeypatch.setattr(db, "check", lambda _, **__: CheckedSQL(chained, chained, ()))
    monkeypatch.setattr(db, "_row_guard", lambda sql: sql)
    with pytest.raises(SQLExecutionError, match="multiple commands"):
        db.run("anything")


@pytest.mark.slow
def test_a_call_that_ignores_the_time_out_is_cancelled_at_the_deadline(
    shop: Any, monkeypatch: Any
) -> None:
    """A server call the statement time-out does not stop (simulated: the time-out switched
    off, then pg_sleep) is cancelled from the client at the deadline."""
    from llama_index_rag_pack.sql import sql_database

    def ignores_time_out(raw: Any, sql: str, deadline: float, **_: Any) -> Any:
        cursor = raw.cursor()
        cursor.execute("SET LOCAL statement_timeout = 0")
        cursor.execute("SELECT pg_sleep(20)")
        return [], []

    db = reader_db(shop, timeout_s=0.5)
    monkeypatch.setattr(sql_database, "postgres_execute", ignores_time_out)
    start = time.monotonic()
    with pytest.raises(SQLExecutionError, match=r"ran past the 0\.5s time-out"):
        db.run("SELECT count(*) FROM staff")
    assert time.monotonic() - start < 1.0
    for _ in range(50):  # the cancel reaches the server: no sleeper left
        sleeping = shop.execute(
            "shop", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'"
        )
        if sleeping == [(0,)]:
            break
        time.sleep(0.1)
    assert sleeping == [(0,)]
