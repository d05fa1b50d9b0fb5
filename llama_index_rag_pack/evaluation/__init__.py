"""Evaluation: metrics, offline corpora, labelled question sets and the strategy harness.

The harness (:class:`EvalHarness`) is imported lazily so ``import llama_index_rag_pack`` stays
light.
"""

from __future__ import annotations

from typing import Any

from llama_index_rag_pack.evaluation.labelled import (
    LabelledExample,
    LabelledSet,
    load_corpus,
    load_labelled_set,
    save_labelled_set,
    shipped_sets,
)
from llama_index_rag_pack.evaluation.metrics import (
    citation_precision,
    citation_recall,
    exact_match,
    hit_at_k,
    mrr_at_k,
    ndcg_at_k,
    normalize_answer,
    precision_at_k,
    recall_at_k,
    token_f1,
)

_LAZY = {
    "EvalHarness": "llama_index_rag_pack.evaluation.harness",
    "EvalReport": "llama_index_rag_pack.evaluation.report",
    "Strategy": "llama_index_rag_pack.evaluation.strategies",
    "register_strategy": "llama_index_rag_pack.evaluation.strategies",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EvalHarness",
    "EvalReport",
    "LabelledExample",
    "LabelledSet",
    "Strategy",
    "citation_precision",
    "citation_recall",
    "exact_match",
    "hit_at_k",
    "load_corpus",
    "load_labelled_set",
    "mrr_at_k",
    "ndcg_at_k",
    "normalize_answer",
    "precision_at_k",
    "recall_at_k",
    "register_strategy",
    "save_labelled_set",
    "shipped_sets",
    "token_f1",
]
