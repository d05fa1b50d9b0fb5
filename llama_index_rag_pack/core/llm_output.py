"""Tolerant readers of LLM text (untrusted input): JSON values and lists of strings.

* :func:`json_values`: core's ``parse_json_markdown`` (``llama_index.core.output_parsers.utils``,
  plain functions, no LlamaIndex classes) reads the reply first: a fenced ```` ```json ```` block
  or the outermost ``{...}``/``[...]`` span, with PyYAML's leniency (trailing commas, single
  quotes, unquoted keys). What it misses on real small-model output is read here: several values
  or stray braces in prose (each top-level value on its own) and templates echoed with ``{{ }}``.
* :func:`parse_list`: a list written as a JSON array or one item per line (numbered, bulleted,
  quoted, in bold, in a code fence, wrapped in prose), cleaned and de-duplicated.
* :func:`strip_code_fences`: the text without its Markdown fence lines.
* Route replies are read by :mod:`~llama_index_rag_pack.core.route_replies`, on top of these.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from contextlib import suppress
from typing import Any

from llama_index.core.output_parsers.utils import parse_json_markdown

from llama_index_rag_pack.core.nesting import shallow

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
_DECODER = json.JSONDecoder()
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_CLOSERS = {"{": "}", "[": "]"}


def _core_json(text: str) -> Any:
    """Core's reading of ``text``, ``None`` when it finds no JSON object or array."""
    try:
        value = parse_json_markdown(text)
        json.dumps(value)  # refuse what is not plain JSON: YAML dates, self-referencing aliases
    except Exception:  # core raises OutputParserException; PyYAML also ValueError/TypeError
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


def _read_span(span: str) -> Any:
    """A span that is not strict JSON: without trailing commas, else as a Python literal."""
    with suppress(ValueError):
        return json.loads(_TRAILING_COMMA.sub(r"\1", span))
    return ast.literal_eval(span)


def _top_level_values(text: str) -> list[Any]:
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
            found.append(_read_span(text[i:end]))
        i = end
    return found


def json_values(text: str) -> list[Any]:
    """The JSON objects and arrays in an LLM reply, the most likely one first.

    Core's ``parse_json_markdown`` reading comes first, then every top-level value found in the
    text. Nothing found: an empty list.

    Example:
        >>> json_values('Sure! ```json\\n{"route": "physics",}\\n```')
        [{'route': 'physics'}]
        >>> json_values('{"route": "math"} or maybe {"route": "physics"}')
        [{'route': 'math'}, {'route': 'physics'}]
    """
    text = text if isinstance(text, str) else ""
    first = _core_json(text)
    first = first if first is None or shallow(first) else None
    found = [] if first is None else [first]
    found += [
        v
        for v in _top_level_values(text)
        if isinstance(v, (dict, list)) and shallow(v) and v != first
    ]
    if not found and "{{" in text:  # a model echoing an escaped template: {{"answer": ...}}
        return json_values(text.replace("{{", "{").replace("}}", "}"))
    return found


# --------------------------------------------------------------------------- lists
_ITEM_PREFIX = re.compile(
    r"""^\s*(?:
        (?:[-*+•·–—>]\s*)+                    # bullets / quote marks
      | \(?\d{1,3}\s*[.):\]]\s*              # 1.  1)  (1)  1:  1]
      | \(?[a-zA-Z][.)]\s+                   # a)  b.
      | (?:search\s+)?(?:query|question|q)\s*\#?\d*\s*[:.)-]\s*   # Query 1:  Q2.
    )""",
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
