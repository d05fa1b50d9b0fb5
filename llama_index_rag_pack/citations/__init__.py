"""Deterministic citations: streaming marker rewriting, citable chunks and a cited query engine."""

from llama_index_rag_pack.citations.postprocessor import CitationGranularity, CitationPostprocessor
from llama_index_rag_pack.citations.query_engine import (
    CitationMode,
    CitedAsyncStreamingResponse,
    CitedQueryEngine,
    CitedResponse,
    CitedStreamingResponse,
)
from llama_index_rag_pack.citations.quotes import QuoteCheck, QuoteMatch, verify_quote
from llama_index_rag_pack.citations.references import (
    Citation,
    EmptyReferenceStyle,
    HTMLReferenceStyle,
    MarkdownReferenceStyle,
    ReferenceManager,
    ReferenceStyle,
    ReferenceStyleName,
    TextReferenceStyle,
    render_references,
)

__all__ = [
    "Citation",
    "CitationGranularity",
    "CitationMode",
    "CitationPostprocessor",
    "CitedAsyncStreamingResponse",
    "CitedQueryEngine",
    "CitedResponse",
    "CitedStreamingResponse",
    "EmptyReferenceStyle",
    "HTMLReferenceStyle",
    "MarkdownReferenceStyle",
    "QuoteCheck",
    "QuoteMatch",
    "ReferenceManager",
    "ReferenceStyle",
    "ReferenceStyleName",
    "TextReferenceStyle",
    "render_references",
    "verify_quote",
]
