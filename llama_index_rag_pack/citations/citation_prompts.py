"""Prompts of :class:`~llama_index_rag_pack.citations.cited_query_engine.CitedQueryEngine` and
the numbered context they show the LLM.

Every prompt gets ``{context_str}``: the context chunks as ``<document id=N title="...">``
blocks, ``N`` being the 1-based position the LLM cites as ``[k](id=N)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeWithScore

__all__ = [
    "DEFAULT_ANNOTATE_ANSWER_PROMPT",
    "DEFAULT_ANNOTATE_PROMPT",
    "DEFAULT_CITATION_QA_PROMPT",
    "DEFAULT_QUOTES_PROMPT",
    "format_context",
]

DEFAULT_CITATION_QA_PROMPT = PromptTemplate(
    "Answer the question using only the documents below. After each claim, cite the document "
    'it comes from as [N](id=ID), where ID is the document id (e.g. "The Space Needle is in '
    'Seattle [1](id=3)."). Cite only documents that state the claim. If the documents do not '
    "contain the answer, say that you don't know.\n\n"
    "{context_str}\n\n"
    "Question: {query_str}\n"
    "Answer: "
)

DEFAULT_QUOTES_PROMPT = PromptTemplate(
    "Answer the question using only the documents below, and justify the answer with VERBATIM "
    "quotes copied from them, each with the id of its document.\n\n"
    "{context_str}\n\n"
    "Question: {query_str}\n\n"
    'Reply with JSON only, in this form: {"answer": "...", "citations": '
    '[{"source_id": 1, "quote": "exact words from document 1"}]}\n'
)

DEFAULT_ANNOTATE_ANSWER_PROMPT = PromptTemplate(
    "Answer the question using only the documents below. If they do not contain the answer, "
    "say that you don't know.\n\n"
    "{context_str}\n\n"
    "Question: {query_str}\n"
    "Answer: "
)

DEFAULT_ANNOTATE_PROMPT = PromptTemplate(
    "Here are documents and an answer split into numbered sentences. For each sentence, list the "
    "ids of the documents that state it, one line per sentence, like:\n"
    "S1: 2, 3\nS2: none\n\n"
    "{context_str}\n\n"
    "Answer sentences:\n{sentences_str}\n\n"
    "Sources:\n"
)


def format_context(nodes: Sequence[NodeWithScore]) -> str:
    """The numbered context: ``<document id=1 title="...">text</document>`` per chunk.

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> node = TextNode(text="Hi.", metadata={"title": "A"})
        >>> print(format_context([NodeWithScore(node=node)]))
        <document id=1 title="A">
        Hi.
        </document>
    """
    parts = []
    for position, nws in enumerate(nodes, 1):
        meta = nws.node.metadata or {}
        title = meta.get("title") or meta.get("file_name")
        attr = f' title="{str(title).replace(chr(34), chr(39))}"' if title else ""
        text = nws.node.get_content(metadata_mode=MetadataMode.NONE).strip()
        parts.append(f"<document id={position}{attr}>\n{text}\n</document>")
    return "\n".join(parts) if parts else "(no documents were found)"
