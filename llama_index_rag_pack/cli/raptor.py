"""``rag-pack raptor build|show|plot``: build a RAPTOR tree next to a collection, look at it.

The tree lives in the collection ``<collection>_raptor`` of the same Milvus database, which is
where ``rag-pack ask --mode raptor`` / ``--mode raptor_traversal`` find it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from llama_index_rag_pack.cli import output as _cli

__all__ = ["register"]


def _names(args: argparse.Namespace) -> tuple[str, str]:
    from llama_index_rag_pack.models.settings import default_collection, default_milvus_uri

    return args.uri or default_milvus_uri(), args.collection or default_collection()


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The tree options given on the command line."""
    keys = ("max_levels", "min_compression", "max_concurrency", "chunk_size", "chunk_overlap")
    keys += ("max_llm_calls", "max_tokens")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def _embedding(args: argparse.Namespace) -> tuple[Any, int]:
    from llama_index_rag_pack.models.settings import resolve_embed_model

    embed = resolve_embed_model(args.embed_model)
    return embed, len(embed.get_text_embedding("dimension probe"))


def _open_tree(args: argparse.Namespace, *, must_exist: bool, llm: Any = None) -> Any:
    from llama_index_rag_pack.pack.raptor import open_raptor_store
    from llama_index_rag_pack.raptor.raptor_tree import RaptorTree

    uri, collection = _names(args)
    embed, dim = _embedding(args)
    store = open_raptor_store(uri, collection, dim=dim, token=args.token, must_exist=must_exist)
    return RaptorTree(store, embed_model=embed, llm=llm, show_progress=True, **_options(args))


def _tree_to_estimate(args: argparse.Namespace, llm: Any) -> tuple[Any, bool]:
    """The tree to estimate, and whether it exists (a tree not built yet is not created)."""
    from llama_index_rag_pack.pack.raptor import store_to_estimate
    from llama_index_rag_pack.raptor.raptor_tree import RaptorTree

    uri, collection = _names(args)
    embed, dim = _embedding(args)
    store, exists = store_to_estimate(uri, collection, dim=dim, token=args.token)
    tree = RaptorTree(store, embed_model=embed, llm=llm, show_progress=True, **_options(args))
    return tree, exists


def _check_build_args(args: argparse.Namespace) -> None:
    """Budgets and prices checked before any model loads (one ConfigurationError line)."""
    from llama_index_rag_pack.raptor.build_budget import check_budget, check_prices

    check_budget(args.max_llm_calls, args.max_tokens)
    check_prices(args.price_in, args.price_out)


def _read_inputs(args: argparse.Namespace, uri: str, collection: str) -> list[Any]:
    from llama_index_rag_pack.core.errors import CollectionNotFoundError
    from llama_index_rag_pack.documents.ingest import load_documents
    from llama_index_rag_pack.pack.commands import collection_leaves

    if args.paths:
        with _cli.step("reading documents"):
            documents = load_documents(args.paths, show_progress=True)
            _cli.out(f"  {len(documents)} documents")
        return documents
    with _cli.step(f"reading the chunks of collection {collection!r}"):
        try:
            documents = collection_leaves(uri, collection, token=args.token)
        except CollectionNotFoundError as e:
            raise CollectionNotFoundError(
                f"{e} Or give files: `rag-pack raptor build PATH`."
            ) from None
        _cli.out(f"  {len(documents)} chunks (their embeddings are reused)")
    return documents


def _print_estimate(
    tree: Any, documents: list[Any], args: argparse.Namespace, *, exists: bool = True
) -> Any:
    with _cli.step("estimating the build (no LLM call)"):
        estimate = tree.estimate(documents, reuse=exists and not args.overwrite)
    for line in estimate.lines(args.price_in, args.price_out):
        _cli.out(f"  {line}")
    for cap, spent, what in (
        (args.max_llm_calls, estimate.calls, "calls"),
        (args.max_tokens, estimate.total_tokens, "tokens"),
    ):
        if cap is not None and spent > cap:
            _cli.out(f"  budget  : {cap:,} of the {spent:,} {what} estimated: the build stops")
    return estimate


