"""Scoring one strategy's retrieved chunks against a labelled question.

* document level (a chunk counts for its source document): recall@k, precision@k, MRR@k, nDCG@k;
* chunk level: *evidence hit@k*, a chunk from a relevant document that contains the evidence
  sentence is in the top k;
* *answer in context@k*: a gold answer occurs in one of the top-k chunks (open-domain QA's
  top-k accuracy);
* EM and token F1 of an answer the LLM wrote, when there is one.

:func:`score_retrieval` turns retrieved nodes into per-node flags (what the result cache keeps);
:func:`question_metrics` and :func:`summarize` compute the metrics from those flags.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import NodeWithScore

from llama_index_rag_pack.evaluation import metrics as M
from llama_index_rag_pack.evaluation.labelled import LabelledExample

__all__ = [
    "DEFAULT_KS",
    "evidence_in_text",
    "node_doc_ids",
    "question_metrics",
    "score_retrieval",
    "summarize",
]

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
DOC_ID_METADATA_KEYS = ("ref_doc_id", "doc_id", "document_id", "source_doc_id")
DOC_IDS_METADATA_KEYS = ("source_doc_ids", "doc_ids", "ref_doc_ids")


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
