"""llama-index-rag-pack: advanced RAG for LlamaIndex over Milvus."""

from llama_index_rag_pack.citations import (
    CitationPostprocessor,
    CitedQueryEngine,
    ReferenceManager,
    ReferenceStyle,
    render_references,
)
from llama_index_rag_pack.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
    LLMNotConfiguredError,
    MilvusUnavailableError,
    RagPackError,
)
from llama_index_rag_pack.evaluation.harness import EvalHarness, EvalReport
from llama_index_rag_pack.evaluation.labelled import LabelledExample, LabelledSet, load_labelled_set
from llama_index_rag_pack.fusion import (
    FusionRetriever,
    MilvusHybridRetriever,
    distribution_based_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    union_fusion,
)
from llama_index_rag_pack.pack import RagPack, RetrievalMode
from llama_index_rag_pack.raptor import (
    RaptorBuildError,
    RaptorRetrieveMode,
    RaptorRetriever,
    RaptorTree,
    cluster_embeddings,
)
from llama_index_rag_pack.routing import (
    FusionRouterRetriever,
    LogicalSelector,
    PromptRouter,
    Route,
    RoutedRagPack,
    RouteSelection,
    RouteSource,
    RoutingError,
    SemanticSelector,
)
from llama_index_rag_pack.transforms import HyDERetriever, RewriteRetriever

__version__ = "0.1.0"

__all__ = [
    "RaptorBuildError",
    "RaptorRetrieveMode",
    "RaptorRetriever",
    "RaptorTree",
    "cluster_embeddings",
    "CitationPostprocessor",
    "CitedQueryEngine",
    "ReferenceManager",
    "ReferenceStyle",
    "render_references",
    "CollectionNotFoundError",
    "ConfigurationError",
    "EmptyCorpusError",
    "EvalHarness",
    "EvalReport",
    "FusionRetriever",
    "FusionRouterRetriever",
    "HyDERetriever",
    "LabelledExample",
    "LabelledSet",
    "LLMNotConfiguredError",
    "LogicalSelector",
    "MilvusHybridRetriever",
    "MilvusUnavailableError",
    "PromptRouter",
    "RagPack",
    "RagPackError",
    "RetrievalMode",
    "RewriteRetriever",
    "Route",
    "RouteSelection",
    "RoutedRagPack",
    "RoutingError",
    "RouteSource",
    "SemanticSelector",
    "distribution_based_fusion",
    "load_labelled_set",
    "reciprocal_rank_fusion",
    "relative_score_fusion",
    "union_fusion",
    "__version__",
]
