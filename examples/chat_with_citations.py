"""A conversation with citations: follow-ups are condensed with the history into a standalone
question, and every answer cites its sources.

Run:  HF_HUB_OFFLINE=1 python examples/chat_with_citations.py [--real-llm]
"""

from _common import SAMPLE_DOCS, example_llm, parse_args

from llama_index_rag_pack import RagPack


def main() -> None:
    args = parse_args(__doc__)
    pack = RagPack(
        SAMPLE_DOCS,
        uri=f"{args.data_dir}/examples.db",
        collection_name="chat",
        llm=example_llm(args),
        overwrite=True,
    )
    chat = pack.make_chat_engine(citation_style="text")
    for message in ("What is Milvus?", "Which kinds of search does it support?"):
        response = chat.stream_chat(message)
        print("You:", message)
        print("Assistant: ", end="")
        for token in response.response_gen:
            print(token, end="", flush=True)
        print(f"\n  (searched: {response.metadata['condensed_question']})")
    print("history:", len(chat.chat_history), "messages")


if __name__ == "__main__":
    main()
