"""llama-index-rag-pack: advanced RAG for LlamaIndex over Milvus."""

from llama_index_rag_pack.components.citation_attribution import SentenceAttributor
from llama_index_rag_pack.components.citation_postprocessor import CitationPostprocessor
from llama_index_rag_pack.components.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.components.fusion import FusionRetriever
from llama_index_rag_pack.components.hyde import HyDERetriever
from llama_index_rag_pack.components.logical_selector import LogicalSelector
from llama_index_rag_pack.components.prompt_router import PromptRouter
from llama_index_rag_pack.components.raptor_levels import RaptorBuildError
from llama_index_rag_pack.components.rewrite import RewriteRetriever
from llama_index_rag_pack.components.router import FusionRouterRetriever
from llama_index_rag_pack.components.routes import Route, RouteSelection, RoutingError
from llama_index_rag_pack.components.semantic_selector import SemanticSelector
from llama_index_rag_pack.core.clustering import cluster_embeddings
from llama_index_rag_pack.core.errors import (
    CollectionNotFoundError,
    ConfigurationError,
    EmptyCorpusError,
    LLMNotConfiguredError,
    MilvusUnavailableError,
    RagPackError,
)
from llama_index_rag_pack.core.rank_fusion import (
    distribution_based_fusion,
    reciprocal_rank_fusion,
    relative_score_fusion,
    union_fusion,
)
from llama_index_rag_pack.core.reference_styles import ReferenceStyle
from llama_index_rag_pack.core.references import ReferenceManager, render_references
from llama_index_rag_pack.evaluation.harness import EvalHarness
from llama_index_rag_pack.evaluation.labelled import LabelledExample, LabelledSet, load_labelled_set
from llama_index_rag_pack.evaluation.report import EvalReport
from llama_index_rag_pack.pack.fusion_config import FusionConfig
from llama_index_rag_pack.pack.modes import ModeSpec, RetrievalMode, register_mode
from llama_index_rag_pack.pack.rag_pack import RagPack
from llama_index_rag_pack.pack.routed import RoutedRagPack
from llama_index_rag_pack.pack.sources import RouteSource
from llama_index_rag_pack.storage.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.storage.raptor_retriever import RaptorRetrieveMode, RaptorRetriever
from llama_index_rag_pack.storage.raptor_tree import RaptorTree
from llama_index_rag_pack.storage.score_fusion import MilvusScoreFusionRetriever
from llama_index_rag_pack.storage.sentence_index import MilvusSentenceIndex
from llama_index_rag_pack.storage.sentence_retriever import MilvusSentenceRetriever

__version__ = "0.1.0"

__all__ = [
    "RaptorBuildError",
    "RaptorRetrieveMode",
    "RaptorRetriever",
    "RaptorTree",
    "cluster_embeddings",
    "CitationPostprocessor",
    "CitedQueryEngine",
    "SentenceAttributor",
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
    "MilvusScoreFusionRetriever",
    "MilvusSentenceIndex",
    "MilvusSentenceRetriever",
    "FusionConfig",
    "MilvusUnavailableError",
    "PromptRouter",
    "RagPack",
    "RagPackError",
    "RetrievalMode",
    "ModeSpec",
    "register_mode",
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
