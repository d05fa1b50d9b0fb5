"""Judge-driven recursive RAG over a :class:`~llama_index_rag_pack.RagPack`: the pack's retriever
for any registered mode, the pack's LLM as judge and writer.
"""

from __future__ import annotations

from typing import Any

from llama_index_rag_pack.judge.judge_query_engine import JudgeQueryEngine
from llama_index_rag_pack.pack.pack_view import PackView

__all__ = ["JudgeEngineMixin", "judge_query_engine"]


def judge_query_engine(
    pack: PackView,
    mode: str | None = None,
    *,
    similarity_top_k: int | None = None,
    **options: Any,
) -> JudgeQueryEngine:
    """A :class:`~llama_index_rag_pack.JudgeQueryEngine` over ``pack.retriever(mode)``.

    Args:
        pack: A :class:`~llama_index_rag_pack.RagPack` (or ``RoutedRagPack``).
        mode: Any registered retrieval mode (default: the pack's default mode).
        similarity_top_k: Chunks judged per question (default: the pack's ``similarity_top_k``).
        options: :class:`~llama_index_rag_pack.JudgeQueryEngine` options (``max_depth``,
            ``max_branching``, ``max_llm_calls``, ``style``, ...).

    Example:
        >>> engine = judge_query_engine(pack, "hybrid", max_depth=1)  # doctest: +SKIP
        >>> engine.query("Where was the author of Animal Farm born?")  # doctest: +SKIP
    """
    extra = {"similarity_top_k": similarity_top_k} if similarity_top_k else {}
    return JudgeQueryEngine(
        pack.retriever(mode, **extra),
        pack.llm,
        callback_manager=pack.callback_manager,
        **options,
    )


class JudgeEngineMixin:
    """Adds :meth:`make_judge_query_engine` to a pack (next to ``make_query_engine``)."""

    def make_judge_query_engine(
        self, mode: str | None = None, *, similarity_top_k: int | None = None, **options: Any
    ) -> JudgeQueryEngine:
        """Judge-driven recursive RAG over this pack's ``mode`` retriever: see
        :func:`judge_query_engine` for the options.

        Example:
            >>> engine = pack.make_judge_query_engine("hybrid", max_depth=1)  # doctest: +SKIP
        """
        return judge_query_engine(self, mode, similarity_top_k=similarity_top_k, **options)
