"""Run retrieval strategies over a labelled set and score them; cache per strategy.

:class:`EvalHarness` indexes the set's corpus once into Milvus (reused while the corpus, chunking
and embedding model are unchanged), obtains one retriever per strategy from
``RagPack.retriever(mode)``, retrieves ``top_k`` chunks per question, and scores:

* document level (a chunk counts for its source document): recall@k, MRR@k, nDCG@k;
* chunk level: *evidence hit@k*, a chunk from a relevant document that contains the evidence
  sentence is in the top k;
* *answer in context@k*: a gold answer occurs in one of the top-k chunks (open-domain QA's
  top-k accuracy);
* optionally answers: EM and token F1 of an answer the LLM writes from the top chunks.

Per-question results are cached under ``cache_dir`` in a file keyed by the strategy's mode and
arguments, the source code of its retriever, the index, ``top_k``, the LLM in use and the seed;
an entry is reused only when the question and its labels are unchanged. A re-run therefore only
computes strategies (and questions) whose config, code or data changed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.prompts.mixin import PromptDictType, PromptMixin, PromptMixinType
from llama_index.core.schema import NodeWithScore

from llama_index_rag_pack.core import metrics as M
from llama_index_rag_pack.core.errors import ConfigurationError, LLMNotConfiguredError, RagPackError
from llama_index_rag_pack.evaluation.labelled import (
    LabelledExample,
    LabelledSet,
    load_corpus,
    load_labelled_set,
)
from llama_index_rag_pack.evaluation.strategies import (
    Strategy,
    code_fingerprint,
    resolve_strategies,
    retriever_builder,
)

logger = logging.getLogger(__name__)

HARNESS_VERSION = "1"
DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
DOC_ID_METADATA_KEYS = ("ref_doc_id", "doc_id", "document_id", "source_doc_id")
DOC_IDS_METADATA_KEYS = ("source_doc_ids", "doc_ids", "ref_doc_ids")

DEFAULT_ANSWER_PROMPT = PromptTemplate(
    "Answer the question with a short phrase taken from the context (a name, a year, a few "
    "words). Reply with the answer only.\n\n"
    "Context:\n{context_str}\n\n"
    "Question: {query_str}\n"
    "Answer:"
)

# Headline columns: (key, label). Keys are produced by :func:`summarize`.
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("recall@1", "R@1"),
    ("recall@5", "R@5"),
    ("recall@10", "R@10"),
    ("mrr@10", "MRR@10"),
    ("ndcg@10", "nDCG@10"),
    ("evidence@5", "chunk hit@5"),
    ("answer_in_context@5", "answer@5"),
)


# --------------------------------------------------------------------------- per-question scoring
def _norm_space(text: str) -> str:
    return " ".join(text.split()).lower()


def node_doc_ids(node: Any) -> list[str]:
    """Source document id(s) of a retrieved node (summary nodes may list several)."""
    meta = getattr(node, "metadata", None) or {}
    for key in DOC_IDS_METADATA_KEYS:
        value = meta.get(key)
        if isinstance(value, (list, tuple)) and value:
            return [str(v) for v in value]
    ref = getattr(node, "ref_doc_id", None)
    if ref:
        return [str(ref)]
    for key in DOC_ID_METADATA_KEYS:
        if meta.get(key):
            return [str(meta[key])]
    return []


def evidence_in_text(text: str, evidence: Sequence[str], answers: Sequence[str] = ()) -> bool:
    """True when ``text`` holds an evidence sentence.

    A sentence split across two chunks still counts for a chunk holding the answer and at least
    60% of the sentence's words.
    """
    hay = _norm_space(text)
    for sentence in evidence:
        needle = _norm_space(sentence)
        if needle and needle in hay:
            return True
        if answers and M.answer_in_text(text, answers):
            words = set(re.findall(r"\w+", needle))
            if words and len(words & set(re.findall(r"\w+", hay))) >= 0.6 * len(words):
                return True
    return False


def score_retrieval(
    example: LabelledExample, nodes: Sequence[NodeWithScore]
) -> list[dict[str, Any]]:
    """Per retrieved node: its document ids and whether it is relevant / holds evidence / answer."""
    relevant = set(example.relevant_ids)
    out = []
    for nws in nodes:
        node = nws.node
        text = node.get_content()
        doc_ids = node_doc_ids(node)
        is_rel = bool(relevant.intersection(doc_ids))
        out.append(
            {
                "node_id": node.node_id,
                "doc_ids": doc_ids,
                "score": None if nws.score is None else float(nws.score),
                "relevant": is_rel,
                "evidence": is_rel
                and bool(example.evidence)
                and evidence_in_text(text, example.evidence, example.answers),
                "answer": bool(example.answers) and M.answer_in_text(text, example.answers),
            }
        )
    return out


def question_metrics(
    result: dict[str, Any], example: LabelledExample, ks: Sequence[int]
) -> dict[str, float]:
    """Metrics of one question from its cached per-node flags."""
    retrieved = result.get("retrieved") or []
    ranked_docs: list[str] = []
    for item in retrieved:
        # A node counts as its first relevant doc id (else its first id) at that rank.
        ids = item["doc_ids"]
        hit = next((d for d in ids if d in example.relevant_ids), None)
        ranked_docs.append(hit or (ids[0] if ids else f"?{item['node_id']}"))
    rel = set(example.relevant_ids)
    out: dict[str, float] = {}
    max_k = max(ks)
    for k in ks:
        if rel:
            out[f"recall@{k}"] = M.recall_at_k(ranked_docs, rel, k)
            out[f"precision@{k}"] = M.precision_at_k(ranked_docs, rel, k)
            out[f"ndcg@{k}"] = M.ndcg_at_k(ranked_docs, rel, k)
        if example.evidence:
            out[f"evidence@{k}"] = float(any(r["evidence"] for r in retrieved[:k]))
        if example.answers:
            out[f"answer_in_context@{k}"] = float(any(r["answer"] for r in retrieved[:k]))
    if rel:
        out[f"mrr@{max_k}"] = M.mrr_at_k(ranked_docs, rel, max_k)
        out["mrr@10"] = M.mrr_at_k(ranked_docs, rel, 10) if max_k >= 10 else out[f"mrr@{max_k}"]
    if "prediction" in result and example.answers:
        out["em"] = M.exact_match(result["prediction"], example.answers)
        out["f1"] = M.token_f1(result["prediction"], example.answers)
    out["latency_ms"] = float(result.get("latency_ms", 0.0))
    out["error"] = float(bool(result.get("error")))
    return out


def summarize(
    results: dict[str, dict[str, Any]], examples: Sequence[LabelledExample], ks: Sequence[int]
) -> dict[str, float]:
    """Mean of every metric over the examples that have a result."""
    per_q = [question_metrics(results[ex.id], ex, ks) for ex in examples if ex.id in results]
    keys = sorted({k for m in per_q for k in m})
    out = {k: M.mean(m[k] for m in per_q if k in m) for k in keys}
    out["errors"] = float(sum(m.get("error", 0.0) for m in per_q))
    return out


# --------------------------------------------------------------------------- report
@dataclass
class StrategyResult:
    """Outcome of one strategy: its metrics, or why it was skipped / failed.

    Example:
        >>> from llama_index_rag_pack.evaluation.strategies import Strategy
        >>> StrategyResult(Strategy("fusion", "fusion"), "ok", llm="ScriptedLLM").label
        'fusion [LLM: ScriptedLLM]'
    """

    strategy: Strategy
    status: str  # "ok", "skipped", "error"
    note: str = ""
    n: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    llm: str | None = None
    cached: int = 0
    seconds: float = 0.0
    question_ids: list[str] = field(default_factory=list)
    results: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        return f"{self.strategy.name} [LLM: {self.llm}]" if self.llm else self.strategy.name


@dataclass
class EvalReport:
    """Results of one ``rag-pack eval`` run; renders Markdown, JSON and a bar chart.

    Example:
        >>> report = EvalHarness("wiki_qa", limit=20).run("vector,bm25")  # doctest: +SKIP
        >>> report.write("eval-out")  # doctest: +SKIP
        {'markdown': PosixPath('eval-out/wiki_qa.md'), 'json': ..., 'chart': ...}
    """

    dataset: str
    corpus: str | None
    n_questions: int
    config: dict[str, Any]
    rows: list[StrategyResult]
    examples: list[LabelledExample] = field(default_factory=list, repr=False)

    def ok_rows(self) -> list[StrategyResult]:
        return [r for r in self.rows if r.status == "ok"]

    def shared_question_ids(self) -> list[str]:
        rows = self.ok_rows()
        if not rows:
            return []
        common = set(rows[0].question_ids)
        for r in rows[1:]:
            common &= set(r.question_ids)
        return [ex.id for ex in self.examples if ex.id in common]

    def shared_metrics(self) -> dict[str, dict[str, float]]:
        """Metrics of every ok strategy on the questions all of them answered."""
        ids = set(self.shared_question_ids())
        exs = [ex for ex in self.examples if ex.id in ids]
        ks = tuple(self.config.get("ks", DEFAULT_KS))
        return {r.strategy.name: summarize(r.results, exs, ks) for r in self.ok_rows()}

    def to_dict(self) -> dict[str, Any]:
        shared = self.shared_metrics() if self._uneven() else {}
        return {
            "dataset": self.dataset,
            "corpus": self.corpus,
            "n_questions": self.n_questions,
            "config": self.config,
            "strategies": [
                {
                    "name": r.strategy.name,
                    "mode": r.strategy.mode,
                    "kwargs": dict(r.strategy.kwargs),
                    "status": r.status,
                    "note": r.note,
                    "llm": r.llm,
                    "n": r.n,
                    "cached": r.cached,
                    "seconds": round(r.seconds, 3),
                    "metrics": {k: round(v, 6) for k, v in r.metrics.items()},
                    **(
                        {
                            "shared_subset_metrics": {
                                k: round(v, 6) for k, v in shared[r.strategy.name].items()
                            }
                        }
                        if r.strategy.name in shared
                        else {}
                    ),
                }
                for r in self.rows
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    def _uneven(self) -> bool:
        return len({r.n for r in self.ok_rows()}) > 1

    def _columns(self) -> list[tuple[str, str]]:
        cols = list(SUMMARY_COLUMNS)
        if any("em" in r.metrics for r in self.ok_rows()):
            cols += [("em", "EM"), ("f1", "F1")]
        return cols

    def _table(
        self,
        metrics_by_name: dict[str, dict[str, float]],
        rows: list[StrategyResult],
        *,
        n_col: bool,
    ) -> list[str]:
        cols = self._columns()
        header = ["strategy", *[label for _, label in cols], "ms/query"] + (["n"] if n_col else [])
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in rows:
            m = metrics_by_name[r.strategy.name]
            ms = r.metrics.get("ms_per_query", m.get("latency_ms", 0.0))
            cells = [r.label, *[f"{m[k]:.3f}" if k in m else "–" for k, _ in cols], f"{ms:.0f}"]
            if n_col:
                cells.append(str(r.n))
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    def to_markdown(self) -> str:
        """The results table (plus a shared-subset table when strategies ran on different
        counts)."""
        rows = self.ok_rows()
        cfg = self.config
        lines = [
            f"### `{self.dataset}`: {self.n_questions} questions, corpus `{self.corpus}`, "
            f"top_k={cfg.get('top_k')}",
            "",
        ]
        if rows:
            lines += self._table({r.strategy.name: r.metrics for r in rows}, rows, n_col=True)
        if rows and self._uneven():
            shared = self.shared_metrics()
            lines += [
                "",
                f"Same {len(self.shared_question_ids())} questions for every strategy "
                "(LLM strategies ran on a subset):",
                "",
                *self._table(shared, rows, n_col=False),
            ]
        others = [r for r in self.rows if r.status != "ok"]
        if others:
            lines += ["", "Not run:"]
            lines += [f"- `{r.strategy.name}` ({r.status}): {r.note}" for r in others]
        lines += [
            "",
            "R@k: a chunk of the relevant article in the top k (document level); chunk hit@k: a "
            "chunk holding the evidence sentence in the top k; answer@k: the gold answer "
            "appears in a top-k chunk; "
            f"ms/query: wall time per question with {cfg.get('concurrency', 1)} in flight.",
        ]
        return "\n".join(lines) + "\n"

    def plot(
        self,
        path: str | Path,
        *,
        metrics: Sequence[str] = (
            "recall@5",
            "mrr@10",
            "ndcg@10",
            "evidence@5",
            "answer_in_context@5",
        ),
    ) -> Path:
        """Grouped bar chart of ``metrics`` per strategy, saved as PNG."""
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        import numpy as np

        rows = self.ok_rows()
        if not rows:
            raise ConfigurationError("No strategy produced results: nothing to plot.")
        labels = dict(SUMMARY_COLUMNS)
        metrics = [m for m in metrics if any(m in r.metrics for r in rows)]
        x = np.arange(len(rows))
        width = 0.8 / max(len(metrics), 1)
        fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(rows) + 2), 4.2))
        for i, metric in enumerate(metrics):
            values = [r.metrics.get(metric, 0.0) for r in rows]
            bars = ax.bar(
                x + (i - (len(metrics) - 1) / 2) * width,
                values,
                width,
                label=labels.get(metric, metric),
            )
            if len(rows) * len(metrics) <= 40:
                ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
        uneven = self._uneven()
        ticks = [
            r.strategy.name + ("*" if r.llm else "") + (f"\nn={r.n}" if uneven else "")
            for r in rows
        ]
        ax.set_xticks(
            x, ticks, rotation=20 if not uneven else 0, ha="right" if not uneven else "center"
        )
        ax.set_ylim(0, 1.08)
        ax.set_ylabel("score")
        title = f"{self.dataset}: {self.n_questions} questions, top_k={self.config.get('top_k')}"
        if any(r.llm for r in rows):
            title += "  (* uses LLM: " + ", ".join(sorted({r.llm for r in rows if r.llm})) + ")"
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, ncol=len(metrics), loc="upper center", bbox_to_anchor=(0.5, -0.22))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    def write(
        self, out_dir: str | Path, *, stem: str | None = None, chart: bool = True
    ) -> dict[str, Path]:
        """Write ``<stem>.md``, ``<stem>.json`` and (if any row ran) ``<stem>.png`` to
        ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        stem = stem or self.dataset
        paths = {"markdown": out / f"{stem}.md", "json": out / f"{stem}.json"}
        paths["markdown"].write_text(self.to_markdown(), encoding="utf-8")
        paths["json"].write_text(self.to_json() + "\n", encoding="utf-8")
        if chart and self.ok_rows():
            paths["chart"] = self.plot(out / f"{stem}.png")
        return paths


