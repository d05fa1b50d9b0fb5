"""Check a Milvus boolean expression before it is sent, and name the fields it reads (pure).

Every string filter is checked here before it is used: ``rag-pack ask --filter EXPR`` before any
model loads, and every ``filters="..."`` of the Python API (a retriever, ``pack.run``, a chat
engine, ``pack.delete``) before it is ``and``-ed with a tenant's scope. A bad operator, an unknown
function, an unclosed string or bracket is one line naming it and its column. The grammar is the
part of Milvus' that metadata filters use: comparisons (``== != < <= > >=``), ``in`` / ``not in``
lists, ``like``, ``exists``, ``and`` / ``&&``, ``or`` / ``||``, ``not`` / ``!``, parentheses,
``true`` / ``false``, the JSON and array functions, and fields as names or ``$meta["key"]``.

An expression that passes is read by Milvus (a server and Milvus Lite) as this parser reads it, so
its parentheses balance and it cannot close the parentheses it is wrapped in: strings are
tokenised as both read them (no line break inside, only the escapes ``\\ \" \' \n \r
\t``), white space is only space, tab and line breaks, there are no comments, and a Milvus
keyword (``is``, ``null``, ``iso``, ... in any case) is refused as a bare field name.

Example:
    >>> sorted(expression_fields('year > 2010 and (genre in ["a", "b"] or not exists tags)'))
    ['genre', 'tags', 'year']
    >>> expression_fields("year => 2010")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: Bad filter at column 6: unknown operator '=>' (use ==, !=, <, <=, >, >=, in, not in, like, and, or, not).
"""  # noqa: E501  (doctest output is one line)

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
from dataclasses import dataclass

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.milvus.metadata_fields import RESERVED

__all__ = ["FUNCTIONS", "KEYWORDS", "MAX_NESTING", "expression_fields"]

FUNCTIONS = frozenset(
    "json_contains json_contains_any json_contains_all array_contains array_contains_any "
    "array_contains_all array_length text_match".split()
)
_COMPARE = ("==", "!=", "<=", ">=", "<", ">")
#: What Milvus (server and Lite) skips between tokens: no other white space, and no comments.
_SPACE = " \t\r\n"
# A string as both Milvus parsers read it: no line break inside, and only the escapes both know
# (Milvus Lite refuses any other), so a quote or bracket inside one is never read as code.
_STRING = r""""(?:[^"\\\r\n]|\\["'\\nrt])*"|'(?:[^'\\\r\n]|\\["'\\nrt])*'"""
_TOKEN = re.compile(
    rf"""[{_SPACE}]*(?:
      (?P<string>{_STRING})
    | (?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)
    | (?P<meta>\$meta[{_SPACE}]*\[[{_SPACE}]*(?:{_STRING})[{_SPACE}]*\])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\],])
    | (?P<bad>[^{_SPACE}]+?)(?=[{_SPACE}()\[\],"']|$)
    )""",
    re.X,
)
_WORDS = {"and": "and", "or": "or", "not": "not", "in": "in", "like": "like", "exists": "exists"}
_BOOLEANS = frozenset({"true", "True", "TRUE", "false", "False", "FALSE"})
#: Words a bare field cannot be: Milvus reads them as keywords (``$meta["is"]`` names the key).
KEYWORDS = RESERVED | FUNCTIONS
_MAX_TOKENS = 200_000
#: Nesting (parentheses and ``not``) an expression may have: room for every compiled filter.
MAX_NESTING = 128
_ESCAPED = {"n": "\n", "r": "\r", "t": "\t"}
_ESCAPE_HINT = "(use \\\\ \\\" \\' \\n \\r \\t)"


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    col: int


def _bad(expr: str, text: str, col: int) -> ConfigurationError:
    if text[:1] in "\"'":
        return _error(col, _string_problem(expr, col - 1))
    if text.startswith("$meta"):
        return _error(col, 'expected $meta["key"] with a closed string key')
    if all(ch in "=<>!&|~^%*/+-.:;?@#" for ch in text):
        return _error(col, f"unknown operator {text[:20]!r} " + _OPS_HINT)
    return _error(col, f"cannot read {text[:20]!r}")


def _string_problem(expr: str, start: int) -> str:
    """Why the string opening at ``start`` is not one both Milvus parsers read the same way."""
    quote, i = expr[start], start + 1
    while i < len(expr) and expr[i] != quote:
        if expr[i] in "\r\n":
            return "a string holds a line break (write \\n)"
        if expr[i] == "\\":
            if i + 1 < len(expr) and expr[i + 1] not in "\"'\\nrt":
                return f"unknown escape {expr[i : i + 2]!r} in a string " + _ESCAPE_HINT
            i += 1
        i += 1
    return "a string is not closed"


def _word(tok_text: str, col: int) -> tuple[str, str]:
    low = tok_text.lower()
    if low in _WORDS:
        return "word", low
    if low in ("true", "false"):
        if tok_text not in _BOOLEANS:
            raise _error(col, f"{tok_text!r} is not a boolean (write true or false)")
        return "bool", low
    return "name", tok_text


