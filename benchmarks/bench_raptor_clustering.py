"""RAPTOR clustering alone: ours vs the reference algorithm, at 1k and 10k vectors.

The reference is llama-index-packs-raptor 0.4.2's ``clustering.py`` (itself the RAPTOR paper's
code) copied faithfully below (``reference_perform_clustering``): global UMAP → GMM with k chosen
by fitting every k in 1..49 → threshold → local UMAP + GMM per global cluster → map rows back
with ``(embeddings == local[:, None]).all(-1)``.

Data: unit-normalised 384-d vectors from a mixture of Gaussian topics (synthetic, seeded), so 10k
vectors need no 40-minute embedding run. Every case runs in a fresh process after a UMAP warm-up
(the numba JIT is not timed). Peak memory = tracemalloc peak (Python + numpy allocations) and the
process' peak RSS growth during the call.

Also compares the BIC search alone on the same reduced data: ours (geometric grid + golden
section) vs fitting every k in 1..49.

    python benchmarks/bench_raptor_clustering.py [--sizes 1000 10000] [--skip-reference-above 20000]
        [--out benchmarks/results]

Writes ``raptor_clustering.json`` and ``raptor_clustering.md`` to ``--out``. Both sides run in
this project's venv (same numpy, scikit-learn, umap-learn), so no peer venv is needed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import numpy as np
from _results import add_out_argument, md_table, write_results


# ----------------------------------------------------------------------------- reference (verbatim)
def reference_perform_clustering(
    embeddings: np.ndarray, dim: int, threshold: float
) -> list[np.ndarray]:
    import umap
    from sklearn.mixture import GaussianMixture

    RANDOM_SEED = 224

    def global_cluster_embeddings(embeddings, dim, n_neighbors=None, metric="cosine"):
        if n_neighbors is None:
            n_neighbors = int((len(embeddings) - 1) ** 0.5)
        return umap.UMAP(n_neighbors=n_neighbors, n_components=dim, metric=metric).fit_transform(
            embeddings
        )

    def local_cluster_embeddings(embeddings, dim, num_neighbors=10, metric="cosine"):
        return umap.UMAP(n_neighbors=num_neighbors, n_components=dim, metric=metric).fit_transform(
            embeddings
        )

    def get_optimal_clusters(embeddings, max_clusters=50, random_state=RANDOM_SEED):
        max_clusters = min(max_clusters, len(embeddings))
        n_clusters = np.arange(1, max_clusters)
        bics = []
        for n in n_clusters:
            gm = GaussianMixture(n_components=n, random_state=random_state)
            gm.fit(embeddings)
            bics.append(gm.bic(embeddings))
        return n_clusters[np.argmin(bics)]

    def GMM_cluster(embeddings, threshold, random_state=0):
        n_clusters = get_optimal_clusters(embeddings)
        gm = GaussianMixture(n_components=n_clusters, random_state=random_state)
        gm.fit(embeddings)
        probs = gm.predict_proba(embeddings)
        labels = [np.where(prob > threshold)[0] for prob in probs]
        return labels, n_clusters

    if len(embeddings) <= dim + 1:
        return [np.array([0]) for _ in range(len(embeddings))]
    reduced_embeddings_global = global_cluster_embeddings(embeddings, dim)
    global_clusters, n_global_clusters = GMM_cluster(reduced_embeddings_global, threshold)
    all_local_clusters = [np.array([]) for _ in range(len(embeddings))]
    total_clusters = 0
    for i in range(n_global_clusters):
        global_cluster_embeddings_ = embeddings[np.array([i in gc for gc in global_clusters])]
        if len(global_cluster_embeddings_) == 0:
            continue
        if len(global_cluster_embeddings_) <= dim + 1:
            local_clusters = [np.array([0]) for _ in global_cluster_embeddings_]
            n_local_clusters = 1
        else:
            reduced_embeddings_local = local_cluster_embeddings(global_cluster_embeddings_, dim)
            local_clusters, n_local_clusters = GMM_cluster(reduced_embeddings_local, threshold)
        for j in range(n_local_clusters):
            local_cluster_embeddings_ = global_cluster_embeddings_[
                np.array([j in lc for lc in local_clusters])
            ]
            indices = np.where((embeddings == local_cluster_embeddings_[:, None]).all(-1))[1]
            for idx in indices:
                all_local_clusters[idx] = np.append(all_local_clusters[idx], j + total_clusters)
        total_clusters += n_local_clusters
    return all_local_clusters


# ----------------------------------------------------------------------------- data and cases
def make_data(n: int, topics: int = 60, dim: int = 384, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(topics, dim))
    sizes = rng.dirichlet(np.ones(topics) * 2) * n
    counts = np.maximum(1, np.round(sizes).astype(int))
    counts[-1] += n - counts.sum()
    x = np.concatenate(
        [centres[t] + rng.normal(scale=0.9, size=(c, dim)) for t, c in enumerate(counts) if c > 0]
    )
    x = x[:n]
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(case: str, n: int) -> dict[str, Any]:
    import warnings

    warnings.filterwarnings("ignore")
    from llama_index_rag_pack.core.clustering import cluster_embeddings
    from llama_index_rag_pack.core.dimension_reduction import reduce_embeddings
    from llama_index_rag_pack.core.mixture_selection import (
        choose_n_clusters,
        exhaustive_n_clusters,
    )

    x = make_data(n)
    reduce_embeddings(make_data(60, seed=1), 10)  # numba JIT warm-up, not timed
    reduce_embeddings(make_data(60, seed=1), 10, random_state=0)
    if case == "bic":
        reduced = reduce_embeddings(x, 10, random_state=0)
        start = time.perf_counter()
        fast = choose_n_clusters(reduced, random_state=0)
        fast_s = time.perf_counter() - start
        start = time.perf_counter()
        full = exhaustive_n_clusters(reduced, random_state=0)
        full_s = time.perf_counter() - start
        return {
            "ours_k": fast.k,
            "ours_bic": fast.bic,
            "ours_fits": fast.n_fits,
            "ours_s": fast_s,
            "full_k": full.k,
            "full_bic": full.bic,
            "full_fits": full.n_fits,
            "full_s": full_s,
        }
    base_rss = rss_mb()
    tracemalloc.start()
    start = time.perf_counter()
    if case == "ours":
        out = cluster_embeddings(x, random_state=0)
        n_clusters = len({c for row in out for c in row})
        unassigned = sum(1 for row in out if not row)
    else:
        out = reference_perform_clustering(x, 10, 0.1)
        n_clusters = len({int(c) for row in out for c in row})
        unassigned = sum(1 for row in out if len(row) == 0)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "seconds": seconds,
        "tracemalloc_peak_mb": peak / 2**20,
        "rss_growth_mb": rss_mb() - base_rss,
        "clusters": n_clusters,
        "unassigned_rows": unassigned,
    }


def child(case: str, n: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--case", case, "--n", str(n)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        return {
            "error": proc.stderr.strip().splitlines()[-1]
            if proc.stderr.strip()
            else f"exit {proc.returncode}"
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--skip-reference-above", type=int, default=20000)
    parser.add_argument(
        "--default-blas-reference-up-to",
        type=int,
        default=2000,
        help="also run the reference with default BLAS threading up to this n "
        "(above it only with 1 BLAS thread: the default can take hours on a busy machine)",
    )
    add_out_argument(parser)
    parser.add_argument(
        "--case", choices=["ours", "reference", "bic"], default=None, help=argparse.SUPPRESS
    )
    parser.add_argument("--n", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.n)))
        return

    rows = []
    for n in args.sizes:
        start = time.perf_counter()
        ours = child("ours", n)
        ref1 = (
            child("reference", n, {"OPENBLAS_NUM_THREADS": "1"})
            if n <= args.skip_reference_above
            else {"error": "skipped"}
        )
        ref = (
            child("reference", n)
            if n <= args.default_blas_reference_up_to
            else {"error": "skipped"}
        )
        bic = child("bic", n)
        rows.append(
            {"n": n, "ours": ours, "reference": ref1, "reference_default_blas": ref, "bic": bic}
        )
        print(f"n={n}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    clustering_rows = []
    for row in rows:
        n, ours, ref = row["n"], row["ours"], row["reference"]
        for name, r in (
            ("ours", ours),
            ("reference, 1 BLAS thread", ref),
            ("reference, default BLAS", row["reference_default_blas"]),
        ):
            if "error" in r:
                clustering_rows.append((n, name, r["error"], "", "", "", ""))
                continue
            clustering_rows.append(
                (
                    n,
                    name,
                    f"{r['seconds']:.1f}",
                    f"{r['tracemalloc_peak_mb']:.0f}",
                    f"{r['rss_growth_mb']:.0f}",
                    r["clusters"],
                    r["unassigned_rows"],
                )
            )
        if "error" not in ref and "error" not in ours:
            row["time_ratio_reference_over_ours"] = ref["seconds"] / ours["seconds"]
            row["tracemalloc_ratio_reference_over_ours"] = ref["tracemalloc_peak_mb"] / max(
                ours["tracemalloc_peak_mb"], 1e-9
            )
            clustering_rows.append(
                (
                    n,
                    "**ratio** (reference 1 thread / ours)",
                    f"**{row['time_ratio_reference_over_ours']:.1f}x**",
                    f"{row['tracemalloc_ratio_reference_over_ours']:.1f}x",
                    "",
                    "",
                    "",
                )
            )
    clustering_table = md_table(
        ["n", "", "time s", "tracemalloc peak MB", "RSS growth MB", "clusters", "rows lost"],
        clustering_rows,
        align="rlrrrrr",
    )
    bic_rows = []
    for row in rows:
        n, bic = row["n"], row["bic"]
        if "error" in bic:
            bic_rows.append((n, bic["error"], "", "", "", ""))
            continue
        row["bic_speedup"] = bic["full_s"] / bic["ours_s"]
        bic_rows += [
            (
                n,
                "ours (grid + golden section)",
                bic["ours_k"],
                f"{bic['ours_bic']:.1f}",
                bic["ours_fits"],
                f"{bic['ours_s']:.2f}",
            ),
            (
                n,
                "every k in 1..49",
                bic["full_k"],
                f"{bic['full_bic']:.1f}",
                bic["full_fits"],
                f"{bic['full_s']:.2f}",
            ),
            (n, "**speed-up**", "", "", "", f"**{row['bic_speedup']:.1f}x**"),
        ]
    bic_table = md_table(["n", "search", "k", "BIC", "fits", "time s"], bic_rows, align="rlrrrr")
    clustering_title = (
        "Clustering (384-d, threshold 0.1, reduction_dim 10; time excludes the UMAP JIT)"
    )
    bic_title = "Choosing k by BIC on the same global UMAP reduction (10-d)"
    description = (
        "Ours (`llama_index_rag_pack.core.clustering`) vs the reference algorithm "
        "(llama-index-packs-raptor 0.4.2's clustering.py, the RAPTOR paper's code, reproduced "
        "in the script) on synthetic unit-normalised 384-d vectors from 60 Gaussian topics; "
        "every case in a fresh process, both in this venv (same numpy, scikit-learn, "
        "umap-learn)."
    )
    blas_note = (
        "reference, 1 BLAS thread = OPENBLAS_NUM_THREADS=1 (what ours does inside its GMM "
        "fits), the like-for-like comparison; reference, default BLAS = default threading, "
        f"run up to n={args.default_blas_reference_up_to}. Peak memory: tracemalloc peak "
        "(Python + numpy allocations) and the process' peak RSS growth during the call."
    )
    print(clustering_title)
    print(clustering_table)
    print(blas_note)
    print(f"\n{bic_title}")
    print(bic_table)
    write_results(
        "raptor_clustering",
        {
            "reference": "llama-index-packs-raptor 0.4.2 clustering.py, reproduced in the script",
            "sizes": args.sizes,
            "rows": rows,
        },
        [(clustering_title, clustering_table), (bic_title, bic_table)],
        out=args.out,
        description=description,
        notes=[blas_note],
        headline_packages=["numpy", "scikit-learn", "umap-learn", "numba"],
    )


if __name__ == "__main__":
    main()
