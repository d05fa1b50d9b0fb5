"""Query routing: logical (LLM) and semantic (embedding) selectors, a fusing router, a prompt
router.
"""

from llama_index_rag_pack.routing.pack import RoutedRagPack, RouteSource
from llama_index_rag_pack.routing.prompt_router import PromptRouter
from llama_index_rag_pack.routing.router import FusionRouterRetriever
from llama_index_rag_pack.routing.selectors import (
    DEFAULT_ROUTE_SELECT_PROMPT,
    DEFAULT_SEMANTIC_THRESHOLD,
    Aggregation,
    LogicalSelector,
    Route,
    RouteSelection,
    RoutingError,
    SemanticSelector,
    ThresholdReport,
)

__all__ = [
    "DEFAULT_ROUTE_SELECT_PROMPT",
    "DEFAULT_SEMANTIC_THRESHOLD",
    "Aggregation",
    "FusionRouterRetriever",
    "LogicalSelector",
    "PromptRouter",
    "Route",
    "RouteSelection",
    "RoutedRagPack",
    "RoutingError",
    "SemanticSelector",
    "RouteSource",
    "ThresholdReport",
]
