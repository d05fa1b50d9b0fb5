"""The ``rag-pack`` command line: argument parsing and printing only (the top layer).

``main`` imports the command modules on first call, so ``import llama_index_rag_pack.cli`` is cheap.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rag-pack`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    from llama_index_rag_pack.cli.app import main as run

    return run(argv)


__all__ = ["main"]
