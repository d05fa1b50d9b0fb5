"""A pack's second stage (``RagPack(rerank=...)``): which reranker, how many candidates it sees,
and the reranked retriever every mode then gets.

``pack.retriever(mode, ...)`` asks here how to build and cache its retriever: with a reranker,
the mode's builder is asked for ``rerank_top_n`` candidates (default ``4 * top_k``, the
``pre_top_k`` of the fused retrievers) and wrapped in
:class:`~llama_index_rag_pack.rerank.reranked_retriever.RerankedRetriever`, which keeps
``top_k``. So every mode, the query engines and the chat engine over it rerank. A mode asking
the pack for its base retriever (HyDE, rewrite, self-query) passes ``rerank=False``
(:func:`~llama_index_rag_pack.pack.filters.base_scope`): only the outer retriever reranks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError, check_count

__all__ = ["PackReranking"]

#: Candidates the reranker sees per chunk returned, unless ``rerank_top_n`` says otherwise.
CANDIDATES_PER_RESULT = 4


class PackReranking:
    """A pack's reranking settings and the rerankers made from them (one per spec).

    Args:
        rerank: The pack's reranker: a rerank endpoint's URL, ``local:DIR``, a LlamaIndex node
            postprocessor, or ``None`` (no second stage unless a call names one).
        top_n: Candidates reranked per query (``None``: 4 x ``top_k``).
        fallback: ``"raise"`` or ``"keep"`` (a failed rerank keeps the first-stage order).
        options: Further options of a reranker made from a string (``batch_size``,
            ``timeout``, ``api_key_env``, ``max_response_bytes``, ``device``).
    """

    def __init__(
        self,
        rerank: Any = None,
        *,
        top_n: int | None = None,
        fallback: str = "raise",
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.top_n = check_count("rerank_top_n", top_n, none_ok=True)
        self.options = {**dict(options or {}), "fallback": fallback}
        if "top_n" in self.options:
            raise ConfigurationError("Give the candidates as rerank_top_n, not in rerank_options.")
        self.spec = rerank
        self._made: dict[str, Any] = {}
        # checked now: a bad URL, directory or option fails when the pack is made
        self.default = None if rerank is None else self.reranker_for(rerank)

    def reranker_for(self, rerank: Any) -> Any:
        """The reranker of one call: ``None`` the pack's, ``False`` none, else ``rerank``
        (a spec string, made once, or a node postprocessor)."""
        if rerank is None:
            return self.default
        if rerank is False:
            return None
        if isinstance(rerank, str):
            if rerank not in self._made:
                from llama_index_rag_pack.rerank.reranker_spec import make_reranker

                self._made[rerank] = make_reranker(rerank, **self.options)
            return self._made[rerank]
        from llama_index_rag_pack.rerank.reranker_spec import make_reranker

        return make_reranker(rerank)

    def describe(self) -> dict[str, str]:
        """``{"rerank": ...}`` for ``pack.describe()`` (empty without a reranker)."""
        if self.default is None:
            return {}
        from llama_index_rag_pack.rerank.reranker_spec import describe_reranker

        top_n = self.top_n or f"{CANDIDATES_PER_RESULT} x top_k"
        return {"rerank": f"{describe_reranker(self.default)}, {top_n} candidates"}

    def plan(
        self,
        pack: Any,
        spec: Any,
        kwargs: dict[str, Any],
        rerank: Any,
        key: tuple[Any, ...] | None,
    ) -> tuple[tuple[Any, ...] | None, Callable[[], Any]]:
        """The cache key and the builder of ``pack.retriever(spec.name, rerank=rerank,
        **kwargs)`` (``kwargs`` scoped already; ``key``: their cache key without a reranker,
        ``None``: not cached)."""
        reranker = self.reranker_for(rerank)
        if reranker is None:
            return key, lambda: spec.build(pack, **kwargs)
        _check_takes_top_k(spec)
        top_k = check_count(
            "similarity_top_k", kwargs.get("similarity_top_k") or pack.similarity_top_k
        )
        candidates = self.top_n or CANDIDATES_PER_RESULT * top_k
        if candidates < top_k:
            raise ConfigurationError(
                f"rerank_top_n ({candidates}) must be >= similarity_top_k ({top_k}): the "
                "reranker keeps top_k of the candidates it sees."
            )
        first_stage = {**kwargs, "similarity_top_k": candidates}

        def build() -> Any:
            from llama_index_rag_pack.rerank.reranked_retriever import RerankedRetriever

            return RerankedRetriever(
                spec.build(pack, **first_stage),
                reranker,
                top_k=top_k,
                callback_manager=pack.callback_manager,
            )

        which = rerank if isinstance(rerank, str) else id(reranker)
        return (None if key is None else (*key, ("rerank", which, candidates))), build


def _check_takes_top_k(spec: Any) -> None:
    params = inspect.signature(spec.build).parameters
    if "similarity_top_k" not in params and not any(
        p.kind is p.VAR_KEYWORD for p in params.values()
    ):
        raise ConfigurationError(
            f"Mode {spec.name!r} cannot be reranked: its builder takes no similarity_top_k, "
            "so it cannot be asked for more candidates."
        )
