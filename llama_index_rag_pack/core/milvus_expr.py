"""Check a Milvus boolean expression before it is sent, and name the fields it reads (pure).

``rag-pack ask --filter EXPR`` checks the expression here before any model loads: a bad operator,
an unknown function, an unclosed string or bracket is one line naming it and its column. The
grammar is the part of Milvus' that metadata filters use: comparisons (``== != < <= > >=``),
``in`` / ``not in`` lists, ``like``, ``exists``, ``and`` / ``&&``, ``or`` / ``||``, ``not`` /
``!``, parentheses, the JSON and array functions, and fields as names or ``$meta["key"]``.

Example:
    >>> sorted(expression_fields('year > 2010 and (genre in ["a", "b"] or not exists tags)'))
    ['genre', 'tags', 'year']
    >>> expression_fields("year => 2010")
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: Bad filter at column 6: unknown operator '=>' (use ==, !=, <, <=, >, >=, in, not in, like, and, or, not).
"""  # noqa: E501  (doctest output is one line)

from __future__ import annotations

import re
from dataclasses import dataclass

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["FUNCTIONS", "expression_fields"]

FUNCTIONS = frozenset(
    "json_contains json_contains_any json_contains_all array_contains array_contains_any "
    "array_contains_all array_length text_match".split()
)
_COMPARE = ("==", "!=", "<=", ">=", "<", ">")
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<meta>\$meta\s*\[\s*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*\])
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<op>==|!=|<=|>=|&&|\|\||[<>!()\[\],])
    | (?P<bad>\S+?)(?=\s|$|[()\[\],"'])
    )""",
    re.X,
)
_WORDS = {"and": "and", "or": "or", "not": "not", "in": "in", "like": "like", "exists": "exists"}
_MAX_TOKENS = 4096


@dataclass(frozen=True)
class _Tok:
    kind: str
    text: str
    col: int


def _tokens(expr: str) -> list[_Tok]:
    toks, pos = [], 0
    while pos < len(expr):
        if not expr[pos:].strip():
            break
        m = _TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            raise _error(pos + 1, f"cannot read {expr[pos : pos + 10].strip()!r}")
        kind = m.lastgroup or "bad"
        text = m.group(kind)
        col = m.start(kind) + 1
        if kind == "bad":
            if text[:1] in "\"'":
                raise _error(col, "a string is not closed")
            raise _error(col, f"unknown operator {text!r} " + _OPS_HINT)
        if kind == "name" and text.lower() in _WORDS:
            kind, text = "word", text.lower()
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
        if tok is not None:
            raise _error(tok.col, f"unexpected {tok.text!r}")
        return self.fields

    def disjunction(self, depth: int) -> None:
        if depth > 64:
            raise _error(self.peek().col if self.peek() else self.end, "nested too deeply")
        self.conjunction(depth)
        while self.take("or", "||"):
            self.conjunction(depth)

    def conjunction(self, depth: int) -> None:
        self.negation(depth)
        while self.take("and", "&&"):
            self.negation(depth)

    def negation(self, depth: int) -> None:
        if self.take("not", "!"):
            self.negation(depth + 1)
        elif self.take("exists"):
            self.field("exists")
        elif self.take("("):
            self.disjunction(depth + 1)
            self.expect(")", "a parenthesised condition")
        else:
            self.condition()

    def field(self, after: str) -> None:
        tok = self.peek()
        if tok is None or tok.kind not in ("name", "meta"):
            raise _error(tok.col if tok else self.end, f"expected a field after {after}")
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
        if self.take(*_COMPARE) or self.take("like"):
            self.value("the operator")
        elif self.take("in") or (self.take("not") and self.take("in")):
            self.value("in")
        else:
            nxt = self.peek()
            raise _error(nxt.col if nxt else self.end, "expected an operator " + _OPS_HINT)

    def _is_call(self) -> bool:
        nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
        return nxt is not None and nxt.text == "("

    def value(self, after: str) -> None:
        tok = self.peek()
        literal = tok is not None and (
            tok.kind in ("string", "number") or tok.text in ("true", "false")
        )
        if literal:
            self.i += 1
        elif self.take("["):
            if not self.take("]"):
                self.value("[")
                while self.take(","):
                    self.value(",")
                self.expect("]", "a list")
        else:
            raise _error(tok.col if tok else self.end, f"expected a value after {after}")


def _meta_key(text: str) -> str:
    inner = text[text.index("[") + 1 : text.rindex("]")].strip()
    return re.sub(r"\\(.)", r"\1", inner[1:-1])


def expression_fields(expr: str) -> set[str]:
    """The fields the Milvus expression ``expr`` reads.

    Raises:
        ConfigurationError: the expression is empty or malformed (one line, with the column).
    """
    return _Parser(expr).parse()
