"""Second-stage rerankers: rerank endpoints (TEI, vLLM, Infinity, Jina, Cohere), local
cross-encoders, and the retriever that reranks a first stage's candidates."""
