"""The text analysis of the BM25 side: what words a chunk and a query are reduced to.

Milvus Lite ships two BM25 analyzers, ``standard`` (lower-cased word tokens) and ``jieba``, and
ignores the stop-word and stemmer filters a server honours
(``benchmarks/results/bm25_analyzer.md``). So the pack analyses on the client: every chunk is
stored twice, its original text (what is shown and cited) and an analysed copy (what Milvus' BM25
function reads), and every query goes through the same function before the BM25 search. Milvus's
``standard`` tokenizer then only splits the analysed copy on the spaces between its terms, so Lite,
a ``milvus-lite server`` and a Milvus server or cluster index the same terms and rank alike.

Analyzers (:func:`resolve_analyzer`):

* ``auto`` (the default for new collections): each chunk in its own language(s)
  (:class:`LanguageAnalyzer`, :mod:`~llama_index_rag_pack.documents.languages`). Chinese runs are
  segmented by jieba's dictionary, Japanese runs by Sudachi, the words of the rest stemmed with
  the Snowball stemmer of their identified language (German, French, Spanish, Russian, ... and
  English) minus its stop words, other scripts without spaces (Hangul, Thai, ...) cut into
  character bigrams. A chunk's language is recorded in its metadata (``language``) and the
  collection's languages with the collection, and a question is analysed by its own language
  among those. On English text ``auto`` gives exactly the ``english`` terms.
* ``chinese``, ``japanese``: that language's segmenter for every CJK run, English for the rest.
* a Snowball language's name (``german``, ``french``, ``spanish``, ``russian``, ...): its stemmer
  and stop words for every word, bigrams for CJK runs.
* ``unicode``: the script-aware fallback alone: lower-cased words, bigrams for CJK runs.
* ``english``: lower-cased letter/digit runs, Lucene's English stop words (Milvus'
  ``_english_`` list) removed, then the Snowball English stemmer (Porter2, from PyStemmer: the
  stemmer of ``bm25s`` and LlamaIndex's ``BM25Retriever``); a run of CJK characters stays one
  term. The analysis of collections made before ``auto``.
* ``standard``: no client-side analysis; Milvus' own ``standard`` analyzer reads the original
  text (what collections indexed before the ``english`` analyzer use).
* any callable ``text -> list[str]``; a collection records its name, so reopen it with the same
  callable.

Every analysis heads a chunk's analysed copy with its title and section headings, so a question
naming an article finds it.

Example:
    >>> english_terms("The runners were running in Milvus's new indexes")
    ['runner', 'were', 'run', 'milvus', 's', 'new', 'index']
    >>> analyze_for_bm25("Running fast", english_terms)
    'run fast'
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.language_analysis import (
    AUTO_VERSION,
    LanguageAnalyzer,
    LanguageProfile,
    analysis_names,
    english_terms,
    fixed_analyzer,
)
from llama_index_rag_pack.documents.sections import SECTION_KEY, SectionPaths
from llama_index_rag_pack.documents.stop_words import ENGLISH_STOP_WORDS
from llama_index_rag_pack.documents.words import word_tokens

logger = logging.getLogger(__name__)

__all__ = [
    "ANALYSIS_PROPERTY",
    "ENGLISH_STOP_WORDS",
    "HEADING_KEYS",
    "LANGUAGES_PROPERTY",
    "MAX_ANALYSED_BYTES",
    "READ_SHARE",
    "VERSION_PROPERTY",
    "AnalysedChunk",
    "Bm25Analysis",
    "BM25Analyzer",
    "ChunkToAnalyse",
    "analyse_chunks",
    "analyze_for_bm25",
    "document_headings",
    "english_terms",
    "resolve_analyzer",
    "word_tokens",
]

#: A Milvus VARCHAR holds at most 65,535 bytes: an analysed copy is cut (at a space) below that.
MAX_ANALYSED_BYTES = 65_000
#: The collection property that records how its BM25 field was analysed.
ANALYSIS_PROPERTY = "rag_pack.bm25_analyzer"
#: ... the version of a language-aware analysis and the segmenters it ran with (JSON).
VERSION_PROPERTY = "rag_pack.bm25_analysis_version"
#: ... and how many chunks were analysed in each language (JSON ``{"en": 120, "zh": 30}``).
LANGUAGES_PROPERTY = "rag_pack.bm25_languages"
#: The share of a collection's chunks in an embedding model's languages from which the model
#: counts as reading the collection (:meth:`Bm25Analysis.read_by`).
READ_SHARE = 0.8
#: The analysis of a new collection when none is asked for.
DEFAULT_ANALYZER = "auto"

BM25Analyzer = Callable[[str], Sequence[str]]


def analyze_for_bm25(text: str, analyzer: BM25Analyzer) -> str:
    """The terms of ``text`` under ``analyzer``, joined by single spaces (what the BM25 field
    holds, and what a BM25 query sends), cut below :data:`MAX_ANALYSED_BYTES`.

    Terms the analyzer returns with spaces or punctuation inside are split into their words, so
    Milvus' ``standard`` tokenizer reads back exactly the terms joined here.
    """
    return _joined(analyzer(text))


def _joined(terms: Sequence[str]) -> str:
    # one pass over all terms: the same words as splitting each term on its own
    out = " ".join(word_tokens(" ".join(map(str, terms))))
    if len(out.encode()) > MAX_ANALYSED_BYTES:
        out = out.encode()[:MAX_ANALYSED_BYTES].decode(errors="ignore").rsplit(" ", 1)[0]
    return out


@dataclass(frozen=True)
class AnalysedChunk:
    """A chunk's analysed copy and the languages it was analysed in.

    Attributes:
        text: The terms joined by spaces (what the BM25 field holds).
        language: The chunk's main language (``None`` for an analysis that does not tell).
        languages: Every language whose analysis gave terms.
    """

    text: str
    language: str | None = None
    languages: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChunkToAnalyse:
    """What the analysis of one chunk reads (plain values: another process can analyse it).

    Attributes:
        text: The chunk's text.
        headings: Its title and section headings (:func:`document_headings`).
        language: Its recorded language, analysed in as before (``None``: identified).
        document: Its document's key: chunks of one document share its language.
        takes_hint: Whether its words may take its document's language.
    """

    text: str
    headings: tuple[str, ...] = ()
    language: str | None = None
    document: str = ""
    takes_hint: bool = True


@dataclass(frozen=True)
class Bm25Analysis:
    """How a collection's BM25 field is filled and how its queries are analysed.

    Attributes:
        name: ``auto``, ``english``, ``standard``, a language (``chinese``, ``german``, ...) or
            ``custom:<callable name>`` (what the collection records).
        analyzer: The client-side analysis, or ``None`` for ``standard`` (Milvus reads the
            original text).
        profile: Under a language-aware analysis, the collection's chunks per language (what
            questions are identified among); updated as chunks are written.
    """

    name: str
    analyzer: BM25Analyzer | None = None
    profile: LanguageProfile = field(default_factory=LanguageProfile, compare=False, repr=False)

    @property
    def client_side(self) -> bool:
        """True when the client analyses (an analysed copy in its own field)."""
        return self.analyzer is not None

    @property
    def language_aware(self) -> bool:
        """True for ``auto`` and the fixed-language analyses (they record languages)."""
        return isinstance(self.analyzer, LanguageAnalyzer)

    @property
    def version(self) -> int | None:
        """The version of a language-aware analysis (``None`` for the others)."""
        return AUTO_VERSION if self.language_aware else None

    def document_hint(self, text: str) -> str | None:
        """A document's language under a language-aware analysis (what its short chunks
        take), else ``None``."""
        if isinstance(self.analyzer, LanguageAnalyzer):
            return self.analyzer.document_hint(text)
        return None

    def analyse_document(
        self,
        text: str,
        headings: Sequence[str] = (),
        *,
        language: str | None = None,
        hint: str | None = None,
    ) -> AnalysedChunk:
        """The analysed copy of a chunk (its headings, then its text) and its languages.

        Args:
            language: The chunk's language when it was recorded before (its metadata), so a
                chunk is analysed alike every time.
            hint: Its document's language (:meth:`document_hint`).
        """
        if self.analyzer is None:
            return AnalysedChunk(text)
        head = "\n".join(h for h in headings if h)
        full = f"{head}\n{text}" if head else text
        if isinstance(self.analyzer, LanguageAnalyzer):
            found = self.analyzer.analyse_document(full, language=language, hint=hint)
            return AnalysedChunk(_joined(found.terms), found.language, found.languages)
        return AnalysedChunk(_joined(self.analyzer(full)))

    def document_text(self, text: str, headings: Sequence[str] = ()) -> str:
        """The analysed copy of a chunk: its headings (title, sections) then its text."""
        return self.analyse_document(text, headings).text

    def query_text(self, query: str) -> str:
        """What a BM25 search sends for ``query`` (the query itself under ``standard``)."""
        if self.analyzer is None:
            return query
        if isinstance(self.analyzer, LanguageAnalyzer):
            return _joined(self.analyzer.query_terms(query, self.profile))
        return analyze_for_bm25(query, self.analyzer)

    def query_language(self, query: str) -> str | None:
        """The main language of a question as this analysis reads it (``None`` when it does
        not tell: ``standard`` and custom analyses)."""
        if isinstance(self.analyzer, LanguageAnalyzer):
            return self.analyzer.query_language(query, self.profile)
        return "en" if self.name == "english" else None

    def share_in(self, languages: Collection[str]) -> float | None:
        """The share of the collection's chunks whose main language is one of ``languages``
        (``None`` when the analysis does not record languages, or before any chunk)."""
        counts = self.profile.counts()
        total = sum(counts.values())
        if not total:
            return 1.0 if self.name == "english" and "en" in languages else None
        return sum(n for code, n in counts.items() if code in languages) / total

    def read_by(self, languages: Collection[str], query: str) -> bool:
        """Whether a model that reads ``languages`` reads ``query`` and the collection: the
        question's language is one of them and so are the main languages of at least
        :data:`READ_SHARE` of the chunks (unknown languages count as read)."""
        asked, share = self.query_language(query), self.share_in(languages)
        return (asked is None or asked in languages) and (share is None or share >= READ_SHARE)

    def describe(self) -> str:
        """One line for ``pack.describe()``: the analysis and the collection's languages."""
        if self.analyzer is None:
            return "standard (Milvus analyses the original text)"
        if not self.language_aware:
            if self.name == "english":
                return (
                    "english (indexed before per-language analysis; `rag-pack index --reindex` "
                    "upgrades it to auto)"
                )
            return self.name
        counts = self.profile.counts()
        langs = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        return f"{self.name} v{self.version}" + (
            f" (chunks per language: {langs})" if langs else ""
        )


