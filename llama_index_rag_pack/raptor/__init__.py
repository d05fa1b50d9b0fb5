"""RAPTOR: recursive clustering and summarisation into a tree stored in Milvus."""

from llama_index_rag_pack.raptor.clustering import choose_n_clusters, cluster_embeddings
from llama_index_rag_pack.raptor.retriever import RaptorRetrieveMode, RaptorRetriever
from llama_index_rag_pack.raptor.tree import (
    DEFAULT_SUMMARY_PROMPT,
    BuildStats,
    RaptorBuildError,
    RaptorTree,
)

__all__ = [
    "DEFAULT_SUMMARY_PROMPT",
    "BuildStats",
    "RaptorBuildError",
    "RaptorRetrieveMode",
    "RaptorRetriever",
    "RaptorTree",
    "choose_n_clusters",
    "cluster_embeddings",
]
