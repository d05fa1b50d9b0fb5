"""llama-index-rag-pack: advanced RAG for LlamaIndex over Milvus.

The public names are imported on first use (PEP 562), so ``import llama_index_rag_pack`` and the
``rag-pack`` command line start without loading LlamaIndex, torch or pymilvus.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_rag_pack.chat.cited_chat_engine import (
        CitedChatEngine,
        CitedChatResponse,
        CitedStreamingChatResponse,
    )
    from llama_index_rag_pack.citations.citation_attribution import SentenceAttributor
    from llama_index_rag_pack.citations.citation_postprocessor import CitationPostprocessor
    from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
    from llama_index_rag_pack.citations.reference_styles import ReferenceStyle
    from llama_index_rag_pack.citations.references import ReferenceManager, render_references
    from llama_index_rag_pack.core.errors import (
        CollectionNotFoundError,
        ConfigurationError,
        EmbeddingError,
        EmptyCorpusError,
        LLMNotConfiguredError,
        MilvusUnavailableError,
        RagPackError,
        RerankError,
    )
    from llama_index_rag_pack.core.usage import TokenUsage, metered
    from llama_index_rag_pack.evaluation.harness import EvalHarness
    from llama_index_rag_pack.evaluation.labelled import (
        LabelledExample,
        LabelledSet,
        load_labelled_set,
    )
    from llama_index_rag_pack.evaluation.report import EvalReport
    from llama_index_rag_pack.fusion.fusion_config import FusionConfig
    from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
    from llama_index_rag_pack.fusion.hyde import HyDERetriever
    from llama_index_rag_pack.fusion.rag_fusion import FusionRetriever
    from llama_index_rag_pack.fusion.rank_fusion import (
        distribution_based_fusion,
        reciprocal_rank_fusion,
        relative_score_fusion,
        union_fusion,
    )
    from llama_index_rag_pack.fusion.rewrite import RewriteRetriever
    from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever
    from llama_index_rag_pack.fusion.sentence_retriever import MilvusSentenceRetriever
    from llama_index_rag_pack.judge.judge_query_engine import JudgeQueryEngine, JudgeResponse
    from llama_index_rag_pack.judge.judge_tree import JudgedChunk, SearchNode, SearchTree
    from llama_index_rag_pack.milvus.metadata_fields import FieldSpec, load_field_specs
    from llama_index_rag_pack.milvus.milvus_filter import compile_conditions, milvus_literal
    from llama_index_rag_pack.milvus.sentence_index import MilvusSentenceIndex
    from llama_index_rag_pack.models.local_embedding import LocalEmbedding
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
    from llama_index_rag_pack.raptor.clustering import cluster_embeddings
    from llama_index_rag_pack.raptor.raptor_levels import RaptorBuildError
    from llama_index_rag_pack.raptor.raptor_retriever import RaptorRetrieveMode, RaptorRetriever
    from llama_index_rag_pack.raptor.raptor_tree import RaptorTree
    from llama_index_rag_pack.rerank.cross_encoder import CrossEncoderReranker
    from llama_index_rag_pack.rerank.endpoint_reranker import EndpointReranker
    from llama_index_rag_pack.rerank.reranked_retriever import RerankedRetriever
    from llama_index_rag_pack.rerank.reranker_base import PackReranker
    from llama_index_rag_pack.routing.logical_selector import LogicalSelector
    from llama_index_rag_pack.routing.prompt_router import PromptRouter
    from llama_index_rag_pack.routing.router import FusionRouterRetriever
    from llama_index_rag_pack.routing.routes import Route, RouteSelection, RoutingError
    from llama_index_rag_pack.routing.semantic_selector import SemanticSelector
    from llama_index_rag_pack.self_query.metadata_filter import infer_field_specs
    from llama_index_rag_pack.self_query.replies import SelfQuery, parse_self_query
    from llama_index_rag_pack.self_query.self_query_retriever import SelfQueryRetriever
    from llama_index_rag_pack.sql.sql_database import (
        SafeSQLDatabase,
        SQLExecutionError,
        SQLResult,
    )
    from llama_index_rag_pack.sql.sql_query_engine import SQLQueryEngine
    from llama_index_rag_pack.sql.sql_safety import (
        CheckedSQL,
        SQLLimits,
        UnsafeSQLError,
        check_sql,
    )

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "SentenceAttributor": ".citations.citation_attribution",
    "CitationPostprocessor": ".citations.citation_postprocessor",
    "CitedChatEngine": ".chat.cited_chat_engine",
    "LocalEmbedding": ".models.local_embedding",
    "CitedChatResponse": ".chat.cited_chat_engine",
    "CitedStreamingChatResponse": ".chat.cited_chat_engine",
    "CitedQueryEngine": ".citations.cited_query_engine",
    "FusionRetriever": ".fusion.rag_fusion",
    "HyDERetriever": ".fusion.hyde",
    # judge-driven recursive RAG (issue 16, section 3)
    "JudgeQueryEngine": ".judge.judge_query_engine",
    "JudgeResponse": ".judge.judge_query_engine",
    "JudgedChunk": ".judge.judge_tree",
    "SearchNode": ".judge.judge_tree",
    "SearchTree": ".judge.judge_tree",
    "judge_query_engine": ".pack.judge",
    "LogicalSelector": ".routing.logical_selector",
    "PromptRouter": ".routing.prompt_router",
    "RaptorBuildError": ".raptor.raptor_levels",
    "RewriteRetriever": ".fusion.rewrite",
    "FusionRouterRetriever": ".routing.router",
    "Route": ".routing.routes",
    "RouteSelection": ".routing.routes",
    "RoutingError": ".routing.routes",
    "SemanticSelector": ".routing.semantic_selector",
    # text-to-SQL
    "SafeSQLDatabase": ".sql.sql_database",
    "SQLExecutionError": ".sql.sql_database",
    "SQLResult": ".sql.sql_database",
    "SQLQueryEngine": ".sql.sql_query_engine",
    "CheckedSQL": ".sql.sql_safety",
    "SQLLimits": ".sql.sql_safety",
    "UnsafeSQLError": ".sql.sql_safety",
    "check_sql": ".sql.sql_safety",
    "cluster_embeddings": ".raptor.clustering",
    "CollectionNotFoundError": ".core.errors",
    "ConfigurationError": ".core.errors",
    "EmbeddingError": ".core.errors",
    "EmptyCorpusError": ".core.errors",
    "LLMNotConfiguredError": ".core.errors",
    "MilvusUnavailableError": ".core.errors",
    "RagPackError": ".core.errors",
    "RerankError": ".core.errors",
    # what an answer spent (docs/usage.md)
    "TokenUsage": ".core.usage",
    "metered": ".core.usage",
    # second-stage rerankers (docs/rerank.md)
    "CrossEncoderReranker": ".rerank.cross_encoder",
    "EndpointReranker": ".rerank.endpoint_reranker",
    "PackReranker": ".rerank.reranker_base",
    "RerankedRetriever": ".rerank.reranked_retriever",
    "distribution_based_fusion": ".fusion.rank_fusion",
    "reciprocal_rank_fusion": ".fusion.rank_fusion",
    "relative_score_fusion": ".fusion.rank_fusion",
    "union_fusion": ".fusion.rank_fusion",
    "ReferenceStyle": ".citations.reference_styles",
    "ReferenceManager": ".citations.references",
    "render_references": ".citations.references",
    "EvalHarness": ".evaluation.harness",
    "LabelledExample": ".evaluation.labelled",
    "LabelledSet": ".evaluation.labelled",
    "load_labelled_set": ".evaluation.labelled",
    "EvalReport": ".evaluation.report",
    "FusionConfig": ".fusion.fusion_config",
    "ModeSpec": ".pack.modes",
    "RetrievalMode": ".pack.modes",
    "register_mode": ".pack.modes",
    "base_modes": ".pack.modes",
    "RagPack": ".pack.rag_pack",
    "RoutedRagPack": ".pack.routed",
    "RouteSource": ".pack.sources",
    "MilvusHybridRetriever": ".fusion.hybrid",
    "RaptorRetrieveMode": ".raptor.raptor_retriever",
    "RaptorRetriever": ".raptor.raptor_retriever",
    "RaptorTree": ".raptor.raptor_tree",
    "MilvusScoreFusionRetriever": ".fusion.score_fusion",
    "MilvusSentenceIndex": ".milvus.sentence_index",
    "MilvusSentenceRetriever": ".fusion.sentence_retriever",
    # self-query
    "FieldSpec": ".milvus.metadata_fields",
    "load_field_specs": ".milvus.metadata_fields",
    "compile_conditions": ".milvus.milvus_filter",
    "milvus_literal": ".milvus.milvus_filter",
    "SelfQuery": ".self_query.replies",
    "parse_self_query": ".self_query.replies",
    "configure_self_query": ".pack.self_query",
    "infer_field_specs": ".self_query.metadata_filter",
    "SelfQueryRetriever": ".self_query.self_query_retriever",
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
    "CrossEncoderReranker",
    "EndpointReranker",
    "PackReranker",
    "RerankedRetriever",
    "RerankError",
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
    # token usage
    "TokenUsage",
    "metered",
    "__version__",
]
