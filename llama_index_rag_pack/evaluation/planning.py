"""What a strategy needs before it runs: its LLM and its retriever, or why it is skipped.

A strategy that cannot run (no LLM for an LLM strategy, no RAPTOR tree, a retriever that fails to
build) does not stop the evaluation: its report row says why, with the command that fixes it when
there is one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from llama_index.core.llms import LLM

from llama_index_rag_pack.core.errors import ConfigurationError, LLMNotConfiguredError, RagPackError
from llama_index_rag_pack.evaluation.cache import ResultCache
from llama_index_rag_pack.evaluation.labelled import LabelledExample
from llama_index_rag_pack.evaluation.report import StrategyResult
from llama_index_rag_pack.evaluation.strategies import Strategy

logger = logging.getLogger(__name__)

__all__ = ["StrategyPlan", "build_retriever", "pack_llm", "retriever_llm"]


@dataclass
class StrategyPlan:
    """One strategy ready to run.

    Attributes:
        strategy: The strategy.
        row: Its line of the report, filled in when the run ends.
        retriever: The retriever built for it.
        examples: The questions it answers (fewer for LLM strategies under ``llm_limit``).
        cache: Its result file.
        answer_llm: The LLM that answers from the top chunks, when answers are scored.
    """

    strategy: Strategy
    row: StrategyResult
    retriever: Any
    examples: list[LabelledExample]
    cache: ResultCache
    answer_llm: Any | None


def pack_llm(pack: Any, strategy: Strategy, row: StrategyResult, *, answers: bool) -> Any | None:
    """The pack's LLM when ``strategy`` or answer scoring needs one.

    ``None`` when neither does, and when the pack has no LLM: then a strategy that needs one is
    marked skipped in ``row`` (and answer scoring noted as off).
    """
    if not (strategy.needs_llm or answers):
        return None
    try:
        return pack.llm
    except (LLMNotConfiguredError, ConfigurationError) as e:
        if strategy.needs_llm:
            row.status, row.note = "skipped", f"needs an LLM: {e}"
        else:
            row.note = f"answers not scored: {e}"
        return None


def build_retriever(
    pack: Any, strategy: Strategy, row: StrategyResult, *, uri: str, **scope: Any
) -> Any | None:
    """The strategy's retriever, or ``None`` with why it could not be built in ``row``.

    Args:
        pack: The ``RagPack`` over the evaluation index.
        strategy: The strategy.
        row: Its report row (status and note are set when the retriever cannot be built).
        uri: The evaluation index's Milvus uri (named in the RAPTOR build hint).
        **scope: ``filters=`` every strategy searches under (a strategy that takes none is
            skipped).
    """
    try:
        return pack.retriever(strategy.mode, **{**dict(strategy.kwargs), **scope})
    except (LLMNotConfiguredError, ConfigurationError, RagPackError, NotImplementedError) as e:
        row.status, row.note = "skipped", f"{type(e).__name__}: {e}"
        if strategy.needs_tree:
            collection = getattr(pack.vector_store, "collection_name", "?")
            row.note += (
                f" For this evaluation index: `rag-pack --uri {uri} "
                f"--collection {collection} raptor build` (LLM summaries of every cluster: "
                "slow with a local model; use --corpus-limit for a small corpus)."
            )
    except Exception as e:  # noqa: BLE001 - one broken strategy must not stop the others
        logger.debug("building %s failed", strategy.name, exc_info=True)
        row.status = "error"
        row.note = f"building the retriever failed: {type(e).__name__}: {e}"
    return None


def retriever_llm(retriever: Any) -> LLM | None:
    """The LLM a retriever holds (``llm`` / ``_llm``), if any."""
    for attr in ("llm", "_llm"):
        value = getattr(retriever, attr, None)
        if isinstance(value, LLM):
            return value
    return None
