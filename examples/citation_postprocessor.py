"""Citations in a stock core query engine: index.as_query_engine(node_postprocessors=[...]) with
the pack's CitationPostprocessor cutting the retrieved chunks into numbered, citable sentences.

Run:  HF_HUB_OFFLINE=1 python examples/citation_postprocessor.py [--real-llm]
"""

from _common import SAMPLE_DOCS, example_llm, parse_args
from llama_index.core import StorageContext, VectorStoreIndex

from llama_index_rag_pack import CitationPostprocessor
from llama_index_rag_pack.milvus.connection import open_vector_store
from llama_index_rag_pack.models.settings import resolve_embed_model


def main() -> None:
    args = parse_args(__doc__)
    embed_model = resolve_embed_model(None)
    store = open_vector_store(
        f"{args.data_dir}/examples.db", "postprocessor", dim=384, overwrite=True
    )
    index = VectorStoreIndex.from_documents(
        SAMPLE_DOCS,
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
    )
    engine = index.as_query_engine(
        llm=example_llm(args),
        similarity_top_k=2,
        node_postprocessors=[
            CitationPostprocessor(granularity="sentence", embed_model=embed_model, top_n=3)
        ],
    )
    response = engine.query("How does sourdough rise?")
    print(response)
    for source in response.source_nodes:
        print(f"  [{source.node.metadata.get('title')}] {source.node.get_content()[:80]}")


if __name__ == "__main__":
    main()
