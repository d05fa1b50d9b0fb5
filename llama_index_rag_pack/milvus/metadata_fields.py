"""Declared metadata fields of a self-query retriever, and the validation of one LLM condition.

A :class:`FieldSpec` says what the LLM may filter on: the field's name, its type (``string``,
``int``, ``float``, ``bool``), a description for the prompt, and optionally the allowed values
or a ``[minimum, maximum]`` range. :func:`validate_condition` turns one untrusted condition
(field, operator, value) into a :class:`Condition` of checked Python types, or says why not.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import in_file, read_json_file

__all__ = [
    "FIELD_TYPES",
    "OPERATORS",
    "Condition",
    "FieldSpec",
    "field_specs",
    "load_field_specs",
    "validate_condition",
]

FIELD_TYPES = ("string", "int", "float", "bool")
#: Canonical operators; ``between`` takes ``[low, high]`` (both ends included).
OPERATORS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in", "between")
_OP_ALIASES = {
    "=": "==", "eq": "==", "$eq": "==", "is": "==", "equals": "==",
    "<>": "!=", "ne": "!=", "$ne": "!=", "neq": "!=", "not": "!=",
    "gt": ">", "$gt": ">", "gte": ">=", "$gte": ">=", "ge": ">=", "=>": ">=",
    "lt": "<", "$lt": "<", "lte": "<=", "$lte": "<=", "le": "<=", "=<": "<=",
    "$in": "in", "any": "in", "one of": "in", "nin": "not in", "$nin": "not in",
    "not_in": "not in", "notin": "not in", "range": "between", "$between": "between",
}  # fmt: skip
_TYPE_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "integer": "int", "int64": "int",
    "int32": "int", "int16": "int", "int8": "int", "number": "float", "double": "float",
    "float32": "float", "float64": "float", "boolean": "bool",
}  # fmt: skip
#: Words of Milvus' expression grammar that cannot name a field (compared lower-cased: Milvus
#: Lite reads its keywords in any case, a server in lower and upper case).
RESERVED = frozenset(
    "and or not in like true false exists is null iso interval json_contains json_contains_all "
    "json_contains_any array_contains array_contains_all array_contains_any array_length "
    "text_match phrase_match random_sample element_filter match_all match_any match_least "
    "match_most match_exact minimum_should_match threshold st_equals st_touches st_overlaps "
    "st_crosses st_contains st_intersects st_within st_dwithin st_isvalid".split()
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
INT64 = (-(2**63), 2**63 - 1)
MAX_STRING = 1024
MAX_IN_VALUES = 100
_CONTROL_OK = {"\t", "\n", "\r"}


@dataclass(frozen=True)
class FieldSpec:
    """One metadata field the LLM may filter on.

    Args:
        name: The field (a Milvus scalar field or a dynamic metadata key): an identifier.
        type: ``string``, ``int``, ``float`` or ``bool``.
        description: What the field holds, shown to the LLM.
        allowed: The only values a condition may use (e.g. the genres), or empty.
        minimum / maximum: The range numbers must lie in, or ``None``.

    Raises:
        ConfigurationError: a name that is not an identifier or is a Milvus keyword, an unknown
            type, allowed values of the wrong type, or ``minimum > maximum``.

    Example:
        >>> FieldSpec("year", "int", "publication year", minimum=1800, maximum=2030).type
        'int'
    """

    name: str
    type: str = "string"
    description: str = ""
    allowed: tuple[Any, ...] = field(default_factory=tuple)
    minimum: float | None = None
    maximum: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigurationError(
                f"Field name {self.name!r} must be an identifier (letters, digits, '_')."
            )
        if self.name.lower() in RESERVED:
            raise ConfigurationError(f"Field name {self.name!r} is a Milvus keyword; rename it.")
        kind = _TYPE_ALIASES.get(str(self.type).lower(), str(self.type).lower())
        if kind not in FIELD_TYPES:
            raise ConfigurationError(
                f"Field {self.name!r} has unknown type {self.type!r}; "
                f"valid types: {', '.join(FIELD_TYPES)}."
            )
        object.__setattr__(self, "type", kind)
        allowed = []
        for value in self.allowed or ():
            checked, problem = coerce_value(self, value, check_allowed=False)
            if problem:
                raise ConfigurationError(f"Field {self.name!r}: allowed value {problem}.")
            allowed.append(checked)
        object.__setattr__(self, "allowed", tuple(allowed))
        lo, hi = self.minimum, self.maximum
        bounds = [b for b in (lo, hi) if b is not None]
        if bounds and (kind not in ("int", "float") or not all(_is_number(b) for b in bounds)):
            raise ConfigurationError(
                f"Field {self.name!r}: minimum/maximum must be numbers on an int or float field."
            )
        if lo is not None and hi is not None and lo > hi:
            raise ConfigurationError(f"Field {self.name!r}: minimum {lo} > maximum {hi}.")

    def describe(self) -> str:
        """One prompt line: name, type, description, allowed values or range."""
        line = f"- {self.name} ({self.type}): {self.description or 'no description'}"
        if self.allowed:
            line += f"; one of {json.dumps(list(self.allowed), ensure_ascii=False)}"
        if self.minimum is not None or self.maximum is not None:
            line += f"; range [{self.minimum}, {self.maximum}]"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The declaration as JSON-ready data (what :func:`field_specs` reads back)."""
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.description:
            out["description"] = self.description
        if self.allowed:
            out["allowed"] = list(self.allowed)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


