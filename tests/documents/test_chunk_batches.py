"""Documents are split many to a call of core's node parser, and the chunks are those of one
call per document: ids, texts, metadata and links."""

from __future__ import annotations

import pytest
from llama_index.core import Document
from llama_index.core.schema import BaseNode

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents import chunking
from llama_index_rag_pack.documents.chunking import split_documents


def _dump(nodes: list[BaseNode]) -> list[tuple]:
    return [
        (n.node_id, n.get_content(), n.metadata, {k: v.node_id for k, v in n.relationships.items()},
         n.start_char_idx, n.end_char_idx)
        for n in nodes
    ]  # fmt: skip


DOCS = [
    Document(text="The aardvark digs. " * 60, id_="a", metadata={"title": "Aardvark"}),
    Document(text="Part one of the report. " * 40, id_="r", metadata={"page_label": "1"}),
    Document(text="Part two of the report. " * 40, id_="r", metadata={"page_label": "2"}),
    Document(
        text="| k | v |\n|---|---|\n" + "\n".join(f"| r{i} | {i} |" for i in range(90)), id_="t"
    ),
    Document(text="大熊猫吃竹子。" * 80, id_="zh"),
    Document(text="Short.", id_="s"),
]


def test_chunks_are_those_of_one_call_per_document(monkeypatch: pytest.MonkeyPatch) -> None:
    batched = split_documents(DOCS, chunk_size=64, chunk_overlap=8)
    one_at_a_time = [
        node for doc in DOCS for node in split_documents([doc], chunk_size=64, chunk_overlap=8)
    ]
    assert _dump(batched) == _dump(one_at_a_time)
    # two documents of one id keep their own metadata (never split in the same call)
    pages = {n.metadata["page_label"] for n in batched if n.ref_doc_id == "r"}
    assert pages == {"1", "2"}
    assert [len(run) for run in chunking._distinct_id_runs(DOCS)] == [2, 4]


def test_the_document_that_cannot_be_split_is_named_whatever_its_place() -> None:
    docs = [Document(text="plain words", id_="first"), Document(text="🦔🦔", id_="hedgehogs")]
    docs.append(Document(text="more words", id_="last"))
    with pytest.raises(ConfigurationError, match="^hedgehogs: cannot be split into chunks of 1"):
        split_documents(docs, chunk_size=1, chunk_overlap=0)