#: Metadata keys whose values head a chunk's analysed copy, in this order: the document's
#: title, then section headings as document parsers record them (LlamaIndex's
#: ``MarkdownNodeParser`` writes ``header_path``, e.g. ``/Install/From source/``). ``section``,
#: the path the pack's chunker writes, only under ``RAG_PACK_SECTION_PATHS=all``
#: (:class:`~llama_index_rag_pack.documents.sections.SectionPaths`).
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
        if key == SECTION_KEY and SectionPaths.from_env() is not SectionPaths.ALL:
            continue  # the pack's section path: in the BM25 text only when asked for
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


def analyse_chunks(analysis: Bm25Analysis, chunks: Sequence[ChunkToAnalyse]) -> list[AnalysedChunk]:
    """The analysed copies of ``chunks``, in order. Under a language-aware analysis, the words
    of a chunk too short to identify take the language of its document, identified over the
    document's chunks among ``chunks`` (a document of one chunk is identified as that chunk)."""
    hints: dict[str, str | None] = {}
    if analysis.language_aware:
        by_doc: dict[str, list[str]] = {}
        for chunk in chunks:
            if chunk.takes_hint:
                by_doc.setdefault(chunk.document, []).append(chunk.text)
        hints = {
            doc: analysis.document_hint("\n".join(parts))
            for doc, parts in by_doc.items()
            if len(parts) > 1
        }
    return [
        analysis.analyse_document(
            chunk.text, chunk.headings, language=chunk.language, hint=hints.get(chunk.document)
        )
        for chunk in chunks
    ]


