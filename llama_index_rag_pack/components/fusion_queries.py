"""Query generation for multi-query retrieval / RAG-Fusion, with tolerant parsing of LLM output.

Real models wrap their list in prose ("Sure! Here are 3 queries:"), number or bullet it, quote
it, put it in a code fence or a JSON array, echo the original question, repeat themselves, and
return more or fewer lines than asked. :func:`parse_queries` turns all of that into a clean list;
:func:`generate_queries` / :func:`agenerate_queries` ask the LLM and fall back to no variants
(the original query alone) with a warning when nothing usable comes back.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING

from llama_index.core.prompts import PromptTemplate

from llama_index_rag_pack.core.errors import check_query

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_QUERY_GEN_PROMPT",
    "agenerate_queries",
    "generate_queries",
    "parse_queries",
]

DEFAULT_QUERY_GEN_PROMPT = PromptTemplate(
    "You are a helpful assistant that writes search queries for a document search engine.\n"
    "Write {num_queries} different search queries that would find documents answering the "
    "question below. Cover different wordings and aspects of the question.\n"
    "Write one query per line, with no numbering and no explanations.\n"
    "Question: {query}\n"
    "Queries:\n"
)

_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*$")
_PREFIX_RE = re.compile(
    r"""^\s*(?:
        (?:[-*+•·–—>]\s*)+                    # bullets / quote marks
      | \(?\d{1,3}\s*[.):\]]\s*              # 1.  1)  (1)  1:  1]
      | \(?[a-zA-Z][.)]\s+                   # a)  b.
      | (?:search\s+)?(?:query|question|q)\s*\#?\d*\s*[:.)-]\s*   # Query 1:  Q2.
    )""",
    re.IGNORECASE | re.VERBOSE,
)
_QUOTES = "\"'`“”‘’«»"
_PREAMBLE_RE = re.compile(
    r"^(?:(?:sure|certainly|okay|ok|of course)(?:[!,.:]|$)|here (?:are|is)\b|below (?:are|is)\b|"
    r"the following\b|these are\b|i (?:have|hope|can)\b|let me\b|"
    r"(?:note|queries|search queries|answer)\s*:)",
    re.IGNORECASE,
)


def _normalise(text: str) -> str:
    return re.sub(r"[^\w]+", " ", text.lower()).strip()


def _clean_line(line: str) -> str:
    line = line.strip()
    for _ in range(3):  # "1. - **"query"**" needs several passes
        before = line
        line = _PREFIX_RE.sub("", line, count=1).strip()
        line = line.strip("*_").strip()
        if len(line) >= 2 and line[0] in _QUOTES and line[-1] in _QUOTES:
            line = line[1:-1].strip()
        line = line.rstrip(",").strip()
        if line == before:
            break
    return line.strip(_QUOTES + " ").strip()


def _json_list(text: str) -> list[str] | None:
    start, end = text.find("["), text.rfind("]")
    if start == -1 or end <= start:
        return None
    try:
        data = json.loads(text[start : end + 1])
    except (ValueError, TypeError):
        return None
    if isinstance(data, list) and data and all(isinstance(x, str) for x in data):
        return data
    return None


def parse_queries(
    text: str, *, original: str | None = None, num_queries: int | None = None
) -> list[str]:
    """Extract search queries from an LLM reply.

    Handles numbered and bulleted lists, quotes, Markdown bold, code fences, JSON arrays, blank
    lines and prose around the list. Drops the original query when it is echoed back,
    case-insensitive duplicates, and lines that are preamble ("Here are 3 queries:").

    Args:
        text: The raw LLM reply.
        original: The user's query (removed from the output if echoed).
        num_queries: Keep at most this many (the first ones).

    Returns:
        The queries, in the order the model gave them (possibly empty).

    Example:
        >>> parse_queries('Sure! Here are 2 queries:\\n1. "BM25 ranking"\\n2. **hybrid search**\\n')
        ['BM25 ranking', 'hybrid search']
    """
    if not text or not text.strip():
        return []
    candidates = _json_list(text)
    if candidates is None:
        candidates = [line for line in text.splitlines() if not _FENCE_RE.match(line)]
    seen = {_normalise(original)} if original else set()
    out: list[str] = []
    for raw in candidates:
        line = _clean_line(raw)
        if not line or len(_normalise(line)) < 2:
            continue
        if line.endswith(":") or (_PREAMBLE_RE.match(line) and not line.endswith("?")):
            continue
        key = _normalise(line)
        if key in seen:
            continue
        seen.add(key)
        out.append(line)
    if num_queries is not None:
        out = out[: max(num_queries, 0)]
    return out


def _after_reply(text: str | None, query: str, num_queries: int) -> list[str]:
    queries = parse_queries(text or "", original=query, num_queries=num_queries)
    if not queries:
        logger.warning(
            "Query generation returned nothing usable (%r); "
            "searching with the original query only.",
            (text or "")[:200],
        )
    elif len(queries) < num_queries:
        logger.info("Query generation returned %d of %d queries.", len(queries), num_queries)
    return queries


def generate_queries(
    llm: LLM,
    query: str,
    num_queries: int,
    *,
    prompt: PromptTemplate = DEFAULT_QUERY_GEN_PROMPT,
    raise_on_failure: bool = False,
) -> list[str]:
    """Ask ``llm`` for up to ``num_queries`` variants of ``query`` (the original not included).

    An LLM error or an unusable reply logs a warning and returns ``[]`` (search with the
    original query alone), unless ``raise_on_failure``.

    Example:
        >>> from llama_index_rag_pack.testing import ScriptedLLM
        >>> generate_queries(ScriptedLLM(replies=["1. milvus bm25\\n2. milvus sparse"]), "bm25?", 3)
        ['milvus bm25', 'milvus sparse']
    """
    query = check_query(query).strip()
    if num_queries <= 0:
        return []
    try:
        text = llm.complete(prompt.format(num_queries=num_queries, query=query)).text
    except Exception as e:
        if raise_on_failure:
            raise
        logger.warning(
            "Query generation failed (%s: %s); using the original query only.", type(e).__name__, e
        )
        return []
    return _after_reply(text, query, num_queries)


async def agenerate_queries(
    llm: LLM,
    query: str,
    num_queries: int,
    *,
    prompt: PromptTemplate = DEFAULT_QUERY_GEN_PROMPT,
    raise_on_failure: bool = False,
) -> list[str]:
    """Async :func:`generate_queries` (awaits ``llm.acomplete``)."""
    query = check_query(query).strip()
    if num_queries <= 0:
        return []
    try:
        text = (await llm.acomplete(prompt.format(num_queries=num_queries, query=query))).text
    except Exception as e:
        if raise_on_failure:
            raise
        logger.warning(
            "Query generation failed (%s: %s); using the original query only.", type(e).__name__, e
        )
        return []
    return _after_reply(text, query, num_queries)
