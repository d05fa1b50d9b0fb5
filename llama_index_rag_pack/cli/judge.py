"""``rag-pack judge``: answer with judge-driven recursive RAG and show the search tree.

``rag-pack judge "question" --show-tree`` answers (citations in ``--format``), then prints the
tree: every question, its chunks with the judge's scores, the follow-up questions and their
answers. ``--save-tree tree.json`` keeps it; ``rag-pack judge --open tree.json`` prints a saved
tree again (``--tree-format mermaid`` for a diagram) without loading any model.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from llama_index_rag_pack.cli import output as _cli

__all__ = ["register", "render_tree"]

#: The options bounding the search, passed to the engine under their own names.
_SEARCH_LIMITS = ("max_depth", "max_branching", "max_llm_calls")


def render_tree(tree: Any, fmt: str) -> str:
    """The tree as ``text`` (indented), ``mermaid`` or ``json``."""
    if fmt == "mermaid":
        return tree.to_mermaid()
    if fmt == "json":
        return tree.to_json()
    return tree.render_text()


def cmd_judge(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.core.errors import ConfigurationError
    from llama_index_rag_pack.judge.judge_tree import SearchTree

    if args.open:
        if args.question:
            raise ConfigurationError("Give a question or --open TREE.json, not both.")
        tree = SearchTree.load(args.open)  # a bad file: one ConfigurationError line naming it
        _cli.out(render_tree(tree, args.tree_format))
        return 0
    if not args.question:
        raise ConfigurationError('Give a question: rag-pack judge "your question" --show-tree')
    return _answer(args)


def _answer(args: argparse.Namespace) -> int:
    from llama_index_rag_pack.cli.session import open_session
    from llama_index_rag_pack.pack.judge import judge_query_engine

    session = open_session(args)
    limits = {name: getattr(args, name) for name in _SEARCH_LIMITS}
    engine = judge_query_engine(session.pack, args.mode, style=args.format, **limits)
    response = session.time_answer(args.question, lambda: engine.query(args.question))
    tree = response.search_tree
    _cli.out(str(response))
    _cli.out(f"\n({tree.llm_calls} LLM calls, search depth {tree.depth})")
    if args.show_tree:
        _cli.out("\nSearch tree:")
        _cli.out(render_tree(tree, args.tree_format))
    if args.save_tree:
        _cli.out(f"Saved the search tree to {tree.save(Path(args.save_tree))}")
    return 0


def _mode_names() -> list[str]:
    from llama_index_rag_pack.pack.modes import mode_names

    return [m for m in mode_names() if m != "route"]


def register(subparsers: Any) -> None:
    """Add ``rag-pack judge`` to the CLI."""
    p = subparsers.add_parser(
        "judge",
        help="answer with judge-driven recursive RAG and show its search tree",
        description="An LLM judge scores each retrieved chunk (2 answers, 1 partial, 0 "
        "irrelevant); partial chunks send a follow-up question down the same search.",
    )
    p.add_argument("question", nargs="?", default=None, help="the question")
    p.add_argument("--open", default=None, metavar="TREE.json", help="print a saved tree")
    p.add_argument("--mode", default=None, choices=_mode_names(), help="retrieval mode")
    p.add_argument("--top-k", type=int, default=4, help="chunks judged per question (default 4)")
    p.add_argument("--max-depth", type=int, default=2, help="follow-up levels (default 2)")
    p.add_argument(
        "--max-branching", type=int, default=2, help="follow-ups per question (default 2)"
    )
    p.add_argument(
        "--max-llm-calls", type=int, default=24, help="LLM calls per question, at most (24)"
    )
    p.add_argument("--format", default="text", choices=["text", "markdown", "html"])
    p.add_argument("--show-tree", action="store_true", help="print the search tree")
    p.add_argument("--tree-format", default="text", choices=["text", "mermaid", "json"])
    p.add_argument("--save-tree", default=None, metavar="PATH", help="write the tree as JSON")
    p.set_defaults(func=cmd_judge)
