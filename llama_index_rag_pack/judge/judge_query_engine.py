"""``JudgeQueryEngine``: RAG where an LLM judge scores every retrieved chunk, and chunks that are
relevant but incomplete send a follow-up question down the same RAG, recursively.

For a question the engine retrieves chunks and the judge scores each one (concurrently): 2, the
chunk answers the question; 1, relevant but incomplete, with a follow-up question for what is
missing; 0, irrelevant. When a chunk scores 2 the answer is written at once from the relevant
chunks. Otherwise each chunk scored 1 (at most ``max_branching`` per question, at most
``max_depth`` levels down) has its follow-up answered by the same search, and that answer is
attached to the chunk before the question is answered from the relevant chunks. The answer cites
its chunks through the project's citation machinery (``[N](id=M)`` markers renumbered by
:class:`~llama_index_rag_pack.citations.references.ReferenceManager`).

The whole search is returned as data: ``response.metadata["search_tree"]`` is a
:class:`~llama_index_rag_pack.judge.judge_tree.SearchTree` as a dict (``SearchTree.from_dict``
reopens it), also at ``response.search_tree``. No run makes more than ``max_llm_calls`` LLM
calls: every call is taken from a shared budget before it is made, and the answer of each
question searched is reserved before its chunks are judged.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from llama_index_rag_pack.citations.citation_options import check_retriever
from llama_index_rag_pack.citations.citation_prompts import format_context
from llama_index_rag_pack.citations.cited_responses import CitedResponse, CitedResponseBuilder
from llama_index_rag_pack.citations.reference_styles import ReferenceStyle
from llama_index_rag_pack.core.errors import check_count
from llama_index_rag_pack.core.query_bases import PackQueryEngine, PromptAttributes
from llama_index_rag_pack.judge.judge_prompts import (
    DEFAULT_JUDGE_ANSWER_PROMPT,
    DEFAULT_JUDGE_PROMPT,
    JUDGE_REPLY_SCHEMA,
    augmented_nodes,
)
from llama_index_rag_pack.judge.judge_tree import JudgedChunk, SearchNode, SearchTree
from llama_index_rag_pack.judge.judge_verdicts import CallBudget, parse_judge_reply
from llama_index_rag_pack.models.json_output import json_output
from llama_index_rag_pack.models.settings import resolve_llm

logger = logging.getLogger(__name__)
dispatcher = get_dispatcher(__name__)

__all__ = ["NO_ANSWER", "JudgeQueryEngine", "JudgeResponse"]

#: The answer when no retrieved chunk was judged relevant (no LLM call is spent on it).
NO_ANSWER = "None of the retrieved passages answers the question."
_SPACE_BEFORE_PUNCT = re.compile(r"(?<!\s)\s+([.,;:!?])")  # from the start of a run: linear


@dataclass
class JudgeResponse(CitedResponse):
    """A :class:`~llama_index_rag_pack.citations.cited_responses.CitedResponse` with the search
    tree (also in ``metadata["search_tree"]`` as a dict)."""

    search_tree: SearchTree | None = None


@dataclass
class _Run:
    """One query's shared state: the call budget and the limit on LLM calls in flight."""

    budget: CallBudget
    max_concurrency: int
    lock: threading.BoundedSemaphore = field(init=False)
    alock: Any = None  # the asyncio.Semaphore of an async query

    def __post_init__(self) -> None:
        self.lock = threading.BoundedSemaphore(self.max_concurrency)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``fn`` over ``items`` in threads (each in a copy of this context, so spans nest)."""
        if len(items) <= 1:
            return [fn(item) for item in items]
        contexts = [contextvars.copy_context() for _ in items]
        with ThreadPoolExecutor(max_workers=len(items), thread_name_prefix="judge") as pool:
            return list(pool.map(lambda ctx, item: ctx.run(fn, item), contexts, items))


def _judged_chunk(nws: NodeWithScore) -> JudgedChunk:
    meta = nws.node.metadata or {}
    source = meta.get("title") or meta.get("url") or meta.get("file_name")
    return JudgedChunk(
        chunk_id=nws.node.node_id,
        text=nws.node.get_content(metadata_mode=MetadataMode.NONE),
        source=str(source) if source else None,
        retrieval_score=nws.score,
    )


class JudgeQueryEngine(PromptAttributes, PackQueryEngine):
    """Judge every retrieved chunk, follow up on partial ones recursively, answer with citations.

    Args:
        retriever: Any LlamaIndex retriever; it serves the question and every follow-up.
        llm: The judge and answer LLM; default ``Settings.llm`` when set, else
            :func:`~llama_index_rag_pack.models.settings.resolve_llm`'s choice.
        max_depth: How many levels of follow-up questions (0: judge, never recurse).
        max_branching: Follow-up questions searched per question (the first chunks scored 1).
        max_llm_calls: Most LLM calls of one query, judging and answering, never exceeded (>= 2).
        max_concurrency: LLM calls in flight at once.
        style: Citation style of the answer (``markdown``, ``text``, ``html``, ``empty`` or a
            ``ReferenceStyle``).
        source_id: Which chunks share a citation number (metadata key or callable).
        judge_template, answer_template: Prompt overrides (also via ``update_prompts``).
        callback_manager: LlamaIndex callbacks.

    Raises:
        ConfigurationError: a bound is out of range or the retriever is not a retriever.

    Example:
        >>> engine = JudgeQueryEngine(index.as_retriever(), llm, max_depth=2)  # doctest: +SKIP
        >>> response = engine.query("Where was the author of Animal Farm born?")  # doctest: +SKIP
        >>> print(response.search_tree.render_text())  # doctest: +SKIP
    """

    prompt_attributes = {"judge_template": "_judge_template", "answer_template": "_answer_template"}

    def __init__(
        self,
        retriever: BaseRetriever,
        llm: LLM | None = None,
        *,
        max_depth: int = 2,
        max_branching: int = 2,
        max_llm_calls: int = 24,
        max_concurrency: int = 4,
        style: str | ReferenceStyle | None = "markdown",
        source_id: str | Callable[[Any], Any] | None = None,
        judge_template: BasePromptTemplate | None = None,
        answer_template: BasePromptTemplate | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        check_retriever(retriever)
        for name, value, low in (
            ("max_depth", max_depth, 0),
            ("max_branching", max_branching, 1),
            ("max_llm_calls", max_llm_calls, 2),
            ("max_concurrency", max_concurrency, 1),
        ):
            check_count(name, value, minimum=low)
        self._retriever = retriever
        self._llm = llm if llm is not None else resolve_llm(None)
        self.max_depth = max_depth
        self.max_branching = max_branching
        self.max_llm_calls = max_llm_calls
        self.max_concurrency = max_concurrency
        self._responses = CitedResponseBuilder("judge", style=style, source_id=source_id)
        self._plain = CitedResponseBuilder("judge", style="empty", source_id=source_id)
        self._judge_template = judge_template or DEFAULT_JUDGE_PROMPT
        self._answer_template = answer_template or DEFAULT_JUDGE_ANSWER_PROMPT
        super().__init__(callback_manager=callback_manager)

    # ------------------------------------------------------------------ prompts
    @property
    def retriever(self) -> BaseRetriever:
        return self._retriever

    # ------------------------------------------------------------------ shared steps
    def _new_run(self) -> _Run:
        run = _Run(CallBudget(self.max_llm_calls), self.max_concurrency)
        run.budget.take()  # the root question's answer is reserved first
        return run

    def _judge_kwargs(self, question: str, chunk: JudgedChunk) -> dict[str, str]:
        return {"query_str": question, "chunk_str": chunk.text.strip()}

    def _start_node(self, question: str, depth: int, nodes: list[NodeWithScore], run: _Run) -> Any:
        """The node for ``question`` and the chunks whose judging the budget allows."""
        node = SearchNode(question, depth, chunks=[_judged_chunk(n) for n in nodes])
        to_judge = []
        for chunk in node.chunks:
            if run.budget.take():
                to_judge.append(chunk)
            else:
                chunk.problem = "not judged: the LLM call budget is spent"
        node.llm_calls += len(to_judge)
        return node, to_judge

    @staticmethod
    def _record(chunk: JudgedChunk, reply: str | BaseException, question: str) -> None:
        if isinstance(reply, BaseException):
            logger.warning("Judge call failed for chunk %s: %s", chunk.chunk_id, reply)
            chunk.score, chunk.problem = 0, f"judge call failed: {reply}"
            return
        verdict = parse_judge_reply(reply, question)
        if verdict.problem:
            logger.warning(
                "Judge reply for chunk %s: %s (%r)", chunk.chunk_id, verdict.problem, reply[:80]
            )
        chunk.score, chunk.follow_up, chunk.problem = (
            verdict.score,
            verdict.follow_up,
            verdict.problem,
        )

    def _plan_follow_ups(self, node: SearchNode, run: _Run) -> list[JudgedChunk]:
        """The chunks whose follow-up is searched; sets ``node.stop``. Reserves each follow-up's
        answer call."""
        scores = [c.score for c in node.chunks]
        if not node.chunks:
            node.stop = "no_chunks"
        elif all(score is None for score in scores):
            node.stop = "budget"
        elif 2 in scores:
            node.stop = "answered"
        elif 1 not in scores:
            node.stop = "no_relevant_chunk"
        elif node.depth >= self.max_depth:
            node.stop = "max_depth"
        else:
            partial = [c for c in node.chunks if c.score == 1 and c.follow_up]
            chosen = [c for c in partial[: self.max_branching] if run.budget.take()]
            node.stop = "followed_up" if chosen else "budget" if partial else "no_follow_up"
            return chosen
        return []

    def _context(self, node: SearchNode, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        keep = [i for i, c in enumerate(node.chunks) if c.score in (1, 2)]
        return augmented_nodes([nodes[i] for i in keep], [node.chunks[i] for i in keep])

    def _answer_kwargs(self, question: str, context: list[NodeWithScore]) -> dict[str, str]:
        return {"context_str": format_context(context), "query_str": question}

    def _finish(
        self, node: SearchNode, context: list[NodeWithScore], raw: str | None, run: _Run
    ) -> CitedResponse:
        """Fill the node's answer; the response (in the engine's style) for ``node``."""
        if raw is None:  # nothing relevant: the reserved answer call is not made
            run.budget.release()
            return self._responses.build([], NO_ANSWER, "")
        node.llm_calls += 1
        plain = self._plain.build(context, raw, raw)
        node.answer = _SPACE_BEFORE_PUNCT.sub(r"\1", plain.answer).strip()
        node.cited_ids = [n.node.node_id for n in plain.source_nodes]
        return self._responses.build(context, raw, raw)

    def _response(self, node: SearchNode, response: CitedResponse, run: _Run) -> JudgeResponse:
        tree = SearchTree(
            node,
            llm_calls=sum(n.llm_calls for n in node.walk()),
            max_depth=self.max_depth,
            max_branching=self.max_branching,
            max_llm_calls=self.max_llm_calls,
        )
        metadata = {**response.metadata, "search_tree": tree.to_dict(), "llm_calls": tree.llm_calls}
        fields = {k: getattr(response, k) for k in response.__dataclass_fields__}
        return JudgeResponse(**{**fields, "metadata": metadata}, search_tree=tree)

    # ------------------------------------------------------------------ sync
    @dispatcher.span
    def judge_chunk(self, question: str, chunk: JudgedChunk, run: _Run) -> str | BaseException:
        """The judge's reply on one chunk for ``question`` (an error is returned, not raised)."""
        with run.lock, json_output(JUDGE_REPLY_SCHEMA):
            try:
                return self._llm.predict(
                    self._judge_template, **self._judge_kwargs(question, chunk)
                )
            except Exception as e:  # an untrusted reply path: logged, scored as irrelevant
                return e

    @dispatcher.span
    def search_step(self, question: str, depth: int, run: _Run) -> tuple[SearchNode, CitedResponse]:
        """One node of the search tree: retrieve, judge each chunk, follow up, answer."""
        nodes = self._retriever.retrieve(QueryBundle(question))
        node, to_judge = self._start_node(question, depth, nodes, run)
        for chunk, reply in zip(
            to_judge, run.map(lambda c: self.judge_chunk(question, c, run), to_judge), strict=True
        ):
            self._record(chunk, reply, question)
        follow = self._plan_follow_ups(node, run)

        def child(chunk: JudgedChunk) -> None:
            chunk.child = self.search_step(chunk.follow_up or "", depth + 1, run)[0]

        run.map(child, follow)
        context = self._context(node, nodes)
        raw = self.write_answer(question, context, run) if context else None
        return node, self._finish(node, context, raw, run)

    @dispatcher.span
    def write_answer(self, question: str, context: list[NodeWithScore], run: _Run) -> str:
        """The LLM's answer to ``question`` from the chunks judged relevant."""
        with run.lock:
            kwargs = self._answer_kwargs(question, context)
            return self._llm.predict(self._answer_template, **kwargs)

    def _answer(self, query_bundle: QueryBundle, query: str) -> JudgeResponse:
        run = self._new_run()
        node, response = self.search_step(query, 0, run)
        return self._response(node, response, run)

    # ------------------------------------------------------------------ async
    @dispatcher.span
    async def ajudge_chunk(
        self, question: str, chunk: JudgedChunk, run: _Run
    ) -> str | BaseException:
        """Async :meth:`judge_chunk`."""
        async with run.alock:
            try:
                kwargs = self._judge_kwargs(question, chunk)
                with json_output(JUDGE_REPLY_SCHEMA):
                    return await self._llm.apredict(self._judge_template, **kwargs)
            except Exception as e:
                return e

    @dispatcher.span
    async def asearch_step(
        self, question: str, depth: int, run: _Run
    ) -> tuple[SearchNode, CitedResponse]:
        """Async :meth:`search_step`: the chunks judged and the follow-ups searched at once."""
        nodes = await self._retriever.aretrieve(QueryBundle(question))
        node, to_judge = self._start_node(question, depth, nodes, run)
        replies = await asyncio.gather(*(self.ajudge_chunk(question, c, run) for c in to_judge))
        for chunk, reply in zip(to_judge, replies, strict=True):
            self._record(chunk, reply, question)
        follow = self._plan_follow_ups(node, run)
        children = await asyncio.gather(
            *(self.asearch_step(c.follow_up or "", depth + 1, run) for c in follow)
        )
        for chunk, (child, _) in zip(follow, children, strict=True):
            chunk.child = child
        context = self._context(node, nodes)
        raw = await self.awrite_answer(question, context, run) if context else None
        return node, self._finish(node, context, raw, run)

    @dispatcher.span
    async def awrite_answer(self, question: str, context: list[NodeWithScore], run: _Run) -> str:
        """Async :meth:`write_answer`."""
        async with run.alock:
            kwargs = self._answer_kwargs(question, context)
            return await self._llm.apredict(self._answer_template, **kwargs)

    async def _aanswer(self, query_bundle: QueryBundle, query: str) -> JudgeResponse:
        run = self._new_run()
        run.alock = asyncio.Semaphore(self.max_concurrency)
        node, response = await self.asearch_step(query, 0, run)
        return self._response(node, response, run)
