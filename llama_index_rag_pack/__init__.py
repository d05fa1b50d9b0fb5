"""llama-index-rag-pack: advanced RAG for LlamaIndex over Milvus."""

from llama_index_rag_pack.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
    LLMNotConfiguredError,
    MilvusUnavailableError,
    RagPackError,
)
from llama_index_rag_pack.fusion import (
    FusionRetriever,
    MilvusHybridRetriever,
    distribution_based_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    union_fusion,
)
from llama_index_rag_pack.pack import RagPack, RetrievalMode
from llama_index_rag_pack.transforms import HyDERetriever, RewriteRetriever

__version__ = "0.1.0"

__all__ = [
    "CollectionNotFoundError",
    "ConfigurationError",
    "EmptyCorpusError",
    "FusionRetriever",
    "HyDERetriever",
    "LLMNotConfiguredError",
    "MilvusHybridRetriever",
    "MilvusUnavailableError",
    "RagPack",
    "RagPackError",
    "RetrievalMode",
    "RewriteRetriever",
    "distribution_based_fusion",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "union_fusion",
    "__version__",
]
