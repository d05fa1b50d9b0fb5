"""The pack contract: build a RagPack, look at its parts with get_modules(), answer with run().

Run:  HF_HUB_OFFLINE=1 python examples/pack_contract.py [--real-llm]
"""

from _common import SAMPLE_DOCS, example_llm, parse_args

from llama_index_rag_pack import RagPack


def main() -> None:
    args = parse_args(__doc__)
    pack = RagPack(
        SAMPLE_DOCS,
        uri=f"{args.data_dir}/examples.db",
        collection_name="pack_contract",
        llm=example_llm(args),
        overwrite=True,
    )
    modules = pack.get_modules()
    print("modules:", ", ".join(sorted(modules)))
    print("retriever:", type(modules["retriever"]).__name__)
    response = pack.run("What kinds of search does Milvus support?")  # the default mode, cited
    print(response)
    for mode in ("bm25", "vector"):
        nodes = pack.retriever(mode).retrieve("Why does sourdough rise?")
        print(f"{mode}: {nodes[0].node.metadata['title']}")


if __name__ == "__main__":
    main()
