"""RAPTOR at scale: a build over ``--chunks`` chunks (default 100,000) with a scripted LLM that
answers every summary in a fixed ``--delay`` (0.2 s) with ``--concurrency`` (16) in flight, and a
build killed part-way (SIGKILL) then resumed in a fresh process, beside one never stopped.

Chunks: synthetic text on ``--topics`` topics, each with its own 40-word vocabulary (70% of a
chunk's 60 words come from it), embedded by a hashed bag-of-words embedding (384-d), so topics
are real in vector space and no model time is counted. The scripted LLM answers like a terse
model: ``In short: w1 w2 ... w12.``, the twelve commonest words of the passages it was given, so
a summary embeds near its children. The tree is a ``RaptorTree`` on Milvus Lite, built through
``abuild`` (summaries on the event loop, ``max_concurrency`` in flight), with the default options
and the LLM's 4,096-token window as the cluster budget.

Measured: wall time of the build (storing the leaves apart), the clustering seconds of each level
(from the build's progress callback), LLM calls, the tree's shape, peak RSS, and the bound the
summaries are held to: levels time <= (clustering + calls x delay / concurrency) x 1.1.
Resume: the build is killed ``--kill-after`` seconds into its first level's summaries, then
``resume()`` runs in a new process; reported are the summaries stored before the kill, the LLM
calls of the resume, and whether the resumed tree equals an uninterrupted build's (the id, text
and children of every summary).

Run:  python benchmarks/bench_raptor_scale.py [--chunks 100000] [--resume-chunks 20000]
Writes ``raptor_scale.json`` and ``raptor_scale.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _results import add_out_argument, md_table, write_results

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DIM = 384


def chunks(n: int, topics: int, seed: int = 0) -> list[Any]:
    """``n`` TextNodes on ``topics`` topics, with their hashed embeddings."""
    import zlib

    import numpy as np
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    rng = np.random.default_rng(seed)
    vocab = np.asarray([[f"t{t}w{w}" for w in range(40)] for t in range(topics)])
    common = np.asarray([f"common{w}" for w in range(200)])
    slot = {w: zlib.crc32(w.encode()) % DIM for w in [*vocab.ravel(), *common]}
    out = []
    for i in range(n):
        t = int(rng.integers(topics))
        own = rng.random(60) < 0.7
        words = np.where(
            own, vocab[t][rng.integers(40, size=60)], common[rng.integers(200, size=60)]
        )
        text = " ".join(words) + "."
        counts = np.bincount([slot[w] for w in words], minlength=DIM).astype(np.float32)
        node = TextNode(id_=f"chunk-{i}", text=text, metadata={"topic": t})
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc-{i // 10}")
        node.embedding = (counts / float(np.linalg.norm(counts))).tolist()
        out.append(node)
    return out


def hashed_vector(text: str) -> list[float]:
    """A 384-d vector of hashed word counts (crc32: the same in every process)."""
    import zlib

    import numpy as np

    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().replace(".", " ").split():
        v[zlib.crc32(word.encode()) % DIM] += 1.0
    return (v / (float(np.linalg.norm(v)) or 1.0)).tolist()


def hashed() -> Any:
    """The hashed embedding of ``profile_indexing`` over :func:`hashed_vector` (crc32, so the
    killed, resumed and uninterrupted builds' processes embed alike)."""
    from profile_indexing import hashed_embedding

    return hashed_embedding(hashed_vector, batch_size=1024)


def terse_summary(prompt: str) -> str:
    """The twelve commonest topic words of the passages: what a terse model would keep."""
    body = prompt.rsplit("Summary:", 1)[0]
    words = [w.strip(".,") for w in body.split() if w.startswith("t") and "w" in w]
    top = [w for w, _ in Counter(words).most_common(12)]
    return "In short: " + " ".join(top) + "."


def tree(uri: str, delay: float, concurrency: int, progress: Any = None) -> Any:
    from llama_index_rag_pack.milvus.connection import open_vector_store
    from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
    from llama_index_rag_pack.testing import ScriptedLLM

    llm = ScriptedLLM(replies=terse_summary, delay=delay, context_window=4096)
    store = open_vector_store(uri, "scale_raptor", dim=DIM)
    return RaptorTree(
        store, embed_model=hashed(), llm=llm, max_concurrency=concurrency, progress=progress
    )


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_build(args: argparse.Namespace) -> dict[str, Any]:
    """One build in this process (``--child build``), timed by stage."""
    nodes = chunks(args.n, args.topics)
    clustering: dict[int, float] = {}
    started: dict[int, float] = {}
    lines: list[str] = []

    def progress(p: Any) -> None:
        if p.stage == "clustering":
            if p.done == 0:
                started[p.level] = time.perf_counter()
            else:
                clustering[p.level] = time.perf_counter() - started[p.level]
        if p.stage == "clustering" or p.done == p.total:
            lines.append(p.line())
            print(p.line(), file=sys.stderr, flush=True)

    t = tree(args.uri, args.delay, args.concurrency, progress)
    times: dict[str, float] = {}
    leaves = t.make_leaves(nodes)
    del nodes

    async def build() -> Any:  # what RaptorTree.abuild does, its two steps timed apart
        return await t._run_async(lambda summarise: _timed_build(t, leaves, summarise, times))

    stats = asyncio.run(build())
    return {
        "chunks": args.n,
        "leaves_s": times["leaves"],
        "levels_s": times["levels"],
        "clustering_s": clustering,
        "llm_calls": stats.llm_calls,
        "summaries_written": stats.summaries_written,
        "summaries_carried": stats.summaries_carried,
        "summaries_reused": stats.summaries_reused,
        "levels": {int(k): v for k, v in t.levels().items()},
        "peak_rss_mb": peak_rss_mb(),
        "progress": lines,
    }


def _timed_build(t: Any, leaves: list[Any], summarise: Any, times: dict[str, float]) -> Any:
    """``RaptorTree._build`` with its leaves and its levels timed apart."""
    builder = t._builder(summarise)
    start = time.perf_counter()
    builder.store_leaves(leaves)
    times["leaves"] = time.perf_counter() - start
    leaves.clear()
    start = time.perf_counter()
    builder.grow(0)
    stats = builder.finish()
    times["levels"] = time.perf_counter() - start
    return stats


def run_resume(args: argparse.Namespace) -> dict[str, Any]:
    """Resume the tree in ``--uri`` (``--child resume``): no chunks given."""
    from llama_index_rag_pack.raptor.raptor_nodes import is_carried

    t = tree(args.uri, args.delay, args.concurrency)
    stored = t.store.tree_nodes(min_level=1)
    before, asked = len(stored), sum(not is_carried(n) for n in stored)
    start = time.perf_counter()
    stats = asyncio.run(t.aresume())
    return {
        "summaries_stored_before": before,
        "summaries_asked_before": asked,
        "llm_calls": stats.llm_calls,
        "summaries_reused": stats.summaries_reused,
        "seconds": time.perf_counter() - start,
        "levels": {int(k): v for k, v in t.levels().items()},
    }


def tree_shape(uri: str) -> dict[str, Any]:
    from llama_index_rag_pack.raptor.raptor_nodes import CHILD_KEY

    t = tree(uri, 0.0, 1)
    return {
        n.node_id: [n.get_content(), sorted(n.metadata.get(CHILD_KEY) or [])]
        for n in t.store.tree_nodes(min_level=1)
    }


def child(kind: str, n: int, uri: str, args: argparse.Namespace, **extra: Any) -> Any:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        kind,
        "--n",
        str(n),
        "--uri",
        uri,
        *("--topics", str(args.topics), "--delay", str(args.delay)),
        *("--concurrency", str(args.concurrency)),
    ]
    if args.cores:
        cmd = ["taskset", "-c", ",".join(str(c) for c in range(args.cores)), *cmd]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **extra)


