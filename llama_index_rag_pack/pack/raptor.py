"""How ``RagPack`` and the CLI find and build a RAPTOR tree: a collection next to the pack's,
``<name>_raptor``; on a collection with tenants, one tree per tenant
(``<name>_raptor_t<hash of the tenant>``), so no summary ever mixes two tenants' text.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
)
from llama_index_rag_pack.pack.mode_registry import get_mode, mode_names
from llama_index_rag_pack.pack.pack_view import PackView

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.schema import Document

    from llama_index_rag_pack.raptor.raptor_levels import BuildStats
    from llama_index_rag_pack.raptor.spend_estimate import RaptorEstimate

logger = logging.getLogger(__name__)

RAPTOR_SUFFIX = "_raptor"


def raptor_collection_name(collection_name: str, tenant: str | None = None) -> str:
    """The collection holding the RAPTOR tree of ``collection_name`` (of one ``tenant``)."""
    if tenant is not None:
        digest = hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:16]
        return f"{collection_name}{RAPTOR_SUFFIX}_t{digest}"
    return (
        collection_name
        if collection_name.endswith(RAPTOR_SUFFIX)
        else f"{collection_name}{RAPTOR_SUFFIX}"
    )


def tree_tenant(pack: PackView, tenant: str | None) -> str | None:
    """The tenant whose tree a RAPTOR step of ``pack`` uses (``None`` on a pack without
    tenants).

    Raises:
        ConfigurationError: a pack with tenants and no single tenant named, or a tenant on a
            pack without tenants.
    """
    from llama_index_rag_pack.milvus.tenants import ANY_TENANT, tenant_expression

    field = getattr(pack, "tenant_field", None)
    tenant_expression(field, tenant)  # the same checks as a search
    if field is not None and tenant == ANY_TENANT:
        raise ConfigurationError(
            "RAPTOR trees are built per tenant (no summary mixes two tenants): "
            "pass one tenant='<name>', not '*'."
        )
    return tenant if field is not None else None


def build_hint(collection_name: str) -> str:
    return (
        f"No RAPTOR tree for collection {collection_name!r}: build one with "
        f"`rag-pack --collection {collection_name} raptor build PATH` (or `rag-pack raptor build` "
        "to reuse the chunks already indexed), pack.build_raptor_tree() from Python, or "
        "RaptorRetriever.from_documents(...)."
    )


def open_raptor_store(
    uri: str | None,
    collection_name: str,
    *,
    dim: int,
    token: str | None = None,
    must_exist: bool = True,
    tenant: str | None = None,
) -> Any:
    """Open the ``MilvusVectorStore`` of the tree next to ``collection_name`` (of ``tenant``).

    Raises:
        CollectionNotFoundError: ``must_exist`` and no tree was built (the message says how to
            build it).
    """
    from llama_index_rag_pack.milvus.connection import open_vector_store

    try:
        return open_vector_store(
            uri,
            raptor_collection_name(collection_name, tenant),
            dim=dim,
            token=token,
            must_exist=must_exist,
        )
    except CollectionNotFoundError:
        raise CollectionNotFoundError(build_hint(collection_name)) from None


class _NoCollection:
    """The client of a tree not built yet: it has no collection, and is asked nothing else."""

    def has_collection(self, name: str) -> bool:
        return False


class TreeNotBuilt:
    """Where a tree not built yet will be, for an estimate: its name and no collection, so
    nothing is created (opening the real store would create the collection)."""

    client = _NoCollection()

    def __init__(self, collection_name: str) -> None:
        self.collection_name = collection_name

    def add(self, *args: Any, **kwargs: Any) -> Any:
        raise ConfigurationError(f"No RAPTOR tree {self.collection_name!r} yet: estimate only.")

    query = add


def store_to_estimate(
    uri: str | None,
    collection_name: str,
    *,
    dim: int,
    token: str | None = None,
    tenant: str | None = None,
) -> tuple[Any, bool]:
    """The tree's store for an estimate, and whether the tree exists; a tree not built yet is
    not created (:class:`TreeNotBuilt`)."""
    try:
        store = open_raptor_store(
            uri, collection_name, dim=dim, token=token, must_exist=True, tenant=tenant
        )
    except CollectionNotFoundError:
        return TreeNotBuilt(raptor_collection_name(collection_name, tenant)), False
    return store, True


def _require_uri(pack: PackView) -> None:
    if not getattr(pack, "uri", None):
        raise ConfigurationError(
            "RAPTOR modes need the pack's Milvus uri to find the tree collection: create RagPack "
            "with uri=... (not only vector_store=...), or use RaptorRetriever(vector_store=...) "
            "directly."
        )


def open_pack_tree(
    pack: PackView, *, must_exist: bool = True, tenant: str | None = None, **tree_options: Any
) -> Any:
    """The :class:`RaptorTree` stored next to ``pack``'s collection, with the pack's models.

    Raises:
        CollectionNotFoundError: ``must_exist`` and no tree was built yet (the message says how).
        ConfigurationError: the pack was given a ready vector store without ``uri``.
    """
    from llama_index_rag_pack.raptor.raptor_tree import RaptorTree

    _require_uri(pack)
    dim = len(pack.embed_model.get_text_embedding("dimension probe"))
    store = open_raptor_store(
        pack.uri,
        pack.vector_store.collection_name,
        dim=dim,
        must_exist=must_exist,
        tenant=tree_tenant(pack, tenant),
    )
    llm = pack.llm_or_spec
    return RaptorTree(store, embed_model=pack.embed_model, llm=llm, **tree_options)


def pack_tree_inputs(
    pack: PackView, documents: Sequence[Any] | None, tenant: str | None = None
) -> list[Any]:
    """What a pack's tree (of ``tenant``) is built from: ``documents``, or else every chunk
    already indexed (of that tenant; their embeddings are reused).

    Raises:
        EmptyCorpusError: the collection holds no chunk and no documents were given.
        ConfigurationError: a document of another tenant.
    """
    from llama_index_rag_pack.milvus.tenants import check_tenants, tenant_expression

    tenant = tree_tenant(pack, tenant)
    field = getattr(pack, "tenant_field", None)
    if documents is not None:
        if field is not None:
            check_tenants(documents, field)
            if any(d.metadata[field] != tenant for d in documents):
                raise ConfigurationError(
                    f"The tree of tenant {tenant!r} is built from that tenant's documents only."
                )
        return list(documents)
    leaves = leaves_from_collection(pack.vector_store, tenant_expression(field, tenant))
    if not leaves:
        raise EmptyCorpusError(
            f"Collection {pack.vector_store.collection_name!r} holds no chunks to build a RAPTOR "
            "tree from: index documents first (pack.insert(...) or `rag-pack index PATH`)."
        )
    return leaves


def drop_pack_tree(pack: PackView, tenant: str | None = None) -> None:
    """Delete the tree collection next to ``pack``'s collection (of ``tenant``), if any."""
    _require_uri(pack)
    client = pack.vector_store.client
    name = raptor_collection_name(pack.vector_store.collection_name, tree_tenant(pack, tenant))
    if client.has_collection(name):
        client.drop_collection(name)


