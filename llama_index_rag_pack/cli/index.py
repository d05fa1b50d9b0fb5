"""``rag-pack index``: files and folders into the collection, once, as a sync (``--sync``),
or kept in sync (``--sync --watch``)."""

from __future__ import annotations

import argparse
from typing import Any

from llama_index_rag_pack.cli.output import out, pack_kwargs, step
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["cmd_index"]


def cmd_index(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.pack.file_indexing import index_files

    if args.reindex:
        from llama_index_rag_pack.cli.reindex import cmd_reindex

        return cmd_reindex(args)
    if not args.paths:
        raise ConfigurationError(
            "rag-pack index needs files or directories to index (or --reindex to upgrade the "
            "stored collection's BM25 analysis)."
        )
    if not args.watch_every > 0:
        raise ConfigurationError(
            f"--watch-every takes a number of seconds above 0, got {args.watch_every:g}."
        )
    if args.watch and not args.sync:
        raise ConfigurationError("--watch keeps the collection in sync: use it with --sync.")
    if args.watch and args.overwrite:
        raise ConfigurationError(
            "--watch cannot be used with --overwrite (it would rebuild on every change)."
        )
    if args.watch:
        from llama_index_rag_pack.cli.watch import watch

        return watch(
            lambda: _index_once(args, index_files, overwrite=False),
            args.paths,
            recursive=not args.no_recursive,
            interval=args.watch_every,
            say=out,
        )
    return _index_once(args, index_files, overwrite=args.overwrite)


def _index_once(args: argparse.Namespace, index_files: Any, *, overwrite: bool) -> int:
    timings: dict[str, float] = {}
    with step("reading, chunking, embedding and storing in Milvus", timings):
        report = index_files(
            args.paths,
            recursive=not args.no_recursive,
            overwrite=overwrite,
            sync=args.sync,
            show_progress=True,
            chunk_size=args.chunk_size,
            chunk_overlap=args.chunk_overlap,
            sentence_index=not args.no_sentence_index,
            bm25_analyzer=args.bm25_analyzer or "auto",
            ocr=getattr(args, "ocr", "auto"),
            **{k: v for k, v in pack_kwargs(args).items() if k != "llm"},
        )
        out(f"  {report.summary()}")  # each unreadable file was logged with its reason
    pack = report.pack
    sentences = pack.sentence_index.count() if pack.sentence_index is not None else 0
    out(
        f"Collection {pack.vector_store.collection_name!r} now holds {pack.count()} chunks"
        + (f" and {sentences} sentences." if sentences else ".")
        + (f" Skipped {len(report.skipped)} unreadable files." if report.skipped else "")
    )
    return 0
