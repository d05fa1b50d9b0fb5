"""The BM25 side of a chunk collection: which field Milvus' BM25 function reads, how it was
analysed, and the upgrade of a collection indexed with another analysis.

A collection made with a client-side analyzer (``english``, the default, or a callable; see
:mod:`~llama_index_rag_pack.documents.bm25_analysis`) holds two texts per chunk: ``text``, the
original (shown, cited, sent to the LLM), and ``bm25_text``, its analysed copy with the
chunk's title and headings, which the BM25 function reads. The collection property
``rag_pack.bm25_analyzer`` records the analyzer's name. A collection whose BM25 function reads
``text`` (every collection indexed before this layout) is searched with Milvus' ``standard``
analysis, as it was indexed;
:func:`~llama_index_rag_pack.milvus.bm25.bm25_upgrade.upgrade_bm25_analysis` (``rag-pack index
--reindex``) rebuilds it with the new one, keeping its vectors and ids.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.bm25_analysis import (
    ANALYSIS_PROPERTY,
    LANGUAGES_PROPERTY,
    VERSION_PROPERTY,
    Bm25Analysis,
    BM25Analyzer,
    resolve_analyzer,
)
from llama_index_rag_pack.documents.language_analysis import AUTO_VERSION, LanguageProfile
from llama_index_rag_pack.documents.segmenters import segmenter_versions

logger = logging.getLogger(__name__)

__all__ = [
    "BM25_TEXT_FIELD",
    "BM25_VECTORS_PROPERTY",
    "LANGUAGE_KEY",
    "analysis_outdated",
    "collection_properties",
    "check_async_client",
    "store_analysis",
    "bm25_input_field",
    "bm25_store_kwargs",
    "collection_bm25_analysis",
    "function_type_name",
    "stored_bm25_analysis",
]

#: The field holding a chunk's analysed copy (read by the BM25 function, never shown).
BM25_TEXT_FIELD = "bm25_text"
#: The collection property saying the pack computes its BM25 vectors (``client``), on a Milvus
#: without the BM25 function (:mod:`~llama_index_rag_pack.milvus.bm25.client_bm25`).
BM25_VECTORS_PROPERTY = "rag_pack.bm25_vectors"
#: The metadata key recording a chunk's main language under a language-aware analysis
#: (ISO 639 code: ``en``, ``zh``, ``de``, ...); filterable (``language == "zh"``), kept out of
#: the text embedded and shown to the LLM.
LANGUAGE_KEY = "language"


def function_type_name(value: Any) -> str:
    """The name of a Milvus function type as ``describe_collection`` reports it (``BM25``)."""
    name = getattr(value, "name", None)  # pymilvus FunctionType enum
    if name:
        return str(name).upper()
    return "BM25" if value in (1, "1") else str(value).upper()


def bm25_input_field(client: Any, collection_name: str) -> str | None:
    """The field the collection's BM25 vectors are made of: what its BM25 function reads, or
    :data:`BM25_TEXT_FIELD` where the pack computes them (``None`` without BM25)."""
    info = client.describe_collection(collection_name)
    for fn in info.get("functions", []):
        if function_type_name(fn.get("type")) == "BM25":
            inputs = list(fn.get("input_field_names") or [])
            return str(inputs[0]) if inputs else None
    if (info.get("properties") or {}).get(BM25_VECTORS_PROPERTY) == "client":
        return BM25_TEXT_FIELD
    return None


def stored_bm25_analysis(client: Any, collection_name: str) -> str | None:
    """The analysis a collection was indexed with: ``standard`` when its BM25 function reads
    the original text, else the recorded name (``english``, ``custom:...``); ``None`` without
    BM25."""
    field = bm25_input_field(client, collection_name)
    if field is None:
        return None
    if field != BM25_TEXT_FIELD:
        return "standard"
    props = client.describe_collection(collection_name).get("properties") or {}
    return str(props.get(ANALYSIS_PROPERTY) or "english")


def collection_bm25_analysis(
    client: Any,
    collection_name: str,
    requested: str | BM25Analyzer | Bm25Analysis | None = None,
) -> Bm25Analysis | None:
    """How to analyse BM25 queries on this collection: the analysis it was indexed with.

    ``requested`` (what the caller asked for) is used when it names that analysis, and must be
    the callable itself for a collection indexed with a custom analyzer. A different request
    is logged once and the stored analysis wins: ranking a collection with another analysis
    than its index's would miss every changed term.

    Raises:
        ConfigurationError: the collection was indexed with a custom analyzer and no callable
            was given.
    """
    stored = stored_bm25_analysis(client, collection_name)
    if stored is None:
        return None
    wanted = resolve_analyzer(requested) if requested is not None else None
    if stored.startswith("custom:"):
        if wanted is None or not wanted.name.startswith("custom:"):
            raise ConfigurationError(
                f"Collection {collection_name!r} was indexed with the BM25 analyzer {stored!r}: "
                "pass the same callable as bm25_analyzer= to search it, or re-index it with "
                "`rag-pack index --reindex` (the auto analysis)."
            )
        if wanted.name != stored:
            logger.warning(
                "Collection %r was indexed with BM25 analyzer %s; searching it with %s",
                collection_name,
                stored,
                wanted.name,
            )
        return wanted
    if isinstance(requested, Bm25Analysis) and requested.name == stored:
        return requested  # the store's own: its language profile is shared
    if wanted is not None and wanted.name != stored:
        logger.info(
            "Collection %r was indexed with the %r BM25 analysis: searched with it (asked for "
            "%r; `rag-pack index --reindex` upgrades the collection)",
            collection_name,
            stored,
            wanted.name,
        )
    analysis = resolve_analyzer(stored)
    if analysis.language_aware:
        props = collection_properties(client, collection_name)
        analysis.profile.update(LanguageProfile.from_json(props.get(LANGUAGES_PROPERTY)).counts())
        _check_version(collection_name, props.get(VERSION_PROPERTY))
    return analysis


def collection_properties(client: Any, collection_name: str) -> dict[str, Any]:
    """The collection's properties (``rag_pack.*`` records among them)."""
    return dict(client.describe_collection(collection_name).get("properties") or {})


