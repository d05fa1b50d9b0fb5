"""llama-index-rag-pack: advanced RAG for LlamaIndex over Milvus."""

from llama_index_rag_pack.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
    LLMNotConfiguredError,
    MilvusUnavailableError,
    RagPackError,
)
from llama_index_rag_pack.pack import RagPack, RetrievalMode

__version__ = "0.1.0"

__all__ = [
    "CollectionNotFoundError",
    "ConfigurationError",
    "EmptyCorpusError",
    "LLMNotConfiguredError",
    "MilvusUnavailableError",
    "RagPack",
    "RagPackError",
    "RetrievalMode",
    "__version__",
]
