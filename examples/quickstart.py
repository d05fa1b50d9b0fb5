"""Index a few documents into Milvus Lite and answer a question, offline.

Run:  HF_HUB_OFFLINE=1 python examples/quickstart.py
Uses the bundled embedding model, Milvus Lite in ./rag_pack_data and the LLM resolved from the
environment (OpenAI / an OpenAI-compatible server / the bundled local GGUF model).
"""

from llama_index.core import Document

from llama_index_rag_pack import RagPack

DOCS = [
    Document(
        text="Milvus is an open-source vector database built for AI applications. It supports "
        "dense, sparse and hybrid search.",
        metadata={"title": "Milvus", "url": "https://milvus.io"},
    ),
    Document(
        text="RAPTOR recursively clusters document chunks and summarises each cluster, building a "
        "tree that can be searched at every level of abstraction.",
        metadata={"title": "RAPTOR", "url": "https://arxiv.org/abs/2401.18059"},
    ),
    Document(
        text="RAG-Fusion generates several versions of a question, retrieves for each and merges "
        "the rankings with reciprocal rank fusion.",
        metadata={"title": "RAG-Fusion"},
    ),
]

if __name__ == "__main__":
    pack = RagPack(
        DOCS, uri="./rag_pack_data/examples.db", collection_name="quickstart", overwrite=True
    )
    question = "What kinds of search does Milvus support?"
    response = pack.run(question)
    print("models:", pack.describe())
    print("Q:", question)
    print("A:", response)
    for source in response.source_nodes:
        print(f"  - {source.node.metadata.get('title')}: {source.score:.3f}")
