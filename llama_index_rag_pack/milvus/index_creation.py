"""Creating a new collection's indexes without pymilvus' fixed half-second waits.

``MilvusClient.create_index`` (and ``create_collection`` with ``index_params``, which
``MilvusVectorStore`` uses) sleeps 0.5 s before it first asks whether each index is built: a
chunk collection (dense and BM25 indexes) and its sentence index cost 1.5 s of sleep, whatever
their size, and a Milvus Lite file builds an empty collection's index inside the call. Here the
indexes are created without that wait and their state is polled from 10 ms on, backing off to
0.5 s, until Milvus reports them built (the same end state, on Lite and on a server).
"""

from __future__ import annotations

from typing import Any

from tenacity import (
    RetryError,
    Retrying,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
)

from llama_index_rag_pack.core.errors import MilvusUnavailableError

__all__ = ["INDEX_TIMEOUT_S", "create_indexes", "create_store_indexes"]

#: How long a new index may take to be reported built.
INDEX_TIMEOUT_S = 120.0


def create_indexes(
    client: Any, collection_name: str, index_params: Any, *, timeout: float = INDEX_TIMEOUT_S
) -> None:
    """Create ``index_params`` on ``collection_name``, wait until each is built, then load the
    collection.

    Raises:
        MilvusUnavailableError: Milvus reports an index failed, or it is not built in
            ``timeout`` seconds.
    """
    client.create_index(collection_name, index_params, sync=False)
    for param in index_params:
        name = param.index_name or param.field_name
        waiting = Retrying(
            retry=retry_if_result(lambda state: state not in ("Finished", "Failed")),
            wait=wait_exponential(multiplier=0.01, max=0.5),
            stop=stop_after_delay(timeout),
        )
        try:
            state = waiting(_index_state, client, collection_name, name)
        except RetryError:
            raise MilvusUnavailableError(
                f"Index {name!r} of collection {collection_name!r} was not built in "
                f"{timeout:.0f} s."
            ) from None
        if state == "Failed":
            raise MilvusUnavailableError(
                f"Milvus could not build index {name!r} of collection {collection_name!r}."
            )
    client.load_collection(collection_name)


def create_store_indexes(store: Any) -> None:
    """The indexes ``MilvusVectorStore`` gives a new collection (its own index settings),
    created by :func:`create_indexes`."""
    params = store.client.prepare_index_params()
    if store.enable_dense:
        params = store._add_dense_index_params(params)
    if store.enable_sparse:
        params = store._add_sparse_index_params(params)
    if params:
        create_indexes(store.client, store.collection_name, params)


def _index_state(client: Any, collection_name: str, index_name: str) -> str:
    info = client.describe_index(collection_name, index_name=index_name) or {}
    return str(info.get("state") or "")
