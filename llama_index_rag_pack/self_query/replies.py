"""Read a self-query reply (untrusted LLM text) into a search query and validated conditions.

The prompt asks for ``{"query": "...", "filter": [{"field": ..., "op": ..., "value": ...}]}``.
Replies are read with :func:`~llama_index_rag_pack.core.llm_output.json_values` (prose around
the JSON, code fences, trailing commas, single quotes), and these shapes are accepted too:

* ``"filter"``/``"filters"``/``"conditions"``/``"where"`` as a list of conditions, a single
  condition, or a mapping ``{"genre": "mystery", "year": {"$gt": 2010}}``;
* ``"operator"``/``"comparator"``/``"operation"`` for ``op``, ``"attribute"``/``"name"`` for
  ``field``; operator words (``gt``, ``$gte``, ``eq``, ``nin``).

Each condition is checked by
:func:`~llama_index_rag_pack.milvus.metadata_fields.validate_condition`: what fails is dropped and
its reason kept; the rest is compiled by
:func:`~llama_index_rag_pack.milvus.milvus_filter.compile_conditions`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index_rag_pack.core.llm_output import json_values
from llama_index_rag_pack.milvus.metadata_fields import (
    OPERATORS,
    Condition,
    FieldSpec,
    validate_condition,
)
from llama_index_rag_pack.milvus.milvus_filter import compile_conditions

__all__ = ["MAX_CONDITIONS", "SelfQuery", "parse_self_query", "self_query_schema"]

MAX_CONDITIONS = 16
_QUERY_KEYS = ("query", "search_query", "search", "question", "text")
_FILTER_KEYS = ("filter", "filters", "conditions", "condition", "where", "metadata_filter")
_FIELD_KEYS = ("field", "attribute", "name", "key", "column")
_OP_KEYS = ("op", "operator", "comparator", "operation", "cmp")
_VALUE_KEYS = ("value", "values", "val", "range")


@dataclass
class SelfQuery:
    """What a self-query reply asked for.

    Attributes:
        query: The search text (the question itself when the reply gave none).
        conditions: The valid conditions.
        dropped: One reason per condition that was left out.
        expression: The Milvus expression of ``conditions`` (``""`` for none).
    """

    query: str
    conditions: list[Condition] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    expression: str = ""


def _first(item: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((item[k] for k in keys if k in item), None)


MAX_NESTING = 8
_TOO_DEEP = object()


def _raw_conditions(value: Any) -> list[tuple[Any, Any, Any]]:
    """``(field, op, value)`` triples from a list, one condition, or a field mapping.

    Lists and ``{"and": [...]}`` are flattened iteratively; what is nested deeper than
    ``MAX_NESTING`` comes back as one unusable triple (dropped, with a reason, by validation).
    """
    out: list[tuple[Any, Any, Any]] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            out.append((_TOO_DEEP, None, None))
            continue
        if isinstance(item, list):
            stack.extend((child, depth + 1) for child in reversed(item))
            continue
        if not isinstance(item, Mapping):
            if item not in (None, "", []):
                out.append((None, None, item))
            continue
        lowered = {str(k).lower(): v for k, v in item.items()}
        if any(k in lowered for k in _FIELD_KEYS):
            op = _first(lowered, _OP_KEYS)
            out.append((_first(lowered, _FIELD_KEYS), "==" if op is None else op,
                        _first(lowered, _VALUE_KEYS)))  # fmt: skip
        elif set(lowered) & {"and", "$and"}:  # {"and": [...]} (an "or" is not supported)
            stack.append((_first(lowered, ("and", "$and")), depth + 1))
        else:
            for name, val in item.items():
                if isinstance(val, Mapping) and val and all(isinstance(k, str) for k in val):
                    out += [(name, op, v) for op, v in val.items()]
                else:
                    out.append((name, "in" if isinstance(val, list) else "==", val))
    return out


def _reply_object(text: str) -> Mapping[str, Any] | None:
    for value in json_values(text):
        if isinstance(value, list) and value and isinstance(value[0], Mapping):
            value = value[0]
        if isinstance(value, Mapping):
            return value
    return None


def parse_self_query(reply: str, fields: Sequence[FieldSpec], question: str = "") -> SelfQuery:
    """The search query and the Milvus filter in an LLM reply, every condition validated.

    Never raises on the reply: what cannot be used is dropped, with a reason in ``dropped``.

    Args:
        reply: The raw LLM reply.
        fields: The declared fields.
        question: The user's question (the search text when the reply gives none).

    Example:
        >>> from llama_index_rag_pack.milvus.metadata_fields import FieldSpec
        >>> fields = [FieldSpec("genre", allowed=("mystery", "sci-fi")), FieldSpec("year", "int")]
        >>> sq = parse_self_query(
        ...     'Sure! ```json\\n{"query": "memory", "filter": [{"field": "genre", '
        ...     '"op": "eq", "value": "mystery"}, {"field": "year", "op": "gt", "value": "2010"}, '
        ...     '{"field": "author", "op": "==", "value": "x"},]}\\n```', fields)
        >>> sq.query, sq.expression
        ('memory', '(genre == "mystery") and (year > 2010)')
        >>> sq.dropped
        ["unknown field 'author'"]
    """
    data = _reply_object(reply or "")
    result = SelfQuery(query=question.strip())
    if data is None:
        if (reply or "").strip():
            result.dropped.append("no JSON object in the reply")
        return result
    lowered = {str(k).lower(): v for k, v in data.items()}
    query = _first(lowered, _QUERY_KEYS)
    if isinstance(query, str) and query.strip():
        result.query = " ".join(query.split())
    raw = _raw_conditions(_first(lowered, _FILTER_KEYS))
    for name, op, value in raw[:MAX_CONDITIONS]:
        if name is _TOO_DEEP:
            result.dropped.append(f"conditions nested deeper than {MAX_NESTING} levels")
            continue
        cond, problem = validate_condition(fields, name, op, value)
        if cond is None:
            result.dropped.append(problem)
        elif cond not in result.conditions:
            result.conditions.append(cond)
    if len(raw) > MAX_CONDITIONS:
        result.dropped.append(f"{len(raw) - MAX_CONDITIONS} conditions over {MAX_CONDITIONS}")
    result.expression = compile_conditions(result.conditions)
    return result


def self_query_schema(fields: Sequence[FieldSpec]) -> dict[str, Any]:
    """The JSON schema of a self-query reply over ``fields`` (for LLMs that constrain their
    decoding to one): a search query and a list of conditions on the declared fields only.

    Example:
        >>> schema = self_query_schema([FieldSpec("year", "int")])
        >>> schema["properties"]["filter"]["items"]["properties"]["field"]
        {'enum': ['year']}
    """
    value = {"anyOf": [
        {"type": "string"}, {"type": "number"}, {"type": "boolean"},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}]},
         "maxItems": 16},
    ]}  # fmt: skip
    condition = {
        "type": "object",
        "properties": {
            "field": {"enum": [f.name for f in fields]},
            "op": {"enum": list(OPERATORS)},
            "value": value,
        },
        "required": ["field", "op", "value"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "filter": {"type": "array", "items": condition, "maxItems": MAX_CONDITIONS},
        },
        "required": ["query", "filter"],
        "additionalProperties": False,
    }
