"""Names that differ only by case on PostgreSQL (``sql/sql_names.py``): the checker
compares names ignoring case, PostgreSQL compares quoted names exactly, so a database where an
allowed table or a visible column has a case twin is refused when it opens; without twins, a
name in another case reaches nothing (the server reports it missing)."""

from __future__ import annotations

from typing import Any

import pytest

from llama_index_rag_pack import SafeSQLDatabase, SQLExecutionError, UnsafeSQLError
from llama_index_rag_pack.core.errors import ConfigurationError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def case_dbs(postgres: Any) -> Any:
    names = ("case_twins", "case_columns", "case_ok")
    postgres.execute("postgres", *(f"CREATE DATABASE {name}" for name in names))
    postgres.execute(
        "case_twins",
        'CREATE TABLE "Staff" (id INT, "Code" TEXT)',
        "INSERT INTO \"Staff\" VALUES (1, 'visible')",
        "CREATE TABLE staff (id INT, secret TEXT)",
        "INSERT INTO staff VALUES (777, 'forbidden-table-zq9')",
    )
    postgres.execute(
        "case_columns",
        'CREATE TABLE "Staff" (id INT, "Code" TEXT, code TEXT)',
        "INSERT INTO \"Staff\" VALUES (1, 'visible', 'hidden-code-zq9')",
    )
    postgres.execute(
        "case_ok",
        'CREATE TABLE "Staff" (id INT, "Code" TEXT, secret TEXT)',
        "INSERT INTO \"Staff\" VALUES (1, 'visible', 'hidden-zq9')",
        "CREATE TABLE vault (v TEXT)",
        "INSERT INTO vault VALUES ('vault-zq9')",
    )
    return postgres


def _open(postgres: Any, database: str, **kwargs: Any) -> SafeSQLDatabase:
    return SafeSQLDatabase(postgres.url(database), role_check="warn", **kwargs)


def test_an_allowed_table_with_a_lower_case_twin_is_refused(case_dbs: Any) -> None:
    # SELECT s.id FROM staff s passed the checker as "Staff" and read the forbidden staff
    with pytest.raises(ConfigurationError, match="'staff' besides the allowed table 'Staff'"):
        _open(case_dbs, "case_twins", tables=["Staff"])


def test_a_visible_column_with_a_hidden_case_twin_is_refused(case_dbs: Any) -> None:
    # SELECT s.code FROM "Staff" s passed the checker as "Code" and read the hidden code
    with pytest.raises(ConfigurationError, match="'Code' and 'code'") as error:
        _open(case_dbs, "case_columns", tables=["Staff"], columns={"Staff": ["id", "Code"]})
    assert "\n" not in str(error.value)


def test_a_visible_column_named_like_a_system_column_is_refused(case_dbs: Any) -> None:
    case_dbs.execute("case_columns", 'CREATE TABLE "Odd" (id INT, "CTID" TEXT)')
    with pytest.raises(ConfigurationError, match="'CTID' and 'ctid'"):
        _open(case_dbs, "case_columns", tables=["Odd"])


def test_a_table_named_like_a_catalog_relation_is_refused(case_dbs: Any) -> None:
    # pg_catalog is searched first: "PG_Roles" written unquoted would read pg_roles
    case_dbs.execute("case_columns", 'CREATE TABLE "PG_Roles" (id INT)')
    with pytest.raises(ConfigurationError, match="'pg_roles' besides the allowed table"):
        _open(case_dbs, "case_columns", tables=["PG_Roles"])


def test_hidden_case_twins_alone_are_accepted(case_dbs: Any) -> None:
    db = _open(case_dbs, "case_columns", tables=["Staff"], columns={"Staff": ["id"]})
    assert db.run('SELECT s.id FROM "Staff" s').rows == [(1,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT s.id FROM staff s",  # folds to staff: no such table
        'SELECT s.id FROM "STAFF" s',
        'SELECT s.code FROM "Staff" s',  # folds to code: no such column
        'SELECT s."SECRET" FROM "Staff" s',
        'SELECT s.id FROM "Vault" s',
    ],
)
def test_without_twins_another_case_reaches_nothing(case_dbs: Any, sql: str) -> None:
    db = _open(case_dbs, "case_ok", tables=["Staff"], columns={"Staff": ["id", "Code"]})
    assert db.run('SELECT s.id, s."Code" FROM "Staff" s').rows == [(1, "visible")]
    with pytest.raises((UnsafeSQLError, SQLExecutionError)) as error:
        db.run(sql)
    assert "zq9" not in str(error.value)
