"""Text-to-SQL safety: the attack list, the repair-once path, sync/async, cited answers, and a
property test that whatever SQL the LLM writes, only allowed tables and columns are ever read."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_rag_pack import (
    SafeSQLDatabase,
    SQLExecutionError,
    SQLQueryEngine,
    UnsafeSQLError,
    check_sql,
)
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.sql.sql_query_engine import SQL_REPLY_FORMATS, SQL_REPLY_SCHEMA
from llama_index_rag_pack.sql.sql_safety import CheckedSQL, extract_sql
from llama_index_rag_pack.testing import ScriptedLLM

ALLOWED_COLUMNS = {"books": ["id", "title", "year", "author_id"], "authors": ["id", "name"]}


@pytest.fixture(scope="module")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sql") / "library.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE authors (id INTEGER PRIMARY KEY, name TEXT, email TEXT);
            CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT, year INT, author_id INT);
            CREATE TABLE secrets (k TEXT, v TEXT);
            INSERT INTO authors VALUES (1, 'Ada', 'ada@x.org'), (2, 'Bo', 'bo@x.org');
            INSERT INTO books VALUES (1, 'Memory', 2012, 1), (2, 'Tides', 1999, 2),
                                     (3, 'Lanterns', 2015, 1);
            INSERT INTO secrets VALUES ('password', 'hunter2');
            """
        )
    conn.close()
    return path


@pytest.fixture(scope="module")
def db(db_path: Path) -> SafeSQLDatabase:
    return SafeSQLDatabase(
        db_path, tables=["books", "authors"], columns={"authors": ["id", "name"]}, timeout_s=0.5
    )


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


ATTACKS = [
    ("DROP TABLE books", "DROP is not allowed"),
    ("DELETE FROM books WHERE 1=1", "DELETE is not allowed"),
    ("UPDATE books SET title = 'x'", "UPDATE is not allowed"),
    ("INSERT INTO books VALUES (9, 'x', 1, 1)", "INSERT is not allowed"),
    ("ATTACH DATABASE '/tmp/evil.db' AS evil", "ATTACH is not allowed"),
    ("PRAGMA writable_schema = 1", "PRAGMA is not allowed"),
    ("SELECT title FROM books; DROP TABLE books", "2 statements found"),
    ("SELECT title FROM books -- harmless\n; DELETE FROM books", "2 statements found"),
    ("SELECT title FROM books /* hi */; UPDATE books SET year = 0", "2 statements found"),
    (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c",
        "WITH RECURSIVE is not allowed",
    ),
    ("SELECT k, v FROM secrets", "table 'secrets' is not allowed"),
    ("SELECT name FROM sqlite_master", "table 'sqlite_master' is not allowed"),
    ("SELECT title FROM main.books", "is qualified"),
    ("SELECT email FROM authors", "Column 'email' could not be resolved"),
    ("SELECT a.email FROM authors AS a", "Unknown column: email"),
    ("SELECT title FROM books WHERE id IN (SELECT v FROM secrets)", "'secrets' is not allowed"),
    ("SELECT load_extension('/tmp/evil.so')", "load_extension() is not allowed"),
    ("SELECT readfile('/etc/passwd')", "readfile() is not allowed"),
    ("SELECT title FROM books INTO OUTFILE '/tmp/x'", ""),
    ("VACUUM INTO '/tmp/copy.db'", ""),
    ("", "no SQL found"),
]


@pytest.mark.parametrize(("sql", "message"), ATTACKS)
def test_each_attack_is_blocked_with_a_clear_message_and_nothing_changes(
    db: SafeSQLDatabase, db_path: Path, sql: str, message: str
) -> None:
    before = checksum(db_path)
    with pytest.raises(UnsafeSQLError) as caught:
        db.run(sql)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text and text
    assert checksum(db_path) == before


def test_the_engine_reports_a_blocked_attack_after_one_repair(
    db: SafeSQLDatabase, db_path: Path
) -> None:
    before = checksum(db_path)
    llm = ScriptedLLM(replies=["DROP TABLE books", "```sql\nDELETE FROM books\n```"])
    response = SQLQueryEngine(db, llm=llm).query("Remove every book")
    assert len(llm.prompts) == 2  # the query, one repair, no answer step
    assert "DROP is not allowed" in llm.prompts[1]
    assert response.metadata["error"] == "DELETE is not allowed; only a read-only SELECT can run"
    assert response.response.startswith("No safe SQL query could answer this: DELETE")
    assert checksum(db_path) == before


