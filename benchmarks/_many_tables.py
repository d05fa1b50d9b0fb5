"""A SQLite database of 200 tables across 20 business domains (``data/many_tables.txt``) and
hand-written questions naming none of them (``data/many_tables_questions.jsonl``): for the SQL
table-retrieval benchmark and its tests."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

DATA = Path(__file__).parent / "data"


def table_specs() -> dict[str, tuple[list[str], list[str]]]:
    """``{table: (columns, sample words)}`` in file order."""
    specs = {}
    for line in (DATA / "many_tables.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, rest = line.split(":", 1)
        columns, _, words = rest.partition("|")
        specs[name.strip()] = (
            [c.strip() for c in columns.split(",") if c.strip()],
            [w.strip() for w in words.split(",") if w.strip()],
        )
    return specs


def questions() -> list[dict[str, str]]:
    lines = (DATA / "many_tables_questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _value(column: str, row: int, words: list[str], position: int) -> object:
    if column.endswith("_id") or column in ("quantity", "seats", "floors", "capacity"):
        return row + 1
    if any(k in column for k in ("date", "_on", "_at", "time", "month", "year")):
        return f"2024-0{row + 1}-1{position % 10}"
    if words:
        return words[(row + position) % len(words)]
    return round(10.5 * (row + 1) * (position + 1), 2)


def build_database(path: str | Path) -> list[str]:
    """Write the 200 tables, three sample rows each, to a new SQLite file; their names."""
    specs = table_specs()
    with sqlite3.connect(path) as conn:
        for table, (columns, words) in specs.items():
            conn.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
            for row in range(3):
                values = [_value(c, row, words, i) for i, c in enumerate(columns)]
                marks = ", ".join("?" for _ in columns)
                conn.execute(f"INSERT INTO {table} VALUES ({marks})", values)
    return list(specs)
