"""Streaming citation rewrite: ReferenceManager vs langchain-references 1.0.0, side by side.

Both rewrite the same recorded token streams: answers built from the evidence sentences of
``benchmarks/data/wiki_qa.jsonl`` (a citation after every sentence, ids drawn at random over six
context chunks, two of them from the same source), split into tokens the way a model streams
them (words with their leading space; a marker in several tokens). Each library gets its own
marker format: ours ``[k](id=M)`` → tokens ``" [", "k", "](", "id", "=", "M", ")"``; the peer's
``【M†source】`` → ``" 【", "M", "†", "source", "】"``. Text and split are otherwise identical.
Both use their text style. The peer runs in its own venv (same CPython 3.11.7), started as a
subprocess; ``references.py`` needs no LlamaIndex, so ours runs in this process on the same data.

Measured: throughput (tokens/s over all answers, best of ``--repeats``), mean and p99 time per
``feed`` (the latency the rewrite adds to each token), linear time on one huge answer, whether
the rewritten text is correct, and the outputs of both on the peer's known failure cases.

The peer's venv: ``benchmarks/make_peer_venv.sh lcref PATH``; then pass
``--peer-python PATH/bin/python`` or set ``RAG_PACK_PEER_LCREF_PYTHON`` (default:
``.venv-peer-lcref/bin/python`` under the repository root). Without it only our side is measured.

Run:  python benchmarks/bench_citations_streaming.py [--answers 300] [--repeats 3]
      [--huge-tokens 200000] [--peer-python PATH/bin/python] [--out benchmarks/results]

Writes ``citations_streaming.json`` and ``citations_streaming.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _results import (
    add_out_argument,
    md_table,
    peer_missing_message,
    peer_python,
    write_results,
)

from llama_index_rag_pack.citations.references import ReferenceManager, render_references
from llama_index_rag_pack.testing import split_tokens

HERE = Path(__file__).resolve().parent
DOCS = [
    {"text": "chapter 1 of a", "metadata": {"source": "a.html#chap1", "title": "a chap1"}},
    {"text": "chapter 2 of a", "metadata": {"source": "a.html#chap2", "title": "a chap2"}},
    {"text": "fragment 1 of b", "metadata": {"source": "b.pdf", "title": "b"}},
    {"text": "fragment 2 of b", "metadata": {"source": "b.pdf", "title": "b"}},
    {"text": "the big c", "metadata": {"source": "c.pdf", "title": "c"}},
    {"text": "a row of d", "metadata": {"source": "d.csv", "title": "d"}},
]


def ours_marker(k: int, m: int) -> list[str]:
    return [" [", str(k), "](", "id", "=", str(m), ")"]


def peer_marker(k: int, m: int) -> list[str]:
    return [" 【", str(m), "†", "source", "】"]


def sentences() -> list[str]:
    rows = [
        json.loads(line)
        for line in (HERE / "data" / "wiki_qa.jsonl").read_text().splitlines()
        if line.strip()
    ]
    found = [s.strip() for r in rows for s in r.get("evidence", [])]
    # Brackets in the text would be markers' business; keep the throughput streams realistic.
    return [s.rstrip(".") for s in found if s and not any(c in s for c in "[]【】")]


def build_streams(
    n_answers: int, per_answer: int, seed: int = 0
) -> tuple[list[list[str]], list[list[str]]]:
    rng = random.Random(seed)
    pool = sentences()
    ours, peer = [], []
    for _ in range(n_answers):
        o: list[str] = []
        p: list[str] = []
        for k in range(1, per_answer + 1):
            words = split_tokens(rng.choice(pool))
            m = rng.randint(1, len(DOCS))
            o += words + ours_marker(k, m) + ["."]
            p += words + peer_marker(k, m) + ["."]
            o.append(" ")
            p.append(" ")
        ours.append(o)
        peer.append(p)
    return ours, peer


def run_ours(tokens: list[str]) -> str:
    manager = ReferenceManager(DOCS, style="text")
    out = [manager.feed(t) for t in tokens]
    return "".join(out) + manager.finish()


def time_ours(streams: list[list[str]], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for tokens in streams:
            run_ours(tokens)
        best = min(best, time.perf_counter() - start)
    return best


def per_token_ours(streams: list[list[str]]) -> list[int]:
    samples = []
    for tokens in streams:
        manager = ReferenceManager(DOCS, style="text")
        for token in tokens:
            t0 = time.perf_counter_ns()
            manager.feed(token)
            samples.append(time.perf_counter_ns() - t0)
    return samples


def body(text: str) -> str:
    """The rewritten answer without the reference list.

    Spaces before ``[n]`` are ignored (the peer eats them).
    """
    return re.sub(r" +(\[\d+\])", r"\1", text.split("\n\n", 1)[0]).rstrip()


# The peer's known failure cases, each written in each library's own marker format.
LONG_TAIL = " then type the name of the command you want to run and press enter to confirm it"
CASES = {
    "false bracket": (
        split_tokens("Press the [ key" + LONG_TAIL + ". Paris is the capital of France")
        + ours_marker(1, 1)
        + ["."],
        split_tokens("Press the 【 key" + LONG_TAIL + ". Paris is the capital of France")
        + peer_marker(1, 1)
        + ["."],
    ),
    "single-chunk answer": (
        ["Paris is the capital of France [1](id=1). Lyon is in France [2](id=3)."],
        ["Paris is the capital of France 【1†source】. Lyon is in France 【3†source】."],
    ),
    "[1](id=) (empty id)": (
        split_tokens("Broken [1](id=) marker, good one") + ours_marker(2, 2) + ["."],
        split_tokens("Broken [1](id=) marker, good one") + peer_marker(2, 2) + ["."],
    ),
    "empty id, own format": (
        split_tokens("Broken [1](id=) marker, good one") + ours_marker(2, 2) + ["."],
        split_tokens("Broken 【†source】 marker, good one") + peer_marker(2, 2) + ["."],
    ),
    "hallucinated id": (
        split_tokens("Real")
        + ours_marker(1, 2)
        + split_tokens(" and invented")
        + ours_marker(2, 42)
        + ["."],
        split_tokens("Real")
        + peer_marker(1, 2)
        + split_tokens(" and invented")
        + peer_marker(2, 42)
        + ["."],
    ),
}


def run_peer(python: str, job: dict) -> dict:
    proc = subprocess.run(
        [python, str(HERE / "_peer_lcref.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"peer failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def pct(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0


def rate(tokens: int, seconds: float | None) -> float | None:
    return tokens / seconds if seconds else None


def fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--answers", type=int, default=300)
    parser.add_argument("--sentences", type=int, default=8, help="sentences (citations) per answer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--huge-tokens", type=int, default=200_000)
    parser.add_argument(
        "--peer-python",
        default=None,
        help="Python of the langchain-references venv (default: $RAG_PACK_PEER_LCREF_PYTHON, "
        "else .venv-peer-lcref/bin/python)",
    )
    add_out_argument(parser)
    args = parser.parse_args()

    ours_answers, peer_answers = build_streams(args.answers, args.sentences)
    n_huge = max(1, args.huge_tokens // (len(ours_answers[0]) or 1))
    ours_huge_src, peer_huge_src = build_streams(n_huge, args.sentences, seed=1)
    ours_huge = [[t for s in ours_huge_src for t in s]]
    peer_huge = [[t for s in peer_huge_src for t in s]]
    quarter_o, quarter_p = (
        [ours_huge[0][: len(ours_huge[0]) // 4]],
        [peer_huge[0][: len(peer_huge[0]) // 4]],
    )
    job = {
        "docs": DOCS,
        "repeats": args.repeats,
        "timed": {"answers": peer_answers, "huge": peer_huge, "quarter": quarter_p},
        "per_token": ["answers"],
        "per_token_streams": 50,
        "cases": {name: peer for name, (_, peer) in CASES.items()},
    }
    python = peer_python("lcref", args.peer_python)
    peer: dict | None = None
    if python.exists():
        print("Running the peer ...", flush=True)
        peer = run_peer(str(python), job)
    else:
        print(peer_missing_message("lcref", python), flush=True)

    print("Running ours ...", flush=True)
    ours_t = {
        "answers": time_ours(ours_answers, args.repeats),
        "huge": time_ours(ours_huge, args.repeats),
        "quarter": time_ours(quarter_o, args.repeats),
    }
    ours_pt = per_token_ours(ours_answers[:50])
    peer_pt = peer["timings"]["answers"]["per_token_ns"] if peer else []

    def peer_s(name: str) -> float | None:
        return peer["timings"][name]["seconds"] if peer else None

    n_tokens_o = sum(map(len, ours_answers))
    n_tokens_p = sum(map(len, peer_answers))
    peer_label = (
        f"langchain-references {peer['version']} in its own venv" if peer else "peer not run"
    )
    description = (
        f"Streaming rewrite, {args.answers} answers x {args.sentences} citations (ours "
        f"{n_tokens_o:,} tokens, peer {n_tokens_p:,} tokens: the peer's marker is 5 tokens, "
        f"ours 7); best of {args.repeats}; {peer_label}."
    )
    throughput = []
    for name, label, no, np_ in (
        ("answers", "typical answers", n_tokens_o, n_tokens_p),
        ("quarter", "one answer, 1/4 size", len(quarter_o[0]), len(quarter_p[0])),
        ("huge", "one huge answer", len(ours_huge[0]), len(peer_huge[0])),
    ):
        ro, rp = rate(no, ours_t[name]), rate(np_, peer_s(name))
        throughput.append(
            {
                "workload": label,
                "ours_tokens": no,
                "ours_seconds": ours_t[name],
                "ours_tokens_per_s": ro,
                "peer_tokens": np_,
                "peer_seconds": peer_s(name),
                "peer_tokens_per_s": rp,
                "ratio_ours_over_peer": ro / rp if ro and rp else None,
            }
        )
    throughput_table = md_table(
        [
            "workload",
            "ours tokens",
            "ours tokens/s",
            "peer tokens",
            "peer tokens/s",
            "throughput ratio (ours/peer)",
        ],
        [
            (
                r["workload"],
                f"{r['ours_tokens']:,}",
                fmt(r["ours_tokens_per_s"], ",.0f"),
                f"{r['peer_tokens']:,}",
                fmt(r["peer_tokens_per_s"], ",.0f"),
                fmt(r["ratio_ours_over_peer"], ".2f") + ("x" if peer else ""),
            )
            for r in throughput
        ],
        align="lrrrrr",
    )

    latency = {}
    for key, samples in (("ours", ours_pt), ("peer", peer_pt)):
        latency[key] = (
            {
                "mean_us": statistics.fmean(samples) / 1000,
                "p50_us": pct(samples, 0.5),
                "p99_us": pct(samples, 0.99),
                "max_us": max(samples) / 1000,
                "samples": len(samples),
            }
            if samples
            else None
        )
    cols = (("mean_us", ".2f"), ("p50_us", ".2f"), ("p99_us", ".2f"), ("max_us", ".1f"))
    latency_table = md_table(
        ["", "mean µs", "p50 µs", "p99 µs", "max µs"],
        [
            (label, *(fmt(d[k] if d else None, spec) for k, spec in cols))
            for label, d in (
                ("ours (ReferenceManager.feed)", latency["ours"]),
                ("peer (_manage_references.send)", latency["peer"]),
            )
        ],
        align="lrrrr",
    )
    latency_ratio = (
        latency["peer"]["mean_us"] / latency["ours"]["mean_us"] if latency["peer"] else None
    )
    us_per_token = {
        "ours_quarter": ours_t["quarter"] / len(quarter_o[0]) * 1e6,
        "ours_full": ours_t["huge"] / len(ours_huge[0]) * 1e6,
        "peer_quarter": peer_s("quarter") / len(quarter_p[0]) * 1e6 if peer else None,
        "peer_full": peer_s("huge") / len(peer_huge[0]) * 1e6 if peer else None,
    }
    linear = (
        f"Linear time: µs/token at 1/4 size vs full size: ours {us_per_token['ours_quarter']:.2f}"
        f" vs {us_per_token['ours_full']:.2f}"
        + (
            f"; peer {us_per_token['peer_quarter']:.2f} vs {us_per_token['peer_full']:.2f}."
            if peer
            else "."
        )
    )

    expected = body(render_references("".join(ours_answers[0]), DOCS, style="text"))
    correct_ours = body(run_ours(ours_answers[0])) == expected
    correct_peer = body(peer["outputs"]["answers#first"]) == expected if peer else None
    correctness = (
        "Correctness on the first typical answer (rewritten text equal to the whole-text "
        f"rewrite): ours {correct_ours}, peer {'not run' if peer is None else correct_peer}."
    )

    cases = {}
    case_lines = []
    for name, (o_tokens, p_tokens) in CASES.items():
        entry = {
            "input_ours": "".join(o_tokens),
            "ours": run_ours(o_tokens),
            "input_peer": "".join(p_tokens),
            "peer": peer["outputs"][name] if peer else None,
            "peer_async": peer["outputs"][name + "#async"] if peer else None,
        }
        cases[name] = entry
        case_lines += [
            f"### {name}",
            f"  input (ours): {entry['input_ours']!r}",
            f"  ours        : {entry['ours']!r}",
            f"  input (peer): {entry['input_peer']!r}",
            f"  peer        : {entry['peer']!r}",
            f"  peer (async): {entry['peer_async']!r}",
            "",
        ]
    cases_table = md_table(
        ["case", "input (ours)", "ours", "input (peer)", "peer", "peer, async path"],
        [
            (
                name.replace("[", "\\["),
                *(
                    "–" if v is None else "`" + repr(v).replace("|", "\\|") + "`"
                    for v in (
                        e["input_ours"],
                        e["ours"],
                        e["input_peer"],
                        e["peer"],
                        e["peer_async"],
                    )
                ),
            )
            for name, e in cases.items()
        ],
    )

    print(f"\n{description}\n")
    print(throughput_table)
    print("\nAdded latency per token (time inside one feed/send call, first 50 typical answers)\n")
    print(latency_table)
    if latency_ratio:
        print(f"\nmean added latency ratio (peer/ours): {latency_ratio:.2f}x")
    print(linear)
    print("\n" + correctness)
    print("\nKnown failure cases (each library in its own marker format; outputs verbatim)\n")
    print("\n".join(case_lines))

    write_results(
        "citations_streaming",
        {
            "answers": args.answers,
            "sentences_per_answer": args.sentences,
            "repeats": args.repeats,
            "peer_ran": peer is not None,
            "throughput": throughput,
            "per_token_latency": latency,
            "mean_latency_ratio_peer_over_ours": latency_ratio,
            "us_per_token": us_per_token,
            "correct_first_answer": {"ours": correct_ours, "peer": correct_peer},
            "failure_cases": cases,
        },
        [
            ("Throughput", throughput_table),
            (
                "Added latency per token (time inside one feed/send call, first 50 answers)",
                latency_table,
            ),
            (
                "Known failure cases (each library in its own marker format; outputs verbatim)",
                cases_table,
            ),
        ],
        out=args.out,
        peers={"langchain-references": peer["runtime"]} if peer else None,
        peer_kind="lcref" if peer else None,
        description=description,
        notes=[
            (
                f"Mean added latency ratio (peer/ours): {latency_ratio:.2f}x."
                if latency_ratio
                else "Peer not run: our side only."
            ),
            linear,
            correctness,
        ],
    )


if __name__ == "__main__":
    sys.exit(main())
