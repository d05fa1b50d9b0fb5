"""Word segmentation of Chinese and Japanese runs of text, by libraries that ship their
dictionaries in their wheels: jieba's dictionary compiled into ``rjieba`` (jieba-rs) for
Chinese, SudachiPy with ``sudachidict-core`` for Japanese. Both are dependencies of the package;
a broken install is an error at indexing, never a silent fallback to another analysis.

Example:
    >>> chinese_words("向量数据库")
    ['向量', '数据库']
    >>> japanese_words("ツチブタはシロアリを食べる")
    ['土豚', '白蟻', '食べる']
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import threading
from importlib import metadata
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = ["chinese_words", "japanese_surface_words", "japanese_words", "segmenter_versions"]

#: Sudachi refuses inputs over 49,149 bytes: longer runs are read in pieces of this many
#: characters (3 bytes each in UTF-8).
_SUDACHI_PIECE = 4000
#: Parts of speech (Sudachi's first level) that carry no topic: particles, auxiliary verbs,
#: symbols and blanks.
_JAPANESE_DROPPED_POS = frozenset({"助詞", "助動詞", "補助記号", "空白", "記号"})


def _missing(library: str, language: str, error: Exception) -> ConfigurationError:
    return ConfigurationError(
        f"{language} text needs {library} for its BM25 analysis, and it could not be loaded "
        f"({type(error).__name__}: {error}): reinstall llama-index-rag-pack (`pip install "
        f"{library}`), or pick another analysis with bm25_analyzer=."
    )


@functools.lru_cache(maxsize=1)
def _rjieba() -> Any:
    try:
        import rjieba
    except ImportError as e:
        raise _missing("rjieba", "Chinese", e) from e
    return rjieba


def chinese_words(text: str) -> list[str]:
    """The words of a Chinese run by jieba's dictionary (jieba-rs), without its HMM guesses for
    unknown words: an unknown word falls apart into single characters the same way wherever it
    occurs, so a question and a passage split it alike."""
    return [w for w in _rjieba().cut(text, hmm=False) if w.strip()]


_SUDACHI = threading.local()  # a Sudachi tokenizer serves one thread at a time


@functools.lru_cache(maxsize=1)
def _sudachi_dictionary() -> Any:
    try:
        from sudachipy import Dictionary

        return Dictionary(dict="core")
    except Exception as e:  # ImportError, or sudachidict-core missing (sudachipy's own error)
        raise _missing("sudachipy and sudachidict-core", "Japanese", e) from e


def _sudachi_tokenizer() -> Any:
    tokenizer = getattr(_SUDACHI, "tokenizer", None)
    if tokenizer is None:
        from sudachipy import SplitMode

        tokenizer = _sudachi_dictionary().create(mode=SplitMode.B)
        _SUDACHI.tokenizer = tokenizer
    return tokenizer


def japanese_words(text: str) -> list[str]:
    """The content words of a Japanese run: Sudachi's middle split (mode B), each word in its
    normalised form (ツチブタ and 土豚, 附属 and 付属 read alike), particles, auxiliary verbs and
    symbols dropped."""
    tokenizer = _sudachi_tokenizer()
    out: list[str] = []
    for start in range(0, len(text), _SUDACHI_PIECE):
        for morpheme in tokenizer.tokenize(text[start : start + _SUDACHI_PIECE]):
            if morpheme.part_of_speech()[0] in _JAPANESE_DROPPED_POS:
                continue
            word = morpheme.normalized_form()
            if word.strip():
                out.append(word)
    return out


def japanese_surface_words(text: str) -> list[str]:
    """Every word of a Japanese run as written (Sudachi's mode B), particles included: what a
    word count or a sentence's word overlap reads."""
    tokenizer = _sudachi_tokenizer()
    out: list[str] = []
    for start in range(0, len(text), _SUDACHI_PIECE):
        out.extend(
            m.surface()
            for m in tokenizer.tokenize(text[start : start + _SUDACHI_PIECE])
            if m.surface().strip()
        )
    return out


def segmenter_versions() -> dict[str, str]:
    """Versions of the segmenters and dictionaries installed (recorded with a collection)."""
    out = {}
    for dist in ("rjieba", "sudachipy", "sudachidict-core", "py3langid", "PyStemmer"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "missing"
    return out
