"""How ``RagPack`` and the CLI find a RAPTOR tree: a collection next to the pack's,
``<name>_raptor``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
)

logger = logging.getLogger(__name__)

RAPTOR_SUFFIX = "_raptor"


def raptor_collection_name(collection_name: str) -> str:
    """The collection holding the RAPTOR tree of ``collection_name``."""
    return (
        collection_name
        if collection_name.endswith(RAPTOR_SUFFIX)
        else f"{collection_name}{RAPTOR_SUFFIX}"
    )


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
) -> Any:
    """Open the ``MilvusVectorStore`` of the tree next to ``collection_name``.

    Raises:
        CollectionNotFoundError: ``must_exist`` and no tree was built (the message says how to
            build it).
    """
    from llama_index_rag_pack.storage.milvus import open_vector_store

    try:
        return open_vector_store(
            uri,
            raptor_collection_name(collection_name),
            dim=dim,
            token=token,
            must_exist=must_exist,
        )
    except CollectionNotFoundError:
        raise CollectionNotFoundError(build_hint(collection_name)) from None


def _require_uri(pack: Any) -> None:
    if not getattr(pack, "uri", None):
        raise ConfigurationError(
            "RAPTOR modes need the pack's Milvus uri to find the tree collection: create RagPack "
            "with uri=... (not only vector_store=...), or use RaptorRetriever(vector_store=...) "
            "directly."
        )


def open_pack_tree(pack: Any, *, must_exist: bool = True, **tree_options: Any) -> Any:
    """The :class:`RaptorTree` stored next to ``pack``'s collection, with the pack's models.

    Raises:
        CollectionNotFoundError: ``must_exist`` and no tree was built yet (the message says how).
        ConfigurationError: the pack was given a ready vector store without ``uri``.
    """
    from llama_index_rag_pack.storage.raptor_tree import RaptorTree

    _require_uri(pack)
    dim = len(pack.embed_model.get_text_embedding("dimension probe"))
    store = open_raptor_store(
        pack.uri, pack.vector_store.collection_name, dim=dim, must_exist=must_exist
    )
    llm = pack._llm_spec if pack._llm is None else pack._llm
    return RaptorTree(store, embed_model=pack.embed_model, llm=llm, **tree_options)


def pack_tree_inputs(pack: Any, documents: Sequence[Any] | None) -> list[Any]:
    """What a pack's tree is built from: ``documents``, or else every chunk already indexed
    (their embeddings are reused).

    Raises:
        EmptyCorpusError: the collection holds no chunk and no documents were given.
    """
    if documents is not None:
        return list(documents)
    leaves = leaves_from_collection(pack.vector_store)
    if not leaves:
        raise EmptyCorpusError(
            f"Collection {pack.vector_store.collection_name!r} holds no chunks to build a RAPTOR "
            "tree from: index documents first (pack.insert(...) or `rag-pack index PATH`)."
        )
    return leaves


def drop_pack_tree(pack: Any) -> None:
    """Delete the tree collection next to ``pack``'s collection, if there is one."""
    _require_uri(pack)
    client = pack.vector_store.client
    name = raptor_collection_name(pack.vector_store.collection_name)
    if client.has_collection(name):
        client.drop_collection(name)


def pack_raptor_retriever(
    pack: Any, mode: str, similarity_top_k: int | None = None, filters: Any = None
) -> Any:
    """The :class:`RaptorRetriever` over the tree next to ``pack``'s collection.

    Raises:
        CollectionNotFoundError: no tree was built yet (the message says how).
        ConfigurationError: the pack was given a ready vector store without ``uri``.
    """
    from llama_index_rag_pack.storage.raptor_retriever import RaptorRetriever

    tree = open_pack_tree(pack)
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


def leaves_from_collection(vector_store: Any) -> list[Any]:
    """Every chunk stored in a pack's collection, as nodes with their embeddings (for reuse as
    leaves)."""
    from llama_index_rag_pack.storage.raptor_store import RaptorStore

    return RaptorStore(vector_store).all_nodes(with_embeddings=True)


__all__ = [
    "RAPTOR_SUFFIX",
    "build_hint",
    "drop_pack_tree",
    "leaves_from_collection",
    "open_pack_tree",
    "open_raptor_store",
    "pack_tree_inputs",
    "pack_raptor_retriever",
    "raptor_collection_name",
]