@dataclass(frozen=True)
class Condition:
    """A validated condition: ``field op value`` with a value of the field's type (a tuple for
    ``in``/``not in``/``between``)."""

    field: str
    op: str
    value: Any


def field_specs(declared: Iterable[FieldSpec | Mapping[str, Any]]) -> tuple[FieldSpec, ...]:
    """:class:`FieldSpec` objects from specs or dicts (``{"name", "type", "description",
    "allowed", "minimum", "maximum"}``).

    Raises:
        ConfigurationError: a declaration that is neither a spec nor a dict, a field of the wrong
            type, a bad declaration, an unknown key or a duplicate name.
    """
    specs: list[FieldSpec] = []
    for item in declared:
        if isinstance(item, Mapping):
            item = _declared_field(item)
        elif not isinstance(item, FieldSpec):
            raise ConfigurationError(
                f"A field declaration must be an object with a name and a type, got {item!r:.60}."
            )
        specs.append(item)
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"Field names must be unique, got {names}.")
    return tuple(specs)


def _declared_field(item: Mapping[str, Any]) -> FieldSpec:
    """One dict declaration, its keys and their types checked, as a :class:`FieldSpec`."""
    unknown = set(item) - {"name", "type", "description", "allowed", "minimum", "maximum"}
    if unknown:
        raise ConfigurationError(f"Field declaration has unknown keys {sorted(unknown)}.")
    name = item.get("name")
    for key in ("type", "description"):
        if not isinstance(item.get(key, ""), str):
            raise ConfigurationError(f"Field {name!r:.60}: {key} must be a string.")
    allowed = item.get("allowed") or ()
    if isinstance(allowed, (str, bytes, Mapping)) or not isinstance(allowed, Iterable):
        raise ConfigurationError(f"Field {name!r:.60}: allowed must be a list of values.")
    return FieldSpec(**{**item, "allowed": tuple(allowed)})


def load_field_specs(path: str | Path) -> tuple[FieldSpec, ...]:
    """Field declarations from a JSON file: a list of dicts, or ``{"fields": [...]}``. Only a
    regular UTF-8 file is read (a FIFO or device is refused, never waited on).

    Raises:
        ConfigurationError: the file is missing, not a regular file, not JSON, nested too deeply,
            or declares bad fields (one line naming the file).
    """
    data = read_json_file(path, what="field declarations")
    if isinstance(data, dict):
        data = data.get("fields")
    if not isinstance(data, list):
        raise ConfigurationError(f"{path} must hold a JSON list of fields or {{'fields': [...]}}.")
    with in_file(path):
        return field_specs(data)


