"""Compile validated conditions to a Milvus boolean expression (pure; no pymilvus).

Only :class:`~llama_index_rag_pack.milvus.metadata_fields.Condition` objects are compiled, so
every field name is a declared identifier and every value has its field's type. Values are
written as Milvus literals:

* strings in double quotes; ``\\`` ``"`` and newline, carriage return and tab are escaped
  (``\\\\``, ``\\"``, ``\\n``, ``\\r``, ``\\t``: the escapes Milvus' parser accepts; other
  control characters are rejected before this by validation);
* integers in decimal (int64 only: Milvus holds no other), floats by ``repr`` (finite only),
  booleans as ``true``/``false``;
* ``in``/``not in`` as a ``[...]`` list (a float zero listed as both ``0.0`` and ``-0.0``, so
  they match what ``==`` matches; NaN is never a value, so it matches neither), ``between`` as
  ``(lo <= f and f <= hi)``.

Conditions are joined with ``and``, each in parentheses.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import math
from collections.abc import Iterable

from llama_index_rag_pack.milvus.metadata_fields import INT64, Condition

__all__ = ["and_expressions", "compile_conditions", "milvus_literal", "signed_zeros"]

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def milvus_literal(value: object) -> str:
    """``value`` (str, int, float or bool) as a Milvus expression literal.

    Raises:
        ValueError: another type, an int outside int64, or a float that is not finite.

    Example:
        >>> print(milvus_literal('say "hi" \\\\ bye'))
        "say \\"hi\\" \\\\ bye"
        >>> milvus_literal(True), milvus_literal(2010), milvus_literal(7.5)
        ('true', '2010', '7.5')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not INT64[0] <= value <= INT64[1]:
            raise ValueError("an integer outside int64 (-2**63 to 2**63 - 1) cannot be a value")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r} as a Milvus literal")
        return repr(value)
    if isinstance(value, str):
        return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'
    raise ValueError(f"cannot write {type(value).__name__} as a Milvus literal")


def signed_zeros(values: Iterable[object]) -> list[object]:
    """``values`` with both ``0.0`` and ``-0.0`` when either is there: ``==`` matches both zeros
    but a list compares bits, so ``x in [0.0]`` alone would miss a row stored as ``-0.0``."""
    out = list(values)
    if any(isinstance(v, float) and v == 0.0 for v in out):
        out = [v for v in out if not (isinstance(v, float) and v == 0.0)] + [0.0, -0.0]
    return out


def _compile_one(cond: Condition) -> str:
    name = cond.field
    if cond.op in ("in", "not in"):
        items = ", ".join(milvus_literal(v) for v in signed_zeros(cond.value))
        return f"{name} {cond.op} [{items}]"
    if cond.op == "between":
        lo, hi = (milvus_literal(v) for v in cond.value)
        return f"{name} >= {lo} and {name} <= {hi}"
    return f"{name} {cond.op} {milvus_literal(cond.value)}"


def compile_conditions(conditions: Iterable[Condition]) -> str:
    """The Milvus expression matching every condition (``""`` for none).

    Example:
        >>> from llama_index_rag_pack.milvus.metadata_fields import Condition
        >>> compile_conditions([Condition("genre", "in", ("mystery",)),
        ...                     Condition("year", ">", 2010)])
        '(genre in ["mystery"]) and (year > 2010)'
    """
    return and_expressions(_compile_one(c) for c in conditions)


def and_expressions(expressions: Iterable[str]) -> str:
    """Non-empty expressions joined with ``and``, each in parentheses (so an ``or`` inside one
    never changes the meaning of the whole)."""
    parts = [e for e in expressions if e]
    return " and ".join(f"({p})" for p in parts)
