"""Is a file's content text, and in which encoding: the test that keeps binaries out of an index.

A file that is not valid UTF-8 goes to ``charset_normalizer``, which finds no plausible
encoding for random bytes, images, archives or executables (they are rejected), and does for
legacy-encoded text in any language. Its first guess among look-alike single-byte code pages is
unreliable for Western European text (French Latin-1 comes back as Baltic ``cp1257``), so when a
Western code page is among its candidates the text is decoded as Windows-1252 (a superset of
Latin-1's printable range), else with its best guess (``cp1251`` Russian, ``shift_jis`` ...).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

__all__ = ["TextEncoding", "detect_text_encoding", "without_lone_surrogates"]

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# charset_normalizer's names of the code pages that Windows-1252 decodes the same way (for the
# letters Western text uses).
_WESTERN = {"cp1252", "latin_1", "iso8859_15", "cp1250", "iso8859_2", "cp1257", "iso8859_10"}


@dataclass(frozen=True)
class TextEncoding:
    """How to decode a file: ``bytes.decode(encoding, errors)``."""

    encoding: str
    errors: str = "strict"

    def decode(self, data: bytes) -> str:
        return data.decode(self.encoding, self.errors)


def detect_text_encoding(data: bytes) -> TextEncoding | None:
    """The encoding of ``data`` when it is text, ``None`` when it is binary or undecodable.

    Example:
        >>> detect_text_encoding("naïve café".encode()).encoding
        'utf-8'
        >>> detect_text_encoding("L'élève a mangé une crème brûlée.".encode("latin-1")).decode(
        ...     "L'élève a mangé une crème brûlée.".encode("latin-1"))
        "L'élève a mangé une crème brûlée."
        >>> detect_text_encoding(bytes(range(256)) * 64) is None
        True
    """
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return TextEncoding(encoding, "replace")
    if b"\0" in data:  # text without a BOM never holds NUL bytes
        return None
    try:
        data.decode("utf-8")
        return TextEncoding("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        return None
    if best.encoding == "utf_8":  # UTF-8 text with a few stray bytes
        return TextEncoding("utf-8", "replace")
    if {m.encoding for m in matches} & _WESTERN:
        try:
            data.decode("cp1252")
            return TextEncoding("cp1252")
        except UnicodeDecodeError:
            return TextEncoding("latin-1")
    return TextEncoding(best.encoding, "replace")


_SURROGATE = re.compile("[\ud800-\udfff]")


def without_lone_surrogates(text: str) -> str:
    """``text`` with every surrogate code point replaced by U+FFFD.

    A Python string can hold surrogates (an LLM reply or a question decoded with
    ``surrogateescape``), but UTF-8 cannot encode them: tokenizers, gRPC and Milvus refuse such a
    text with their own errors. Replaced, the rest of the text is searched and embedded as it is.

    Example:
        >>> without_lone_surrogates("vector " + chr(0xD800) + " search") == "vector \ufffd search"
        True
    """
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def escape_undecodable(text: str) -> str:
    """``text`` as valid UTF-8 that still tells apart the names it may stand for.

    A file name with bytes that are not UTF-8 reaches Python with each such byte as a lone
    surrogate (``surrogateescape``); gRPC and Milvus cannot encode it. Here each one becomes its
    byte's escape (``\\xe9``), the way ``ls -b`` shows it: stable across runs, different for
    names that differ only in those bytes (unlike :func:`without_lone_surrogates`), and the
    identity for valid text. Other lone surrogates become their code point's escape
    (``\\ud800``).

    Example:
        >>> escape_undecodable(b"caf\\xe9.txt".decode("utf-8", "surrogateescape"))
        'caf\\\\xe9.txt'
        >>> escape_undecodable("café.txt")
        'café.txt'
    """
    if text.isascii() or not _SURROGATE.search(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is not an escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


__all__ += ["escape_undecodable"]


def split_at_breaks(text: str, limit: int) -> list[str]:
    """``text`` cut into pieces of at most ``limit`` characters (joined, they are ``text``), each
    ending at the last paragraph break in its second half, else line break, sentence or word end.

    Example:
        >>> split_at_breaks("one two. three\\n\\nfour five", 16)
        ['one two. three\\n\\n', 'four five']
        >>> split_at_breaks("abcdef", 4)
        ['abcd', 'ef']
    """
    pieces, start = [], 0
    while len(text) - start > limit:
        end = start + limit
        for sep in ("\n\n", "\n", ". ", "\u3002", " "):
            cut = text.rfind(sep, start + limit // 2, end)
            if cut >= 0:
                end = cut + len(sep)
                break
        pieces.append(text[start:end])
        start = end
    pieces.append(text[start:])
    return pieces


__all__ += ["split_at_breaks"]
