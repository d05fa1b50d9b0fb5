"""``RewriteRetriever``: rewrite-retrieve-read (Ma et al., 2023).

The LLM turns a noisy, chatty question into a focused search query before retrieval. The answer
step still sees the user's original question; the rewritten query is recorded on every node.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core.llm_output import MAX_LENIENT_CHARS, parse_list
from llama_index_rag_pack.core.node_tags import annotate_node
from llama_index_rag_pack.core.query_bases import wrapped_retriever
from llama_index_rag_pack.fusion.llm_query import LLMQueryRetriever

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

__all__ = ["DEFAULT_REWRITE_PROMPT", "MAX_REWRITE_READ", "RewriteRetriever", "parse_rewrite"]

DEFAULT_REWRITE_PROMPT = PromptTemplate(
    "Rewrite the user's message below as one short search query that would find documents "
    "answering it. Drop everything that is not needed to answer the question.\n"
    "Write only the query, on one line.\n"
    "Message: {query}\n"
    "Search query:"
)

_LABEL_RE = re.compile(  # read on stripped lines; no two quantifiers match the same blanks
    r"^(?:(?:rewritten|better|improved|new|optimi[sz]ed|stand-?alone|rephrased|condensed)\s*)?"
    r"(?:search\s+)?(?:query|question)\s*:\s*",
    re.IGNORECASE,
)
#: Characters of a reply :func:`parse_rewrite` reads in all (its first whole lines): each line is
#: read as a list (JSON or lenient), so the reply's bound on lenient reading must hold over them.
MAX_REWRITE_READ = MAX_LENIENT_CHARS


def parse_rewrite(text: str, *, max_chars: int = 500) -> str | None:
    """The rewritten query in an LLM reply, or ``None`` when there is none.

    Strips preamble ("Sure! Here is a better query:"), labels ("Search query:"), numbering,
    quotes and the ``**`` markers of the classic rewrite prompt; takes the first query line.
    Reads only the lines that end within the first :data:`MAX_REWRITE_READ` characters: a query
    after them (or longer than ``max_chars``) gives ``None``.

    Example:
        >>> parse_rewrite(
        ...     'Sure, here is a better query:\\n"key figures ancient greek philosophy"**'
        ... )
        'key figures ancient greek philosophy'
    """
    if not text or not text.strip():
        return None
    lines = text[: MAX_REWRITE_READ + 1].splitlines()
    if len(text) > MAX_REWRITE_READ:
        lines.pop()  # cut by the bound (or ending just past it): not read, nor what follows
    for line in "\n".join(lines).replace("**", "\n").splitlines():
        line = _LABEL_RE.sub("", line.strip())
        if not line:
            continue
        found = parse_list(line)
        if found:
            query = found[0]
            return query if len(query) <= max_chars else None
    return None


class RewriteRetriever(LLMQueryRetriever):
    """Rewrite-retrieve-read: the LLM rewrites the query, then ``retriever`` searches with it.

    Each node's metadata gets ``original_query`` and ``rewritten_query`` (hidden from the LLM).
    An LLM error or an unusable reply falls back to the original query with a warning
    (``raise_on_failure=True`` raises instead).

    Args:
        retriever: Any LlamaIndex retriever.
        llm: Rewrites the query (default: resolved on first use, see ``settings.resolve_llm``).
        rewrite_prompt: Template with ``{query}``.
        raise_on_failure: Raise on LLM errors instead of falling back.
        callback_manager: LlamaIndex callback manager.

    Example:
        >>> from llama_index_rag_pack.testing import ScriptedLLM
        >>> rrr = RewriteRetriever(index.as_retriever(),  # doctest: +SKIP
        ...                        llm=ScriptedLLM(replies=['"ancient greek philosophers"']))
        >>> nodes = rrr.retrieve(  # doctest: +SKIP
        ...     "I burnt my toast... anyway who were the greek philosophers?"
        ... )
        >>> nodes[0].node.metadata["rewritten_query"]  # doctest: +SKIP
        'ancient greek philosophers'
    """

    prompt_key = "rewrite_prompt"

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        llm: LLM | None = None,
        rewrite_prompt: str | BasePromptTemplate | None = None,
        raise_on_failure: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        self.retriever = wrapped_retriever(retriever, "RewriteRetriever")
        self.raise_on_failure = raise_on_failure
        super().__init__(llm, rewrite_prompt, DEFAULT_REWRITE_PROMPT, callback_manager, verbose)

    def _parse(self, text: str | None, error: Exception | None, query: str) -> str:
        if error is not None:
            if self.raise_on_failure:
                raise error
            logger.warning(
                "Query rewrite failed (%s: %s); using the original query.",
                type(error).__name__,
                error,
            )
            return query
        rewritten = parse_rewrite(text or "")
        if rewritten is None:
            logger.warning(
                "Query rewrite returned nothing usable (%r); using the original query.",
                (text or "")[:200],
            )
            return query
        return rewritten

    @dispatcher.span
    def rewrite(self, query: str) -> str:
        """The rewritten query (the original one when the LLM gives nothing usable, or when it
        is blank: nothing to rewrite)."""
        if not query.strip():
            return query
        try:
            text, error = self.llm.complete(self.rewrite_prompt.format(query=query)).text, None
        except Exception as e:
            text, error = None, e
        return self._parse(text, error, query)

    @dispatcher.span
    async def arewrite(self, query: str) -> str:
        """Async :meth:`rewrite`."""
        if not query.strip():
            return query
        try:
            text, error = (
                (await self.llm.acomplete(self.rewrite_prompt.format(query=query))).text,
                None,
            )
        except Exception as e:
            text, error = None, e
        return self._parse(text, error, query)

    def _finish(
        self, nodes: list[NodeWithScore], original: str, rewritten: str
    ) -> list[NodeWithScore]:
        extra = {"original_query": original, "rewritten_query": rewritten}
        return [annotate_node(n, extra) for n in nodes]

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        rewritten = self.rewrite(query)
        nodes = self.retriever.retrieve(QueryBundle(rewritten))
        return self._finish(nodes, query, rewritten)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        rewritten = await self.arewrite(query)
        nodes = await self.retriever.aretrieve(QueryBundle(rewritten))
        return self._finish(nodes, query, rewritten)
