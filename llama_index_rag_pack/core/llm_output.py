"""Tolerant readers of LLM text (untrusted input): JSON values and lists of strings.

* :func:`json_values`: the reply is read first the way core's ``parse_json_markdown``
  (``llama_index.core.output_parsers.utils``) reads it: a fenced ```` ```json ```` block or the
  outermost ``{...}``/``[...]`` span, as JSON, else with PyYAML's leniency (trailing commas,
  single quotes, unquoted keys). It is done here, not by calling core, because core's YAML
  fallback (``yaml.safe_load``) reads anchors and aliases: a 424-character reply of aliases to
  aliases stands for 10^8 values (seconds and gigabytes once walked). What it misses on real
  small-model output is read next: several values or stray braces in prose (each top-level
  value on its own) and templates echoed with ``{{ }}``. Every step is bounded (see
  :func:`json_values`).
* :func:`parse_list`: a list written as a JSON array or one item per line (numbered, bulleted,
  quoted, in bold, in a code fence, wrapped in prose), cleaned and de-duplicated.
* :func:`strip_code_fences`: the text without its Markdown fence lines.
* Route replies are read by :mod:`~llama_index_rag_pack.routing.route_replies`, on top of these.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

import yaml

from llama_index_rag_pack.core.nesting import MAX_JSON_DEPTH

__all__ = ["json_values", "parse_list", "strip_code_fences"]

# --------------------------------------------------------------------------- code fences
_FENCE_LINE = re.compile(r"^[ \t]*```[\w+-]*[ \t]*(?:\n|$)", re.M)


def strip_code_fences(text: str) -> str:
    """``text`` without Markdown code-fence lines (```` ``` ````, ```` ```json ````), stripped.

    Example:
        >>> strip_code_fences("```json\\n[1, 2]\\n```")
        '[1, 2]'
    """
    text = _FENCE_LINE.sub("", text or "").strip()
    return text.removeprefix("```").removesuffix("```").strip()


# --------------------------------------------------------------------------- JSON
#: Characters of a reply :func:`json_values` reads (a structured answer is far shorter).
MAX_REPLY_CHARS = 200_000
#: Characters of one reply the slow readers (YAML, Python literals: ~0.3 s and ~30 MB for
#: 20,000 characters) may read in all; longer spans are read as strict JSON only.
MAX_LENIENT_CHARS = 20_000
#: Containers and scalars one value may hold (it is walked, compared and printed).
MAX_JSON_NODES = 20_000
_DECODER = json.JSONDecoder()
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_CLOSERS = {"{": "}", "[": "]"}


class _Budget:
    """What is left of :data:`MAX_LENIENT_CHARS` for one reply."""

    def __init__(self) -> None:
        self.left = MAX_LENIENT_CHARS

    def take(self, text: str) -> bool:
        if len(text) > self.left:
            return False
        self.left -= len(text)
        return True


class _PlainYAML(yaml.SafeLoader):
    """PyYAML's safe loader without anchors and aliases: a few hundred characters of aliases
    to aliases stand for 10^8 values once the value is walked (an "alias bomb")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.YAMLError("YAML anchors and aliases are not read")
        return super().compose_node(parent, index)


def _small(value: Any) -> bool:
    """Whether ``value`` nests at most :data:`MAX_JSON_DEPTH` deep and holds at most
    :data:`MAX_JSON_NODES` values (counted without recursion, shared parts each time)."""
    stack, count = [(value, 1)], 0
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_JSON_NODES:
            return False
        if isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _outer_span(text: str) -> str:
    """Core's span (``_marshal_llm_to_json``): the first ``[``/``{`` to the last closer."""
    text = text.strip()
    square, brace = text.find("["), text.find("{")
    if (square < brace and square != -1) or brace == -1:
        return text[square : text.rfind("]") + 1] if square != -1 else ""
    return text[brace : text.rfind("}") + 1]


def _core_json(text: str, budget: _Budget) -> Any:
    """Core's reading of ``text`` (``parse_json_markdown``: a ```` ```json ```` block or the
    outermost span, as JSON, else as YAML for its leniency), with YAML read by
    :class:`_PlainYAML` and within ``budget``; ``None`` when it finds no object or array."""
    if "```json" in text:
        text = text.split("```json")[1].strip().strip("`").strip()
    span = _outer_span(text)
    try:
        try:
            value = json.loads(span)
        except ValueError:
            if not budget.take(span):
                return None
            value = yaml.load(span, Loader=_PlainYAML)  # noqa: S506 - a safe loader
        if not _small(value):
            return None
        json.dumps(value)  # refuse what is not plain JSON: YAML dates, sets, binary
    except Exception:  # YAMLError, ValueError, TypeError, RecursionError
        return None
    return value if isinstance(value, (dict, list)) else None


def _balanced_end(text: str, start: int) -> int | None:
    """End of the ``{...}``/``[...]`` span opened at ``start`` (same-kind brackets counted)."""
    opener, closer = text[start], _CLOSERS[text[start]]
    depth = 0
    for j in range(start, len(text)):
        if text[j] == opener:
            depth += 1
        elif text[j] == closer:
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _read_span(span: str, budget: _Budget) -> Any:
    """A span that is not strict JSON: without trailing commas, else as a Python literal."""
    with suppress(ValueError):
        return json.loads(_TRAILING_COMMA.sub(r"\1", span))
    if not budget.take(span):
        raise ValueError("too long to read leniently")
    return ast.literal_eval(span)


