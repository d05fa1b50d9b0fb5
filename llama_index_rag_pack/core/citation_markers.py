"""The ``[N](id=M)`` citation marker grammar and its bounded, incremental scanner.

The LLM writes ``[N](id=M)`` after a claim (also ``[N](id=M,K)``), ``M`` being the 1-based
position of a context chunk. :func:`scan_marker` reads one marker starting at a ``[`` and tells
whether it is complete, may still become one when more text streams in, or cannot be one. The
grammar is bounded so one scan costs O(1) and text held back while a marker may be forming never
exceeds :data:`MAX_MARKER_LEN`.
"""

from __future__ import annotations

__all__ = ["FAIL", "MATCH", "MAX_MARKER_LEN", "PARTIAL", "scan_marker"]

# Marker grammar (bounded, so a marker scan costs O(1)):
#   "[" LABEL "]" "(id=" SP ID SP ("," SP ID SP)* ")"
#   LABEL: 0..9 of [0-9A-Za-z] (the LLM's own number, ignored: we renumber)
#   ID: 1..9 digits, at most MAX_IDS of them; SP: 0..2 spaces
MAX_LABEL = 9
MAX_DIGITS = 9
MAX_SPACES = 2
MAX_IDS = 16
# The longest possible marker; text held back while a marker may be forming never exceeds it,
# which keeps the rewrite linear in the length of the answer.
MAX_MARKER_LEN = (
    1 + MAX_LABEL + 1 + len("(id=") + MAX_IDS * (2 * MAX_SPACES + MAX_DIGITS) + (MAX_IDS - 1) + 1
)
_LABEL_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_DIGITS = frozenset("0123456789")

# Scan outcomes (plain ints: the scan runs once per "[" of every streamed answer).
FAIL = 0
PARTIAL = 1
MATCH = 2


def scan_marker(s: str, j: int) -> tuple[int, int, list[int]]:
    """Scan a marker starting at ``s[j] == "["``.

    Returns:
        ``(MATCH, end, ids)`` for a complete marker ending before ``end``; ``(PARTIAL, 0, [])``
        when ``s`` ends while it could still become one; ``(FAIL, 0, [])`` when it cannot.

    Example:
        >>> scan_marker("Paris [1](id=2, 5).", 6)
        (2, 18, [2, 5])
        >>> scan_marker("Paris [1](id=", 6)[0] == PARTIAL
        True
    """
    n = len(s)
    k = j + 1
    start = k
    while k < n and s[k] in _LABEL_CHARS:
        k += 1
        if k - start > MAX_LABEL:
            return FAIL, 0, []
    if k >= n:
        return PARTIAL, 0, []
    if s[k] != "]":
        return FAIL, 0, []
    k += 1
    for expected in "(id=":
        if k >= n:
            return PARTIAL, 0, []
        if s[k] != expected:
            return FAIL, 0, []
        k += 1
    ids: list[int] = []
    while True:
        spaces = 0
        while k < n and s[k] == " ":
            k += 1
            spaces += 1
            if spaces > MAX_SPACES:
                return FAIL, 0, []
        start = k
        while k < n and s[k] in _DIGITS:
            k += 1
            if k - start > MAX_DIGITS:
                return FAIL, 0, []
        if k >= n:
            return PARTIAL, 0, []
        if k == start:
            return FAIL, 0, []
        ids.append(int(s[start:k]))
        if len(ids) > MAX_IDS:
            return FAIL, 0, []
        spaces = 0
        while k < n and s[k] == " ":
            k += 1
            spaces += 1
            if spaces > MAX_SPACES:
                return FAIL, 0, []
        if k >= n:
            return PARTIAL, 0, []
        if s[k] == ")":
            return MATCH, k + 1, ids
        if s[k] != ",":
            return FAIL, 0, []
        k += 1
