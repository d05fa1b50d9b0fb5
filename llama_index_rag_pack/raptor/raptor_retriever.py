"""``RaptorRetriever``: collapsed-tree, tree-traversal and leaves-only retrieval over a RAPTOR
tree.

A cluster of one is carried up the tree unchanged (``raptor_carried``: same text and embedding
as its child, no LLM summary). Such a node only links its level to the next: tree traversal
walks through it to its child, and no mode ever returns it (the collapsed search asks for more
hits until ``similarity_top_k`` are left without it), so a chunk never comes back twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from llama_index_rag_pack.core.choices import Choice
from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
)
from llama_index_rag_pack.core.query_bases import PackRetriever
from llama_index_rag_pack.milvus.metadata_filters import Filters, filter_expression
from llama_index_rag_pack.raptor.raptor_levels import BuildStats
from llama_index_rag_pack.raptor.raptor_nodes import CHILD_KEY, TOKENS_KEY, is_carried
from llama_index_rag_pack.raptor.raptor_store import scope_all_levels, scope_level, scope_within
from llama_index_rag_pack.raptor.raptor_tree import RaptorTree

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

DEFAULT_TOKEN_BUDGET = 2000  # the paper's collapsed-tree context budget


class RaptorRetrieveMode(Choice):
    """How :class:`RaptorRetriever` searches the tree.

    * ``collapsed``: every level in one pool, best first, cut to a token budget (the paper's best);
    * ``tree_traversal``: top-k at the top level, then top-k among the children of what was picked,
      level by level down to the leaves;
    * ``leaves``: plain vector search over the chunks only.
    """

    COLLAPSED = "collapsed"
    TREE_TRAVERSAL = "tree_traversal"
    LEAVES = "leaves"

    @classmethod
    def label(cls) -> str:
        return "RAPTOR mode"


class RaptorRetriever(PackRetriever):
    """Retrieve from a RAPTOR tree stored in Milvus.

    ``RaptorRetriever(vector_store=...)`` reopens a tree that is already built (no LLM call, no
    rebuild); :meth:`from_documents` builds one first. Every returned node carries its level in
    ``node.metadata["raptor_level"]`` (0 = chunk, higher = summaries).

    Args:
        vector_store: The ``MilvusVectorStore`` holding the tree (ignored when ``tree`` is given).
        tree: A ready :class:`RaptorTree` (its store, models and build options are used).
        embed_model: Embedding model (default: the bundled all-MiniLM-L6-v2).
        llm: LLM for summaries on :meth:`insert`/:meth:`delete` (resolved only when needed).
        mode: ``collapsed`` (default), ``tree_traversal`` or ``leaves``.
        similarity_top_k: Nodes per search (per level in ``tree_traversal``).
        token_budget: Cut results, best first, once their total tokens would exceed this
            (``None``: no cut). The first node is always kept.
        summary_prompt: Overrides the summary prompt of the tree.
        must_exist: Raise when the collection holds no tree (set False to build later).
        filters: Core's ``MetadataFilters`` or a Milvus expression on the chunks' metadata.
            Leaves are filtered exactly; a summary is returned only when every leaf below it
            passes (so no summary carries text of an excluded chunk).
        callback_manager: LlamaIndex callbacks.
        verbose: Log each level visited.

    Raises:
        ConfigurationError: bad mode or numbers (the message lists valid values).
        CollectionNotFoundError: ``must_exist`` and there is no tree in the collection.

    Example:
        >>> from llama_index.core import Document
        >>> from llama_index_rag_pack.milvus.connection import open_vector_store
        >>> store = open_vector_store("./raptor.db", "docs_raptor")  # doctest: +SKIP
        >>> retriever = RaptorRetriever.from_documents(  # doctest: +SKIP
        ...     docs, llm=llm, vector_store=store
        ... )
        >>> later = RaptorRetriever(vector_store=store, mode="tree_traversal")  # doctest: +SKIP
        >>> [  # doctest: +SKIP
        ...     n.metadata["raptor_level"] for n in later.retrieve("What is RAPTOR?")
        ... ]
        [2, 1, 1, 0, 0]
    """

    def __init__(
        self,
        vector_store: Any | None = None,
        *,
        tree: RaptorTree | None = None,
        embed_model: BaseEmbedding | str | None = None,
        llm: LLM | str | None = None,
        mode: str | RaptorRetrieveMode = RaptorRetrieveMode.COLLAPSED,
        similarity_top_k: int = 5,
        token_budget: int | None = DEFAULT_TOKEN_BUDGET,
        summary_prompt: BasePromptTemplate | str | None = None,
        must_exist: bool = True,
        filters: Filters = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.mode = RaptorRetrieveMode.parse(mode)
        if not isinstance(similarity_top_k, int) or similarity_top_k <= 0:
            raise ConfigurationError(
                f"similarity_top_k must be an integer > 0, got {similarity_top_k!r}"
            )
        if token_budget is not None and token_budget <= 0:
            raise ConfigurationError(f"token_budget must be > 0 or None, got {token_budget!r}")
        if tree is None:
            if vector_store is None:
                raise ConfigurationError(
                    "Give vector_store= (a MilvusVectorStore holding the tree) or "
                    "tree=RaptorTree(...); open one with "
                    "llama_index_rag_pack.milvus.connection.open_vector_store(uri, "
                    "collection_name)."
                )
            tree = RaptorTree(
                vector_store, embed_model=embed_model, llm=llm, summary_prompt=summary_prompt
            )
        elif summary_prompt is not None:
            tree.update_prompts({"summary_prompt": summary_prompt})
        self.tree = tree
        self.similarity_top_k = similarity_top_k
        self.token_budget = token_budget
        self._top_level: int | None = None
        self._passing: dict[str, int] | None = None  # the nodes the filter lets through
        self.filter = filter_expression(filters, schema_fields=self.tree.store.schema_fields())
        if must_exist and not self.tree.store.levels():
            raise CollectionNotFoundError(
                f"No RAPTOR tree in collection {self.tree.store.collection_name!r}. Build one with "
                "RaptorRetriever.from_documents(documents, llm=..., vector_store=...) or "
                "`rag-pack raptor build PATH`."
            )
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_documents(
        cls,
        documents: Sequence[BaseNode],
        *,
        llm: LLM | str | None = None,
        embed_model: BaseEmbedding | str | None = None,
        vector_store: Any | None = None,
        uri: str | None = None,
        collection_name: str | None = None,
        tree_options: dict[str, Any] | None = None,
        **retriever_options: Any,
    ) -> RaptorRetriever:
        """Build a tree from ``documents`` (resuming a partial one in the same store) and return
        its retriever.

        Args:
            documents: ``Document`` objects (chunked here) or ready chunks (other nodes).
            llm: Writes the summaries.
            embed_model: Embedding model.
            vector_store: Where the tree goes; default: a new/existing ``raptor`` collection at
                ``uri``.
            uri: Milvus address when ``vector_store`` is not given.
            collection_name: Collection name when ``vector_store`` is not given.
            tree_options: Extra :class:`RaptorTree` options (max_levels, max_concurrency, ...).
            **retriever_options: :class:`RaptorRetriever` options (mode, similarity_top_k, ...).
        """
        tree = cls._make_tree(llm, embed_model, vector_store, uri, collection_name, tree_options)
        return cls._over_built(tree, tree.build(documents), retriever_options)

    @classmethod
    async def afrom_documents(
        cls,
        documents: Sequence[BaseNode],
        *,
        llm: LLM | str | None = None,
        embed_model: BaseEmbedding | str | None = None,
        vector_store: Any | None = None,
        uri: str | None = None,
        collection_name: str | None = None,
        tree_options: dict[str, Any] | None = None,
        **retriever_options: Any,
    ) -> RaptorRetriever:
        """Async :meth:`from_documents` (summaries awaited on the running loop)."""
        tree = cls._make_tree(llm, embed_model, vector_store, uri, collection_name, tree_options)
        return cls._over_built(tree, await tree.abuild(documents), retriever_options)

    @classmethod
    def _over_built(
        cls, tree: RaptorTree, stats: BuildStats, retriever_options: dict[str, Any]
    ) -> RaptorRetriever:
        """The retriever over ``tree``, just built (``stats`` logged)."""
        logger.info("RAPTOR tree built: %s", stats)
        return cls(tree=tree, **retriever_options)

    @staticmethod
    def _make_tree(
        llm: Any,
        embed_model: Any,
        vector_store: Any,
        uri: str | None,
        collection_name: str | None,
        tree_options: dict[str, Any] | None,
    ) -> RaptorTree:
        from llama_index_rag_pack.models.settings import resolve_embed_model

        embed = resolve_embed_model(embed_model)
        if vector_store is None:
            from llama_index_rag_pack.milvus.connection import open_vector_store

            dim = len(embed.get_text_embedding("dimension probe"))
            vector_store = open_vector_store(uri, collection_name or "raptor", dim=dim)
        return RaptorTree(vector_store, embed_model=embed, llm=llm, **(tree_options or {}))

    # ------------------------------------------------------------------ prompts
    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        pass

    def _get_prompt_modules(self) -> PromptMixinType:
        return {"tree": self.tree}

    # ------------------------------------------------------------------ tree info and updates
    def levels(self) -> dict[int, int]:
        """Nodes per level, e.g. ``{0: 312, 1: 41, 2: 6, 3: 1}``."""
        return self.tree.levels()

    @property
    def top_level(self) -> int:
        if self._top_level is None:
            self._top_level = self.tree.store.top_level() or 0
        return self._top_level

    def insert(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Add documents incrementally (see :meth:`RaptorTree.insert`)."""
        self._top_level = self._passing = None
        return self.tree.insert(documents)

    async def ainsert(self, documents: Sequence[BaseNode]) -> BuildStats:
        """Async :meth:`insert`."""
        self._top_level = self._passing = None
        return await self.tree.ainsert(documents)

    def delete(self, ref_doc_ids: str | Sequence[str]) -> BuildStats:
        """Remove documents and refresh the summaries above them."""
        self._top_level = self._passing = None
        return self.tree.delete(ref_doc_ids)

    async def adelete(self, ref_doc_ids: str | Sequence[str]) -> BuildStats:
        """Async :meth:`delete`."""
        self._top_level = self._passing = None
        return await self.tree.adelete(ref_doc_ids)

    # ------------------------------------------------------------------ retrieval
    def _cut(self, hits: list[NodeWithScore]) -> list[NodeWithScore]:
        hits = [h for h in hits if not is_carried(h.node)]
        hits = sorted(hits, key=lambda h: -(h.score if h.score is not None else float("-inf")))
        if self.token_budget is None:
            return hits
        kept, total = [], 0
        for hit in hits:
            tokens = int(hit.node.metadata.get(TOKENS_KEY) or 0)
            if kept and total + tokens > self.token_budget:
                break
            kept.append(hit)
            total += tokens
        return kept

    def _passing_ids(self) -> dict[str, int] | None:
        """What the filter lets through (``None``: no filter), read once until this retriever
        changes the tree (a pack drops its retrievers when it writes)."""
        if not self.filter:
            return None
        if self._passing is None:
            self._passing = self.tree.store.passing_ids(self.filter)
        return self._passing

    @staticmethod
    def _children(hits: list[NodeWithScore], only: Mapping[str, int] | None = None) -> list[str]:
        ids: dict[str, None] = {}
        for hit in hits:
            for child in hit.node.metadata.get(CHILD_KEY) or []:
                if only is None or child in only:
                    ids.setdefault(child, None)
        return list(ids)

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        embedding = query_bundle.embedding or self.tree.embed_model.get_query_embedding(query)
        store, k = self.tree.store, self.similarity_top_k
        only = self._passing_ids()
        if self.mode is RaptorRetrieveMode.COLLAPSED:
            scope, fetch = scope_all_levels(only), k
            while (kept := _originals(store.search(embedding, fetch, scope), k, fetch)) is None:
                fetch *= 2
            return self._cut(kept)
        if self.mode is RaptorRetrieveMode.LEAVES:
            return self._cut(store.search(embedding, k, scope_level(0, only)))
        level = self.top_level if only is None else max(only.values(), default=0)
        picked = store.search(embedding, k, scope_level(level, only))
        selected = list(picked)
        while level > 0 and picked:
            level -= 1
            picked = store.search(embedding, k, scope_within(level, self._children(picked, only)))
            self._log_level(level, picked)
            selected.extend(picked)
        return self._cut(selected)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        embedding = query_bundle.embedding or await self.tree.embed_model.aget_query_embedding(
            query
        )
        store, k = self.tree.store, self.similarity_top_k
        only = await asyncio.to_thread(self._passing_ids) if self.filter else None
        if self.mode is RaptorRetrieveMode.COLLAPSED:
            scope, fetch = scope_all_levels(only), k
            while (
                kept := _originals(await store.asearch(embedding, fetch, scope), k, fetch)
            ) is None:
                fetch *= 2
            return self._cut(kept)
        if self.mode is RaptorRetrieveMode.LEAVES:
            return self._cut(await store.asearch(embedding, k, scope_level(0, only)))
        # the first traversal scans the levels in Milvus: do it off the event loop
        level = self._top_level if only is None else max(only.values(), default=0)
        if level is None:
            level = await asyncio.to_thread(lambda: self.top_level)
        picked = await store.asearch(embedding, k, scope_level(level, only))
        selected = list(picked)
        while level > 0 and picked:
            level -= 1
            picked = await store.asearch(
                embedding, k, scope_within(level, self._children(picked, only))
            )
            self._log_level(level, picked)
            selected.extend(picked)
        return self._cut(selected)

    def _log_level(self, level: int, picked: list[NodeWithScore]) -> None:
        if self._verbose:
            logger.info(
                "RAPTOR traversal: level %d picked %s", level, [h.node.node_id for h in picked]
            )


def _originals(hits: list[NodeWithScore], k: int, fetched: int) -> list[NodeWithScore] | None:
    """The best ``k`` hits that are not carried copies, or ``None`` when the search returned all
    ``fetched`` it was asked for but fewer than ``k`` originals (ask for more)."""
    kept = [h for h in hits if not is_carried(h.node)]
    if len(kept) < k and len(hits) >= fetched:
        return None
    kept.sort(key=lambda h: -(h.score if h.score is not None else float("-inf")))
    return kept[:k]


__all__ = ["DEFAULT_TOKEN_BUDGET", "RaptorRetrieveMode", "RaptorRetriever"]
