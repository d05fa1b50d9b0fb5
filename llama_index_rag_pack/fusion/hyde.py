"""``HyDERetriever``: Hypothetical Document Embeddings (Gao et al., 2022).

The LLM writes ``n`` passages that would answer the question; they are embedded *as documents*
(text embeddings, not query embeddings), averaged (optionally with the query embedding) and the
average is used for vector search. The original question text is still passed on, so a hybrid
retriever's BM25 side and rerankers see the real question.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.async_utils import run_jobs
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_rag_pack.core import similarity
from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.core.node_tags import annotate_node
from llama_index_rag_pack.core.prose_replies import unwrap_prose
from llama_index_rag_pack.core.query_bases import wrapped_retriever
from llama_index_rag_pack.fusion.llm_query import LLMQueryRetriever

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.llms import LLM

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

__all__ = ["DEFAULT_HYDE_PROMPT", "HyDERetriever", "clean_passage", "mean_embedding"]

DEFAULT_HYDE_PROMPT = PromptTemplate(
    "Write a short passage, as it would appear in an encyclopedia or a reference document, that "
    "answers the question below. Write only the passage, without a title or any introduction.\n"
    "Question: {query}\n"
    "Passage:"
)


def clean_passage(text: str) -> str:
    """Strip the wrapping a model puts around a passage (preamble, 'Passage:', quotes, fences).

    Example:
        >>> clean_passage('Sure! Here is a passage:\\n"BM25 ranks documents by term frequency."')
        'BM25 ranks documents by term frequency.'
        >>> clean_passage("```text\\nPassage: BM25 ranks documents by term frequency.\\n```")
        'BM25 ranks documents by term frequency.'
    """
    return unwrap_prose(text, label="passage")


def mean_embedding(vectors: list[list[float]], *, normalize: bool = True) -> list[float]:
    """Element-wise mean of ``vectors``, scaled to unit length when ``normalize``.

    Example:
        >>> mean_embedding([[1.0, 0.0], [0.0, 1.0]], normalize=False)
        [0.5, 0.5]
    """
    if not vectors:
        raise ConfigurationError("mean_embedding needs at least one vector.")
    dim = len(vectors[0])
    if any(len(v) != dim for v in vectors):
        raise ConfigurationError(f"Embeddings of different sizes: {[len(v) for v in vectors]}.")
    mean = np.mean(np.asarray(vectors, dtype=np.float64), axis=0)
    return (similarity.normalize_vector(mean) if normalize else mean).tolist()


class HyDERetriever(LLMQueryRetriever):
    """Search with the embedding of LLM-written hypothetical answers instead of the question's.

    Args:
        retriever: A retriever that searches by ``QueryBundle.embedding`` when it is set (a
            ``VectorStoreIndex`` retriever, :class:`~llama_index_rag_pack.MilvusHybridRetriever`).
        llm: Writes the passages (default: resolved on first use, see ``settings.resolve_llm``).
        embed_model: Embeds passages as documents (default: the bundled MiniLM).
        num_hypotheses: Passages written (concurrently in the async path) and averaged.
        include_query: Average the query embedding in too (as one more vector).
        max_concurrency: LLM calls in flight at once (async path).
        hyde_prompt: Template with ``{query}``.
        raise_on_failure: Raise when the LLM fails instead of searching with the query embedding.
        callback_manager: LlamaIndex callback manager.

    Each node's metadata gets ``hyde_passages`` (hidden from the LLM).

    Example:
        >>> from llama_index_rag_pack.testing import ScriptedLLM
        >>> hyde = HyDERetriever(  # doctest: +SKIP
        ...     index.as_retriever(similarity_top_k=5),
        ...     llm=ScriptedLLM(replies=["BM25 is a bag-of-words ranking function."]),
        ... )
        >>> hyde.retrieve("How do search engines rank keyword matches?")  # doctest: +SKIP
    """

    prompt_key = "hyde_prompt"

    def __init__(
        self,
        retriever: BaseRetriever,
        *,
        llm: LLM | None = None,
        embed_model: BaseEmbedding | None = None,
        num_hypotheses: int = 1,
        include_query: bool = False,
        max_concurrency: int = 8,
        hyde_prompt: str | BasePromptTemplate | None = None,
        raise_on_failure: bool = False,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        check_count("num_hypotheses", num_hypotheses)
        check_count("max_concurrency", max_concurrency)
        from llama_index_rag_pack.models.settings import resolve_embed_model

        self.retriever = wrapped_retriever(retriever, "HyDERetriever")
        self.embed_model = resolve_embed_model(embed_model)
        self.num_hypotheses = num_hypotheses
        self.include_query = include_query
        self.max_concurrency = max_concurrency
        self.raise_on_failure = raise_on_failure
        super().__init__(llm, hyde_prompt, DEFAULT_HYDE_PROMPT, callback_manager, verbose)

    # ------------------------------------------------------------------ steps
    def _collect(self, replies: list[Any], query: str) -> list[str]:
        passages = []
        for reply in replies:
            if isinstance(reply, BaseException):
                if self.raise_on_failure:
                    raise reply
                logger.warning(
                    "HyDE passage generation failed (%s: %s).", type(reply).__name__, reply
                )
                continue
            passage = clean_passage(reply)
            if passage:
                passages.append(passage)
            else:
                logger.warning("HyDE: the LLM returned an empty passage; skipping it.")
        if not passages:
            logger.warning(
                "HyDE: no usable passage for %r; searching with the query embedding.", query
            )
        return passages

    def _embedding(
        self,
        query: str,
        passages: list[str],
        doc_vecs: list[list[float]],
        query_vec: list[float] | None,
    ) -> list[float]:
        vectors = list(doc_vecs)
        if query_vec is not None:
            vectors.append(query_vec)
        return mean_embedding(vectors)

    def _finish(self, nodes: list[NodeWithScore], passages: list[str]) -> list[NodeWithScore]:
        return [annotate_node(n, {"hyde_passages": list(passages)}) for n in nodes]

    @dispatcher.span
    def write_passages(self, query: str) -> list[str]:
        """The hypothetical passages the LLM writes for ``query`` (failed or empty ones left
        out)."""
        replies: list[Any] = []
        for _ in range(self.num_hypotheses):
            try:
                replies.append(self.llm.complete(self.hyde_prompt.format(query=query)).text)
            except Exception as e:  # LLM output is untrusted; failures fall back
                replies.append(e)
        return self._collect(replies, query)

    @dispatcher.span
    async def awrite_passages(self, query: str) -> list[str]:
        """Async :meth:`write_passages` (up to ``max_concurrency`` at once)."""

        async def write() -> str | BaseException:
            try:
                return (await self.llm.acomplete(self.hyde_prompt.format(query=query))).text
            except Exception as e:  # one failed passage does not sink the others
                return e

        writes = [write() for _ in range(self.num_hypotheses)]
        return self._collect(list(await run_jobs(writes, workers=self.max_concurrency)), query)

    def _search(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        passages = self.write_passages(query)
        doc_vecs = self.embed_model.get_text_embedding_batch(passages) if passages else []
        query_vec = None
        if self.include_query or not passages:
            query_vec = self.embed_model.get_query_embedding(query)
        embedding = self._embedding(query, passages, doc_vecs, query_vec)
        nodes = self.retriever.retrieve(QueryBundle(query_str=query, embedding=embedding))
        return self._finish(nodes, passages)

    async def _asearch(self, query_bundle: QueryBundle, query: str) -> list[NodeWithScore]:
        passages = await self.awrite_passages(query)
        doc_vecs = await self.embed_model.aget_text_embedding_batch(passages) if passages else []
        query_vec = None
        if self.include_query or not passages:
            query_vec = await self.embed_model.aget_query_embedding(query)
        embedding = self._embedding(query, passages, doc_vecs, query_vec)
        nodes = await self.retriever.aretrieve(QueryBundle(query_str=query, embedding=embedding))
        return self._finish(nodes, passages)
