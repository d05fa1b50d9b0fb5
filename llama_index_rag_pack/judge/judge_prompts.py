"""Prompts of :class:`~llama_index_rag_pack.judge.judge_query_engine.JudgeQueryEngine`, and
the context its answers are written from.

The judge sees one chunk at a time (``{query_str}``, ``{chunk_str}``). The answer prompt is the
citation prompt of :class:`~llama_index_rag_pack.CitedQueryEngine` (``{context_str}``,
``{query_str}``): each chunk a ``<document id=N>`` block, a chunk's follow-up question and its
answer appended to that block, so the answer cites the chunk it builds on.
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from llama_index_rag_pack.citations.citation_prompts import DEFAULT_CITATION_QA_PROMPT
from llama_index_rag_pack.judge.judge_tree import JudgedChunk

__all__ = [
    "DEFAULT_JUDGE_ANSWER_PROMPT",
    "DEFAULT_JUDGE_PROMPT",
    "JUDGE_REPLY_SCHEMA",
    "augmented_nodes",
]

DEFAULT_JUDGE_PROMPT = PromptTemplate(
    "You judge whether a passage helps answer a question.\n\n"
    "Question: {query_str}\n\n"
    "Passage:\n{chunk_str}\n\n"
    "Score 2 if the passage answers the question, 1 if it is relevant but something needed to "
    "answer is missing, 0 if it is irrelevant. For a 1, write one short follow-up question that "
    "asks for exactly the missing information.\n"
    'Reply with JSON only: {{"score": 2}}, {{"score": 1, "follow_up": "..."}} or '
    '{{"score": 0}}\n'
)

#: The JSON schema of a verdict. LLMs that constrain decoding (the local llama.cpp model) are held
#: to it (:func:`~llama_index_rag_pack.models.json_output.json_output`), so even a small model's
#: verdict parses; the reply is still read tolerantly, as any other LLM's.
JUDGE_REPLY_SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "integer", "enum": [0, 1, 2]},
        "follow_up": {"type": "string", "maxLength": 150},
    },
    "required": ["score"],
    "additionalProperties": False,
}

#: The answer prompt: the citation prompt, so answers cite chunks as ``[N](id=ID)``.
DEFAULT_JUDGE_ANSWER_PROMPT = DEFAULT_CITATION_QA_PROMPT


def augmented_nodes(
    nodes: Sequence[NodeWithScore], judged: Sequence[JudgedChunk]
) -> list[NodeWithScore]:
    """The context chunks, each with its follow-up question and answer appended (when it has
    one); ids and metadata are kept, so citations point at the original chunks."""
    out = []
    for nws, chunk in zip(nodes, judged, strict=True):
        child = chunk.child
        if child is None or not child.answer:
            out.append(nws)
            continue
        text = nws.node.get_content(metadata_mode=MetadataMode.NONE).rstrip()
        text += f"\n\nFollow-up: {child.question}\nAnswer: {child.answer}"
        node = TextNode(id_=nws.node.node_id, text=text, metadata=dict(nws.node.metadata or {}))
        out.append(NodeWithScore(node=node, score=nws.score))
    return out
