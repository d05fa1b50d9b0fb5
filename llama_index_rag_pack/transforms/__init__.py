"""Query transformations as retrievers: HyDE and rewrite-retrieve-read."""

from llama_index_rag_pack.transforms.hyde import DEFAULT_HYDE_PROMPT, HyDERetriever
from llama_index_rag_pack.transforms.rewrite import DEFAULT_REWRITE_PROMPT, RewriteRetriever

__all__ = ["DEFAULT_HYDE_PROMPT", "DEFAULT_REWRITE_PROMPT", "HyDERetriever", "RewriteRetriever"]