def cmd_build(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.models.settings import describe_llm, resolve_llm
    from llama_index_rag_pack.pack.commands import drop_raptor_tree
    from llama_index_rag_pack.raptor.spend_estimate import report_lines

    _check_build_args(args)
    uri, collection = _names(args)
    llm = resolve_llm(args.llm)
    if hasattr(llm, "load") and not args.estimate:
        llm.load()
    _cli.out(f"  llm       : {describe_llm(llm)}")
    documents = _read_inputs(args, uri, collection)
    if args.estimate:  # nothing is written, not even with --overwrite
        tree, exists = _tree_to_estimate(args, llm)
        _print_estimate(tree, documents, args, exists=exists)
        _cli.out("Build with: rag-pack raptor build (same arguments, without --estimate)")
        return 0
    if args.overwrite:
        drop_raptor_tree(uri, collection, token=args.token)
    tree = _open_tree(args, must_exist=False, llm=llm)
    if not args.no_estimate:
        try:
            _print_estimate(tree, documents, args)
        except Exception as e:  # the estimate only informs: the build goes on without it
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            _cli.err(f"  (no estimate: {first})")
    with _cli.step(
        f"building the RAPTOR tree in {tree.store.collection_name!r} (resumes a partial build)"
    ):
        stats = tree.build(documents)
    _cli.out(f"  levels    : {stats.levels}")
    _cli.out(f"  llm calls : {stats.llm_calls} ({stats.summaries_reused} summaries reused)")
    _cli.out(f"  carried   : {stats.summaries_carried} clusters of one (no LLM call)")
    for line in report_lines(stats, stats.estimate, args.price_in, args.price_out):
        _cli.out(line)
    if stats.stopped_at_budget:
        _cli.out(
            f"Budget reached: {stats.llm_calls} LLM calls, {stats.total_tokens:,} tokens spent; "
            "every summary written is stored. Continue with "
            "`rag-pack raptor build` again, without --overwrite (a larger --max-llm-calls / "
            "--max-tokens, or none)."
        )
        return 0
    _cli.out(f'Ask with: rag-pack --collection {collection} ask --mode raptor "your question"')
    return 0


def cmd_update(args: argparse.Namespace) -> int:
    """Write again the summaries above leaves a folder sync removed (no LLM call when none)."""
    tree = _open_tree(args, must_exist=True, llm=args.llm)
    with _cli.step(f"refreshing the RAPTOR tree in {tree.store.collection_name!r}"):
        stats = tree.refresh()
    if not stats.leaves_removed:
        _cli.out("  up to date: no summary lost a leaf")
        return 0
    _cli.out(f"  levels    : {stats.levels}")
    _cli.out(
        f"  llm calls : {stats.llm_calls} ({stats.summaries_written} summaries written above "
        f"{stats.leaves_removed} removed leaves)"
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.cli.raptor_plot import to_dot, to_mermaid, tree_outline

    tree = _open_tree(args, must_exist=True)
    if not tree.levels():
        from llama_index_rag_pack.core.errors import CollectionNotFoundError
        from llama_index_rag_pack.pack.raptor import build_hint

        raise CollectionNotFoundError(build_hint(_names(args)[1]))
    if args.format == "mermaid":
        text = to_mermaid(tree, max_nodes=args.max_nodes)
    elif args.format == "dot":
        text = to_dot(tree, max_nodes=args.max_nodes)
    else:
        text = tree_outline(tree)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        _cli.out(f"Wrote {args.out}")
    else:
        _cli.out(text, end="")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.cli.raptor_plot import plot_levels, to_mermaid

    tree = _open_tree(args, must_exist=True)
    with _cli.step("projecting each level to 2-D and drawing it"):
        paths = plot_levels(tree, args.out)
    mermaid = Path(args.out) / "tree.mmd"
    mermaid.write_text(to_mermaid(tree), encoding="utf-8")
    for path in [*paths, mermaid]:
        _cli.out(f"  {os.fspath(path)}")
    return 0


def _spend_arguments(b: argparse.ArgumentParser) -> None:
    """``raptor build``'s estimate, budget and price options."""
    first = b.add_mutually_exclusive_group()
    first.add_argument(
        "--estimate",
        action="store_true",
        help="print the summary calls and tokens the build would spend (no LLM call, nothing "
        "written), then stop; with a budget, where it would stop the build",
    )
    first.add_argument(
        "--no-estimate", action="store_true", help="build without printing an estimate first"
    )
    b.add_argument(
        "--max-llm-calls",
        type=int,
        default=None,
        help="stop (and store what was written) before a summary request beyond N",
    )
    b.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="start no summary request once N tokens are spent (requests in flight finish)",
    )
    b.add_argument(
        "--price-in", type=float, default=None, help="USD per million input tokens (a cost line)"
    )
    b.add_argument("--price-out", type=float, default=None, help="USD per million output tokens")


def register(subparsers: Any) -> None:
    """Add ``rag-pack raptor ...`` to the CLI."""
    p = subparsers.add_parser(
        "raptor", help="build, show or plot a RAPTOR tree next to a collection"
    )
    sub = p.add_subparsers(dest="raptor_command", required=True)

    b = sub.add_parser(
        "build", help="build (or resume) the tree from files, or from the indexed chunks"
    )
    b.add_argument(
        "paths", nargs="*", help="files or directories; none: reuse the collection's chunks"
    )
    b.add_argument("--max-levels", type=int, default=None, help="highest summary level (default 5)")
    b.add_argument(
        "--min-compression",
        type=float,
        default=None,
        help="build a level only when the one below has this many times as many nodes "
        "(default 2.0; 1: while anything merges)",
    )
    b.add_argument(
        "--max-concurrency", type=int, default=None, help="summaries in flight (default 16)"
    )
    b.add_argument(
        "--chunk-size", type=int, default=None, help="leaf chunk size in tokens (default 256)"
    )
    b.add_argument(
        "--chunk-overlap", type=int, default=None, help="leaf chunk overlap (default 32)"
    )
    b.add_argument("--overwrite", action="store_true", help="drop the existing tree first")
    _spend_arguments(b)
    b.set_defaults(func=cmd_build)

    u = sub.add_parser(
        "update",
        help="write again the summaries above leaves that `rag-pack index --sync` removed",
    )
    u.set_defaults(func=cmd_update)

    s = sub.add_parser("show", help="print the tree as an outline, Mermaid or Graphviz")
    s.add_argument("--format", choices=["text", "mermaid", "dot"], default="text")
    s.add_argument(
        "--max-nodes", type=int, default=150, help="nodes in mermaid/dot output (top levels first)"
    )
    s.add_argument("--out", default=None, help="write to this file instead of stdout")
    s.set_defaults(func=cmd_show)

    q = sub.add_parser("plot", help="PNG scatter of each level's clusters, plus tree.mmd")
    q.add_argument(
        "--out", default="raptor_plots", help="output directory (default ./raptor_plots)"
    )
    q.set_defaults(func=cmd_plot)