def _tokens(expr: str) -> list[_Tok]:
    toks, pos = [], 0
    while pos < len(expr):
        if not expr[pos:].strip(_SPACE):
            break
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise _error(pos + 1, f"cannot read {expr[pos : pos + 10].strip(_SPACE)!r}")
        kind = m.lastgroup or "bad"
        text = m.group(kind)
        col = m.start(kind) + 1
        if kind == "bad":
            raise _bad(expr, text, col)
        if kind == "name":
            kind, text = _word(text, col)
        toks.append(_Tok(kind, text, col))
        pos = m.end()
        if len(toks) > _MAX_TOKENS:
            raise _error(col, f"more than {_MAX_TOKENS} tokens")
    return toks


_OPS_HINT = "(use ==, !=, <, <=, >, >=, in, not in, like, and, or, not)."


def _error(col: int, what: str) -> ConfigurationError:
    return ConfigurationError(f"Bad filter at column {col}: {what}")


class _Parser:
    def __init__(self, expr: str) -> None:
        self.toks, self.i, self.fields = _tokens(expr), 0, set()
        self.end = len(expr) + 1

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, *texts: str) -> _Tok | None:
        tok = self.peek()
        if tok is not None and tok.text in texts and tok.kind in ("op", "word"):
            self.i += 1
            return tok
        return None

    def expect(self, text: str, after: str) -> None:
        if self.take(text) is None:
            tok = self.peek()
            raise _error(tok.col if tok else self.end, f"expected {text!r} after {after}")

    def parse(self) -> set[str]:
        if not self.toks:
            raise _error(1, "the expression is empty")
        self.disjunction(0)
        tok = self.peek()
        if tok is not None and tok.text == ")":
            raise _error(tok.col, "')' closes no '(' (parentheses must balance)")
        if tok is not None:
            raise _error(tok.col, f"unexpected {tok.text!r}")
        return self.fields

    def nested(self, depth: int) -> None:
        """Refuse nesting (parentheses, ``not``, lists) past :data:`MAX_NESTING`: the parser
        recurses on it."""
        if depth > MAX_NESTING:
            raise _error(self.peek().col if self.peek() else self.end, "nested too deeply")

    def disjunction(self, depth: int) -> None:
        self.nested(depth)
        self.conjunction(depth)
        while self.take("or", "||"):
            self.conjunction(depth)

    def conjunction(self, depth: int) -> None:
        self.negation(depth)
        while self.take("and", "&&"):
            self.negation(depth)

    def negation(self, depth: int) -> None:
        while self.take("not", "!"):
            depth += 1
            self.nested(depth)
        if self.take("exists"):
            self.field("exists")
        elif self.take("("):
            self.disjunction(depth + 1)
            self.expect(")", "a parenthesised condition")
        elif self.peek() is not None and self.peek().kind == "bool":
            self.i += 1  # ``true`` / ``false`` alone: a condition every row passes / fails
        else:
            self.condition()

    def field(self, after: str) -> None:
        tok = self.peek()
        if tok is None or tok.kind not in ("name", "meta"):
            raise _error(tok.col if tok else self.end, f"expected a field after {after}")
        if tok.kind == "name" and tok.text.lower() in KEYWORDS:
            raise _error(tok.col, f"{tok.text!r} is a Milvus keyword: write $meta[{tok.text!r}]")
        self.i += 1
        self.fields.add(tok.text if tok.kind == "name" else _meta_key(tok.text))

    def condition(self) -> None:
        tok = self.peek()
        if tok is not None and tok.kind == "name" and tok.text in FUNCTIONS:
            self.i += 1
            self.expect("(", tok.text)
            self.field(f"{tok.text}(")
            while self.take(","):
                self.value(tok.text)
            self.expect(")", f"the arguments of {tok.text}")
            if self.take(*_COMPARE):
                self.value("a comparison")
            return
        if tok is not None and tok.kind == "name" and self._is_call():
            raise _error(tok.col, f"unknown function {tok.text!r}")
        self.field("a condition")
        if self.take(*_COMPARE):
            self.value("the operator")
        elif self.take("like"):  # Milvus takes only a string pattern
            tok = self.peek()
            if tok is None or tok.kind != "string":
                raise _error(tok.col if tok else self.end, "expected a string pattern after like")
            self.i += 1
        elif self.take("in") or (self.take("not") and self.take("in")):
            tok = self.peek()  # Milvus takes only a list
            if tok is None or tok.text != "[":
                raise _error(tok.col if tok else self.end, "expected a list [...] after in")
            self.value("in")
        else:
            nxt = self.peek()
            raise _error(nxt.col if nxt else self.end, "expected an operator " + _OPS_HINT)

    def _is_call(self) -> bool:
        nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
        return nxt is not None and nxt.text == "("

    def value(self, after: str, depth: int = 0) -> None:
        tok = self.peek()
        literal = tok is not None and tok.kind in ("string", "number", "bool")
        if literal:
            self.i += 1
        elif self.take("["):
            self.nested(depth + 1)
            if not self.take("]"):
                self.value("[", depth + 1)
                while self.take(","):
                    self.value(",", depth + 1)
                self.expect("]", "a list")
        else:
            raise _error(tok.col if tok else self.end, f"expected a value after {after}")


def _meta_key(text: str) -> str:
    inner = text[text.index("[") + 1 : text.rindex("]")].strip(_SPACE)
    return re.sub(r"\\(.)", lambda m: _ESCAPED.get(m.group(1), m.group(1)), inner[1:-1])


def expression_fields(expr: str) -> set[str]:
    """The fields the Milvus expression ``expr`` reads.

    Raises:
        ConfigurationError: the expression is empty or malformed (one line, with the column).
    """
    return _Parser(expr).parse()
