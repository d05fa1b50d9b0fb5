"""Query generation for multi-query retrieval / RAG-Fusion, with tolerant parsing of LLM output.

Real models wrap their list in prose ("Sure! Here are 3 queries:"), number or bullet it, quote
it, put it in a code fence or a JSON array, echo the original question, repeat themselves, and
return more or fewer lines than asked. :func:`parse_queries` turns all of that into a clean list
(with :func:`~llama_index_rag_pack.core.llm_output.parse_list`); :func:`generate_queries` /
:func:`agenerate_queries` ask the LLM and fall back to no variants (the original query alone) with
a warning when nothing usable comes back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from llama_index.core.prompts import PromptTemplate

from llama_index_rag_pack.core.llm_output import MAX_REPLY_CHARS, parse_list

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


def parse_queries(
    text: str, *, original: str | None = None, num_queries: int | None = None
) -> list[str]:
    """The search queries in an LLM reply, without the original query when it is echoed back.

    Numbered and bulleted lists, quotes, Markdown bold, code fences, JSON arrays, blank lines,
    preamble and duplicates are handled by
    :func:`~llama_index_rag_pack.core.llm_output.parse_list`.

    Args:
        text: The raw LLM reply.
        original: The user's query (removed from the output if echoed).
        num_queries: Keep at most this many (the first ones).

    Returns:
        The queries, in the order the model gave them (possibly empty). Only the lines that end
        within the first :data:`~llama_index_rag_pack.core.llm_output.MAX_REPLY_CHARS`
        characters are read.

    Example:
        >>> reply = 'Sure! Here are some:\\n1. What is BM25?\\n2. "BM25 ranking"\\n3. **hybrid**'
        >>> parse_queries(reply, original="What is BM25?")
        ['BM25 ranking', 'hybrid']
        >>> parse_queries(reply, original="What is BM25?", num_queries=1)
        ['BM25 ranking']
    """
    if text and len(text) > MAX_REPLY_CHARS:  # read only the lines that end within the bound
        text = "".join(text[: MAX_REPLY_CHARS + 1].splitlines(keepends=True)[:-1])
    return parse_list(text, exclude=[original] if original else [], limit=num_queries)


def _failed(error: Exception, raise_on_failure: bool) -> list[str]:
    """No variants after the LLM call failed (a warning), or ``error`` raised again."""
    if raise_on_failure:
        raise error
    logger.warning(
        "Query generation failed (%s: %s); using the original query only.",
        type(error).__name__,
        error,
    )
    return []


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
    query = query.strip()
    if num_queries <= 0 or not query:  # nothing to vary
        return []
    try:
        text = llm.complete(prompt.format(num_queries=num_queries, query=query)).text
    except Exception as e:
        return _failed(e, raise_on_failure)
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
    query = query.strip()
    if num_queries <= 0 or not query:
        return []
    try:
        text = (await llm.acomplete(prompt.format(num_queries=num_queries, query=query))).text
    except Exception as e:
        return _failed(e, raise_on_failure)
    return _after_reply(text, query, num_queries)
