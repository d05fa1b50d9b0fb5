"""Index a few documents into Milvus Lite and answer a question, offline.

Run:  HF_HUB_OFFLINE=1 python examples/quickstart.py
Uses the bundled embedding model, Milvus Lite in ./rag_pack_data and the LLM resolved from the
environment (OpenAI / an OpenAI-compatible server / the bundled local GGUF model).
"""

from _common import SAMPLE_DOCS

from llama_index_rag_pack import RagPack

if __name__ == "__main__":
    pack = RagPack(
        SAMPLE_DOCS, uri="./rag_pack_data/examples.db", collection_name="quickstart", overwrite=True
    )
    question = "What kinds of search does Milvus support?"
    response = pack.run(question)
    print("models:", pack.describe())
    print("Q:", question)
    print("A:", response)
    for source in response.source_nodes:
        print(f"  - {source.node.metadata.get('title')}: {source.score:.3f}")