def _top_level_values(text: str, budget: _Budget) -> list[Any]:
    """Every top-level JSON (or Python-literal) object/array in ``text``, in order."""
    found: list[Any] = []
    i = 0
    while i < len(text):
        if text[i] not in _CLOSERS:
            i += 1
            continue
        with suppress(ValueError, RecursionError):
            value, i = _DECODER.raw_decode(text, i)
            found.append(value)
            continue
        end = _balanced_end(text, i)
        if end is None:  # never closed (a truncated reply): nothing after it is top level
            break
        with suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            found.append(_read_span(text[i:end], budget))
        i = end
    return found


def json_values(text: str) -> list[Any]:
    """The JSON objects and arrays in an LLM reply, the most likely one first.

    Core's ``parse_json_markdown`` reading comes first, then every top-level value found in the
    text. Nothing found: an empty list. Bounded for any reply: only its first
    :data:`MAX_REPLY_CHARS` characters are read, YAML anchors and aliases are refused, the slow
    lenient readers see at most :data:`MAX_LENIENT_CHARS` of it, and a value holding more than
    :data:`MAX_JSON_NODES` values or nesting deeper than :data:`MAX_JSON_DEPTH` is dropped.

    Example:
        >>> json_values('Sure! ```json\\n{"route": "physics",}\\n```')
        [{'route': 'physics'}]
        >>> json_values('{"route": "math"} or maybe {"route": "physics"}')
        [{'route': 'math'}, {'route': 'physics'}]
    """
    text = text[:MAX_REPLY_CHARS] if isinstance(text, str) else ""
    return _values(text, _Budget())


def _values(text: str, budget: _Budget) -> list[Any]:
    first = _core_json(text, budget)
    found = [] if first is None else [first]
    found += [
        v
        for v in _top_level_values(text, budget)
        if isinstance(v, (dict, list)) and _small(v) and v != first
    ]
    if not found and "{{" in text:  # a model echoing an escaped template: {{"answer": ...}}
        return _values(text.replace("{{", "{").replace("}}", "}"), budget)
    return found


# --------------------------------------------------------------------------- lists
_ITEM_PREFIX = re.compile(
    r"""^\s*(?:
        (?:[-*+•·–—>]\s*)+                    # bullets / quote marks
      | \(?\d{1,3}\s*[.):\]]\s*              # 1.  1)  (1)  1:  1]
      | \(?[a-zA-Z][.)]\s+                   # a)  b.
      | (?:search\s+)?(?:query|question|q)\s*(?:\#\d*\s*|\d+\s*)?[:.)-]\s*   # Query 1:  Q2.
    )""",  # no two quantifiers may match the same run of text: that backtracks quadratically
    re.IGNORECASE | re.VERBOSE,
)
_ITEM_QUOTES = "\"'`“”‘’«»"
_PREAMBLE = re.compile(
    r"^(?:(?:sure|certainly|okay|ok|of course)(?:[!,.:]|$)|here (?:are|is)\b|below (?:are|is)\b|"
    r"the following\b|these are\b|i (?:have|hope|can)\b|let me\b|"
    r"(?:note|queries|search queries|answer)\s*:)",
    re.IGNORECASE,
)


def _item_key(text: str) -> str:
    return re.sub(r"[^\w]+", " ", text.lower()).strip()


def _clean_item(line: str) -> str:
    line = line.strip()
    for _ in range(3):  # "1. - **"query"**" needs several passes
        before = line
        line = _ITEM_PREFIX.sub("", line, count=1).strip()
        line = line.strip("*_").strip()
        if len(line) >= 2 and line[0] in _ITEM_QUOTES and line[-1] in _ITEM_QUOTES:
            line = line[1:-1].strip()
        line = line.rstrip(",").strip()
        if line == before:
            break
    return line.strip(_ITEM_QUOTES + " ").strip()


def _string_array(value: Any, text: str) -> list[str] | None:
    """``value`` if it is a non-empty array of strings, else the first such value of an object
    (``{"queries": [...]}``), whitespace collapsed.

    The strings must be quoted in ``text``: core's YAML reading of a bracketed word in a list line
    (``1. Milvus [BM25] search``) is not an array the model wrote.
    """
    if isinstance(value, dict):
        return next(filter(None, (_string_array(v, text) for v in value.values())), None)
    if not (isinstance(value, list) and value and all(isinstance(x, str) for x in value)):
        return None
    if not all(json.dumps(x, ensure_ascii=False) in text or repr(x) in text for x in value):
        return None
    return [" ".join(x.split()) for x in value]


def parse_list(text: str, *, exclude: Iterable[str] = (), limit: int | None = None) -> list[str]:
    """The items of a list in an LLM reply: a JSON array of strings, or one item per line.

    Handles numbering, bullets, quotes, Markdown bold, code fences, blank lines and prose around
    the list. Drops preamble lines ("Here are 3 queries:"), case- and punctuation-insensitive
    duplicates and the ``exclude`` items (such as the question, echoed back).

    Args:
        text: The raw LLM reply.
        exclude: Items to leave out.
        limit: Keep at most this many (the first ones).

    Returns:
        The items, in the order the model gave them (possibly empty).

    Example:
        >>> parse_list('Sure! Here are 2 queries:\\n1. "BM25 ranking"\\n2. **hybrid search**\\n')
        ['BM25 ranking', 'hybrid search']
    """
    if not text or not text.strip():
        return []
    arrays = (_string_array(value, text) for value in json_values(text))
    candidates = next(filter(None, arrays), None)
    if candidates is None:
        candidates = strip_code_fences(text).splitlines()
    seen = {_item_key(item) for item in exclude}
    out: list[str] = []
    for raw in candidates:
        item = _clean_item(raw)
        key = _item_key(item)
        if len(key) < 2 or key in seen:
            continue
        if item.endswith(":") or (_PREAMBLE.match(item) and not item.endswith("?")):
            continue
        seen.add(key)
        out.append(item)
    return out if limit is None else out[: max(limit, 0)]
