"""Fusion retrieval: rank fusion functions, query generation, RAG-Fusion and Milvus hybrid search."""

from llama_index_rag_pack.fusion.rank_fusion import (
    DEFAULT_RRF_K,
    FusionMode,
    distribution_based_fusion,
    fuse,
    reciprocal_rank_fusion,
    relative_score_fusion,
    union_fusion,
)

__all__ = [
    "DEFAULT_RRF_K",
    "FusionMode",
    "distribution_based_fusion",
    "fuse",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "union_fusion",
]
