"""Run retrieval strategies over a labelled set and score them; cache per strategy.

:class:`EvalHarness` indexes the set's corpus once into Milvus
(:mod:`~llama_index_rag_pack.evaluation.corpus_index`), obtains one retriever per strategy from
``RagPack.retriever(mode)``, runs it over the questions
(:mod:`~llama_index_rag_pack.evaluation.runner`), scores the retrieved chunks
(:mod:`~llama_index_rag_pack.evaluation.scoring`) and reports
(:mod:`~llama_index_rag_pack.evaluation.report`). Results are cached per strategy and question
(:mod:`~llama_index_rag_pack.evaluation.cache`): a re-run only computes strategies (and
questions) whose config, code or data changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType

from llama_index_rag_pack.core.errors import ConfigurationError, check_count
from llama_index_rag_pack.evaluation.answers import DEFAULT_ANSWER_PROMPT
from llama_index_rag_pack.evaluation.cache import ResultCache, slug, stable_hash
from llama_index_rag_pack.evaluation.corpus_index import (
    default_pack_factory,
    index_key,
    open_or_build_index,
    questions_about,
)
from llama_index_rag_pack.evaluation.labelled import (
    LabelledExample,
    LabelledSet,
    load_corpus,
    load_labelled_set,
)
from llama_index_rag_pack.evaluation.planning import (
    StrategyPlan,
    build_retriever,
    pack_llm,
    retriever_llm,
)
from llama_index_rag_pack.evaluation.report import EvalReport, StrategyResult
from llama_index_rag_pack.evaluation.runner import StrategyRunner
from llama_index_rag_pack.evaluation.scope import EvalScope
from llama_index_rag_pack.evaluation.scoring import DEFAULT_KS
from llama_index_rag_pack.evaluation.strategies import (
    Strategy,
    code_fingerprint,
    resolve_strategies,
    retriever_builder,
)
from llama_index_rag_pack.models.settings import (
    data_dir,
    describe_embed_model,
    describe_llm,
    resolve_embed_model,
)

__all__ = ["EvalHarness", "HARNESS_VERSION"]

HARNESS_VERSION = "1"


class EvalHarness(PromptMixin):
    """Evaluate retrieval strategies of a :class:`~llama_index_rag_pack.RagPack` on a labelled set.

    Args:
        dataset: A :class:`LabelledSet`, a shipped set name (``wiki_qa``) or a JSONL path.
        corpus: Override the corpus the set names (``wikipedia``, ``lee`` or a path).
        cache_dir: Index and per-strategy result cache (default ``<RAG_PACK_DATA_DIR>/eval``).
        uri: Milvus uri for the evaluation index (default: a Lite database in ``cache_dir``).
        top_k: Chunks retrieved per question (the largest k scored).
        ks: Cut-offs reported.
        limit: Evaluate a seeded sample of this many questions.
        llm_limit: At most this many of those questions for strategies that call an LLM per query
            (``None``: all). The report adds a table on the questions every strategy answered.
        corpus_limit: Index only the first N corpus documents and keep the questions whose relevant
            documents are among them (small runs, RAPTOR trees).
        seed: Seed of the question sample (and recorded in every cache key).
        concurrency: Questions in flight at once on the async path.
        answers: Also have the LLM answer from the top ``answer_top_k`` chunks and score EM / F1.
        answer_top_k: Chunks the answering LLM reads.
        llm: LLM (or ``"local"``/``"openai"``/path) for LLM strategies; resolved lazily.
        embed_model: Embedding model (default: bundled MiniLM).
        chunk_size: Chunk size in tokens for the index.
        chunk_overlap: Chunk overlap in tokens.
        rebuild_index: Index the corpus again even if a cached index exists.
        force: Ignore cached per-strategy results.
        show_progress: tqdm progress bars.
        pack_factory: ``(documents | None, **kwargs) -> RagPack`` (tests, custom packs).
        answer_prompt: Prompt for ``answers`` (``{context_str}``, ``{query_str}``).
        documents: The corpus as ``Document`` objects (instead of the set's ``corpus``).
        results_dir: Per-strategy result cache (default ``<cache_dir>/results``).
        filters: Search only the chunks these filters select (core ``MetadataFilters`` or a
            Milvus expression), in every strategy; only the questions whose relevant documents
            the filters keep are evaluated. Strategies that take no filters are skipped.

    Example:
        >>> harness = EvalHarness("wiki_qa", limit=20)  # doctest: +SKIP
        >>> report = harness.run("vector,bm25")  # doctest: +SKIP
        >>> print(report.to_markdown())  # doctest: +SKIP
    """

    def __init__(
        self,
        dataset: LabelledSet | str | Path,
        *,
        corpus: str | None = None,
        cache_dir: str | Path | None = None,
        uri: str | None = None,
        top_k: int = 10,
        ks: Sequence[int] = DEFAULT_KS,
        limit: int | None = None,
        llm_limit: int | None = 10,
        corpus_limit: int | None = None,
        seed: int = 0,
        concurrency: int = 4,
        answers: bool = False,
        answer_top_k: int = 3,
        llm: Any | None = None,
        embed_model: Any | None = None,
        chunk_size: int = 256,
        chunk_overlap: int = 32,
        rebuild_index: bool = False,
        force: bool = False,
        show_progress: bool = False,
        pack_factory: Callable[..., Any] | None = None,
        answer_prompt: BasePromptTemplate | None = None,
        documents: Sequence[Any] | None = None,
        results_dir: str | Path | None = None,
        filters: Any = None,
    ) -> None:
        counts = {"top_k": top_k, "concurrency": concurrency, "answer_top_k": answer_top_k}
        for name, value in counts.items():
            check_count(name, value)
        optional = {"limit": limit, "llm_limit": llm_limit, "corpus_limit": corpus_limit}
        for name, value in optional.items():
            check_count(name, value, none_ok=True)
        ks = _validated_ks(ks, top_k)
        self.dataset = (
            dataset
            if isinstance(dataset, LabelledSet)
            else load_labelled_set(dataset, corpus=corpus)
        )
        if corpus:
            self.dataset.corpus = corpus
        self.top_k = top_k
        self.ks = ks
        self.limit = limit
        self.llm_limit = llm_limit
        self.corpus_limit = corpus_limit
        self.seed = seed
        self.concurrency = concurrency
        self.answers = answers
        self.answer_top_k = answer_top_k
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.rebuild_index = rebuild_index
        self.force = force
        self.show_progress = show_progress
        self._llm_spec = llm
        self._embed_spec = embed_model
        self._pack_factory = pack_factory or default_pack_factory
        self._documents = list(documents) if documents is not None else None
        if self._documents is not None and not self.dataset.corpus:
            self.dataset.corpus = "custom"
        self._answer_prompt = answer_prompt or DEFAULT_ANSWER_PROMPT
        self.cache_dir = Path(cache_dir) if cache_dir else data_dir() / "eval"
        self.uri = uri or str(self.cache_dir / "index.db")
        self.results_dir = Path(results_dir) if results_dir else self.cache_dir / "results"
        self.scope = EvalScope(filters)
        self._pack: Any | None = None
        self._examples: list[LabelledExample] | None = None
        self._index_key: str | None = None

    # ------------------------------------------------------------------ prompts
    def _get_prompts(self) -> PromptDictType:
        return {"answer_prompt": self._answer_prompt}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        if "answer_prompt" in prompts:
            self._answer_prompt = prompts["answer_prompt"]

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # ------------------------------------------------------------------ data and index
    def examples(self) -> list[LabelledExample]:
        """The questions evaluated (after ``corpus_limit`` and ``limit``)."""
        if self._examples is None:
            self.prepare()
        return list(self._examples or [])

    def prepare(self) -> Any:
        """Load the corpus and open (or build) the cached index; returns the ``RagPack``."""
        if self._pack is not None:
            return self._pack
        documents = (
            self._documents if self._documents is not None else load_corpus(self.dataset.corpus)
        )
        if self.corpus_limit is not None:
            documents = documents[: self.corpus_limit]
        examples = questions_about(self.dataset, documents)
        embed_model = resolve_embed_model(self._embed_spec)
        self._index_key = index_key(
            documents, self.chunk_size, self.chunk_overlap, describe_embed_model(embed_model)
        )
        collection = f"eval_{slug(str(self.dataset.corpus))}_{self._index_key}"
        pack_kwargs = dict(
            uri=self.uri,
            collection_name=collection,
            embed_model=embed_model,
            llm=self._llm_spec,
            similarity_top_k=self.top_k,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            show_progress=self.show_progress,
        )
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self._pack = open_or_build_index(
            self._pack_factory,
            documents,
            pack_kwargs,
            marker=self.cache_dir / "index" / f"{collection}.json",
            rebuild=self.rebuild_index,
        )
        examples = self.scope.questions(self._pack, examples)
        subset = LabelledSet(self.dataset.name, examples, self.dataset.corpus).subset(
            self.limit, seed=self.seed
        )
        self._examples = subset.examples
        return self._pack

    # ------------------------------------------------------------------ running
    def run(self, strategies: str | Iterable[str] | Sequence[Strategy] = "all") -> EvalReport:
        """Evaluate ``strategies`` one question at a time on the sync retriever path."""
        plans, report_rows = self._plan(strategies)
        runner = self._runner()
        for plan in plans:
            runner.run(plan)
        return self._report(report_rows)

    async def arun(
        self, strategies: str | Iterable[str] | Sequence[Strategy] = "all"
    ) -> EvalReport:
        """Evaluate ``strategies`` with up to ``concurrency`` questions in flight (async path)."""
        plans, report_rows = self._plan(strategies)
        runner = self._runner()
        for plan in plans:
            await runner.arun(plan)
        return self._report(report_rows)

    # ------------------------------------------------------------------ planning
    def _runner(self) -> StrategyRunner:
        return StrategyRunner(
            top_k=self.top_k,
            ks=self.ks,
            concurrency=self.concurrency,
            answer_prompt=self._answer_prompt,
            answer_top_k=self.answer_top_k,
            show_progress=self.show_progress,
        )

    def _plan(
        self, strategies: str | Iterable[str] | Sequence[Strategy]
    ) -> tuple[list[StrategyPlan], list[StrategyResult]]:
        if (
            isinstance(strategies, (list, tuple))
            and strategies
            and all(isinstance(s, Strategy) for s in strategies)
        ):
            chosen = list(strategies)
        else:
            chosen = resolve_strategies(strategies)  # type: ignore[arg-type]
        pack = self.prepare()
        rows: list[StrategyResult] = []
        plans: list[StrategyPlan] = []
        for strategy in chosen:
            row = StrategyResult(strategy, "ok")
            rows.append(row)
            plan = self._make_plan(pack, strategy, row)
            if plan is not None:
                plans.append(plan)
        return plans, rows

    def _make_plan(self, pack: Any, strategy: Strategy, row: StrategyResult) -> StrategyPlan | None:
        """The plan of one strategy, or ``None`` with the reason in ``row`` (skipped / error)."""
        llm = pack_llm(pack, strategy, row, answers=self.answers)
        if row.status != "ok":
            return None
        retriever = build_retriever(pack, strategy, row, uri=self.uri, **self.scope.kwargs())
        if retriever is None:
            return None
        uses_llm = strategy.needs_llm or retriever_llm(retriever) is not None
        if uses_llm:
            row.llm = describe_llm(llm if llm is not None else retriever_llm(retriever))
        examples = self.examples()
        if uses_llm and self.llm_limit is not None:
            examples = examples[: self.llm_limit]
        answer_llm = llm if self.answers and llm is not None else None
        cache = self._result_cache(strategy, retriever, row.llm, answer_llm)
        return StrategyPlan(strategy, row, retriever, examples, cache, answer_llm)

    def _result_cache(
        self, strategy: Strategy, retriever: Any, llm_name: str | None, answer_llm: Any | None
    ) -> ResultCache:
        """The strategy's result file, named by a hash of everything that changes its results."""
        key = stable_hash(
            HARNESS_VERSION,
            strategy.config_key(),
            code_fingerprint(retriever, retriever_builder(strategy.mode)),
            self._index_key,
            self.top_k,
            llm_name,
            self.seed,
            (describe_llm(answer_llm), self._answer_prompt.get_template(), self.answer_top_k)
            if answer_llm
            else None,
            _fusion_settings(self.prepare()),
            *self.scope.key(),
        )
        path = self.results_dir / slug(self.dataset.name) / f"{slug(strategy.name)}-{key}.json"
        return ResultCache(path, force=self.force)

    def _report(self, rows: list[StrategyResult]) -> EvalReport:
        return EvalReport(
            dataset=self.dataset.name,
            corpus=self.dataset.corpus
            if self.corpus_limit is None
            else f"{self.dataset.corpus} (first {self.corpus_limit} documents)",
            n_questions=len(self.examples()),
            config={
                "top_k": self.top_k,
                "ks": list(self.ks),
                "limit": self.limit,
                "llm_limit": self.llm_limit,
                "corpus_limit": self.corpus_limit,
                "seed": self.seed,
                "chunk_size": self.chunk_size,
                "chunk_overlap": self.chunk_overlap,
                "answers": self.answers,
                "concurrency": self.concurrency,
                **self.scope.config(),
            },
            rows=rows,
            examples=self.examples(),
        )


def _validated_ks(ks: Sequence[int], top_k: int) -> tuple[int, ...]:
    """``ks`` sorted without repeats, checked against ``top_k``."""
    ks = tuple(sorted(set(ks)))
    if not ks or any(not isinstance(k, int) or k <= 0 for k in ks):
        raise ConfigurationError(f"ks must be positive integers, got {ks!r}")
    if ks[-1] > top_k:
        raise ConfigurationError(
            f"The largest k ({ks[-1]}) exceeds top_k ({top_k}); raise top_k or drop that k."
        )
    return ks


def _fusion_settings(pack: Any) -> Any:
    """The hybrid modes' defaults a pack loaded (a saved fit changes the hybrid results)."""
    config = getattr(pack, "fusion_config", None)
    return config.settings() if config is not None else None
