"""The ``[N](id=M)`` citation marker grammar and its bounded, incremental scanner.

The LLM writes ``[N](id=M)`` after a claim (also ``[N](id=M,K)``), ``M`` being the 1-based
position of a context chunk. :func:`scan_marker` reads one marker starting at a ``[`` and tells
whether it is complete, may still become one when more text streams in, or cannot be one. The
grammar is bounded so one scan costs O(1) and text held back while a marker may be forming never
exceeds :data:`MAX_MARKER_LEN`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

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
_SPACE = frozenset(" ")

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
    k = _run_end(s, j + 1, _LABEL_CHARS, MAX_LABEL)
    if k < 0:
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
        start = _run_end(s, k, _SPACE, MAX_SPACES)
        k = _run_end(s, start, _DIGITS, MAX_DIGITS) if start >= 0 else -1
        if k < 0:
            return FAIL, 0, []
        if k >= n:
            return PARTIAL, 0, []
        if k == start:
            return FAIL, 0, []
        ids.append(int(s[start:k]))
        if len(ids) > MAX_IDS:
            return FAIL, 0, []
        k = _run_end(s, k, _SPACE, MAX_SPACES)
        if k < 0:
            return FAIL, 0, []
        if k >= n:
            return PARTIAL, 0, []
        if s[k] == ")":
            return MATCH, k + 1, ids
        if s[k] != ",":
            return FAIL, 0, []
        k += 1


def _run_end(s: str, k: int, chars: frozenset[str], most: int) -> int:
    """Where the run of ``chars`` starting at ``s[k]`` ends, or -1 once it is longer than
    ``most`` (it cannot be part of a marker)."""
    start, n = k, len(s)
    while k < n and s[k] in chars:
        k += 1
        if k - start > most:
            return -1
    return k