def pack_raptor_retriever(
    pack: PackView,
    mode: str,
    similarity_top_k: int | None = None,
    filters: Any = None,
    tenant: str | None = None,
) -> Any:
    """The :class:`RaptorRetriever` over the tree next to ``pack``'s collection.

    Raises:
        CollectionNotFoundError: no tree was built yet (the message says how).
        ConfigurationError: the pack was given a ready vector store without ``uri``.
    """
    from llama_index_rag_pack.raptor.raptor_retriever import RaptorRetriever

    tree = open_pack_tree(pack, tenant=tenant)
    try:
        return RaptorRetriever(
            tree=tree,
            mode=mode,
            similarity_top_k=similarity_top_k or pack.similarity_top_k,
            filters=filters,
            callback_manager=pack.callback_manager,
        )
    except CollectionNotFoundError:
        raise CollectionNotFoundError(build_hint(pack.vector_store.collection_name)) from None


def leaves_from_collection(vector_store: Any, expr: str = "") -> list[Any]:
    """Every chunk stored in a pack's collection (matching ``expr``), as nodes with their
    embeddings (for reuse as leaves)."""
    from llama_index_rag_pack.raptor.raptor_store import RaptorStore

    store = RaptorStore(vector_store)
    if expr:
        return store.matching(expr, with_embeddings=True)
    return store.all_nodes(with_embeddings=True)


