"""The annotate citation mode's steps: the answer is written first, then a second LLM call maps
each of its sentences to the chunks that support it (``S<n>: ids``), and the markers follow from
that mapping."""

from __future__ import annotations

import logging

from llama_index.core.schema import NodeWithScore

from llama_index_rag_pack.citations.annotations import (
    attach_markers,
    parse_annotations,
    split_sentences,
)
from llama_index_rag_pack.citations.citation_prompts import format_context
from llama_index_rag_pack.citations.cited_responses import CitedResponse

__all__ = ["annotate_prompt_args", "annotated_marks", "with_annotations"]

logger = logging.getLogger(__name__)


def annotate_prompt_args(nodes: list[NodeWithScore], answer: str) -> dict[str, str] | None:
    """The annotate prompt's arguments for ``answer`` (``None``: nothing to annotate)."""
    sentences = [s.strip() for s in split_sentences(answer)]
    if not nodes or not any(sentences):
        return None
    return {
        "context_str": format_context(nodes),
        "sentences_str": "\n".join(f"S{i}: {s}" for i, s in enumerate(sentences, 1)),
    }


def annotated_marks(answer: str, reply: str | None) -> tuple[str, dict[int, list[int]]]:
    """``answer`` with the markers the LLM's ``S<n>: ids`` reply assigns, and that mapping."""
    sentences = split_sentences(answer)
    mapping = parse_annotations(reply or "", len(sentences)) if reply is not None else {}
    if reply is not None and not mapping and sentences:
        logger.warning(
            "Annotate mode: no 'S<n>: ids' line in the LLM reply (%r...); no citations",
            reply[:80],
        )
    marked = "".join(attach_markers(s, mapping.get(i, [])) for i, s in enumerate(sentences, 1))
    return marked, mapping


def with_annotations(response: CitedResponse, mapping: dict[int, list[int]]) -> CitedResponse:
    """``response`` with the sentence-to-chunk mapping in its metadata."""
    response.metadata["annotations"] = {str(k): v for k, v in mapping.items()}
    return response
