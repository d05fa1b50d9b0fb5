"""BM25 terms of text in its own language(s): the ``auto`` analysis and the fixed-language ones
(:mod:`~llama_index_rag_pack.documents.bm25_analysis` names them; what each does is described
there).

A chunk is read script by script (:func:`~llama_index_rag_pack.documents.languages.script_runs`):
Chinese or Japanese runs by their segmenter, the words of the rest by the Snowball stemmer and
stop words of their language, scripts without spaces that no segmenter reads in character
bigrams. Under ``auto`` the chunk's languages are identified
(:meth:`LanguageAnalyzer.analyse_document`) and a question is analysed by its own language among
the collection's (:meth:`LanguageAnalyzer.query_terms`, :class:`LanguageProfile`).

Example:
    >>> auto = LanguageAnalyzer.auto()
    >>> auto("The runners were running")  # English: exactly the ``english`` terms
    ['runner', 'were', 'run']
    >>> auto("向量数据库的混合检索")
    ['向量', '数据库', '混合', '检索']
    >>> auto.analyse_document("Die Erdferkel ernähren sich hauptsächlich von Ameisen und "
    ...                       "Termiten, die sie nachts ausgraben.").language
    'de'
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import regex

from llama_index_rag_pack.documents.language_profile import LanguageProfile
from llama_index_rag_pack.documents.languages import (
    CJK_LANGUAGES,
    SNOWBALL_LANGUAGES,
    count_letters,
    fold_width,
    identify,
    letter_script,
    query_languages,
    script_default,
    script_of_language,
    script_runs,
)
from llama_index_rag_pack.documents.segmenters import chinese_words, japanese_words
from llama_index_rag_pack.documents.stop_words import ENGLISH_STOP_WORDS, stop_words
from llama_index_rag_pack.documents.words import bigrams, word_tokens

__all__ = [
    "AUTO_VERSION",
    "Analysed",
    "LanguageAnalyzer",
    "LanguageProfile",
    "analysis_names",
    "english_terms",
    "fixed_analyzer",
    "language_terms",
]

#: Version of the language-aware analyses, recorded with a collection: a later version that
#: changes the terms of some text reads collections of this one with this one's rules.
AUTO_VERSION = 1
#: A chunk's words are identified when they have at least this many letters; shorter ones take
#: their document's language.
MIN_IDENTIFIED_LETTERS = 40
#: ... and the identifier must be at least this sure, else the document's language is used.
MIN_CHUNK_PROBABILITY = 0.9
#: Characters of a document read to identify its language.
DOCUMENT_HINT_CHARS = 4000
#: Characters of a text the identifier reads (its cost grows with the length).
IDENTIFIED_CHARS = 600
#: A document's language needs fewer letters (it is identified over its whole text).
MIN_DOCUMENT_LETTERS = 12
MIN_DOCUMENT_PROBABILITY = 0.5
#: Kana among a chunk's CJK characters from which it reads as Japanese.
KANA_SHARE = 0.1
#: A CJK character counts as this many letters when a chunk's main language is chosen.
CJK_CHAR_WEIGHT = 3

_KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")
#: What no language is written in, left out of the text a language is identified from: links,
#: e-mail addresses, paths and words with digits, underscores or inner capitals (code).
# whole tokens only, tried from their first character: a leading ``\S*`` would retry every
# position of every clean word (3x slower on plain prose)
_NOISE = re.compile(r"(?<!\S)\S*?(?:://|www\.|@|/|\\|_|\d|[a-z][A-Z])\S*")


@functools.lru_cache(maxsize=32)
def _stemmer(language: str) -> Any:
    import Stemmer  # PyStemmer: Snowball stemmers in C

    return Stemmer.Stemmer(language)


def english_terms(text: str) -> list[str]:
    """``text`` as English BM25 terms: lower-cased words, stop words dropped, Snowball-stemmed.

    Example:
        >>> english_terms("Is it raining? The storms are coming!")
        ['rain', 'storm', 'come']
    """
    words = [w for w in word_tokens(text) if w not in ENGLISH_STOP_WORDS]
    return list(_stemmer("english").stemWords(words)) if words else []


def language_terms(text: str, language: str) -> list[str]:
    """The words of ``text`` (no CJK runs in it) as BM25 terms of ``language``: its stop words
    dropped and its Snowball stemmer applied where it has them, plain lower-cased words for
    another language.

    Example:
        >>> language_terms("Die Erdferkel fressen Termiten", "de")
        ['erdferkel', 'fress', 'termit']
        >>> language_terms("Трубкозубы едят термитов", "ru")
        ['трубкозуб', 'ед', 'термит']
    """
    if language == "en":
        return english_terms(text)
    stops = stop_words(language)
    words = [w for w in word_tokens(text) if w not in stops]
    stemmer = SNOWBALL_LANGUAGES.get(language)
    if stemmer and words:
        return list(_stemmer(stemmer).stemWords(words))
    return words


def _cjk_terms(run: str, language: str | None) -> list[str]:
    if language == "zh":
        stops = stop_words("zh")
        return [w.lower() for w in chinese_words(run) if w not in stops]
    if language == "ja":
        stops = stop_words("ja")
        return [w.lower() for w in japanese_words(run) if w not in stops]
    return bigrams(run)


@dataclass(frozen=True)
class Analysed:
    """A text's BM25 terms and the languages they were analysed in.

    Attributes:
        terms: The terms, in text order.
        language: The text's main language (ISO 639 code; ``und`` without letters).
        languages: Every language whose analysis gave terms.
    """

    terms: list[str]
    language: str
    languages: tuple[str, ...]


class LanguageAnalyzer:
    """BM25 terms of text in its language(s): ``auto`` (identified per chunk and per question)
    or one fixed language.

    Args:
        name: The analysis's name (``auto``, ``chinese``, ``german``, ``unicode``, ...).
        language: ``None`` for ``auto``; else the language of every word outside CJK runs
            (an ISO 639 code; ``und``: plain lower-cased words).
        cjk: How CJK runs are read when ``language`` is fixed: ``zh``, ``ja`` or ``None``
            (character bigrams).
    """

    def __init__(self, name: str, language: str | None = None, cjk: str | None = None) -> None:
        self.name = name
        self.language = language
        self.cjk = cjk

    @classmethod
    def auto(cls) -> LanguageAnalyzer:
        return cls("auto")

    def __call__(self, text: str) -> list[str]:
        """The terms of ``text`` as a chunk (``BM25Analyzer`` protocol)."""
        return self.analyse_document(text).terms

    def __repr__(self) -> str:
        return f"LanguageAnalyzer({self.name!r})"

    # ------------------------------------------------------------------ documents
    def rest_language(
        self,
        text: str,
        hint: str | None = None,
        *,
        document: bool = False,
        letters: int | None = None,
    ) -> str:
        """The language of the words of ``text`` outside CJK runs: identified when there are
        enough letters and the identifier is sure, else ``hint``, else the script's default
        (English for Latin letters). A chunk overrides its document's language (``hint``) only
        for a language with a stemmer: a list of names or numbers in an English article does
        not become Latin or Pidgin. ``letters``: the letters of ``text``, when counted already."""
        if self.language is not None:
            return self.language
        sample = _NOISE.sub(" ", text[: 4 * IDENTIFIED_CHARS])
        sample = " ".join(sample.split())[:IDENTIFIED_CHARS]
        letters = count_letters(text) if letters is None else letters
        script = letter_script(sample)
        min_letters = MIN_DOCUMENT_LETTERS if document else MIN_IDENTIFIED_LETTERS
        min_probability = MIN_DOCUMENT_PROBABILITY if document else MIN_CHUNK_PROBABILITY
        if script is not None and letters >= min_letters:
            found = identify(sample)
            if (
                found.probability >= min_probability
                and found.language not in CJK_LANGUAGES
                and script_of_language(found.language) == script
                and (
                    found.language in SNOWBALL_LANGUAGES
                    or self._sure_of_other(found, document, hint)
                )
            ):
                return found.language
        if (
            hint
            and hint not in CJK_LANGUAGES
            and hint != "und"
            and (script is None or script_of_language(hint) == script)
        ):
            return hint
        return script_default(script) if script is not None else "en"

    @staticmethod
    def _sure_of_other(found: Any, document: bool, hint: str | None) -> bool:
        """A language without a stemmer is taken for a document only when the identifier is
        very sure, and for a chunk only without a document language to fall back on."""
        if document:
            return bool(found.probability >= MIN_CHUNK_PROBABILITY)
        return not hint

    def document_hint(self, text: str) -> str:
        """The language of a whole document's words outside CJK runs (what its short chunks
        take): identified over up to its first :data:`DOCUMENT_HINT_CHARS` characters."""
        head = fold_width(text[:DOCUMENT_HINT_CHARS])
        rest = "".join(run if kind == "rest" else " " for kind, run in script_runs(head))
        return self.rest_language(rest, document=True)

    def analyse_document(
        self, text: str, language: str | None = None, hint: str | None = None
    ) -> Analysed:
        """The terms of a chunk and its languages.

        Args:
            text: The chunk (its headings first).
            language: Its main language when already known (recorded in its metadata): a
                chunk is analysed the same way every time it is read.
            hint: Its document's language (:meth:`document_hint`), for a chunk too short to
                identify.
        """
        text = fold_width(text)
        runs = list(script_runs(text))
        cjk = "".join(run for kind, run in runs if kind == "cjk")
        rest = "".join(run if kind == "rest" else " " for kind, run in runs)
        cjk_lang = self._document_cjk(cjk, language)
        letters = count_letters(rest)
        if language and language not in CJK_LANGUAGES and self.language is None:
            rest_lang = language
        else:
            rest_lang = self.rest_language(rest, hint, letters=letters)
        terms: list[str] = []
        used: dict[str, None] = {}
        for kind, run in runs:
            if kind == "cjk":
                got = _cjk_terms(run, cjk_lang)
                if got and cjk_lang:
                    used[cjk_lang] = None
            elif kind == "bigram":
                got = bigrams(run)
            else:
                got = language_terms(run, rest_lang)
                if got:
                    used[rest_lang] = None
            terms.extend(got)
        if cjk and cjk_lang and len(cjk) * CJK_CHAR_WEIGHT >= letters:
            main = cjk_lang
        elif letters or not cjk:
            main = rest_lang
        else:
            main = "und"
        return Analysed(terms, main, tuple(used))

    def main_language(self, text: str) -> str:
        """A chunk's main language alone (no terms made): what :meth:`analyse_document`
        records, without its document's hint."""
        text = fold_width(text)
        runs = list(script_runs(text))
        cjk = "".join(run for kind, run in runs if kind == "cjk")
        rest = "".join(run if kind == "rest" else " " for kind, run in runs)
        letters = count_letters(rest)
        cjk_lang = self._document_cjk(cjk, None)
        if cjk and cjk_lang and len(cjk) * CJK_CHAR_WEIGHT >= letters:
            return cjk_lang
        return self.rest_language(rest)

    def _document_cjk(self, cjk: str, language: str | None) -> str | None:
        if self.language is not None:
            return self.cjk
        if language in CJK_LANGUAGES:
            return language
        if not cjk:
            return None
        return "ja" if len(_KANA.findall(cjk)) >= KANA_SHARE * len(cjk) else "zh"

    # ------------------------------------------------------------------ questions
    def query_language(self, text: str, profile: LanguageProfile | None = None) -> str:
        """A question's main language: its CJK language when CJK characters outweigh its
        letters, else the language its words read as among the collection's."""
        if self.language is not None:
            return self.language
        text = fold_width(text)
        runs = list(script_runs(text))
        cjk = "".join(run for kind, run in runs if kind == "cjk")
        rest = " ".join(run for kind, run in runs if kind == "rest")
        profile = profile or LanguageProfile()
        if cjk and len(cjk) * CJK_CHAR_WEIGHT >= count_letters(rest):
            return "ja" if _KANA.search(cjk) else profile.main_cjk()
        if not word_tokens(rest):
            return "und"
        return query_languages(rest, profile.counts(), letter_script(rest))[-1]

    def query_terms(self, text: str, profile: LanguageProfile | None = None) -> list[str]:
        """The terms of a question: CJK runs by Japanese when it has kana (else by the
        collection's main CJK language); the rest by the collection's main language of its
        script, plus, when the question reads as another of the collection's languages, that
        language's terms too (:func:`~llama_index_rag_pack.documents.languages.query_languages`)."""
        if self.language is not None:
            return self.analyse_document(text).terms
        text = fold_width(text)
        runs = list(script_runs(text))
        cjk = "".join(run for kind, run in runs if kind == "cjk")
        rest = " ".join(run for kind, run in runs if kind == "rest")
        profile = profile or LanguageProfile()
        cjk_lang = "ja" if _KANA.search(cjk) else profile.main_cjk()
        rest_langs = ["en"]
        if word_tokens(rest):
            rest_langs = query_languages(rest, profile.counts(), letter_script(rest))
        terms: list[str] = []
        for kind, run in runs:
            if kind == "cjk":
                terms.extend(_cjk_terms(run, cjk_lang))
            elif kind == "bigram":
                terms.extend(bigrams(run))
            else:
                terms.extend(language_terms(run, rest_langs[0]))
        if len(rest_langs) > 1:  # the question's own language, beside the main one's terms
            seen = set(terms)
            extra = [t for t in language_terms(rest, rest_langs[1]) if t not in seen]
            terms.extend(dict.fromkeys(extra))
        return terms


#: The fixed-language analyses by name (``auto`` and ``english`` are resolved on their own).
def fixed_analyzer(name: str) -> LanguageAnalyzer | None:
    """The language analysis called ``name`` (``chinese``, ``japanese``, ``unicode`` or a
    Snowball language's name such as ``german``), ``None`` for another name."""
    if name == "chinese":
        return LanguageAnalyzer(name, "en", "zh")
    if name == "japanese":
        return LanguageAnalyzer(name, "en", "ja")
    if name == "unicode":
        return LanguageAnalyzer(name, "und", None)
    codes = {stem: code for code, stem in SNOWBALL_LANGUAGES.items()}
    code = codes.get(name)
    if code is not None and name != "english":
        return LanguageAnalyzer(name, code, None)
    return None


def analysis_names() -> Sequence[str]:
    """Every analysis name :func:`fixed_analyzer` knows, plus ``auto`` (sorted)."""
    names = {"auto", "chinese", "japanese", "unicode"} | set(SNOWBALL_LANGUAGES.values())
    names.discard("english")
    return sorted(names)