class RaptorBuildMixin:
    """``RagPack``'s RAPTOR build steps (the tree beside the pack's collection)."""

    _retrievers: Any  # engines.BoundedCache
    _query_engines: Any

    def build_raptor_tree(
        self,
        documents: Sequence[Document] | None = None,
        *,
        overwrite: bool = False,
        tenant: str | None = None,
        **tree_options: Any,
    ) -> BuildStats:
        """Build the RAPTOR tree that the ``raptor`` and ``raptor_traversal`` modes read.

        The tree lives in ``<collection>_raptor`` next to the pack's collection. Without
        ``documents`` its leaves are the chunks already indexed (their embeddings are reused).
        A partial build resumes; ``overwrite=True`` starts over.

        Args:
            documents: Documents to build from instead of the indexed chunks.
            overwrite: Drop an existing tree first.
            tenant: On a collection with tenants, the tenant whose tree is built (from that
                tenant's chunks only); required there.
            tree_options: :class:`~llama_index_rag_pack.RaptorTree` options (``max_levels``,
                ``max_concurrency``, ``summary_prompt``, ``max_llm_calls``, ``max_tokens``,
                ...).

        Raises:
            EmptyCorpusError: nothing indexed and no documents given.
        """
        inputs = pack_tree_inputs(self, documents, tenant)
        if overwrite:
            drop_pack_tree(self, tenant)
        tree = open_pack_tree(self, must_exist=False, tenant=tenant, **tree_options)
        stats = tree.build(inputs)
        self._forget_tree_retrievers()
        return stats

    async def abuild_raptor_tree(
        self,
        documents: Sequence[Document] | None = None,
        *,
        overwrite: bool = False,
        tenant: str | None = None,
        **tree_options: Any,
    ) -> BuildStats:
        """Async :meth:`build_raptor_tree` (summaries are written concurrently)."""
        inputs = await asyncio.to_thread(pack_tree_inputs, self, documents, tenant)
        if overwrite:
            await asyncio.to_thread(drop_pack_tree, self, tenant)
        tree = await asyncio.to_thread(
            open_pack_tree, self, must_exist=False, tenant=tenant, **tree_options
        )
        stats = await tree.abuild(inputs)
        self._forget_tree_retrievers()
        return stats

    def estimate_raptor_tree(
        self,
        documents: Sequence[Document] | None = None,
        *,
        overwrite: bool = False,
        tenant: str | None = None,
        **tree_options: Any,
    ) -> RaptorEstimate:
        """What :meth:`build_raptor_tree` with the same arguments would spend: summary calls
        and tokens per level, without any LLM call and without writing anything (see
        :meth:`~llama_index_rag_pack.RaptorTree.estimate`). ``overwrite=True``: as if the tree
        were empty; otherwise only what a resumed build still has to write counts."""
        from llama_index_rag_pack.raptor.raptor_tree import RaptorTree

        inputs = pack_tree_inputs(self, documents, tenant)
        _require_uri(self)
        store, exists = store_to_estimate(
            self.uri,
            self.vector_store.collection_name,
            dim=len(self.embed_model.get_text_embedding("dimension probe")),
            tenant=tree_tenant(self, tenant),
        )
        tree = RaptorTree(store, embed_model=self.embed_model, llm=self.llm_or_spec, **tree_options)
        return tree.estimate(inputs, reuse=exists and not overwrite)

    def _forget_tree_retrievers(self) -> None:
        self.forget_engines(*(name for name in mode_names() if get_mode(name).needs_tree))


__all__ = [
    "RaptorBuildMixin",
    "RAPTOR_SUFFIX",
    "build_hint",
    "drop_pack_tree",
    "leaves_from_collection",
    "open_pack_tree",
    "open_raptor_store",
    "pack_tree_inputs",
    "pack_raptor_retriever",
    "raptor_collection_name",
    "store_to_estimate",
    "TreeNotBuilt",
]
