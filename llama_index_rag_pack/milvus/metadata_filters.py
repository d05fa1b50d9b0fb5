"""Core's ``MetadataFilters`` as one escaped Milvus boolean expression.

Every retriever of the pack takes ``filters=``: LlamaIndex's ``MetadataFilters`` (the same object
``index.as_retriever(filters=...)`` takes) or a Milvus expression string you wrote yourself.
:func:`filter_expression` turns the first into the second; values only ever appear as escaped
literals (:func:`~llama_index_rag_pack.milvus.milvus_filter.milvus_literal`), keys as identifiers
or as ``$meta["key"]`` with the key escaped, so no value or key can change the expression's shape.

Semantics (two-valued; what the Python reading of the filter gives): a condition on a key that a
row lacks, or holds as null, is false, and so is its negation's inner condition, so ``NOT`` of it
is true. Milvus' own rule differs between operators (``f != 1`` skips rows without ``f``,
``f not in [1]`` keeps them); every metadata condition is compiled as
``((exists f) and ...)`` to hold one rule (the parentheses keep Milvus 2.3 from reading
``exists f and ...`` as ``exists (f and ...)``). Fields of the collection's schema
(``doc_id``, ...) are never missing and get no guard.

Operators: ``==``, ``!=``, ``>``, ``>=``, ``<``, ``<=``, ``in``, ``nin``, ``contains`` (a list
value holds the value), ``any`` / ``all`` (a list value holds any / all of the values),
``is_empty`` (the key is missing or null, or holds an empty list). ``text_match`` needs a Milvus
VARCHAR schema field with ``enable_match``, which metadata keys are not: it is refused with a
one-line error. Conditions nest with ``and``, ``or`` and ``not`` (``not`` negates the ``and`` of
its filters) up to :data:`MAX_FILTER_DEPTH` levels.

Example:
    >>> from llama_index.core.vector_stores import MetadataFilter, MetadataFilters
    >>> print(filter_expression(MetadataFilters(filters=[
    ...     MetadataFilter(key="genre", value='say "hi"'),
    ...     MetadataFilter(key="year", value=2010, operator=">"),
    ... ])))
    (((exists genre) and genre == "say \\"hi\\"") and ((exists year) and year > 2010))
    >>> filter_expression('year > 2010')
    'year > 2010'
"""

from __future__ import annotations

import keyword
from collections.abc import Collection
from typing import Any

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.milvus_expr import KEYWORDS, expression_fields
from llama_index_rag_pack.milvus.milvus_filter import milvus_literal, signed_zeros

__all__ = ["MAX_FILTER_DEPTH", "Filters", "filter_expression"]

#: Nesting levels a ``MetadataFilters`` may have.
MAX_FILTER_DEPTH = 32
#: What ``filters=`` accepts everywhere.
Filters = MetadataFilters | str | None

_COMPARISONS = {
    FilterOperator.EQ: "==",
    FilterOperator.NE: "!=",
    FilterOperator.GT: ">",
    FilterOperator.GTE: ">=",
    FilterOperator.LT: "<",
    FilterOperator.LTE: "<=",
}
_LIST_FUNCTIONS = {
    FilterOperator.ANY: "json_contains_any",
    FilterOperator.ALL: "json_contains_all",
}


def filter_expression(filters: Filters, *, schema_fields: Collection[str] = ()) -> str:
    """The Milvus expression of ``filters`` (``""`` for none).

    Args:
        filters: Core's ``MetadataFilters``, a Milvus expression string (checked, then
            returned stripped; a blank one is ``""``), or ``None``.
        schema_fields: Fields of the collection's schema (never missing: no ``exists`` guard).

    Raises:
        ConfigurationError: an unsupported operator or condition, a value of the wrong kind
            (``None``, a list for ``==``, a scalar for ``in``, an int outside int64), nesting
            deeper than :data:`MAX_FILTER_DEPTH`, or a malformed expression string.
    """
    if filters is None:
        return ""
    if isinstance(filters, str):
        expr = filters.strip()
        if expr:
            expression_fields(expr)  # one line naming the problem; it cannot escape its parens
        return expr
    if not isinstance(filters, MetadataFilters):
        raise ConfigurationError(
            "filters must be llama_index MetadataFilters or a Milvus expression string, "
            f"got {type(filters).__name__}."
        )
    return _compile(filters, frozenset(schema_fields), 1)


