"""A RAPTOR tree over a folder of files: index the folder, build the tree (LLM summaries of
clusters of chunks), and search every level of it.

Run:  HF_HUB_OFFLINE=1 python examples/raptor_folder.py [--folder DIR] [--real-llm]
Without --folder it writes three shipped Wikipedia articles to <data-dir>/raptor_docs first.
"""

from pathlib import Path

from _common import example_llm, parse_args

from llama_index_rag_pack import RagPack


def sample_folder(data_dir: str) -> Path:
    from llama_index_rag_pack.evaluation.labelled import load_corpus

    folder = Path(data_dir) / "raptor_docs"
    folder.mkdir(parents=True, exist_ok=True)
    for doc in load_corpus("wikipedia", titles=["Aikido", "Andorra", "Aardvark"]):
        (folder / f"{doc.metadata['title']}.txt").write_text(doc.text[:4000], encoding="utf-8")
    return folder


def main() -> None:
    args = parse_args(__doc__)
    folder = sample_folder(args.data_dir)
    pack = RagPack(
        input_dir=str(folder),
        uri=f"{args.data_dir}/examples.db",
        collection_name="raptor_folder",
        llm=example_llm(args),
        overwrite=True,
    )
    stats = pack.build_raptor_tree(overwrite=True, max_levels=2)
    print("tree:", stats)
    for mode in ("raptor", "raptor_traversal"):
        nodes = pack.retriever(mode).retrieve("Who developed aikido?")
        levels = sorted({n.node.metadata.get("raptor_level", 0) for n in nodes})
        print(f"{mode}: {len(nodes)} nodes from levels {levels}")


if __name__ == "__main__":
    main()
