"""LlamaIndex components: retrievers, selectors and routers, postprocessors, query engines and model
resolution. Each is a thin shell over :mod:`llama_index_rag_pack.core` and works with any LlamaIndex
retriever or index; none imports pymilvus.
"""
