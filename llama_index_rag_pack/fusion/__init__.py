"""Fusion and hybrid search: rank and score fusion, dense + BM25 (+ best sentence) retrievers over
Milvus, RAG-Fusion's query variants, HyDE and query rewriting, and the fusion settings."""