# --------------------------------------------------------------------------- harness
def _hash(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=repr, ensure_ascii=False).encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


def _example_key(ex: LabelledExample) -> str:
    return _hash(ex.question, ex.relevant_ids, ex.answers, ex.evidence)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "corpus"


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
    ) -> None:
        for name, value in (
            ("top_k", top_k),
            ("concurrency", concurrency),
            ("answer_top_k", answer_top_k),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
        for name, value in (
            ("limit", limit),
            ("llm_limit", llm_limit),
            ("corpus_limit", corpus_limit),
        ):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigurationError(
                    f"{name} must be a positive integer or None, got {value!r}"
                )
        ks = tuple(sorted(set(ks)))
        if not ks or any(not isinstance(k, int) or k <= 0 for k in ks):
            raise ConfigurationError(f"ks must be positive integers, got {ks!r}")
        if ks[-1] > top_k:
            raise ConfigurationError(
                f"The largest k ({ks[-1]}) exceeds top_k ({top_k}); raise top_k or drop that k."
            )
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
        self._pack_factory = pack_factory
        self._documents = list(documents) if documents is not None else None
        if self._documents is not None and not self.dataset.corpus:
            self.dataset.corpus = "custom"
        self._answer_prompt = answer_prompt or DEFAULT_ANSWER_PROMPT
        from llama_index_rag_pack.components.settings import data_dir

        self.cache_dir = Path(cache_dir) if cache_dir else data_dir() / "eval"
        self.uri = uri or str(self.cache_dir / "index.db")
        self.results_dir = Path(results_dir) if results_dir else self.cache_dir / "results"
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
        from llama_index_rag_pack.storage.milvus import count_entities

        documents = (
            self._documents if self._documents is not None else load_corpus(self.dataset.corpus)
        )
        if self.corpus_limit is not None:
            documents = documents[: self.corpus_limit]
        doc_ids = {d.doc_id for d in documents}
        examples = [
            ex
            for ex in self.dataset.examples
            if not ex.relevant_ids or set(ex.relevant_ids) <= doc_ids
        ]
        dropped = len(self.dataset.examples) - len(examples)
        if dropped:
            logger.info(
                "%d questions refer to documents outside the indexed corpus: left out", dropped
            )
        if not examples:
            raise ConfigurationError(
                f"None of the {len(self.dataset)} questions has its relevant documents in the "
                f"corpus ({len(documents)} documents): check --corpus / --corpus-limit and the ids "
                "in the set."
            )
        subset = LabelledSet(self.dataset.name, examples, self.dataset.corpus).subset(
            self.limit, seed=self.seed
        )
        self._examples = subset.examples

        from llama_index_rag_pack.components.settings import (
            describe_embed_model,
            resolve_embed_model,
        )

        embed_model = resolve_embed_model(self._embed_spec)
        corpus_hash = _hash(
            [(d.doc_id, hashlib.sha256(d.text.encode()).hexdigest()) for d in documents]
        )
        self._index_key = _hash(
            corpus_hash, self.chunk_size, self.chunk_overlap, describe_embed_model(embed_model)
        )
        collection = f"eval_{_slug(str(self.dataset.corpus))}_{self._index_key}"
        marker = self.cache_dir / "index" / f"{collection}.json"
        kwargs = dict(
            uri=self.uri,
            collection_name=collection,
            embed_model=embed_model,
            llm=self._llm_spec,
            similarity_top_k=self.top_k,
            chunk_size=self.chunk_size,
            chunk_overlap=self.chunk_overlap,
            show_progress=self.show_progress,
        )
        factory = self._pack_factory or _default_pack_factory
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        pack = None
        if not self.rebuild_index and marker.exists():
            expected = json.loads(marker.read_text()).get("chunks")
            try:
                pack = factory(None, **kwargs)
                if count_entities(pack.vector_store) != expected:
                    logger.warning("Cached index %s is incomplete: rebuilding", collection)
                    pack = None
            except RagPackError as e:
                logger.info("No usable cached index (%s): building it", e)
                pack = None
        if pack is None:
            logger.info("Indexing %d documents into %s (%s)", len(documents), collection, self.uri)
            marker.unlink(missing_ok=True)
            pack = factory(documents, overwrite=True, **kwargs)
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(
                json.dumps(
                    {"chunks": count_entities(pack.vector_store), "documents": len(documents)}
                )
            )
        self._pack = pack
        return pack

    # ------------------------------------------------------------------ running
    def run(self, strategies: str | Iterable[str] | Sequence[Strategy] = "all") -> EvalReport:
        """Evaluate ``strategies`` one question at a time on the sync retriever path."""
        plans, report_rows = self._plan(strategies)
        for plan in plans:
            self._run_one(plan, None)
        return self._report(report_rows)

    async def arun(
        self, strategies: str | Iterable[str] | Sequence[Strategy] = "all"
    ) -> EvalReport:
        """Evaluate ``strategies`` with up to ``concurrency`` questions in flight (async path)."""
        plans, report_rows = self._plan(strategies)
        for plan in plans:
            await self._arun_one(plan)
        return self._report(report_rows)

    # ------------------------------------------------------------------ internals
    def _plan(
        self, strategies: str | Iterable[str] | Sequence[Strategy]
    ) -> tuple[list[_Plan], list[StrategyResult]]:
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
        plans: list[_Plan] = []
        for strategy in chosen:
            row = StrategyResult(strategy, "ok")
            rows.append(row)
            plan = self._make_plan(pack, strategy, row)
            if plan is not None:
                plans.append(plan)
        return plans, rows

    def _make_plan(self, pack: Any, strategy: Strategy, row: StrategyResult) -> _Plan | None:
        from llama_index_rag_pack.components.settings import describe_llm

        llm = None
        if strategy.needs_llm or self.answers:
            try:
                llm = pack.llm
            except (LLMNotConfiguredError, ConfigurationError) as e:
                if strategy.needs_llm:
                    row.status, row.note = "skipped", f"needs an LLM: {e}"
                    return None
                row.note = f"answers not scored: {e}"
        try:
            retriever = pack.retriever(strategy.mode, **dict(strategy.kwargs))
        except (LLMNotConfiguredError, ConfigurationError, RagPackError, NotImplementedError) as e:
            row.status, row.note = "skipped", f"{type(e).__name__}: {e}"
            if strategy.needs_tree:
                collection = getattr(pack.vector_store, "collection_name", "?")
                row.note += (
                    f" For this evaluation index: `rag-pack --uri {self.uri} "
                    f"--collection {collection} raptor build` (LLM summaries of every cluster: "
                    "slow with a local model; use --corpus-limit for a small corpus)."
                )
            return None
        except Exception as e:  # noqa: BLE001 - one broken strategy must not stop the others
            logger.debug("building %s failed", strategy.name, exc_info=True)
            row.status, row.note = (
                "error",
                f"building the retriever failed: {type(e).__name__}: {e}",
            )
            return None
        uses_llm = strategy.needs_llm or _retriever_llm(retriever) is not None
        if uses_llm:
            row.llm = describe_llm(llm if llm is not None else _retriever_llm(retriever))
        examples = self.examples()
        if uses_llm and self.llm_limit is not None:
            examples = examples[: self.llm_limit]
        answer_llm = llm if self.answers and llm is not None else None
        key = _hash(
            HARNESS_VERSION,
            strategy.config_key(),
            code_fingerprint(retriever, retriever_builder(strategy.mode)),
            self._index_key,
            self.top_k,
            row.llm,
            self.seed,
            (describe_llm(answer_llm), self._answer_prompt.get_template(), self.answer_top_k)
            if answer_llm
            else None,
        )
        path = self.results_dir / _slug(self.dataset.name) / f"{_slug(strategy.name)}-{key}.json"
        return _Plan(strategy, row, retriever, examples, path, answer_llm)

    def _load_cache(self, plan: _Plan) -> dict[str, dict[str, Any]]:
        if self.force or not plan.path.exists():
            return {}
        try:
            data = json.loads(plan.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            logger.warning("Unreadable cache %s: recomputing", plan.path)
            return {}
        plan.timing = data.get("timing", {"questions": 0, "seconds": 0.0})
        return data.get("results", {})

    def _save_cache(
        self, plan: _Plan, results: dict[str, dict[str, Any]], computed: int, seconds: float
    ) -> None:
        plan.timing = {
            "questions": plan.timing.get("questions", 0) + computed,
            "seconds": plan.timing.get("seconds", 0.0) + seconds,
        }
        plan.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = plan.path.with_suffix(".tmp")
        payload = {"strategy": plan.strategy.name, "timing": plan.timing, "results": results}
        tmp.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
        tmp.replace(plan.path)

    def _todo(self, plan: _Plan, cache: dict[str, dict[str, Any]]) -> list[LabelledExample]:
        return [ex for ex in plan.examples if cache.get(ex.id, {}).get("key") != _example_key(ex)]

    def _progress(self, plan: _Plan, total: int) -> Any:
        if not self.show_progress or total == 0:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{plan.strategy.name:>18}", unit="q", leave=True)

    def _run_one(self, plan: _Plan, _unused: Any) -> None:
        start = time.perf_counter()
        cache = self._load_cache(plan)
        todo = self._todo(plan, cache)
        bar = self._progress(plan, len(todo))
        loop_start = time.perf_counter()
        for ex in todo:
            t0 = time.perf_counter()
            try:
                nodes = plan.retriever.retrieve(ex.question)
                entry: dict[str, Any] = {"retrieved": score_retrieval(ex, nodes[: self.top_k])}
                if plan.answer_llm is not None:
                    entry["prediction"] = self._answer_sync(plan.answer_llm, ex, nodes)
            except Exception as e:  # noqa: BLE001 - scored as a miss, reported in the table
                logger.warning("%s failed on %s: %s", plan.strategy.name, ex.id, e)
                entry = {"retrieved": [], "error": f"{type(e).__name__}: {e}"}
            entry["latency_ms"] = (time.perf_counter() - t0) * 1000
            entry["key"] = _example_key(ex)
            cache[ex.id] = entry
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        if todo:
            self._save_cache(plan, cache, len(todo), time.perf_counter() - loop_start)
        self._finish(plan, cache, len(plan.examples) - len(todo), time.perf_counter() - start)

    async def _arun_one(self, plan: _Plan) -> None:
        start = time.perf_counter()
        cache = self._load_cache(plan)
        todo = self._todo(plan, cache)
        bar = self._progress(plan, len(todo))
        loop_start = time.perf_counter()
        semaphore = asyncio.Semaphore(self.concurrency)

        async def one(ex: LabelledExample) -> None:
            async with semaphore:
                t0 = time.perf_counter()
                try:
                    nodes = await plan.retriever.aretrieve(ex.question)
                    entry: dict[str, Any] = {"retrieved": score_retrieval(ex, nodes[: self.top_k])}
                    if plan.answer_llm is not None:
                        entry["prediction"] = await self._answer_async(plan.answer_llm, ex, nodes)
                except Exception as e:  # noqa: BLE001 - scored as a miss, reported in the table
                    logger.warning("%s failed on %s: %s", plan.strategy.name, ex.id, e)
                    entry = {"retrieved": [], "error": f"{type(e).__name__}: {e}"}
                entry["latency_ms"] = (time.perf_counter() - t0) * 1000
                entry["key"] = _example_key(ex)
                cache[ex.id] = entry
                if bar is not None:
                    bar.update(1)

        await asyncio.gather(*(one(ex) for ex in todo))
        if bar is not None:
            bar.close()
        if todo:
            self._save_cache(plan, cache, len(todo), time.perf_counter() - loop_start)
        self._finish(plan, cache, len(plan.examples) - len(todo), time.perf_counter() - start)

    def _answer_prompt_for(self, ex: LabelledExample, nodes: Sequence[NodeWithScore]) -> str:
        context = "\n\n".join(n.node.get_content() for n in nodes[: self.answer_top_k])
        return self._answer_prompt.format(context_str=context, query_str=ex.question)

    def _answer_sync(self, llm: Any, ex: LabelledExample, nodes: Sequence[NodeWithScore]) -> str:
        return clean_prediction(llm.complete(self._answer_prompt_for(ex, nodes)).text)

    async def _answer_async(
        self, llm: Any, ex: LabelledExample, nodes: Sequence[NodeWithScore]
    ) -> str:
        return clean_prediction((await llm.acomplete(self._answer_prompt_for(ex, nodes))).text)

    def _finish(
        self, plan: _Plan, cache: dict[str, dict[str, Any]], cached: int, seconds: float
    ) -> None:
        row = plan.row
        ids = {ex.id for ex in plan.examples}
        row.results = {k: v for k, v in cache.items() if k in ids}
        row.question_ids = [ex.id for ex in plan.examples]
        row.n = len(plan.examples)
        row.cached = cached
        row.seconds = seconds
        row.metrics = summarize(row.results, plan.examples, self.ks)
        if plan.timing.get("questions"):
            # wall time per question at the concurrency used (a serialised local LLM makes
            # per-question latency under concurrency meaningless; throughput is what one waits for)
            row.metrics["ms_per_query"] = 1000.0 * plan.timing["seconds"] / plan.timing["questions"]
        if row.metrics.get("errors"):
            row.note = (
                row.note + "; " if row.note else ""
            ) + f"{int(row.metrics['errors'])} questions failed"

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
            },
            rows=rows,
            examples=self.examples(),
        )