def result_of(proc: subprocess.Popen) -> dict[str, Any]:
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def resume_check(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Kill a build part-way, resume it in a fresh process, compare with an unbroken build."""
    n = args.resume_chunks
    whole = result_of(child("build", n, str(work / "whole.db"), args))
    killed_uri = str(work / "killed.db")
    proc = child("build", n, killed_uri, args, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    deadline = None
    for line in proc.stderr:  # kill once the first level's summaries are under way
        if deadline is None and "clusters (" in line:
            deadline = time.monotonic() + args.kill_after
        if deadline is not None and time.monotonic() >= deadline:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = result_of(child("resume", n, killed_uri, args))
    same = tree_shape(killed_uri) == tree_shape(str(work / "whole.db"))
    return {"chunks": n, "uninterrupted": whole, "resumed": resumed, "same_tree": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--resume-chunks", type=int, default=20_000)
    parser.add_argument("--kill-after", type=float, default=5.0)
    parser.add_argument("--topics", type=int, default=25)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--cores", type=int, default=2, help="pin each build to this many CPUs")
    parser.add_argument("--child", choices=["build", "resume"], help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--uri", help=argparse.SUPPRESS)
    add_out_argument(parser)
    args = parser.parse_args()
    if args.child:
        result = run_build(args) if args.child == "build" else run_resume(args)
        print(json.dumps(result))
        return
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        build = result_of(child("build", args.chunks, str(work / "scale.db"), args))
        resume = resume_check(args, work) if args.resume_chunks else None
    clustering = sum(build["clustering_s"].values())
    bound = (clustering + build["llm_calls"] * args.delay / args.concurrency) * 1.1
    build["bound_s"] = bound
    rows = [
        ("chunks", f"{build['chunks']:,}"),
        (
            "tree (nodes per level)",
            " → ".join(f"{v:,}" for _, v in sorted(build["levels"].items())),
        ),
        ("storing the leaves (s)", f"{build['leaves_s']:.1f}"),
        (
            "clustering per level (s)",
            ", ".join(f"L{k}: {v:.1f}" for k, v in sorted(build["clustering_s"].items())),
        ),
        (
            "LLM calls (carried, no call)",
            f"{build['llm_calls']:,} ({build['summaries_carried']:,})",
        ),
        (
            f"LLM time ÷ concurrency ({args.delay} s × calls ÷ {args.concurrency})",
            f"{build['llm_calls'] * args.delay / args.concurrency:.1f}",
        ),
        ("levels time (s)", f"**{build['levels_s']:.1f}**"),
        ("bound: (clustering + LLM ÷ concurrency) × 1.1 (s)", f"{bound:.1f}"),
        ("peak RSS (MB)", f"{build['peak_rss_mb']:.0f}"),
    ]
    tables = [("Build", md_table(["", "value"], rows, align="lr"))]
    if resume:
        whole, resumed = resume["uninterrupted"], resume["resumed"]
        rrows = [
            ("chunks", f"{resume['chunks']:,}"),
            ("LLM calls, uninterrupted build", whole["llm_calls"]),
            (
                "summaries stored when killed (written by the LLM)",
                f"{resumed['summaries_stored_before']} ({resumed['summaries_asked_before']})",
            ),
            ("LLM calls of the resume", resumed["llm_calls"]),
            (
                "stored summaries written again (resume calls + stored − uninterrupted)",
                resumed["llm_calls"] + resumed["summaries_asked_before"] - whole["llm_calls"],
            ),
            (
                "resumed tree equals the uninterrupted one",
                "**yes**" if resume["same_tree"] else "NO",
            ),
        ]
        tables.append(
            (
                f"Killed {args.kill_after:g} s into the first level's summaries, then resumed",
                md_table(["", "value"], rrows, align="lr"),
            )
        )
    for title, table in tables:
        print(f"\n{title}\n{table}")
    write_results(
        "raptor_scale",
        {"args": vars(args), "build": build, "resume": resume},
        tables,
        out=args.out,
        description=__doc__.split("\n\n", 2)[1],
        notes=[
            f"Progress lines of the build (the callback's): {'; '.join(build['progress'][:12])}",
            f"run took {time.perf_counter() - start:.0f} s",
        ],
        headline_packages=["pymilvus", "milvus-lite", "umap-learn", "scikit-learn"],
    )


if __name__ == "__main__":
    main()
