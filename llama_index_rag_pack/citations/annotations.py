"""Sentence-level citations written by code: split an answer into sentences, read the LLM's
``S1: 2, 3`` annotation lines, and put ``[k](id=M)`` markers on each sentence.

Pure Python. Used by the ``annotate`` and ``quotes`` modes of
:class:`~llama_index_rag_pack.citations.cited_query_engine.CitedQueryEngine`; the markers are
then renumbered like the LLM's own by
:class:`~llama_index_rag_pack.citations.references.ReferenceManager`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re
from collections.abc import Sequence

from llama_index_rag_pack.documents.words import cut_after

__all__ = [
    "attach_markers",
    "parse_annotations",
    "split_prose_sentences",
    "split_sentences",
]

#: Where a sentence ends: whitespace after . ! ?, or right after 。！？ (and closing quotes or
#: brackets), which Chinese and Japanese write without a space after them.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|[。！？]+[”’」』）】]*\s*")
_CLOSING = ".!?;:"
_ANNOTATION_LINE = re.compile(r"^\W*(?:s(?:entence)?\s*)?(\d+)\s*[:\-=>)\]]+\s*(.*)$", re.I)
#: Words whose period does not end a sentence (titles, "No.", "vs.", "approx.", ...).
_ABBREVIATIONS = frozenset(
    "dr mr mrs ms st jr sr prof gen col lt sgt capt rev hon no nos vol fig figs vs etc cf ca "
    "approx dept est inc ltd co corp mt ft op al".split()
)


def split_sentences(text: str) -> list[str]:
    """Sentences with their trailing whitespace (joining them gives ``text`` back).

    The answer-side splitter: lossless, so markers go back into the answer exactly where its
    sentences end, and pure Python, so it runs on every streamed answer without loading NLTK.
    The chunk side splits with LlamaIndex's punkt tokenizer instead
    (:func:`~llama_index_rag_pack.documents.sentences.chunk_sentences`): abbreviations such as
    "Dr." matter more there, and the pieces are retrieval units, not text to rebuild.

    Example:
        >>> split_sentences("One. Two!  Three")
        ['One. ', 'Two!  ', 'Three']
    """
    return cut_after(_SENTENCE_END, text)


def split_prose_sentences(text: str) -> list[str]:
    """:func:`split_sentences`, but a period after an initial (``J.``), a dotted abbreviation
    (``U.S.``, ``e.g.``) or a common one (``Dr.``, ``No.``, ``vs.``) does not end a sentence.
    Lossless, like :func:`split_sentences`: joining the pieces gives ``text`` back.

    Example:
        >>> split_prose_sentences("Dr. J. R. Smith came. He left the U.S. Navy in 1990. Then?")
        ['Dr. J. R. Smith came. ', 'He left the U.S. Navy in 1990. ', 'Then?']
        >>> split_prose_sentences("It grew by 3.5. Then it fell.")
        ['It grew by 3.5. ', 'Then it fell.']
    """
    out: list[str] = []
    for piece in split_sentences(text):
        if out and _ends_with_abbreviation(out[-1]):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def _ends_with_abbreviation(piece: str) -> bool:
    words = piece.split()
    if not words or not words[-1].endswith("."):
        return False
    word = words[-1][:-1].lstrip("(\"'“‘")
    dotted = "." in word and word.replace(".", "").isalpha()  # "U.S", "e.g"; not "3.5"
    return (len(word) == 1 and word.isalpha()) or dotted or word.lower() in _ABBREVIATIONS


def attach_markers(sentence: str, ids: Sequence[int]) -> str:
    """Insert ``[k](id=M)`` markers before the sentence's final punctuation (whitespace kept).

    Example:
        >>> attach_markers("Paris is in France. ", [3, 1])
        'Paris is in France [1](id=3)[2](id=1). '
    """
    if not ids:
        return sentence
    body = sentence.rstrip()
    trailing = sentence[len(body) :]
    end = len(body)
    while end > 0 and body[end - 1] in _CLOSING:
        end -= 1
    markers = "".join(f"[{k}](id={m})" for k, m in enumerate(ids, 1))
    return f"{body[:end]} {markers}{body[end:]}{trailing}" if end else f"{markers}{body}{trailing}"


def parse_annotations(text: str, n_sentences: int) -> dict[int, list[int]]:
    """``{sentence_number: [document ids]}`` from lines like ``S1: 2, 3`` (tolerant; 1-based).

    Example:
        >>> parse_annotations("S1: 2, 3\\nSentence 2 - none\\nS9: 1", 2)
        {1: [2, 3], 2: []}
    """
    found: dict[int, list[int]] = {}
    for line in text.splitlines():
        m = _ANNOTATION_LINE.match(line.strip())
        if not m:
            continue
        sentence = int(m.group(1))
        if not 1 <= sentence <= n_sentences:
            continue
        ids = [int(x) for x in re.findall(r"\d+", m.group(2))]
        found.setdefault(sentence, [])
        found[sentence].extend(i for i in ids if i not in found[sentence])
    return found
