"""Self-query: the LLM's search plus metadata filter, checked against declared fields and
compiled to an escaped Milvus expression."""
