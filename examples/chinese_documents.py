"""Chinese documents with the default settings: BM25 reads each chunk in its own language, and a
Chinese question gets a cited answer.

Run:  HF_HUB_OFFLINE=1 python examples/chinese_documents.py [--real-llm]

The bundled embedding model reads English only (the pack says so in one warning when it meets
Chinese text): pass ``embed_model="openai:text-embedding-v3"`` (an OpenAI-compatible endpoint)
or a local multilingual sentence-transformers directory for a multilingual dense side.
"""

from _common import example_llm, parse_args
from llama_index.core import Document

from llama_index_rag_pack import RagPack

DOCS = [
    Document(
        text="RAPTOR 先把文档切成文本块并生成嵌入，再用 UMAP 降维，因为对所有维度直接聚类的计算"
        "代价太高。降维之后用高斯混合模型聚类，每个聚类由大模型写一段总结，总结再嵌入、聚类，"
        "一层层向上形成一棵树。",
        metadata={"title": "RAPTOR 树状检索"},
    ),
    Document(
        text="Milvus 的混合检索同时做稠密向量检索和 BM25 稀疏检索，然后用 RRFRanker 或 "
        "WeightedRanker 把两路结果融合。RRF 只看排名，WeightedRanker 按权重合并分数。",
        metadata={"title": "Milvus 混合检索"},
    ),
    Document(
        text="引用生成要求模型在每个论断后面写出来源编号，代码再把编号重新排列，只保留真正被引用"
        "的来源，并在答案末尾附上参考文献列表。",
        metadata={"title": "引用生成"},
    ),
    Document(
        text="ツチブタはアフリカに住む夜行性の哺乳類で、主にアリやシロアリを食べます。",
        metadata={"title": "ツチブタ"},
    ),
    Document(
        text="Aardvarks are nocturnal mammals of Africa that feed on ants and termites.",
        metadata={"title": "Aardvark"},
    ),
]
QUESTIONS = [
    "RAPTOR 为什么要先降维再聚类？",
    "Milvus 怎么把两路检索结果融合起来？",
    "ツチブタは何を食べますか？",
    "What do aardvarks eat?",
]


def main() -> None:
    args = parse_args(__doc__)
    pack = RagPack(
        DOCS,
        uri=f"{args.data_dir}/examples.db",
        collection_name="chinese_documents",
        llm=example_llm(args),
        overwrite=True,
    )
    print("bm25:", pack.describe()["bm25"])
    for question in QUESTIONS:
        node = pack.retriever("bm25", similarity_top_k=1).retrieve(question)[0].node
        print(f"{question} -> {node.metadata['title']} ({node.metadata['language']})")
    print(pack.run(QUESTIONS[0]))


if __name__ == "__main__":
    main()
