"""SQL over more tables than fit a prompt: only the tables closest to the question are described,
the right one among them; the safety checks still allow exactly the configured tables and
columns. Real SQLite (200 tables, benchmarks/data/many_tables.txt), the real embedding model; the
LLM is scripted and reads the prompt it gets."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from llama_index_rag_pack import SQLQueryEngine
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.sql.sql_tables import SQLTableSelector, table_summary
from llama_index_rag_pack.testing import ScriptedLLM

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from _many_tables import build_database, questions  # noqa: E402

QUESTIONS = questions()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("many") / "many.db"
    tables = build_database(path)
    with sqlite3.connect(path) as conn:  # a table nobody allowed
        conn.execute("CREATE TABLE secrets (owner TEXT, pin TEXT)")
        conn.execute("INSERT INTO secrets VALUES ('ceo', '0000')")
    return path, tables


def _prompt_tables(prompt: str) -> list[str]:
    return re.findall(r"CREATE TABLE (\w+) \(", prompt)


def sql_writer(sql_for: dict[str, str]) -> Any:
    """Writes SQL for the first table of the prompt that the script knows, and answers."""

    def reply(prompt: str) -> str:
        if "SELECT statement" in prompt:
            table = next(t for t in _prompt_tables(prompt) if t in sql_for)
            return f"Here you go:\n```sql\n{sql_for[table]}\n```"
        return "From the rows [2](id=2)."

    return reply


@pytest.fixture(scope="module")
def engine(database: tuple[Path, list[str]], embed_model: Any) -> SQLQueryEngine:
    path, tables = database
    sql_for = {q["table"]: f"SELECT * FROM {q['table']}" for q in QUESTIONS}
    return SQLQueryEngine(
        path,
        tables=tables,
        llm=ScriptedLLM(replies=sql_writer(sql_for)),
        max_tables_in_prompt=5,
        embed_model=embed_model,
    )


@pytest.mark.slow
def test_the_right_table_reaches_the_prompt_for_nine_questions_in_ten(engine) -> None:
    selector = engine.table_selector
    assert selector is not None and selector.top_k == 5
    found = sum(q["table"] in selector.select(q["question"]) for q in QUESTIONS)
    assert found / len(QUESTIONS) >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("item", QUESTIONS[::15], ids=lambda q: q["table"])
def test_the_prompt_describes_at_most_k_tables_and_the_query_runs(engine, item) -> None:
    llm = engine.llm
    response = engine.query(item["question"])
    prompt = llm.prompts[-2]  # the SQL prompt (the last is the answer prompt)
    shown = _prompt_tables(prompt)
    assert len(shown) == 5 and shown == response.metadata["tables_in_prompt"]
    assert item["table"] in shown
    assert response.metadata["error"] is None and item["table"] in response.metadata["sql"]


@pytest.mark.slow
async def test_async_picks_the_same_tables(engine) -> None:
    item = QUESTIONS[3]
    sync = engine.query(item["question"]).metadata["tables_in_prompt"]
    assert (await engine.aquery(item["question"])).metadata["tables_in_prompt"] == sync


@pytest.mark.slow
def test_safety_still_allows_exactly_the_configured_tables_and_columns(
    database: tuple[Path, list[str]], embed_model: Any
) -> None:
    path, tables = database
    tables = tables[:60]  # hr_*, sales_*, ... : more than the 3 the prompt holds
    attempts = iter(
        [
            "SELECT owner, pin FROM secrets",  # a table nobody allowed: refused
            "SELECT gross_salary FROM hr_payroll",  # hidden column: refused
            "SELECT full_name FROM hr_candidates",  # allowed, though not in the prompt: runs
        ]
    )
    llm = ScriptedLLM(replies=lambda p: "Ok [2](id=2)." if "query result" in p else next(attempts))
    engine = SQLQueryEngine(
        path,
        tables=tables,
        columns={"hr_payroll": ["payslip_id", "employee_id", "pay_period"]},
        llm=llm,
        max_tables_in_prompt=3,
        embed_model=embed_model,
    )
    first = engine.query("Which bills are past their due date and still unpaid?")
    assert first.metadata["error"] and "secrets" in first.metadata["attempts"][0]["error"]
    assert "gross_salary" in first.metadata["attempts"][1]["error"]
    second = engine.query("Which bills are past their due date and still unpaid?")
    assert "hr_candidates" not in second.metadata["tables_in_prompt"]
    assert second.metadata["error"] is None and second.metadata["rows"]
    summaries = " ".join(engine.table_selector.summaries.values())
    assert "gross salary" not in summaries and "secrets" not in summaries  # hidden stays hidden


@pytest.mark.slow
def test_few_tables_all_go_in_and_bad_options_are_one_error(
    database: tuple[Path, list[str]], embed_model: Any
) -> None:
    path, tables = database
    small = SQLQueryEngine(path, tables=tables[:4], llm=ScriptedLLM(), embed_model=embed_model)
    assert small.table_selector is None and _prompt_tables(small.schema) == tables[:4]
    with pytest.raises(ConfigurationError, match="top_k must be an integer >= 1"):
        SQLQueryEngine(path, tables=tables, max_tables_in_prompt=0, embed_model=embed_model)
    with pytest.raises(ConfigurationError, match="not allowed: \\['secrets'\\]"):
        SQLQueryEngine(path, tables=tables, table_context={"secrets": "pins"})
    with pytest.raises(ConfigurationError, match="No tables"):
        SQLTableSelector({})
    with pytest.raises(ConfigurationError, match="table_context values must be strings"):
        SQLTableSelector({"a": "CREATE TABLE a (\n  x INT\n);"}, table_context={"a": 3})


@pytest.mark.slow
def test_table_context_is_embedded_with_the_table(
    database: tuple[Path, list[str]], embed_model: Any
) -> None:
    path, tables = database
    question = "Which squad wore the golden kit in the derby?"
    plain = SQLQueryEngine(
        path, tables=tables, max_tables_in_prompt=1, embed_model=embed_model
    ).table_selector
    told = SQLQueryEngine(
        path,
        tables=tables,
        max_tables_in_prompt=1,
        embed_model=embed_model,
        table_context={"sport_teams": "Each squad, its golden or blue kit, and its derby rivals."},
    ).table_selector
    assert told.select(question) == ["sport_teams"] != plain.select(question)
    assert "golden or blue kit" in told.summaries["sport_teams"]


def test_table_summary_reads_the_description() -> None:
    text = table_summary(
        "med_allergies",
        "CREATE TABLE med_allergies (\n  allergy_id INTEGER,\n  allergen TEXT\n);\n\n"
        "/* 2 rows from med_allergies:\nallergy_id\tallergen\n1\tpenicillin\n2\tpeanuts\n*/",
    )
    assert text == (
        "Table med allergies (med_allergies). Columns: allergy id, allergen. "
        "Sample values: peanuts, penicillin."
    )


@pytest.mark.slow
def test_cli_sql_max_tables_in_prompt(
    database: tuple[Path, list[str]], embed_model: Any, monkeypatch: Any, capsys: Any
) -> None:
    import json

    from llama_index_rag_pack.cli import main

    path, tables = database
    llm = ScriptedLLM(replies=sql_writer({"med_allergies": "SELECT allergen FROM med_allergies"}))
    monkeypatch.setattr("llama_index_rag_pack.models.settings.resolve_llm", lambda s=None: llm)
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding", lambda *a: embed_model
    )
    argv = ["sql", "--db", str(path), "--tables", ",".join(tables), "--format", "json"]
    argv += ["--max-tables-in-prompt", "3", "Which patients are allergic to penicillin?"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["tables_in_prompt"]) == 3 and "med_allergies" in payload["tables_in_prompt"]
    assert payload["rows"] and payload["error"] is None
    with pytest.raises(SystemExit) as exit_info:  # argparse: usage and one line, status 2
        main([*argv[:-3], "--max-tables-in-prompt", "0", "q"])
    assert exit_info.value.code == 2
    assert "--max-tables-in-prompt: must be a whole number >= 1" in capsys.readouterr().err
