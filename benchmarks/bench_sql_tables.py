"""Text-to-SQL over 200 tables: does the right table reach the prompt?

A SQLite database of 200 tables in 20 business domains (``data/many_tables.txt``, three sample
rows each) and 90 hand-written questions that name no table (``data/many_tables_questions.jsonl``:
"Which bills are past their due date?" -> ``fin_invoices``). Each question's right table must be
among the ``k`` tables put into the prompt. Compared, with the same bundled embedding model:

* ours: :class:`~llama_index_rag_pack.sql.sql_tables.SQLTableSelector` (what
  ``SQLQueryEngine(max_tables_in_prompt=k)`` uses): each table's name in words, its allowed
  columns and a few sample values, embedded once;
* core: ``ObjectIndex`` over ``SQLTableNodeMapping`` (what core's
  ``SQLTableRetrieverQueryEngine`` retrieves tables with): core's table text (the table's
  ``CREATE`` information as ``SQLDatabase.get_single_table_info`` gives it).

Also reported: the schema the prompt carries (characters) with every table and with the top k.

Run:  python benchmarks/bench_sql_tables.py [--out benchmarks/results]
Writes ``sql_tables.json`` and ``sql_tables.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from _many_tables import build_database, questions
from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

KS = (1, 3, 5, 10, 20)


def ours(path: Path, tables: list[str], embed_model: Any) -> tuple[Any, dict[str, str]]:
    from llama_index_rag_pack.sql.sql_database import SafeSQLDatabase
    from llama_index_rag_pack.sql.sql_tables import SQLTableSelector

    descriptions = SafeSQLDatabase(path, tables=tables).table_descriptions()
    selector = SQLTableSelector(descriptions, top_k=max(KS), embed_model=embed_model)
    return selector.select, descriptions


def core_peer(path: Path, tables: list[str], embed_model: Any) -> Any:
    from llama_index.core import SQLDatabase, VectorStoreIndex
    from llama_index.core.objects import ObjectIndex, SQLTableNodeMapping, SQLTableSchema
    from sqlalchemy import create_engine

    database = SQLDatabase(create_engine(f"sqlite:///{path}"), include_tables=tables)
    mapping = SQLTableNodeMapping(database)
    objects = [SQLTableSchema(table_name=t) for t in tables]
    index = ObjectIndex.from_objects(objects, mapping, VectorStoreIndex, embed_model=embed_model)
    retriever = index.as_retriever(similarity_top_k=max(KS))
    return lambda q: [schema.table_name for schema in retriever.retrieve(q)]


def recall(select: Any, items: list[dict[str, str]]) -> tuple[dict[int, float], float]:
    hits = dict.fromkeys(KS, 0)
    select(items[0]["question"])  # warm-up: ours embeds the tables on first use
    start = time.perf_counter()
    for item in items:
        ranked = select(item["question"])
        for k in KS:
            hits[k] += item["table"] in ranked[:k]
    per_question_ms = 1000 * (time.perf_counter() - start) / len(items)
    return {k: hits[k] / len(items) for k in KS}, per_question_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out_argument(parser)
    args = parser.parse_args()
    from llama_index_rag_pack.models.settings import resolve_embed_model

    embed_model = resolve_embed_model(None)
    items = questions()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "many.db"
        tables = build_database(path)
        select, descriptions = ours(path, tables, embed_model)
        sides = {"ours: SQLTableSelector": recall(select, items)}
        sides["core: ObjectIndex + SQLTableNodeMapping"] = recall(
            core_peer(path, tables, embed_model), items
        )
    rows = [[name, *(f"{r[k]:.3f}" for k in KS), f"{ms:.1f}"] for name, (r, ms) in sides.items()]
    table = md_table(
        ["tables chosen by", *(f"right table in top {k}" for k in KS), "ms / question"],
        rows,
        "l" + "r" * (len(KS) + 1),
    )
    full = sum(len(d) for d in descriptions.values())
    chosen = [select(item["question"]) for item in items]
    mean_chars = {
        k: sum(len(descriptions[t]) for c in chosen for t in c[:k]) / len(chosen) for k in KS
    }
    sizes = md_table(
        ["tables in the prompt", "schema characters (mean over the questions)"],
        [["all 200", f"{full:,}"], *([f"top {k}", f"{mean_chars[k]:,.0f}"] for k in KS)],
        "lr",
    )
    results = {
        "n_tables": len(tables),
        "n_questions": len(items),
        "recall": {name: {str(k): v for k, v in r.items()} for name, (r, _) in sides.items()},
        "ms_per_question": {name: ms for name, (_, ms) in sides.items()},
        "schema_chars_all": full,
        "schema_chars_top_k": {str(k): v for k, v in mean_chars.items()},
        "cpus": os.cpu_count(),
        "load_average_1m": os.getloadavg()[0],
    }
    write_results(
        "sql_tables",
        results,
        [("Right table among the tables put in the prompt", table), ("Prompt size", sizes)],
        out=args.out,
        description=(
            f"{len(tables)} SQLite tables, {len(items)} hand-written questions naming no table; "
            "the bundled all-MiniLM-L6-v2 embeddings on both sides; load average at the end "
            f"{results['load_average_1m']:.2f}."
        ),
    )


if __name__ == "__main__":
    main()