def _compile(filters: MetadataFilters, schema: frozenset[str], depth: int) -> str:
    """``filters`` as one parenthesised expression (``""`` when it has no condition)."""
    if depth > MAX_FILTER_DEPTH:
        raise ConfigurationError(f"filters nest deeper than {MAX_FILTER_DEPTH} levels.")
    parts = [
        _compile(f, schema, depth + 1) if isinstance(f, MetadataFilters) else _one(f, schema)
        for f in filters.filters
    ]
    parts = [p for p in parts if p]
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition is FilterCondition.OR:
        return "(" + " or ".join(parts) + ")" if parts else "false"
    joined = parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")" if parts else ""
    if condition is FilterCondition.NOT:
        return f"(not {joined})" if joined else "false"
    return joined


def _field(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ConfigurationError(f"A filter key must be a non-empty string, got {key!r}.")
    plain = key.isidentifier() and key.isascii() and not keyword.iskeyword(key)
    if plain and key.lower() not in KEYWORDS:  # Milvus Lite reads keywords in any case
        return key
    return f"$meta[{milvus_literal(key)}]"


def _scalar(value: Any, f: MetadataFilter) -> str:
    if value is None or isinstance(value, (list, tuple, set, dict)):
        raise ConfigurationError(
            f"Filter on {f.key!r} with {f.operator.value!r} needs one str, int, float or bool "
            f"value, got {value!r}."
        )
    try:
        return milvus_literal(value)
    except ValueError as e:
        raise ConfigurationError(f"Filter on {f.key!r}: {e}.") from None


def _literals(f: MetadataFilter) -> list[str]:
    if not isinstance(f.value, (list, tuple)) or not f.value:
        raise ConfigurationError(
            f"Filter on {f.key!r} with {f.operator.value!r} needs a non-empty list of values, "
            f"got {f.value!r}."
        )
    return [_scalar(v, f) for v in signed_zeros(f.value)]


def _one(f: MetadataFilter, schema: frozenset[str]) -> str:
    field, op = _field(f.key), FilterOperator(f.operator)
    if op is FilterOperator.IS_EMPTY:
        if f.key in schema:
            raise ConfigurationError(f"{f.key!r} is a schema field: it is never empty.")
        return f"((not (exists {field})) or array_length({field}) == 0)"
    if op in _COMPARISONS:
        body = f"{field} {_COMPARISONS[op]} {_scalar(f.value, f)}"
    elif op in (FilterOperator.IN, FilterOperator.NIN):
        literals = _literals(f)
        if field.startswith("$meta"):  # Milvus takes `in` on a plain name only
            body = "(" + " or ".join(f"{field} == {v}" for v in literals) + ")"
            body = body if op is FilterOperator.IN else f"not {body}"
        else:
            listed = "[" + ", ".join(literals) + "]"
            body = f"{field} {'in' if op is FilterOperator.IN else 'not in'} {listed}"
    elif op is FilterOperator.CONTAINS:
        body = f"json_contains({field}, {_scalar(f.value, f)})"
    elif op in _LIST_FUNCTIONS:
        body = f"{_LIST_FUNCTIONS[op]}({field}, [{', '.join(_literals(f))}])"
    else:
        raise ConfigurationError(
            f"Filter operator {op.value!r} (on {f.key!r}) is not supported on Milvus metadata: "
            "use ==, !=, >, >=, <, <=, in, nin, contains, any, all or is_empty."
        )
    return f"({body})" if f.key in schema else f"((exists {field}) and {body})"
