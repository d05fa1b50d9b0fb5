"""``rag-pack index --reindex``: upgrade a stored collection's BM25 analysis in place."""

from __future__ import annotations

import argparse

from llama_index_rag_pack.cli.output import out, step
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.models.settings import default_collection, default_milvus_uri
from llama_index_rag_pack.pack.commands import reindex_collection


def cmd_reindex(args: argparse.Namespace) -> int:
    """Re-analyse the BM25 side of the stored collection (``auto``, or ``--bm25-analyzer``)."""
    if args.paths:
        raise ConfigurationError(
            "--reindex rebuilds the stored chunks of the collection: give no paths with it."
        )
    uri = args.uri or default_milvus_uri()
    collection = args.collection or default_collection()
    name = getattr(args, "bm25_analyzer", None) or "auto"
    timings: dict[str, float] = {}
    with step(f"re-analysing the stored chunks for BM25 ({name})", timings):
        copied = reindex_collection(uri, collection, token=args.token, bm25_analyzer=name)
    if copied:
        out(f"Collection {collection!r}: {copied} chunks re-indexed with the {name} BM25 analysis")
    else:
        out(f"Collection {collection!r} already uses the {name} BM25 analysis: nothing to do.")
    return 0
