"""Passages and sources as JSON: what ``/v1/retrieve`` returns, and the ``sources`` of a chat
answer (every passage the LLM was shown, cited or not, with the citation number, and where the
sentence that supports the answer stands in its text)."""

from __future__ import annotations

import math
import re
from typing import Any

from llama_index_rag_pack.citations.cited_sources import evidence_spans, passage_text
from llama_index_rag_pack.core.usage import TokenUsage

__all__ = ["answer_sources", "passage_json", "public_metadata", "usage_json"]

_SPACE_BEFORE_PUNCTUATION = re.compile(r"[ \t]+([.,;:!?])")
#: Metadata the pack keeps for itself (hashes and counts of the indexing runs).
_PRIVATE_KEYS = frozenset({"content_sha256", "doc_chunks", "file_abspath"})


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    return str(value)


def public_metadata(node: Any) -> dict[str, Any]:
    """``node``'s metadata as the LLM sees it: without the keys hidden from the LLM and the
    pack's own bookkeeping, JSON-safe.

    Example:
        >>> from llama_index.core.schema import TextNode
        >>> node = TextNode(text="x", metadata={"title": "A", "content_sha256": "ab", "n": 1.5})
        >>> public_metadata(node)
        {'title': 'A', 'n': 1.5}
    """
    hidden = set(getattr(node, "excluded_llm_metadata_keys", None) or ()) | _PRIVATE_KEYS
    return {
        str(k): _json_value(v) for k, v in (node.metadata or {}).items() if str(k) not in hidden
    }


def _score(item: Any) -> float | None:
    score = getattr(item, "score", None)
    return float(score) if isinstance(score, (int, float)) and math.isfinite(score) else None


def passage_json(item: Any, position: int) -> dict[str, Any]:
    """One retrieved passage (a ``NodeWithScore``) as JSON."""
    node = item.node
    return {
        "id": node.node_id,
        "position": position,
        "score": _score(item),
        "text": node.get_content(),
        "metadata": public_metadata(node),
    }


def answer_sources(response: Any) -> list[dict[str, Any]]:
    """The sources of a cited answer: each passage the LLM was shown, in context order, with
    ``cited`` and its citation ``number`` (``None`` when not cited), its text (whitespace
    collapsed) and the ``evidence``: per answer sentence leaning on it, the sentence and the
    ``start``/``end`` of the supporting span in ``text`` (``None`` where none was found); the
    sentence without the space its removed citation marker left before its punctuation."""
    numbers: dict[int, int] = {}
    for citation in getattr(response, "citations", None) or ():
        for position in citation.positions:
            numbers.setdefault(position, citation.number)
    sources = []
    for position, item in enumerate(getattr(response, "context_nodes", None) or (), 1):
        node = item.node
        evidence = [
            {
                "sentence": _SPACE_BEFORE_PUNCTUATION.sub(r"\1", sentence),
                "start": span[0] if span else None,
                "end": span[1] if span else None,
            }
            for sentence, span in evidence_spans(response, position)
        ]
        sources.append(
            {
                "id": node.node_id,
                "position": position,
                "number": numbers.get(position),
                "cited": position in numbers,
                "score": _score(item),
                "text": passage_text(response, position),
                "metadata": public_metadata(node),
                "evidence": evidence,
            }
        )
    return sources


def usage_json(response: Any) -> dict[str, Any]:
    """OpenAI's ``usage`` object for a pack response: ``prompt_tokens``,
    ``completion_tokens``, ``total_tokens``, plus ``llm_calls`` and ``counted`` (true when the
    LLM did not report some calls' tokens and the pack counted them with its tokenizer)."""
    found = (response.metadata or {}).get("usage")
    return dict(found) if isinstance(found, dict) else TokenUsage().as_dict()
