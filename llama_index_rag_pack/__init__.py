"""llama-index-rag-pack: advanced RAG for LlamaIndex over Milvus.

The public names are imported on first use (PEP 562), so ``import llama_index_rag_pack`` and the
``rag-pack`` command line start without loading LlamaIndex, torch or pymilvus.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_rag_pack.components.citation_attribution import SentenceAttributor
    from llama_index_rag_pack.components.citation_postprocessor import CitationPostprocessor
    from llama_index_rag_pack.components.cited_chat_engine import (
        CitedChatEngine,
        CitedChatResponse,
        CitedStreamingChatResponse,
    )
    from llama_index_rag_pack.components.cited_query_engine import CitedQueryEngine
    from llama_index_rag_pack.components.fusion import FusionRetriever
    from llama_index_rag_pack.components.hyde import HyDERetriever
    from llama_index_rag_pack.components.judge_query_engine import JudgeQueryEngine, JudgeResponse
    from llama_index_rag_pack.components.local_embedding import LocalEmbedding
    from llama_index_rag_pack.components.logical_selector import LogicalSelector
    from llama_index_rag_pack.components.prompt_router import PromptRouter
    from llama_index_rag_pack.components.raptor_levels import RaptorBuildError
    from llama_index_rag_pack.components.rewrite import RewriteRetriever
    from llama_index_rag_pack.components.router import FusionRouterRetriever
    from llama_index_rag_pack.components.routes import Route, RouteSelection, RoutingError
    from llama_index_rag_pack.components.semantic_selector import SemanticSelector
    from llama_index_rag_pack.components.sql_database import (
        SafeSQLDatabase,
        SQLExecutionError,
        SQLResult,
    )
    from llama_index_rag_pack.components.sql_query_engine import SQLQueryEngine
    from llama_index_rag_pack.core.clustering import cluster_embeddings
    from llama_index_rag_pack.core.errors import (
        CollectionNotFoundError,
        ConfigurationError,
        EmbeddingError,
        EmptyCorpusError,
        LLMNotConfiguredError,
        MilvusUnavailableError,
        RagPackError,
    )
    from llama_index_rag_pack.core.judge_tree import JudgedChunk, SearchNode, SearchTree
    from llama_index_rag_pack.core.metadata_fields import FieldSpec, load_field_specs
    from llama_index_rag_pack.core.milvus_filter import compile_conditions, milvus_literal
    from llama_index_rag_pack.core.rank_fusion import (
        distribution_based_fusion,
        reciprocal_rank_fusion,
        relative_score_fusion,
        union_fusion,
    )
    from llama_index_rag_pack.core.reference_styles import ReferenceStyle
    from llama_index_rag_pack.core.references import ReferenceManager, render_references
    from llama_index_rag_pack.core.self_query import SelfQuery, parse_self_query
    from llama_index_rag_pack.core.sql_safety import (
        CheckedSQL,
        SQLLimits,
        UnsafeSQLError,
        check_sql,
    )
    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.evaluation.labelled import (
        LabelledExample,
        LabelledSet,
        load_labelled_set,
    )
    from llama_index_rag_pack.evaluation.report import EvalReport
    from llama_index_rag_pack.pack.fusion_config import FusionConfig
    from llama_index_rag_pack.pack.judge import judge_query_engine
    from llama_index_rag_pack.pack.modes import (
        ModeSpec,
        RetrievalMode,
        base_modes,
        register_mode,
    )
    from llama_index_rag_pack.pack.rag_pack import RagPack
    from llama_index_rag_pack.pack.routed import RoutedRagPack
    from llama_index_rag_pack.pack.self_query import configure_self_query
    from llama_index_rag_pack.pack.sources import RouteSource
    from llama_index_rag_pack.storage.hybrid import MilvusHybridRetriever
    from llama_index_rag_pack.storage.metadata_filter import infer_field_specs
    from llama_index_rag_pack.storage.raptor_retriever import RaptorRetrieveMode, RaptorRetriever
    from llama_index_rag_pack.storage.raptor_tree import RaptorTree
    from llama_index_rag_pack.storage.score_fusion import MilvusScoreFusionRetriever
    from llama_index_rag_pack.storage.self_query_retriever import SelfQueryRetriever
    from llama_index_rag_pack.storage.sentence_index import MilvusSentenceIndex
    from llama_index_rag_pack.storage.sentence_retriever import MilvusSentenceRetriever

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "SentenceAttributor": ".components.citation_attribution",
    "CitationPostprocessor": ".components.citation_postprocessor",
    "CitedChatEngine": ".components.cited_chat_engine",
    "LocalEmbedding": ".components.local_embedding",
    "CitedChatResponse": ".components.cited_chat_engine",
    "CitedStreamingChatResponse": ".components.cited_chat_engine",
    "CitedQueryEngine": ".components.cited_query_engine",
    "FusionRetriever": ".components.fusion",
    "HyDERetriever": ".components.hyde",
    # judge-driven recursive RAG (issue 16, section 3)
    "JudgeQueryEngine": ".components.judge_query_engine",
    "JudgeResponse": ".components.judge_query_engine",
    "JudgedChunk": ".core.judge_tree",
    "SearchNode": ".core.judge_tree",
    "SearchTree": ".core.judge_tree",
    "judge_query_engine": ".pack.judge",
    "LogicalSelector": ".components.logical_selector",
    "PromptRouter": ".components.prompt_router",
    "RaptorBuildError": ".components.raptor_levels",
    "RewriteRetriever": ".components.rewrite",
    "FusionRouterRetriever": ".components.router",
    "Route": ".components.routes",
    "RouteSelection": ".components.routes",
    "RoutingError": ".components.routes",
    "SemanticSelector": ".components.semantic_selector",
    # text-to-SQL
    "SafeSQLDatabase": ".components.sql_database",
    "SQLExecutionError": ".components.sql_database",
    "SQLResult": ".components.sql_database",
    "SQLQueryEngine": ".components.sql_query_engine",
    "CheckedSQL": ".core.sql_safety",
    "SQLLimits": ".core.sql_safety",
    "UnsafeSQLError": ".core.sql_safety",
    "check_sql": ".core.sql_safety",
    "cluster_embeddings": ".core.clustering",
    "CollectionNotFoundError": ".core.errors",
    "ConfigurationError": ".core.errors",
    "EmbeddingError": ".core.errors",
    "EmptyCorpusError": ".core.errors",
    "LLMNotConfiguredError": ".core.errors",
    "MilvusUnavailableError": ".core.errors",
    "RagPackError": ".core.errors",
    "distribution_based_fusion": ".core.rank_fusion",
    "reciprocal_rank_fusion": ".core.rank_fusion",
    "relative_score_fusion": ".core.rank_fusion",
    "union_fusion": ".core.rank_fusion",
    "ReferenceStyle": ".core.reference_styles",
    "ReferenceManager": ".core.references",
    "render_references": ".core.references",
    "EvalHarness": ".evaluation.harness",
    "LabelledExample": ".evaluation.labelled",
    "LabelledSet": ".evaluation.labelled",
    "load_labelled_set": ".evaluation.labelled",
    "EvalReport": ".evaluation.report",
    "FusionConfig": ".pack.fusion_config",
    "ModeSpec": ".pack.modes",
    "RetrievalMode": ".pack.modes",
    "register_mode": ".pack.modes",
    "base_modes": ".pack.modes",
    "RagPack": ".pack.rag_pack",
    "RoutedRagPack": ".pack.routed",
    "RouteSource": ".pack.sources",
    "MilvusHybridRetriever": ".storage.hybrid",
    "RaptorRetrieveMode": ".storage.raptor_retriever",
    "RaptorRetriever": ".storage.raptor_retriever",
    "RaptorTree": ".storage.raptor_tree",
    "MilvusScoreFusionRetriever": ".storage.score_fusion",
    "MilvusSentenceIndex": ".storage.sentence_index",
    "MilvusSentenceRetriever": ".storage.sentence_retriever",
    # self-query
    "FieldSpec": ".core.metadata_fields",
    "load_field_specs": ".core.metadata_fields",
    "compile_conditions": ".core.milvus_filter",
    "milvus_literal": ".core.milvus_filter",
    "SelfQuery": ".core.self_query",
    "parse_self_query": ".core.self_query",
    "configure_self_query": ".pack.self_query",
    "infer_field_specs": ".storage.metadata_filter",
    "SelfQueryRetriever": ".storage.self_query_retriever",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "SentenceAttributor",
    "RaptorBuildError",
    "RaptorRetrieveMode",
    "RaptorRetriever",
    "RaptorTree",
    "cluster_embeddings",
    "CitationPostprocessor",
    "CitedChatEngine",
    "LocalEmbedding",
    "CitedChatResponse",
    "CitedStreamingChatResponse",
    "CitedQueryEngine",
    "ReferenceManager",
    "ReferenceStyle",
    "render_references",
    "CollectionNotFoundError",
    "ConfigurationError",
    "EmbeddingError",
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
    "base_modes",
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
    # self-query
    "FieldSpec",
    "SelfQuery",
    "SelfQueryRetriever",
    "compile_conditions",
    "configure_self_query",
    "infer_field_specs",
    "load_field_specs",
    "milvus_literal",
    "parse_self_query",
    # judge-driven recursive RAG (issue 16, section 3)
    "JudgeQueryEngine",
    "JudgeResponse",
    "JudgedChunk",
    "SearchNode",
    "SearchTree",
    "judge_query_engine",
    # text-to-SQL
    "CheckedSQL",
    "SQLLimits",
    "SafeSQLDatabase",
    "SQLExecutionError",
    "SQLQueryEngine",
    "SQLResult",
    "UnsafeSQLError",
    "check_sql",
    "__version__",
]
