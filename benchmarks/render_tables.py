"""Print the benchmark tables quoted by README.md and benchmarks/README.md from the result files.

Every ``benchmarks/results/<name>.json`` written by a ``bench_*.py`` script holds its Markdown
tables and the environment it ran in; this prints, per file, a source line (file, date, CPUs)
and the tables, ready to paste.

Run:  python benchmarks/render_tables.py [NAME ...] [--all-tables] [--results benchmarks/results]

Without NAME every result file with an ``environment`` block is printed; without
``--all-tables`` only each file's first (headline) table.
"""

from __future__ import annotations

import argparse
import json

from _results import DEFAULT_OUT, REPO_ROOT, resolve_out


def source_line(name: str, env: dict, results_dir: str) -> str:
    date = env["date_utc"][:10]
    return f"Source: `{results_dir}/{name}.md`, {date}, {env['cpu_count']} CPUs."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="result names, e.g. raptor_build (default: all)")
    parser.add_argument("--all-tables", action="store_true", help="every table, not only the first")
    parser.add_argument("--results", default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    args = parser.parse_args()

    directory = resolve_out(args.results)
    try:
        shown = str(directory.relative_to(REPO_ROOT))
    except ValueError:
        shown = str(directory)
    paths = (
        [directory / f"{name}.json" for name in args.names]
        if args.names
        else sorted(directory.glob("*.json"))
    )
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        if "environment" not in data or "tables" not in data:
            continue  # e.g. the evaluation harness's own <dataset>.json
        tables = data["tables"] if args.all_tables else data["tables"][:1]
        print(f"<!-- {path.stem} -->")
        for table in tables:
            print(f"{table['title']}:\n")
            print(table["markdown"].rstrip() + "\n")
        print(source_line(path.stem, data["environment"], shown) + "\n")


if __name__ == "__main__":
    main()
