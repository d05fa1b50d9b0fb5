"""Text-to-SQL from the pack (``RagPack.make_sql_query_engine``) and the CLI (``rag-pack sql``)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from llama_index_rag_pack import RagPack, SQLQueryEngine
from llama_index_rag_pack.cli.app import main
from llama_index_rag_pack.pack.sql import SQLEngineMixin
from llama_index_rag_pack.testing import ScriptedLLM


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE items (name TEXT, price REAL);"
            "CREATE TABLE staff (name TEXT, salary REAL);"
            "INSERT INTO items VALUES ('pen', 1.5), ('ink', 4.0);"
            "INSERT INTO staff VALUES ('Ann', 5000);"
        )
    conn.close()
    return path


def test_ragpack_offers_the_sql_engine_with_its_llm_and_style(db_path: Path) -> None:
    assert issubclass(RagPack, SQLEngineMixin)

    class Pack(SQLEngineMixin):  # RagPack's llm and callback_manager, without opening Milvus
        llm = ScriptedLLM(replies=["SELECT max(price) AS top FROM items", "4.0 [1](id=2)"])
        callback_manager = None

    engine = Pack().make_sql_query_engine(db_path, ["items"], citation_style="html", max_rows=5)
    assert isinstance(engine, SQLQueryEngine) and engine.database.max_rows == 5
    response = engine.query("Most expensive item?")
    assert response.metadata["rows"] == [[4.0]]
    assert "<sup>" in response.response


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, llm, argv) -> tuple:
    monkeypatch.setattr("llama_index_rag_pack.models.settings.resolve_llm", lambda spec=None: llm)
    status = main(argv)
    return status, capsys.readouterr().out


def test_cli_sql_prints_the_cited_answer(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    llm = ScriptedLLM(
        replies=["```sql\nSELECT name FROM items WHERE price < 2\n```", "pen [1](id=2)"]
    )
    argv = ["sql", "--db", str(db_path), "--tables", "items", "Cheap items?"]
    status, out = _run(monkeypatch, capsys, llm, argv)
    assert status == 0
    assert out.startswith("pen [1]")
    assert "row 1: name='pen'" in out and 'SQL: SELECT "items"."name"' in out
    assert "staff" not in llm.prompts[0] and "items" in llm.prompts[0]


def test_cli_sql_json_reports_a_blocked_attack_and_exit_status_1(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    llm = ScriptedLLM(replies=["SELECT salary FROM staff", "DELETE FROM staff"])
    argv = ["sql", "--db", str(db_path), "--tables", "items", "--format", "json", "Salaries?"]
    status, out = _run(monkeypatch, capsys, llm, argv)
    payload = json.loads(out)
    assert status == 1
    assert [a["error"].split(";")[0] for a in payload["attempts"]] == [
        "table 'staff' is not allowed",
        "DELETE is not allowed",
    ]
    assert payload["sql"] is None
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before


def test_cli_sql_unknown_table_is_a_one_line_error(
    db_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["sql", "--db", str(db_path), "--tables", "nope", "q"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: table 'nope' is not in the database")


def test_cli_sql_columns_hide_the_others(
    db_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    llm = ScriptedLLM(replies=["SELECT * FROM staff", "Ann [1](id=2)"])
    argv = ["sql", "--db", str(db_path), "--tables", "staff", "--columns", "staff.name",
            "--format", "json", "Who works here?"]  # fmt: skip
    status, out = _run(monkeypatch, capsys, llm, argv)
    payload = json.loads(out)
    assert status == 0 and payload["columns"] == ["name"] and payload["rows"] == [["Ann"]]
    assert "salary" not in llm.prompts[0] and "5000" not in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--columns", "staff"], "is not TABLE.COLUMN"),
        (["--columns", "staff.wage"], "columns ['wage'] are not usable in table 'staff'"),
        (["--columns", "items.name"], "columns name tables not in tables"),
    ],
)
def test_cli_sql_bad_columns_are_one_line_errors(
    db_path: Path, capsys: pytest.CaptureFixture, extra: list[str], message: str
) -> None:
    argv = ["sql", "--db", str(db_path), "--tables", "staff", *extra, "q?"]
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse rejects a malformed value itself
        status = exit_.code
    err = capsys.readouterr().err
    assert status == 2 and message in err


def test_cli_sql_without_a_question_says_so(db_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["sql", "--db", str(db_path), "--tables", "items"]) == 2
    assert "the question is empty" in capsys.readouterr().err
