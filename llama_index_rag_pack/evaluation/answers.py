"""Answers for EM / token F1: the LLM answers from the top chunks, its reply is normalised."""

from __future__ import annotations

import re
from collections.abc import Sequence

from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import NodeWithScore

__all__ = ["DEFAULT_ANSWER_PROMPT", "answer_prompt", "clean_prediction"]

DEFAULT_ANSWER_PROMPT = PromptTemplate(
    "Answer the question with a short phrase taken from the context (a name, a year, a few "
    "words). Reply with the answer only.\n\n"
    "Context:\n{context_str}\n\n"
    "Question: {query_str}\n"
    "Answer:"
)


def clean_prediction(text: str) -> str:
    """First line of an LLM answer without a leading ``Answer:`` label, quotes or a final period.

    Example:
        >>> clean_prediction('Answer: "Hermes Trismegistus".\\nBecause...')
        'Hermes Trismegistus'
    """
    text = (text or "").strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"^(?:final\s+)?answer\s*[:\-]\s*", "", line, flags=re.I)
    for _ in range(2):
        line = line.strip().rstrip(".").strip().strip("\"'`*“”")
    return line.strip()


def answer_prompt(
    template: BasePromptTemplate, question: str, nodes: Sequence[NodeWithScore], top_k: int
) -> str:
    """``template`` filled with ``question`` and the first ``top_k`` of ``nodes`` as context;
    the LLM's reply to it goes through :func:`clean_prediction`."""
    context = "\n\n".join(n.node.get_content() for n in nodes[:top_k])
    return template.format(context_str=context, query_str=question)