def resolve_analyzer(spec: str | BM25Analyzer | Bm25Analysis | None) -> Bm25Analysis:
    """A named analysis (``None``: ``auto``), or a callable ``text -> terms``.

    Raises:
        ConfigurationError: an unknown name, or something neither a name nor a callable.

    Example:
        >>> resolve_analyzer(None).name, resolve_analyzer("standard").client_side
        ('auto', False)
        >>> resolve_analyzer("German").name
        'german'
    """
    if isinstance(spec, Bm25Analysis):
        return spec
    if spec is None:
        spec = DEFAULT_ANALYZER
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name == "english":
            return Bm25Analysis("english", english_terms)
        if name == "standard":
            return Bm25Analysis("standard")
        if name == "auto":
            return Bm25Analysis("auto", LanguageAnalyzer.auto())
        fixed = fixed_analyzer(name)
        if fixed is not None:
            return Bm25Analysis(name, fixed)
        raise ConfigurationError(
            f"Unknown bm25_analyzer {spec!r}: use 'auto' (default), 'english', 'standard', one "
            f"of {', '.join(n for n in analysis_names() if n != 'auto')}, or a callable text "
            "-> list of terms."
        )
    if callable(spec):
        return Bm25Analysis(_callable_name(spec), spec)
    raise ConfigurationError(
        f"bm25_analyzer must be a name ('auto', 'english', 'chinese', ...) or a callable, got "
        f"{type(spec).__name__}"
    )
