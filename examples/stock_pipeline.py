"""The pack's cited query engines inside a stock LlamaIndex pipeline: core's RouterQueryEngine
picks a tool with the pack's SemanticSelector (no LLM call) and the tool answers with citations.

Run:  HF_HUB_OFFLINE=1 python examples/stock_pipeline.py [--real-llm]
"""

from _common import SAMPLE_DOCS, example_llm, parse_args
from llama_index.core.query_engine import RouterQueryEngine
from llama_index.core.tools import QueryEngineTool

from llama_index_rag_pack import RagPack, Route, SemanticSelector


def main() -> None:
    args = parse_args(__doc__)
    llm = example_llm(args)
    uri = f"{args.data_dir}/examples.db"
    tech = RagPack(SAMPLE_DOCS[:2], uri=uri, collection_name="tech", llm=llm, overwrite=True)
    food = RagPack(SAMPLE_DOCS[2:], uri=uri, collection_name="food", llm=llm, overwrite=True)
    tools = [
        QueryEngineTool.from_defaults(
            tech.make_query_engine(citation_style="text"),
            name="tech",
            description="Software: vector databases, retrieval, RAG",
        ),
        QueryEngineTool.from_defaults(
            food.make_query_engine(citation_style="text"),
            name="food",
            description="Cooking and baking: bread, dough, recipes",
        ),
    ]
    # routes named like the tools: their example questions help; a core router needs a
    # selection for every question, so a fallback route takes the ones nothing fits
    selector = SemanticSelector.from_defaults(
        tech.embed_model,
        routes=[
            Route("tech", tools[0].metadata.description, ("What is a vector database?",)),
            Route("food", tools[1].metadata.description, ("How do I bake bread?",)),
        ],
        fallback="tech",
    )
    router = RouterQueryEngine(selector=selector, query_engine_tools=tools, llm=llm)
    for question in ("Why does sourdough bread rise?", "What is Milvus?"):
        response = router.query(question)
        print("Q:", question)
        print("  routed to:", response.metadata["selector_result"].selections[0].index)
        print(" ", str(response).replace("\n", "\n  "))


if __name__ == "__main__":
    main()
