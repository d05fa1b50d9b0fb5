"""How fast ``rag-pack`` answers ``--help`` and bad input, and what a session of several
questions costs, before and after the lazy imports and the one-load-per-session CLI.

``--before DIR`` is a directory holding an older ``llama_index_rag_pack`` package, made with
``git archive <commit> llama_index_rag_pack | tar -x -C DIR``; the current checkout is "after".
Each case runs ``python -c "from llama_index_rag_pack.cli import main; ..." ARGS`` in a fresh
process from an empty directory, ``--runs`` times; reported: median, min and max wall seconds,
the exit status and whether a traceback was printed.

``--answers N`` also answers the first N demo questions with the default local LLM (SmolLM2-135M)
over the shipped Wikipedia articles: before, one ``rag-pack ask`` per question (each loads every
model); after, one ``rag-pack ask Q1 ... QN`` (models load once).

``--demo`` times ``rag-pack demo`` twice in one empty directory per side (the first run indexes
the shipped articles, the second reuses the index), then one ``rag-pack ask`` of the first demo
question over that index (``--no-stream``), each in a fresh process, model loads included.

Run:  python benchmarks/bench_cli_startup.py --before /tmp/before [--runs 10] [--answers 3] [--demo]

Writes ``cli_startup.json`` and ``cli_startup.md`` to ``--out`` (``cli_startup_demo.*`` with
``--skip-cases``: the demo and ask timings alone).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import REPO_ROOT, add_out_argument, md_table, write_results

SLOW_S = 10.0
DRIVER = "import sys; from llama_index_rag_pack.cli import main; sys.exit(main(sys.argv[1:]))"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES: list[tuple[str, list[str]]] = [
    ("rag-pack --help", ["--help"]),
    ("rag-pack ask (no question: parser error)", ["ask"]),
    ('rag-pack ask ""', ["ask", ""]),
    ('rag-pack ask "   "', ["ask", "   "]),
    ("--uri http://127.0.0.1:99999 ask q", ["--uri", "http://127.0.0.1:99999", "ask", "q"]),
    ("--uri http://127.0.0.1:<closed port> ask q", ["--uri", "CLOSED", "ask", "q"]),
]


def run_cli(package_root: Path, argv: list[str], cwd: Path, timeout: float = 900) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(package_root), "HF_HUB_OFFLINE": "1"}
    for name in ("RAG_PACK_MILVUS_URI", "RAG_PACK_DATA_DIR"):
        env.pop(name, None)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    return {
        "wall_s": time.perf_counter() - start,
        "code": done.returncode,
        "traceback": "Traceback" in done.stderr,
        "stderr_lines": len(done.stderr.splitlines()),
        "stdout": done.stdout,
        "stderr": done.stderr,
    }


def measure_cases(sides: dict[str, Path], runs: int) -> list[dict[str, Any]]:
    rows = []
    for label, argv in CASES:
        for side, root in sides.items():
            walls, last = [], {}
            for _ in range(runs):
                if walls and walls[0] > SLOW_S:  # a case that loads models: once is enough
                    break
                args = [
                    str(a).replace("CLOSED", f"http://127.0.0.1:{_closed_port()}") for a in argv
                ]
                with tempfile.TemporaryDirectory() as cwd:
                    last = run_cli(root, args, Path(cwd))
                    left = sorted(p.name for p in Path(cwd).iterdir())
                walls.append(last["wall_s"])
            rows.append(
                {
                    "case": label,
                    "side": side,
                    "runs": len(walls),
                    "median_s": statistics.median(walls),
                    "min_s": min(walls),
                    "max_s": max(walls),
                    "exit_code": last["code"],
                    "traceback": last["traceback"],
                    "stderr_lines": last["stderr_lines"],
                    "left_behind": left,
                }
            )
            print(f"{label:45s} {side:6s} median {rows[-1]['median_s']:.2f} s", flush=True)
    return rows


def measure_answers(sides: dict[str, Path], n: int, workdir: Path) -> dict[str, Any]:
    from llama_index_rag_pack.cli.app import DEMO_QUESTIONS, DEMO_TITLES
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

    docs_dir = workdir / "docs"
    docs_dir.mkdir()
    for doc in load_wikipedia_documents(list(DEMO_TITLES[:3])):
        (docs_dir / f"{doc.metadata['title']}.txt").write_text(doc.text, encoding="utf-8")
    uri = str(workdir / "answers.db")
    indexed = run_cli(sides["after"], ["--uri", uri, "index", str(docs_dir)], workdir)
    if indexed["code"] != 0:
        raise SystemExit(f"indexing failed: {indexed['stderr'][-2000:]}")
    questions = list(DEMO_QUESTIONS[:n])
    result: dict[str, Any] = {"questions": questions}
    if "before" in sides:
        walls = []
        for q in questions:
            one = run_cli(sides["before"], ["--uri", uri, "ask", q, "--no-stream"], workdir)
            walls.append(one["wall_s"])
            print(f"before: one process per question {one['wall_s']:.1f} s", flush=True)
        result["before"] = {"per_process_s": walls, "total_s": sum(walls)}
    after = run_cli(sides["after"], ["--uri", uri, "ask", *questions, "--no-stream"], workdir)
    result["after"] = {
        "total_s": after["wall_s"],
        "code": after["code"],
        "timings": [line.strip() for line in after["stderr"].split("Timings:")[-1].splitlines()],
    }
    print(f"after: one session {after['wall_s']:.1f} s", flush=True)
    return result


def measure_demo(sides: dict[str, Path], workdir: Path) -> list[dict[str, Any]]:
    from llama_index_rag_pack.cli.app import DEMO_QUESTIONS

    rows = []
    for side, root in sides.items():
        home = workdir / side
        home.mkdir()
        runs = [
            ("demo, first run (indexes)", ["demo"]),
            ("demo, second run (reuses the index)", ["demo"]),
            (
                "one `ask` over the demo index",
                [
                    "--uri",
                    "rag_pack_data/demo.db",
                    "--collection",
                    "demo_wikipedia",
                    "ask",
                    DEMO_QUESTIONS[0],
                    "--no-stream",
                ],
            ),
        ]
        for label, argv in runs:
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            one = run_cli(root, argv, home)
            if one["code"] != 0:
                raise SystemExit(f"{side} {label} failed: {one['stderr'][-2000:]}")
            report = one["stdout"] if "Timings:" in one["stdout"] else one["stderr"]
            timings = [
                line.strip() for line in report.split("Timings:")[-1].splitlines() if " s  " in line
            ]
            rows.append(
                {"side": side, "case": label, "wall_s": one["wall_s"], "load_average": load,
                 "timings": timings}
            )  # fmt: skip
            print(f"{side:6s} {label}: {one['wall_s']:.1f} s (load {load})", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=None, help="directory with an older package")
    parser.add_argument("--runs", type=int, default=10, help="runs per case (default 10)")
    parser.add_argument("--answers", type=int, default=0, help="questions answered (default 0)")
    parser.add_argument("--demo", action="store_true", help="time demo (twice) and one ask")
    parser.add_argument("--skip-cases", action="store_true", help="skip the start-up cases")
    add_out_argument(parser)
    args = parser.parse_args()
    sides = {"after": REPO_ROOT}
    if args.before:
        sides = {"before": Path(args.before).resolve(), **sides}
    rows = [] if args.skip_cases else measure_cases(sides, args.runs)
    results: dict[str, Any] = {"runs": args.runs, "cases": rows}
    table = md_table(
        ["case", "side", "runs", "median s", "min s", "max s", "exit", "traceback", "stderr lines"],
        [
            (r["case"], r["side"], r["runs"], f"{r['median_s']:.2f}", f"{r['min_s']:.2f}",
             f"{r['max_s']:.2f}", r["exit_code"], "yes" if r["traceback"] else "no",
             r["stderr_lines"])
            for r in rows
        ],
        "llrrrrrlr",
    )  # fmt: skip
    tables = []
    if args.demo:
        with tempfile.TemporaryDirectory() as workdir:
            results["demo"] = demo = measure_demo(sides, Path(workdir))
        by_case: dict[str, dict[str, Any]] = {}
        for r in demo:
            by_case.setdefault(r["case"], {})[r["side"]] = r
        demo_rows = []
        for case, per_side in by_case.items():
            cells = [f"{per_side[s]['wall_s']:.1f}" if s in per_side else "-" for s in sides]
            loads = [per_side[s]["load_average"] for s in sides if s in per_side]
            ratio = (
                f"{per_side['before']['wall_s'] / per_side['after']['wall_s']:.1f}x"
                if "before" in per_side
                else "-"
            )
            demo_rows.append((case, *cells, ratio, " / ".join(loads)))
        tables.append(
            (
                "rag-pack demo and ask, fresh processes, model loads included (wall seconds)",
                md_table(
                    ["case", *sides, "before / after", "load average (1 5 15 min) at start"],
                    demo_rows,
                    "l" + "r" * (len(sides) + 1) + "l",
                ),
            )
        )
    if rows:
        tables.append(("rag-pack start-up and input errors (wall seconds per process)", table))
    if args.answers:
        with tempfile.TemporaryDirectory() as workdir:
            results["answers"] = answers = measure_answers(sides, args.answers, Path(workdir))
        rows_a = []
        if "before" in answers:
            rows_a.append(("before: one `ask` per question", f"{answers['before']['total_s']:.1f}"))
        rows_a.append(("after: one `ask Q1 ... QN` session", f"{answers['after']['total_s']:.1f}"))
        tables.append(
            (
                f"{args.answers} questions with the local SmolLM2-135M (total wall seconds)",
                md_table(["how", "seconds"], rows_a, "lr"),
            )
        )
    write_results(
        "cli_startup" if rows else "cli_startup_demo",
        results,
        tables,
        out=args.out,
        description=(
            (
                "Each case is a fresh "
                "`python -c 'from llama_index_rag_pack.cli import main; ...'` "
                f"process started in an empty directory, {args.runs} runs (one when a run took "
                f"over {SLOW_S:.0f} s: such a case loads the models); "
            )
            if rows
            else (
                "`rag-pack demo` twice in one empty directory per side (the first run indexes the "
                "8 shipped articles and answers the 3 demo questions, the second reuses the "
                "index), then one `rag-pack ask` of the first demo question over that index "
                "(`--no-stream`); each a fresh process, model loads included; "
            )
        )
        + f"before = {args.before or '(not measured)'}, after = this checkout.",
        notes=[
            "The 2-CPU machine was shared with other jobs during the run: absolute times are "
            "noisy, compare the two sides of one case."
        ],
    )


if __name__ == "__main__":
    main()
