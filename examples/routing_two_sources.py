"""Routing between two sources: each question is sent to the collection whose description and
example questions it is closest to (no LLM call), and answered with citations from there.

Run:  HF_HUB_OFFLINE=1 python examples/routing_two_sources.py [--real-llm]
"""

from _common import SAMPLE_DOCS, example_llm, parse_args

from llama_index_rag_pack import RagPack, RouteSource


def main() -> None:
    args = parse_args(__doc__)
    pack = RagPack.from_sources(
        [
            RouteSource(
                "tech",
                "Software: vector databases, retrieval, RAG",
                ("What is a vector database?",),
                documents=SAMPLE_DOCS[:2],
            ),
            RouteSource(
                "food",
                "Cooking and baking: bread, dough, recipes",
                ("How do I bake bread?",),
                documents=SAMPLE_DOCS[2:],
            ),
        ],
        uri=f"{args.data_dir}/routing.db",
        llm=example_llm(args),
        overwrite=True,
    )
    for question in ("Why does sourdough rise?", "Does Milvus do hybrid search?"):
        selection = pack.retriever("route").select(question)
        print("Q:", question)
        print("  route:", selection.explain())
        print(" ", str(pack.run(question)).replace("\n", "\n  "))


if __name__ == "__main__":
    main()
