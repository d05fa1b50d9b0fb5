"""The text analysis of the BM25 side: what words a chunk and a query are reduced to.

Milvus Lite ships two BM25 analyzers, ``standard`` (lower-cased word tokens) and ``jieba``, and
ignores the stop-word and stemmer filters a server honours
(``benchmarks/results/bm25_analyzer.md``). So the pack analyses on the client: every chunk is
stored twice, its original text (what is shown and cited) and an analysed copy (what Milvus' BM25
function reads), and every query goes through the same function before the BM25 search. Milvus's
``standard`` tokenizer then only splits the analysed copy on the spaces between its terms, so Lite,
a ``milvus-lite server`` and a Milvus server or cluster index the same terms and rank alike.

Analyzers (:func:`resolve_analyzer`):

* ``english`` (the default): lower-cased letter/digit runs, Lucene's English stop words (Milvus'
  ``_english_`` list) removed, then the Snowball English stemmer (Porter2, from PyStemmer: the
  stemmer of ``bm25s`` and LlamaIndex's ``BM25Retriever``). A chunk's analysed copy starts with
  its title and section headings, so a question naming an article finds it.
* ``standard``: no client-side analysis; Milvus' own ``standard`` analyzer reads the original
  text (what collections indexed before the ``english`` analyzer use).
* any callable ``text -> list[str]`` for another language (e.g. a PyStemmer stemmer of that
  language over your own stop words); a collection records its name, so reopen it with the same
  callable.

Example:
    >>> english_terms("The runners were running in Milvus's new indexes")
    ['runner', 'were', 'run', 'milvus', 's', 'new', 'index']
    >>> analyze_for_bm25("Running fast", english_terms)
    'run fast'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "ANALYSIS_PROPERTY",
    "ENGLISH_STOP_WORDS",
    "HEADING_KEYS",
    "MAX_ANALYSED_BYTES",
    "Bm25Analysis",
    "BM25Analyzer",
    "analyze_for_bm25",
    "document_headings",
    "english_terms",
    "resolve_analyzer",
    "word_tokens",
]

#: Lucene's English stop words: Milvus' ``_english_`` list, what a server's ``english``
#: analyzer removes.
ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
#: Runs of Unicode letters and digits: the words Milvus' ``standard`` tokenizer keeps whole, so
#: an analysed copy (terms joined by spaces) is split back into exactly these terms.
_WORD = re.compile(r"[^\W_]+")
#: A Milvus VARCHAR holds at most 65,535 bytes: an analysed copy is cut (at a space) below that.
MAX_ANALYSED_BYTES = 65_000
#: The collection property that records how its BM25 field was analysed.
ANALYSIS_PROPERTY = "rag_pack.bm25_analyzer"

BM25Analyzer = Callable[[str], Sequence[str]]


@functools.lru_cache(maxsize=8)
def _stemmer(language: str) -> Any:
    import Stemmer  # PyStemmer: Snowball stemmers in C

    return Stemmer.Stemmer(language)


def word_tokens(text: str) -> list[str]:
    """Lower-cased runs of letters and digits (``_`` and punctuation separate words)."""
    return _WORD.findall(text.lower())


def english_terms(text: str) -> list[str]:
    """``text`` as English BM25 terms: lower-cased words, stop words dropped, Snowball-stemmed.

    Example:
        >>> english_terms("Is it raining? The storms are coming!")
        ['rain', 'storm', 'come']
    """
    words = [w for w in word_tokens(text) if w not in ENGLISH_STOP_WORDS]
    return list(_stemmer("english").stemWords(words)) if words else []


def analyze_for_bm25(text: str, analyzer: BM25Analyzer) -> str:
    """The terms of ``text`` under ``analyzer``, joined by single spaces (what the BM25 field
    holds, and what a BM25 query sends), cut below :data:`MAX_ANALYSED_BYTES`.

    Terms the analyzer returns with spaces or punctuation inside are split into their words, so
    Milvus' ``standard`` tokenizer reads back exactly the terms joined here.
    """
    terms = [w for term in analyzer(text) for w in word_tokens(str(term))]
    out = " ".join(terms)
    if len(out.encode()) > MAX_ANALYSED_BYTES:
        out = out.encode()[:MAX_ANALYSED_BYTES].decode(errors="ignore").rsplit(" ", 1)[0]
    return out


@dataclass(frozen=True)
class Bm25Analysis:
    """How a collection's BM25 field is filled and how its queries are analysed.

    Attributes:
        name: ``english``, ``standard`` or ``custom:<callable name>`` (what the collection records).
        analyzer: The client-side analysis, or ``None`` for ``standard`` (Milvus reads the
            original text).
    """

    name: str
    analyzer: BM25Analyzer | None = None

    @property
    def client_side(self) -> bool:
        """True when the client analyses (an analysed copy in its own field)."""
        return self.analyzer is not None

    def document_text(self, text: str, headings: Sequence[str] = ()) -> str:
        """The analysed copy of a chunk: its headings (title, sections) then its text."""
        if self.analyzer is None:
            return text
        head = "\n".join(h for h in headings if h)
        return analyze_for_bm25(f"{head}\n{text}" if head else text, self.analyzer)

    def query_text(self, query: str) -> str:
        """What a BM25 search sends for ``query`` (the query itself under ``standard``)."""
        if self.analyzer is None:
            return query
        return analyze_for_bm25(query, self.analyzer)


#: Metadata keys whose values head a chunk's analysed copy, in this order: the document's
#: title, then section headings as document parsers record them (LlamaIndex's
#: ``MarkdownNodeParser`` writes ``header_path``, e.g. ``/Install/From source/``).
HEADING_KEYS = ("title", "header_path", "section_title", "section", "heading")


def document_headings(metadata: Mapping[str, Any] | None) -> list[str]:
    """The title and section headings a chunk's metadata names (a file name, without its
    extension, stands in for a missing title).

    Example:
        >>> document_headings({"title": "Milvus", "header_path": "/Search/BM25/"})
        ['Milvus', 'Search', 'BM25']
        >>> document_headings({"file_name": "release_notes.md"})
        ['release notes']
    """
    meta = metadata or {}
    out: list[str] = []
    for key in HEADING_KEYS:
        value = meta.get(key)
        if isinstance(value, str):
            parts = value.strip("/").split("/") if key == "header_path" else [value]
            out.extend(p.strip() for p in parts if p.strip())
    if not meta.get("title"):
        name = str(meta.get("file_name") or meta.get("file_path") or "").strip()
        if name:
            out.insert(0, PurePath(name).stem.replace("_", " "))
    return out


def _callable_name(analyzer: Callable[..., Any]) -> str:
    module = getattr(analyzer, "__module__", None) or ""
    name = getattr(analyzer, "__qualname__", None) or type(analyzer).__qualname__
    return f"custom:{module}.{name}" if module else f"custom:{name}"


def resolve_analyzer(spec: str | BM25Analyzer | Bm25Analysis | None) -> Bm25Analysis:
    """``english`` (default for ``None``), ``standard``, or a callable ``text -> terms``.

    Raises:
        ConfigurationError: an unknown name, or something neither a name nor a callable.

    Example:
        >>> resolve_analyzer("english").name, resolve_analyzer("standard").client_side
        ('english', False)
    """
    if isinstance(spec, Bm25Analysis):
        return spec
    if spec is None:
        spec = "english"
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name == "english":
            return Bm25Analysis("english", english_terms)
        if name == "standard":
            return Bm25Analysis("standard")
        raise ConfigurationError(
            f"Unknown bm25_analyzer {spec!r}: use 'english', 'standard', or a callable "
            "text -> list of terms (another language: e.g. a PyStemmer stemmer of it)."
        )
    if callable(spec):
        return Bm25Analysis(_callable_name(spec), spec)
    raise ConfigurationError(
        f"bm25_analyzer must be 'english', 'standard' or a callable, got {type(spec).__name__}"
    )
