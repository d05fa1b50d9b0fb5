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


# ----------------------------------------------------------------------------- reference (verbatim logic)
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
    from llama_index_rag_pack.raptor.clustering import (
        choose_n_clusters,
        cluster_embeddings,
        exhaustive_n_clusters,
        reduce_embeddings,
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
    parser.add_argument(
        "--case", choices=["ours", "reference", "bic"], default=None, help=argparse.SUPPRESS
    )
    parser.add_argument("--n", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.n)))  # noqa: T201
        return

    rows = []
    for n in args.sizes:
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
        rows.append((n, ours, ref1, ref, bic))
        print(f"n={n}: done", file=sys.stderr, flush=True)  # noqa: T201

    print("Clustering (384-d, threshold 0.1, reduction_dim 10; time excludes the UMAP JIT)")  # noqa: T201
    print(
        f"{'n':>6} {'':10} {'time s':>8} {'tracemalloc MB':>15} {'RSS growth MB':>14} {'clusters':>9} {'rows lost':>10}"
    )  # noqa: T201
    for n, ours, ref, ref_default, _ in rows:
        for name, r in (("ours", ours), ("reference", ref), ("ref, BLAS*", ref_default)):
            if "error" in r:
                print(f"{n:>6} {name:10} {r['error']}")  # noqa: T201
                continue
            print(
                f"{n:>6} {name:10} {r['seconds']:8.1f} {r['tracemalloc_peak_mb']:15.0f} "  # noqa: T201
                f"{r['rss_growth_mb']:14.0f} {r['clusters']:9d} {r['unassigned_rows']:10d}"
            )
        if "error" not in ref and "error" not in ours:
            print(
                f"{'':>6} {'ratio':10} {ref['seconds'] / ours['seconds']:7.1f}x "  # noqa: T201
                f"{ref['tracemalloc_peak_mb'] / max(ours['tracemalloc_peak_mb'], 1e-9):14.1f}x   (reference / ours)"
            )
    print(
        "reference = run with OPENBLAS_NUM_THREADS=1 (what ours does inside its GMM fits); "  # noqa: T201
        "ref, BLAS* = default BLAS threading"
    )
    print("\nChoosing k by BIC on the same global UMAP reduction (10-d)")  # noqa: T201
    print(f"{'n':>6} {'search':16} {'k':>4} {'BIC':>14} {'fits':>5} {'time s':>8}")  # noqa: T201
    for n, _, _, _, bic in rows:
        if "error" in bic:
            print(f"{n:>6} {bic['error']}")  # noqa: T201
            continue
        print(
            f"{n:>6} {'ours (grid+gold)':16} {bic['ours_k']:>4} {bic['ours_bic']:14.1f} {bic['ours_fits']:>5} {bic['ours_s']:8.2f}"
        )  # noqa: T201,E501
        print(
            f"{n:>6} {'every k 1..49':16} {bic['full_k']:>4} {bic['full_bic']:14.1f} {bic['full_fits']:>5} {bic['full_s']:8.2f}"
        )  # noqa: T201,E501
        print(
            f"{'':>6} {'speed-up':16} {'':>4} {'':>14} {'':>5} {bic['full_s'] / bic['ours_s']:7.1f}x"
        )  # noqa: T201


if __name__ == "__main__":
    main()