@dataclass
class _Plan:
    strategy: Strategy
    row: StrategyResult
    retriever: Any
    examples: list[LabelledExample]
    path: Path
    answer_llm: Any | None
    timing: dict[str, Any] = field(default_factory=lambda: {"questions": 0, "seconds": 0.0})


def clean_prediction(text: str) -> str:
    """First line of an LLM answer without a leading ``Answer:`` label, quotes or a final period."""
    text = (text or "").strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"^(?:final\s+)?answer\s*[:\-]\s*", "", line, flags=re.I)
    for _ in range(2):
        line = line.strip().rstrip(".").strip().strip("\"'`*“”")
    return line.strip()


def _retriever_llm(retriever: Any) -> Any | None:
    from llama_index.core.llms import LLM

    for attr in ("llm", "_llm"):
        value = getattr(retriever, attr, None)
        if isinstance(value, LLM):
            return value
    return None


def _default_pack_factory(documents: Any, **kwargs: Any) -> Any:
    from llama_index_rag_pack.pack.rag_pack import RagPack

    if documents is None:
        return RagPack.open(**kwargs)
    return RagPack(documents, **kwargs)


__all__ = [
    "DEFAULT_ANSWER_PROMPT",
    "EvalHarness",
    "EvalReport",
    "StrategyResult",
    "clean_prediction",
    "evidence_in_text",
    "node_doc_ids",
    "question_metrics",
    "score_retrieval",
    "summarize",
]