def _version_record() -> str:
    return json.dumps({"version": AUTO_VERSION, **segmenter_versions()}, sort_keys=True)


def analysis_outdated(client: Any, collection_name: str, analysis: Bm25Analysis) -> bool:
    """True when the collection was analysed by this language-aware analysis at another
    version of it or of its segmenters than the installed ones."""
    if not analysis.language_aware:
        return False
    recorded = collection_properties(client, collection_name).get(VERSION_PROPERTY)
    try:
        then = json.loads(recorded) if recorded else {}
    except (TypeError, ValueError):
        then = {}
    return not isinstance(then, dict) or then != json.loads(_version_record())


def _check_version(collection_name: str, recorded: Any) -> None:
    """Log once when a collection was analysed by another version of the analysis or its
    segmenters than the ones installed (a few terms may then differ between old chunks and new
    questions; `rag-pack index --reindex` re-analyses the chunks)."""
    try:
        then = json.loads(recorded) if recorded else None
    except (TypeError, ValueError):
        then = None
    if not isinstance(then, dict):
        return
    now = json.loads(_version_record())
    changed = sorted(k for k in now if k in then and then[k] != now[k])
    if changed:
        logger.warning(
            "Collection %r was analysed for BM25 with %s; installed now: %s. Terms of a few words "
            "may differ: `rag-pack index --reindex` re-analyses its chunks.",
            collection_name,
            ", ".join(f"{k} {then[k]}" for k in changed),
            ", ".join(f"{k} {now[k]}" for k in changed),
        )


def bm25_store_kwargs(
    analysis: Bm25Analysis, *, new: bool, vectors: str = "function"
) -> dict[str, Any]:
    """``MilvusVectorStore`` arguments for a BM25 field under ``analysis``.

    Under ``standard`` the BM25 function reads ``text`` (Milvus analyses it); under a client
    analysis it reads :data:`BM25_TEXT_FIELD`, and a ``new`` collection records the analysis.
    With ``vectors="client"`` there is no function: the pack weighs the analysed copies itself,
    and the caller adds the store's ``sparse_embedding_function``
    (:class:`~llama_index_rag_pack.milvus.bm25.client_bm25.ClientBM25Function`).

    Raises:
        ConfigurationError: client vectors under ``standard`` (only Milvus can analyse it).
    """
    from llama_index.vector_stores.milvus.utils import BM25BuiltInFunction

    kwargs: dict[str, Any] = dict(
        enable_sparse=True,
        hybrid_ranker="RRFRanker",
        hybrid_ranker_params={"k": 60},
    )
    properties = {ANALYSIS_PROPERTY: analysis.name}
    if analysis.language_aware:
        properties[VERSION_PROPERTY] = _version_record()
        properties[LANGUAGES_PROPERTY] = analysis.profile.to_json()
    if vectors == "client":
        return _client_vectors_kwargs(kwargs, properties, analysis, new)
    if not analysis.client_side:
        kwargs["sparse_embedding_function"] = BM25BuiltInFunction()
        if new:
            kwargs["collection_properties"] = properties
        return kwargs
    from pymilvus import DataType

    kwargs.update(
        sparse_embedding_function=BM25BuiltInFunction(input_field_names=BM25_TEXT_FIELD),
        scalar_field_names=[BM25_TEXT_FIELD],
        scalar_field_types=[DataType.VARCHAR],
    )
    if new:
        kwargs["collection_properties"] = properties
    return kwargs


def _client_vectors_kwargs(
    kwargs: dict[str, Any], properties: dict[str, str], analysis: Bm25Analysis, new: bool
) -> dict[str, Any]:
    from pymilvus import DataType

    if not analysis.client_side:
        raise ConfigurationError(
            f"The {analysis.name!r} BM25 analysis is Milvus' own and needs its BM25 function: "
            "on a Milvus without it use bm25_analyzer='auto' (or a language), which the pack "
            "analyses itself."
        )
    kwargs.update(
        scalar_field_names=[BM25_TEXT_FIELD],
        scalar_field_types=[DataType.VARCHAR],
        sparse_index_config={"metric_type": "IP"},
    )
    if new:
        kwargs["collection_properties"] = {**properties, BM25_VECTORS_PROPERTY: "client"}
    return kwargs


def store_analysis(
    client: Any,
    collection_name: str,
    requested: str | BM25Analyzer | Bm25Analysis | None,
    *,
    new: bool,
    bm25: bool = True,
) -> Bm25Analysis | None:
    """The analysis of a store opened on the collection: ``requested`` for a ``new`` one, the
    collection's own otherwise (:func:`collection_bm25_analysis`); ``None`` without BM25."""
    if not bm25:
        return None
    if new:
        return resolve_analyzer(requested)
    return collection_bm25_analysis(client, collection_name, requested)


def check_async_client(analysis: Bm25Analysis | None, use_async_client: bool) -> None:
    """pymilvus' async client path of ``MilvusVectorStore`` cannot fill the analysed field.

    Raises:
        ConfigurationError: ``use_async_client`` with a client-side analysis.
    """
    if use_async_client and analysis is not None and analysis.client_side:
        raise ConfigurationError(
            f"use_async_client=True cannot fill the {analysis.name!r} BM25 field; leave "
            "use_async_client off (async methods then run in a worker thread) or pass "
            "bm25_analyzer='standard'."
        )
