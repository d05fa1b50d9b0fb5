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

Run:  python benchmarks/bench_citations_streaming.py [--answers 300] [--repeats 3]
      [--huge-tokens 200000] [--peer-python /work/venv-peer-lcref/bin/python]
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
    """The rewritten answer without the reference list, spaces before ``[n]`` ignored (the peer eats them)."""
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
        [python, str(HERE / "bench_citations_lcref_peer.py")],
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--answers", type=int, default=300)
    parser.add_argument("--sentences", type=int, default=8, help="sentences (citations) per answer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--huge-tokens", type=int, default=200_000)
    parser.add_argument("--peer-python", default="/work/venv-peer-lcref/bin/python")
    args = parser.parse_args()

    ours_answers, peer_answers = build_streams(args.answers, args.sentences)
    n_huge = max(1, args.huge_tokens // (len(ours_answers[0]) or 1))
    ours_huge_src, peer_huge_src = build_streams(n_huge, args.sentences, seed=1)
    ours_huge = [[t for s in ours_huge_src for t in s]]
    peer_huge = [[t for s in peer_huge_src for t in s]]
    half_o, half_p = (
        [ours_huge[0][: len(ours_huge[0]) // 4]],
        [peer_huge[0][: len(peer_huge[0]) // 4]],
    )
    job = {
        "docs": DOCS,
        "repeats": args.repeats,
        "timed": {"answers": peer_answers, "huge": peer_huge, "quarter": half_p},
        "per_token": ["answers"],
        "per_token_streams": 50,
        "cases": {name: peer for name, (_, peer) in CASES.items()},
    }
    print(f"Running the peer ({args.peer_python}) ...", flush=True)
    peer = run_peer(args.peer_python, job)

    print("Running ours ...", flush=True)
    ours_t = {
        "answers": time_ours(ours_answers, args.repeats),
        "huge": time_ours(ours_huge, args.repeats),
        "quarter": time_ours(half_o, args.repeats),
    }
    ours_pt = per_token_ours(ours_answers[:50])
    peer_pt = peer["timings"]["answers"]["per_token_ns"]

    n_tokens_o = sum(map(len, ours_answers))
    n_tokens_p = sum(map(len, peer_answers))
    print(
        f"\nStreaming rewrite, {args.answers} answers x {args.sentences} citations "
        f"(ours {n_tokens_o:,} tokens, peer {n_tokens_p:,} tokens: the peer's marker is 5 tokens, ours 7);"
        f" best of {args.repeats}; langchain-references {peer['version']}\n"
    )
    rows = []
    for name, label, no, np_ in (
        ("answers", "typical answers", n_tokens_o, n_tokens_p),
        ("quarter", "one answer, 1/4 size", len(half_o[0]), len(half_p[0])),
        ("huge", "one huge answer", len(ours_huge[0]), len(peer_huge[0])),
    ):
        to, tp = ours_t[name], peer["timings"][name]["seconds"]
        rows.append((label, no, no / to, np_, np_ / tp, (np_ / tp and (no / to) / (np_ / tp))))
    print(
        "| workload | ours tokens | ours tokens/s | peer tokens | peer tokens/s | throughput ratio (ours/peer) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, no, ro, np_, rp, ratio in rows:
        print(f"| {label} | {no:,} | {ro:,.0f} | {np_:,} | {rp:,.0f} | {ratio:.2f}x |")
    print("\nAdded latency per token (time inside one feed/send call, first 50 typical answers)\n")
    print("| | mean µs | p50 µs | p99 µs | max µs |")
    print("|---|---:|---:|---:|---:|")
    for label, s in (
        ("ours (ReferenceManager.feed)", ours_pt),
        ("peer (_manage_references.send)", peer_pt),
    ):
        print(
            f"| {label} | {statistics.fmean(s) / 1000:.2f} | {pct(s, 0.5):.2f} | {pct(s, 0.99):.2f} | {max(s) / 1000:.1f} |"
        )
    mean_o, mean_p = statistics.fmean(ours_pt), statistics.fmean(peer_pt)
    print(f"\nmean added latency ratio (peer/ours): {mean_p / mean_o:.2f}x")
    q_o, h_o = ours_t["quarter"] / len(half_o[0]), ours_t["huge"] / len(ours_huge[0])
    q_p, h_p = (
        peer["timings"]["quarter"]["seconds"] / len(half_p[0]),
        peer["timings"]["huge"]["seconds"] / len(peer_huge[0]),
    )
    print(
        f"linear time: µs/token at 1/4 size vs full size — ours {q_o * 1e6:.2f} vs {h_o * 1e6:.2f}; "
        f"peer {q_p * 1e6:.2f} vs {h_p * 1e6:.2f}"
    )

    expected = body(render_references("".join(ours_answers[0]), DOCS, style="text"))
    print(
        "\nCorrectness on the first typical answer (rewritten text equal to the whole-text rewrite):"
    )
    print(
        f"  ours: {body(run_ours(ours_answers[0])) == expected}   peer: {body(peer['outputs']['answers#first']) == expected}"
    )

    print("\nKnown failure cases (each library in its own marker format; outputs verbatim)\n")
    for name, (o_tokens, p_tokens) in CASES.items():
        print(f"### {name}")
        print(f"  input (ours): {''.join(o_tokens)!r}")
        print(f"  ours        : {run_ours(o_tokens)!r}")
        print(f"  input (peer): {''.join(p_tokens)!r}")
        print(f"  peer        : {peer['outputs'][name]!r}")
        print(f"  peer (async): {peer['outputs'][name + '#async']!r}\n")


if __name__ == "__main__":
    sys.exit(main())