def _is_number(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return _as_float(value) is not None and math.isfinite(value)


def _as_float(value: int | float) -> float | None:
    """``float(value)``, or ``None`` for an int beyond a float's range (``float`` raises)."""
    try:
        return float(value)
    except OverflowError:
        return None


def _show(value: Any, limit: int | None = None, text: Any = repr) -> str:
    """``text(value)[:limit]`` for a reason (``str`` of an int of over 4300 digits raises: an
    int of over 30 digits is named, not written)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return ("a negative" if value < 0 else "a") + " number of over 30 digits"
    return str(text(value))[:limit]


def _clean_string(value: str) -> tuple[str | None, str]:
    if len(value) > MAX_STRING:
        return None, f"string longer than {MAX_STRING} characters"
    for ch in value:
        if 0xD800 <= ord(ch) <= 0xDFFF:
            return None, "string with a lone surrogate"
        if unicodedata.category(ch) == "Cc" and ch not in _CONTROL_OK:
            return None, f"string with control character {ch!r}"
    return value, ""


def _number(spec: FieldSpec, value: Any) -> tuple[Any, str]:
    if isinstance(value, str):
        try:
            value = float(value.strip()) if spec.type == "float" else int(value.strip())
        except ValueError:
            return None, f"{_show(value)} is not a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{_show(value)} is not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return None, f"{value!r} is not finite"
    if spec.type == "int":
        if isinstance(value, float):
            if not value.is_integer():
                return None, f"{value!r} is not an integer"
            value = int(value)
        if not INT64[0] <= value <= INT64[1]:
            return None, f"{_show(value)} is outside int64"
    else:
        as_float = _as_float(value)
        if as_float is None or abs(as_float) > 1e300:
            return None, f"{_show(value)} is too large"
        value = as_float
    if spec.minimum is not None and value < spec.minimum:
        return None, f"{value} is below the minimum {spec.minimum}"
    if spec.maximum is not None and value > spec.maximum:
        return None, f"{value} is above the maximum {spec.maximum}"
    return value, ""


def coerce_value(spec: FieldSpec, value: Any, *, check_allowed: bool = True) -> tuple[Any, str]:
    """``value`` as ``spec``'s type (numeric strings become numbers, ``"true"`` a bool), or
    ``(None, why not)``."""
    if spec.type == "string":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return None, f"{value!r} is not a string"
        if isinstance(value, float) and not math.isfinite(value):
            return None, f"{value!r} is not a string"
        if isinstance(value, int) and abs(value) >= 10**MAX_STRING:
            return None, f"{_show(value)} is longer than {MAX_STRING} characters"
        out, problem = _clean_string(str(value))
    elif spec.type == "bool":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            return None, f"{_show(value)} is not a boolean"
        out, problem = value, ""
    else:
        out, problem = _number(spec, value)
    if problem:
        return None, problem
    if check_allowed and spec.allowed and out not in spec.allowed:
        return None, f"{out!r} is not one of the allowed values"
    return out, ""


def normalize_op(op: Any) -> str | None:
    """The canonical operator for ``op`` (``"gte"``, ``"$gte"``, ``">="``), or ``None``."""
    if not isinstance(op, str):
        return None
    key = " ".join(op.strip().lower().split())
    key = _OP_ALIASES.get(key, key)
    return key if key in OPERATORS else None


def _list_value(spec: FieldSpec, op: str, value: Any) -> tuple[Any, str]:
    if op == "between" and isinstance(value, Mapping):
        value = [value.get("min", value.get("gte")), value.get("max", value.get("lte"))]
    if not isinstance(value, (list, tuple)):
        value = [value]
    if op == "between":
        if spec.type not in ("int", "float") or len(value) != 2:
            return None, "between needs [low, high] on a number field"
        (lo, p1), (hi, p2) = coerce_value(spec, value[0]), coerce_value(spec, value[1])
        if p1 or p2:
            return None, p1 or p2
        return ((lo, hi), "") if lo <= hi else (None, f"empty range [{lo}, {hi}]")
    if not value or len(value) > MAX_IN_VALUES:
        return None, f"{op} needs 1 to {MAX_IN_VALUES} values"
    out = []
    for item in value:
        checked, problem = coerce_value(spec, item)
        if problem:
            return None, problem
        if checked not in out:
            out.append(checked)
    return tuple(out), ""


def validate_condition(
    fields: Sequence[FieldSpec], name: Any, op: Any, value: Any
) -> tuple[Condition | None, str]:
    """One condition checked against the declared ``fields``.

    Returns:
        ``(Condition, "")``, or ``(None, reason)`` for an unknown field, an unknown operator, an
        operator the type does not support, or a value of the wrong type or out of range.

    Example:
        >>> year = FieldSpec("year", "int", minimum=1800, maximum=2030)
        >>> validate_condition([year], "year", "gt", "2010")
        (Condition(field='year', op='>', value=2010), '')
        >>> validate_condition([year], "year; drop", "==", 1)[1]
        "unknown field 'year; drop'"
    """
    spec = next((f for f in fields if isinstance(name, str) and f.name == name), None)
    if spec is None:
        return None, f"unknown field {_show(name, 80, str)!r}"
    canonical = normalize_op(op)
    if canonical is None:
        return None, f"unknown operator {_show(op, 40, str)!r} on {spec.name!r}"
    if canonical in (">", ">=", "<", "<=") and spec.type in ("string", "bool"):
        return None, f"operator {canonical!r} needs a number field, {spec.name!r} is {spec.type}"
    if canonical in ("in", "not in", "between"):
        checked, problem = _list_value(spec, canonical, value)
    elif isinstance(value, (list, tuple)) and len(value) == 1:
        checked, problem = coerce_value(spec, value[0])
    else:
        checked, problem = coerce_value(spec, value)
    if problem:
        return None, f"{spec.name} {canonical}: {problem}"
    return Condition(spec.name, canonical, checked), ""
