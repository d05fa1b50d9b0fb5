"""Milvus side of self-query: per-query filtered copies of the pack's retrievers, and field
declarations inferred from a collection's schema and a sample of its rows.

:func:`with_filter` gives a copy of a :class:`~llama_index_rag_pack.MilvusHybridRetriever`
(dense, BM25 or hybrid; the sentence retriever too) or a
:class:`~llama_index_rag_pack.MilvusScoreFusionRetriever` whose ``filter`` is the retriever's
own filter ``and`` the new expression, or of the ``vector`` mode's retriever (core's
``VectorIndexRetriever`` over a ``MilvusVectorStore``) whose ``string_expr`` search argument is;
the original is left as it was, so concurrent queries never see each other's filters.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.fusion.hybrid import MilvusHybridRetriever
from llama_index_rag_pack.fusion.score_fusion import MilvusScoreFusionRetriever
from llama_index_rag_pack.fusion.vector import CheckedVectorIndexRetriever
from llama_index_rag_pack.milvus.metadata_fields import RESERVED, FieldSpec, coerce_value
from llama_index_rag_pack.milvus.milvus_filter import and_expressions

__all__ = [
    "check_filterable",
    "infer_field_specs",
    "milvus_target",
    "retriever_filter",
    "with_filter",
]

logger = logging.getLogger(__name__)

#: Keys MilvusVectorStore and LlamaIndex write for their own use: never offered to the LLM.
INTERNAL_KEYS = frozenset(
    {"id", "text", "bm25_text", "embedding", "sparse_embedding", "_node_content", "_node_type",
     "doc_id",
     "document_id", "ref_doc_id", "node_id", "file_path", "creation_date", "last_modified_date",
     "last_accessed_date", "file_size", "file_type"}
)  # fmt: skip
_SCALAR_TYPES = {
    "VARCHAR": "string", "BOOL": "bool", "INT8": "int", "INT16": "int", "INT32": "int",
    "INT64": "int", "FLOAT": "float", "DOUBLE": "float",
}  # fmt: skip
#: A string field with at most this many distinct values (in a sample that covers the whole
#: collection) gets them as its allowed values.
MAX_ALLOWED_VALUES = 20
_STRING = FieldSpec("value", "string")


def check_filterable(retriever: Any) -> None:
    """Raise :class:`ConfigurationError` unless :func:`with_filter` can restrict ``retriever``."""
    if isinstance(retriever, CheckedVectorIndexRetriever) and _is_milvus(retriever):
        return
    if not isinstance(retriever, (MilvusHybridRetriever, MilvusScoreFusionRetriever)):
        raise ConfigurationError(
            f"{type(retriever).__name__} takes no Milvus filter; self-query wraps "
            "MilvusHybridRetriever (dense, sparse, hybrid), MilvusScoreFusionRetriever or the "
            "vector mode's retriever over a MilvusVectorStore."
        )


def _is_milvus(retriever: CheckedVectorIndexRetriever) -> bool:
    store = retriever._vector_store
    return hasattr(store, "client") and hasattr(store, "collection_name")


def milvus_target(retriever: Any) -> tuple[Any, str]:
    """The pymilvus client and the collection a filterable retriever searches."""
    if isinstance(retriever, CheckedVectorIndexRetriever):
        store = retriever._vector_store
        return store.client, store.collection_name
    inner = getattr(retriever, "dense", retriever)
    return inner.client, inner.collection_name


def retriever_filter(retriever: Any) -> str:
    """The Milvus expression a filterable retriever searches under (its ``filters=``, a tenant's
    scope included; ``""`` for none): what it may read, so what may be sampled for its prompt."""
    if isinstance(retriever, CheckedVectorIndexRetriever):
        return str(retriever._kwargs.get("string_expr", "") or "")
    inner = getattr(retriever, "dense", retriever)
    return str(getattr(inner, "filter", "") or "")


def _filtered(retriever: MilvusHybridRetriever, expression: str) -> MilvusHybridRetriever:
    out = copy.copy(retriever)
    out.filter = and_expressions([retriever.filter, expression])
    return out


def with_filter(retriever: Any, expression: str) -> Any:
    """A copy of ``retriever`` that also applies the Milvus ``expression`` (the original is
    unchanged; ``""`` returns it as is).

    Raises:
        ConfigurationError: a retriever that takes no Milvus filter.
    """
    if not expression:
        return retriever
    if isinstance(retriever, MilvusHybridRetriever):
        return _filtered(retriever, expression)
    check_filterable(retriever)
    if isinstance(retriever, CheckedVectorIndexRetriever):
        out = copy.copy(retriever)
        kwargs = dict(retriever._kwargs)
        kwargs["string_expr"] = and_expressions([kwargs.get("string_expr", ""), expression])
        out._kwargs = kwargs
        return out
    out = copy.copy(retriever)
    out.dense = _filtered(retriever.dense, expression)
    out.sparse = _filtered(retriever.sparse, expression)
    if retriever.sentences is not None:
        out.sentences = _filtered(retriever.sentences, expression)
    return out


def _kind(values: list[Any]) -> str | None:
    kinds = {type(v) for v in values if v is not None}
    if kinds == {bool}:
        return "bool"
    if kinds and kinds <= {int}:
        return "int"
    if kinds and kinds <= {int, float}:
        return "float"
    if kinds == {str}:
        return "string"
    return None  # mixed, lists, objects: not offered


def _spec(name: str, kind: str, values: list[Any], whole: bool) -> FieldSpec:
    present = [v for v in values if v is not None]
    if kind in ("int", "float"):
        desc = f"seen from {min(present)} to {max(present)}"
        return FieldSpec(name, kind, desc)
    if kind == "string":
        usable = [v for v in present if not coerce_value(_STRING, v, check_allowed=False)[1]]
        if len(usable) < len(present):
            logger.warning(
                "self-query field %r: %d of %d sampled values skipped (control characters, lone "
                "surrogates or over-long text cannot be filter values)",
                name, len(present) - len(usable), len(present),
            )  # fmt: skip
        present = usable
        counts = Counter(present)
        common = [v for v, _ in counts.most_common(MAX_ALLOWED_VALUES)]
        if whole and len(counts) <= MAX_ALLOWED_VALUES and all(len(v) <= 200 for v in common):
            return FieldSpec(name, kind, "", allowed=tuple(sorted(common)))
        examples = ", ".join(repr(v[:60]) for v in common[:5])
        return FieldSpec(name, kind, f"for example {examples}")
    return FieldSpec(name, kind)


def infer_field_specs(
    client: Any,
    collection_name: str,
    *,
    sample_size: int = 200,
    exclude: tuple[str, ...] = (),
    scope: str = "",
) -> tuple[FieldSpec, ...]:
    """Field declarations from the collection's scalar fields and the metadata keys of a sample
    of rows (type from the values; a string field with few values, when the sample is the whole
    collection, gets them as its allowed values).

    Only rows under the Milvus expression ``scope`` are sampled (pass the expression the
    retriever searches under, :func:`retriever_filter`): the keys and values shown to the LLM are
    then only those the retriever may return, never another tenant's. A ``scope`` no row is under
    gives ``()`` (there is nothing to describe, and nothing outside it may be shown).

    Raises:
        ConfigurationError: no filterable field found (declare the fields yourself).
    """
    info = client.describe_collection(collection_name)
    schema_types = {
        f["name"]: _SCALAR_TYPES.get(getattr(f.get("type"), "name", str(f.get("type"))))
        for f in info.get("fields", [])
    }
    rows = client.query(collection_name, filter=scope, output_fields=["*"], limit=sample_size)
    if scope and not rows:
        logger.warning(
            "self-query: no row of %r is under %r: no field inferred", collection_name, scope
        )
        return ()
    whole = len(rows) < sample_size
    values: dict[str, list[Any]] = {}
    for row in rows:
        for key, value in row.items():
            values.setdefault(key, []).append(value)
    specs = []
    for name, seen in sorted(values.items()):
        if name in INTERNAL_KEYS or name in exclude or name.lower() in RESERVED:
            continue
        kind = _kind(seen) if name not in schema_types else schema_types[name]
        if kind is None or not name.isidentifier() or not name.isascii():
            continue
        specs.append(_spec(name, kind, seen, whole))
    if not specs:
        raise ConfigurationError(
            f"Collection {collection_name!r} has no metadata field to filter on; declare the "
            "fields (SelfQueryRetriever(fields=[...]) or --self-query-fields FILE)."
        )
    logger.info("self-query fields inferred from %r: %s", collection_name, [s.name for s in specs])
    return tuple(specs)
