"""Fusion retrieval: rank fusion functions, query generation, RAG-Fusion and Milvus hybrid
search.
"""

from llama_index_rag_pack.fusion.milvus_hybrid import (
    MilvusHybridRetriever,
    MilvusRanker,
    MilvusSearchType,
)
from llama_index_rag_pack.fusion.queries import (
    DEFAULT_QUERY_GEN_PROMPT,
    agenerate_queries,
    generate_queries,
    parse_queries,
)
from llama_index_rag_pack.fusion.rank_fusion import (
    DEFAULT_RRF_K,
    FusionMode,
    distribution_based_fusion,
    fuse,
    reciprocal_rank_fusion,
    relative_score_fusion,
    union_fusion,
)
from llama_index_rag_pack.fusion.retriever import FusionRetriever

__all__ = [
    "DEFAULT_QUERY_GEN_PROMPT",
    "DEFAULT_RRF_K",
    "FusionRetriever",
    "MilvusHybridRetriever",
    "MilvusRanker",
    "MilvusSearchType",
    "agenerate_queries",
    "generate_queries",
    "parse_queries",
    "FusionMode",
    "distribution_based_fusion",
    "fuse",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "union_fusion",
]