def test_a_recursive_cte_past_the_checker_is_refused_by_the_database(
    db: SafeSQLDatabase, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even if a never-ending recursive CTE slipped past the checker, SQLite's authorizer refuses
    it (and the time-out would stop it: see the next test)."""
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    before = checksum(db_path)
    monkeypatch.setattr(db, "check", lambda sql, **_: CheckedSQL(endless, endless, ()))
    with pytest.raises(SQLExecutionError, match="the database refused the query"):
        db.run("anything")
    assert checksum(db_path) == before


@pytest.mark.slow
def test_an_expensive_query_is_stopped_by_the_time_out(db: SafeSQLDatabase) -> None:
    joins = ", ".join(f"books AS b{i}" for i in range(20))  # 3**20 rows to count
    with pytest.raises(SQLExecutionError, match=r"ran past the 0\.5s time-out; write a cheaper"):
        db.run(f"SELECT count(*) FROM {joins}")


@pytest.mark.parametrize(
    "sql",
    ["DELETE FROM books", "SELECT v FROM secrets", "SELECT email FROM authors"],
)
def test_the_database_refuses_writes_and_hidden_reads_even_past_the_checker(
    db: SafeSQLDatabase, db_path: Path, sql: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = checksum(db_path)
    monkeypatch.setattr(db, "check", lambda _, **__: CheckedSQL(sql, sql, ()))
    with pytest.raises(SQLExecutionError, match="the database refused the query"):
        db.run(sql)
    assert checksum(db_path) == before


def test_safe_queries_run_with_aliases_subqueries_ctes_and_star(db_path: Path) -> None:
    # a roomy time-out: the module's 0.5 s one stopped the checking of the CTE below once, when
    # a loaded machine left the worker unscheduled (what this test checks is not timing)
    db = SafeSQLDatabase(
        db_path, tables=["books", "authors"], columns={"authors": ["id", "name"]}, timeout_s=10
    )
    star = db.run("SELECT * FROM authors ORDER BY id")
    assert star.columns == ["id", "name"]  # the hidden email column is not expanded
    joined = db.run(
        "WITH recent AS (SELECT title, author_id FROM books WHERE year > 2010) "
        "SELECT r.title, a.name FROM recent r JOIN authors a ON a.id = r.author_id ORDER BY 1"
    )
    assert joined.rows == [("Lanterns", "Ada"), ("Memory", "Ada")]
    counted = db.run("SELECT n FROM (SELECT count(*) AS n FROM books) AS s")
    assert counted.rows == [(3,)]
    assert {table for table, _ in joined.reads} == {"books", "authors"}


def test_the_row_limit_is_applied(db_path: Path) -> None:
    small = SafeSQLDatabase(db_path, tables=["books"], max_rows=2)
    result = small.run("SELECT title FROM books ORDER BY id")
    assert result.rows == [("Memory",), ("Tides",)]
    assert "LIMIT 2" in small.check("SELECT title FROM books").limited_sql


def test_bad_configuration_is_a_one_line_error(db_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not in the database"):
        SafeSQLDatabase(db_path, tables=["nope"])
    with pytest.raises(ConfigurationError, match="does not exist"):
        SafeSQLDatabase(tmp_path / "missing.db", tables=["books"])
    with pytest.raises(ConfigurationError, match="tables is empty"):
        SafeSQLDatabase(db_path, tables=[])


def test_the_llm_sees_only_allowed_schema_and_samples(db: SafeSQLDatabase) -> None:
    schema = db.describe()
    assert "CREATE TABLE books" in schema and "CREATE TABLE authors" in schema
    assert "email" not in schema and "secrets" not in schema and "hunter2" not in schema
    assert "Memory" in schema  # sample rows


def test_extract_sql_tolerates_prose_and_fences() -> None:
    assert extract_sql("Sure!\n```sql\nSELECT 1\n```\nDone.") == "SELECT 1"
    assert extract_sql("```\nSELECT 2\n```") == "SELECT 2"
    assert extract_sql("The query is: SELECT title FROM books") == "SELECT title FROM books"


REPAIR_SCRIPT = [
    "Here it is:\n```sql\nSELECT title, email FROM books\n"
    "JOIN authors ON authors.id = author_id\n```",
    "```sql\nSELECT b.title FROM books b WHERE b.year > 2010 ORDER BY b.title\n```",
    "Two books: Lanterns [1](id=2) and Memory [2](id=3).",
]


def _check_repaired(response, llm: ScriptedLLM) -> None:
    assert [a["error"] is None for a in response.metadata["attempts"]] == [False, True]
    assert "Column 'email' could not be resolved" in llm.prompts[1]
    assert response.metadata["rows"] == [["Lanterns"], ["Memory"]]
    assert f"SQL: {response.metadata['sql']}" in response.references  # always cited
    assert "row 1: title='Lanterns'" in response.references
    assert [n.node.metadata.get("sql_row") for n in response.source_nodes] == [1, 2, None]


def test_repair_once_then_a_cited_answer_sync(db: SafeSQLDatabase) -> None:
    llm = ScriptedLLM(replies=list(REPAIR_SCRIPT))
    response = SQLQueryEngine(db, llm=llm, style="text").query("Books after 2010?")
    _check_repaired(response, llm)
    assert response.answer.startswith("Two books: Lanterns [1] and Memory [2]")


def test_repair_once_then_a_cited_answer_async_never_calls_sync(db: SafeSQLDatabase) -> None:
    llm = ScriptedLLM(replies=list(REPAIR_SCRIPT), forbid_sync=True)
    engine = SQLQueryEngine(db, llm=llm, style="markdown")
    response = asyncio.run(engine.aquery("Books after 2010?"))
    _check_repaired(response, llm)
    sync = SQLQueryEngine(db, llm=ScriptedLLM(replies=list(REPAIR_SCRIPT)), style="markdown")
    assert sync.query("Books after 2010?").response == response.response


def test_no_repair_when_disabled(db: SafeSQLDatabase) -> None:
    llm = ScriptedLLM(replies=["SELECT v FROM secrets"])
    response = SQLQueryEngine(db, llm=llm, repair=False).query("secrets?")
    assert len(llm.prompts) == 1
    assert "'secrets' is not allowed" in response.metadata["error"]


# ---------------------------------------------------------------- property test
FRAGMENTS = st.sampled_from(
    [
        "SELECT", "*", "title", "email", "name", "v", "k", "id", "FROM", "books", "authors",
        "secrets", "sqlite_master", "main.books", "WHERE", "1=1", "JOIN", "ON", "a.id", "b", "a",
        "AS", ",", ";", "--", "/*", "*/", "\n", "(", ")", "UNION", "WITH", "RECURSIVE", "x",
        "DROP", "DELETE", "UPDATE", "SET", "INSERT", "INTO", "VALUES", "ATTACH", "PRAGMA",
        "load_extension('a')", "readfile('b')", "count(*)", "ORDER BY", "LIMIT 1", "'s'",
        "```sql", "```", "t(x) AS (SELECT 1)", "IN", "=", "author_id",
    ]
)  # fmt: skip


@pytest.mark.slow
@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.lists(FRAGMENTS, min_size=1, max_size=14).map(" ".join),
        st.text(max_size=60),
    )
)
def test_any_llm_sql_is_rejected_or_reads_only_allowed_columns(
    db: SafeSQLDatabase, db_path: Path, reply: str
) -> None:
    before = checksum(db_path)
    try:
        result = db.run(extract_sql(reply))
    except (UnsafeSQLError, SQLExecutionError):
        assert checksum(db_path) == before
        return
    assert set(result.tables) <= set(ALLOWED_COLUMNS)
    for table, column in result.reads:  # what SQLite actually read, from its authorizer
        assert table in ALLOWED_COLUMNS and (column in ALLOWED_COLUMNS[table] or column == "")
    assert checksum(db_path) == before


def test_check_sql_postgres_dialect_is_checked_the_same_way() -> None:
    allowed = {"books": ["title"]}
    assert (
        "LIMIT 5"
        in check_sql("SELECT title FROM books", allowed, dialect="postgres", max_rows=5).limited_sql
    )
    with pytest.raises(UnsafeSQLError, match="not allowed"):
        check_sql("SELECT pg_read_file('/etc/passwd')", allowed, dialect="postgres")


def test_a_sqlite_url_is_opened_read_only_too(db_path: Path) -> None:
    db = SafeSQLDatabase(f"sqlite:///{db_path}", tables=["books"])
    assert "mode=ro" in str(db.engine.url)
    with db.engine.connect() as conn, pytest.raises(Exception, match="readonly"):
        conn.exec_driver_sql("DELETE FROM books")
    with pytest.raises(ConfigurationError, match="in-memory"):
        SafeSQLDatabase("sqlite://", tables=["books"])


@pytest.mark.slow
def test_a_time_out_is_sent_back_for_repair(db: SafeSQLDatabase) -> None:
    slow = "SELECT count(*) FROM " + ", ".join(f"books AS b{i}" for i in range(20))
    llm = ScriptedLLM(replies=[slow, "SELECT count(*) AS n FROM books", "3 [1](id=2)"])
    response = SQLQueryEngine(db, llm=llm).query("How many books?")
    assert "0.5s time-out" in response.metadata["attempts"][0]["error"]
    assert "0.5s time-out; write a cheaper query" in llm.prompts[1]
    assert response.metadata["rows"] == [[3]]


def test_unnamed_table_functions_are_refused_by_name() -> None:
    with pytest.raises(UnsafeSQLError, match=r"GENERATE_SERIES\(1, 10\).* is not allowed"):
        check_sql("SELECT value FROM generate_series(1, 10)", ALLOWED_COLUMNS)


@pytest.mark.slow
def test_one_uninterruptible_call_is_cut_at_the_deadline(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's progress handler never runs inside one function call (here ``instr`` of a
    200 KB needle over 512 KB, seconds of work even on a fast machine, so the deadline is what
    stops the wait): the caller still gets its answer at the time-out."""
    db = SafeSQLDatabase(db_path, tables=["books"], timeout_s=0.3)
    big = (
        "WITH a0 AS (SELECT '"
        + "a" * 64
        + "' AS x)"
        + "".join(
            f", a{i} AS (SELECT a{i - 1}.x || a{i - 1}.x AS x FROM a{i - 1})" for i in range(1, 14)
        )
    )
    slow = big + " SELECT instr(a13.x, substr(a13.x, 1, 200000) || 'b') FROM a13"
    monkeypatch.setattr(db, "check", lambda _, **__: CheckedSQL(slow, slow, ()))
    start = time.monotonic()
    with pytest.raises(SQLExecutionError, match=r"ran past the 0\.3s time-out"):
        db.run("anything")
    assert time.monotonic() - start < 0.6
    monkeypatch.undo()  # the database still answers afterwards (a fresh connection per query)
    assert db.run("SELECT count(*) FROM books").rows == [(3,)]


def test_the_result_is_bounded_in_bytes_as_well_as_rows(db_path: Path) -> None:
    db = SafeSQLDatabase(db_path, tables=["books"], max_result_bytes=1000)
    wide = ", ".join(["b.title || '" + "x" * 100 + "'"] * 20)
    with pytest.raises(SQLExecutionError, match="larger than 1,000 bytes"):
        db.run(f"SELECT {wide} FROM books AS b")
    assert db.run("SELECT title FROM books ORDER BY id").rows[0] == ("Memory",)


def test_too_many_output_columns_are_refused(db: SafeSQLDatabase) -> None:
    with pytest.raises(UnsafeSQLError, match="returns 65 columns"):
        db.run("SELECT " + ", ".join(["title"] * 65) + " FROM books")


@pytest.mark.parametrize("path", ["sync", "async"])
def test_an_llm_held_to_json_is_asked_for_the_sql_reply_schema(
    db: SafeSQLDatabase, path: str, json_held_llm: Any
) -> None:
    replies = ['{"sql": "SELECT nope FROM books"}', '{"sql": "SELECT count(*) FROM books"}',
               "3 books [1](id=2)."]  # fmt: skip
    llm = json_held_llm(replies)
    engine = SQLQueryEngine(db, llm=llm)
    response = (
        engine.query("How many?") if path == "sync" else asyncio.run(engine.aquery("How many?"))
    )
    assert response.metadata["rows"] == [[3]]
    assert llm.schemas == [SQL_REPLY_SCHEMA, SQL_REPLY_SCHEMA, None]  # the answer is free text
    assert SQL_REPLY_FORMATS["json"] in llm.prompts[0] and "```sql" not in llm.prompts[0]
