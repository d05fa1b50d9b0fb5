"""Languages and scripts of text: what the ``auto`` BM25 analysis needs to know about a chunk or
a question before it reduces it to terms (:mod:`~llama_index_rag_pack.documents.bm25_analysis`).

* **Scripts.** Text is cut into runs: *CJK* runs (Han ideographs and Japanese kana, segmented
  into words by a dictionary), runs of the other scripts written without spaces (Hangul, Thai,
  Lao, Khmer, Myanmar: character bigrams) and the rest (words between spaces and punctuation).
  Full-width Latin letters and digits (``ＡＰＩ``) and half-width katakana are folded first.
* **Languages.** A CJK run is Japanese when its text has kana, Chinese otherwise. The language
  of the rest is identified by ``py3langid`` (its model ships in the wheel): a Snowball
  language gets its stemmer and stop words, any other identified language plain lower-cased
  words, and text too short to tell gets its script's default (English for Latin letters).
* **Questions** are short, so they are read in the collection's main language of their script
  and, when they look like another language the collection was indexed with (weighted by how
  many chunks each has), in that one too (:func:`query_languages`): a rare language in a
  collection never changes how questions in its main one are analysed.

Example:
    >>> list(script_runs("RAPTOR 先降维，ツチブタ。"))
    [('rest', 'RAPTOR '), ('cjk', '先降维'), ('rest', '，'), ('cjk', 'ツチブタ'), ('rest', '。')]
    >>> cjk_language("ツチブタは何を食べますか"), cjk_language("土豚吃什么")
    ('ja', 'zh')
    >>> fold_width("ＡＰＩ　ｖ２")
    'API v2'
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import math
import re
import threading
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import regex

from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "CJK_LANGUAGES",
    "SNOWBALL_LANGUAGES",
    "Identification",
    "cjk_language",
    "fold_width",
    "identify",
    "language_name",
    "normalize_language",
    "letter_script",
    "query_languages",
    "script_runs",
    "script_of_language",
]

#: ISO 639-1 code -> Snowball stemmer (PyStemmer) for every language with one that the
#: language identifier knows.
SNOWBALL_LANGUAGES: Mapping[str, str] = {
    "ar": "arabic",
    "ca": "catalan",
    "da": "danish",
    "de": "german",
    "el": "greek",
    "en": "english",
    "es": "spanish",
    "eu": "basque",
    "fi": "finnish",
    "fr": "french",
    "ga": "irish",
    "hi": "hindi",
    "hu": "hungarian",
    "hy": "armenian",
    "id": "indonesian",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "nl": "dutch",
    "no": "norwegian",
    "nn": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
}
#: Languages whose runs of Han ideographs and kana are segmented by a dictionary.
CJK_LANGUAGES = ("zh", "ja")
_NAMES = {"zh": "chinese", "ja": "japanese", "ko": "korean", "und": "undetermined"}
_CODES_BY_NAME = {
    **{name: code for code, name in SNOWBALL_LANGUAGES.items() if code != "nn"},
    **{name: code for code, name in _NAMES.items()},
    "中文": "zh",
    "日本語": "ja",
}

#: Han ideographs, kana and the marks written inside Japanese words (ー々〆).
_CJK_RUN = r"[\p{Han}\p{Hiragana}\p{Katakana}\u30fc\u3005\u3006\u303b]+"
#: Scripts written without spaces between words that no shipped segmenter reads: bigrams.
_BIGRAM_RUN = r"[\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]+"
_RUNS = regex.compile(f"(?P<cjk>{_CJK_RUN})|(?P<bigram>{_BIGRAM_RUN})")
_KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_NOT_LETTER = regex.compile(r"\P{L}+")
_NOT_ASCII_LETTER = re.compile(r"[^A-Za-z]+")
#: Full-width ASCII and half-width katakana, folded to their usual forms.
_WIDE = regex.compile(r"[\uff01-\uff5e\uff61-\uff9f\u3000]+")

#: Scripts told apart in the rest of a text, each with the language its words get when the
#: text is too short to identify.
_SCRIPTS = ("Latin", "Cyrillic", "Greek", "Arabic", "Armenian", "Devanagari", "Tamil", "Hebrew")
_SCRIPT_LETTER = regex.compile("|".join(rf"(?P<{name}>\p{{{name}}})" for name in _SCRIPTS))
#: Codes the analysis takes from metadata: every language the identifier knows.
_KNOWN_CODES = frozenset(
    "ace af am an ar ary arz as az ba bcl be bg bn br bs ca crh cs cy da de dz el en eo es et "
    "eu ext fa fi fo fr fuv fy ga gcf gcr gd gl gom grc gu gug guw ha hbo he hi hr ht hu hy id "
    "ig is it ja jv ka kab kik kk km kn ko ku ky la lb lg lij ln lo lt ltg lv mg mk ml mn mr ms "
    "mt my ne nl nn no nso oc om or pa pcm pl ps pt qu ro ru rw sa sdh se si sk sl sn so sq sr "
    "st sv sw ta te tg th tk tl tr tt ug uk ur uz uzs vec vi vo wa wuu xh yo yue zh zu und".split()
)
_SCRIPT_DEFAULT = {
    "Latin": "en",
    "Cyrillic": "ru",
    "Greek": "el",
    "Arabic": "ar",
    "Armenian": "hy",
    "Devanagari": "hi",
    "Tamil": "ta",
}
#: Script of each language the identifier knows that is not written in Latin letters.
_NON_LATIN = {
    **dict.fromkeys(
        ["ru", "uk", "bg", "be", "mk", "sr", "kk", "ky", "mn", "tg", "tt", "ba"], "Cyrillic"
    ),
    **dict.fromkeys(["ar", "fa", "ur", "ps", "ug", "ary", "arz", "sdh", "ku"], "Arabic"),
    **dict.fromkeys(["hi", "ne", "mr", "sa", "gom"], "Devanagari"),
    **dict.fromkeys(["he", "hbo"], "Hebrew"),
    "el": "Greek",
    "grc": "Greek",
    "hy": "Armenian",
    "ta": "Tamil",
    "zh": "Han",
    "ja": "Han",
    "wuu": "Han",
    "yue": "Han",
}  # fmt: skip


def fold_width(text: str) -> str:
    """Full-width ASCII (``ＡＰＩ２``), the ideographic space and half-width katakana in their
    usual forms (NFKC on those characters only: everything else is left as it is)."""
    if text.isascii():  # none of those characters
        return text
    return _WIDE.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)


def script_runs(text: str) -> Iterator[tuple[str, str]]:
    """``(kind, run)`` pieces of ``text`` in order: ``cjk`` (Han and kana), ``bigram`` (Hangul,
    Thai, Lao, Khmer, Myanmar) and ``rest`` (everything else, words with spaces between them).
    Joined back, the runs are ``text``."""
    if text.isascii():  # no script of a cjk or bigram run is written in ASCII
        if text:
            yield "rest", text
        return
    pos = 0
    for m in _RUNS.finditer(text):
        if m.start() > pos:
            yield "rest", text[pos : m.start()]
        yield m.lastgroup or "rest", m.group()
        pos = m.end()
    if pos < len(text):
        yield "rest", text[pos:]


def cjk_language(text: str) -> str:
    """``ja`` when ``text`` has kana, else ``zh`` (a run of Han ideographs alone reads as
    Chinese; a Japanese question in kanji alone is answered by the collection's
    profile, :meth:`~llama_index_rag_pack.documents.language_analysis.LanguageProfile.main_cjk`)."""
    return "ja" if _KANA.search(text) else "zh"


def letter_script(text: str) -> str | None:
    """The script most letters of ``text`` are written in (``Latin``, ``Cyrillic``, ...), or
    ``None`` without letters of a script told apart here."""
    if text.isascii():
        return "Latin" if _ASCII_LETTER.search(text) else None
    counts: dict[str, int] = {}
    for m in _SCRIPT_LETTER.finditer(text):
        name = m.lastgroup or ""
        counts[name] = counts.get(name, 0) + 1
    return max(counts, key=lambda name: counts[name]) if counts else None


def script_of_language(code: str) -> str:
    """The script a language's words are written in (``Latin`` unless listed otherwise)."""
    return _NON_LATIN.get(code, "Latin")


def script_default(script: str | None) -> str:
    """The language a script's words get when their text is too short to identify (``und``:
    plain lower-cased words)."""
    return _SCRIPT_DEFAULT.get(script or "", "und")


def language_name(code: str) -> str:
    """``german`` for ``de``: the Snowball name, or ``chinese``/``japanese``, or the code."""
    return SNOWBALL_LANGUAGES.get(code) or _NAMES.get(code, code)


def normalize_language(value: Any) -> str | None:
    """The ISO 639 code a metadata value names (``de``, ``zh-CN``, ``pt_BR``, ``German``,
    ``Chinese``), or ``None`` when it names no language the analysis knows.

    Example:
        >>> normalize_language("zh-Hans"), normalize_language("German"), normalize_language("x1")
        ('zh', 'de', None)
    """
    if not isinstance(value, str):
        return None
    text = value.strip().lower().replace("_", "-")
    if not text or len(text) > 32:
        return None
    code = text.split("-", 1)[0]
    if code in _KNOWN_CODES:
        return code
    return _CODES_BY_NAME.get(text)


def count_letters(text: str) -> int:
    """How many letters ``text`` has (of any script)."""
    # what is left once everything else is taken out: no list of one-letter strings made
    if text.isascii():
        return len(_NOT_ASCII_LETTER.sub("", text))
    return len(_NOT_LETTER.sub("", text))


# --------------------------------------------------------------------------- identification


@dataclass(frozen=True)
class Identification:
    """What the language identifier said of a text.

    Attributes:
        language: ISO 639 code of the most likely language.
        probability: Its probability among the candidates (0-1).
    """

    language: str
    probability: float


_IDENTIFIER_LOCK = threading.Lock()


def _load_model() -> Any:
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError as e:  # a regular dependency: only a broken install gets here
        raise ConfigurationError(
            "Language identification needs py3langid: `pip install py3langid` (a dependency "
            "of llama-index-rag-pack; reinstall the package)."
        ) from e
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=False)


@functools.lru_cache(maxsize=1)
def _full_model() -> Any:
    """The identifier over every language (loaded for a candidate off the defaults only)."""
    return _load_model()


@functools.lru_cache(maxsize=1)
def _base_model() -> tuple[Any, frozenset[str]]:
    """The identifier restricted to :data:`DEFAULT_CANDIDATES`, what the identifiers of those
    languages are cut from (the model's other languages are not kept: half its 28 MB table),
    and every language the model knows."""
    from py3langid.langid import LanguageIdentifier

    full = _full_model() if _full_model.cache_info().currsize else _load_model()
    nb_ptc, nb_pc, nb_classes = full._full_model
    keep = [i for i, code in enumerate(nb_classes) if code in set(DEFAULT_CANDIDATES)]
    base = LanguageIdentifier(
        np.ascontiguousarray(nb_ptc[:, keep]), nb_pc[keep], [nb_classes[i] for i in keep],
        full.tk_nextmove, full.tk_output, tk_row=full.tk_row,
    )  # fmt: skip
    return base, frozenset(nb_classes)


@functools.lru_cache(maxsize=32)
def _identifier(candidates: tuple[str, ...] | None) -> Any:
    """A py3langid identifier restricted to ``candidates`` (unnormalised log-probabilities)."""
    from py3langid.langid import LanguageIdentifier

    if candidates is None:
        return _full_model()
    base, known_to_model = _base_model()
    known = {c for c in candidates if c in known_to_model}
    if known == set(base.nb_classes):
        return base
    source = base if known and known <= set(base.nb_classes) else _full_model()
    nb_ptc, nb_pc, nb_classes = source._full_model
    ident = LanguageIdentifier(
        nb_ptc, nb_pc, nb_classes, source.tk_nextmove, source.tk_output, tk_row=source.tk_row
    )
    ident.set_languages(sorted(known) or None)
    return ident


@functools.lru_cache(maxsize=256)
def _scores(text: str, candidates: tuple[str, ...] | None) -> dict[str, float]:
    """Log-probability of ``text`` under each candidate language (a question is identified
    for its BM25 terms and for its fusion weights: once)."""
    with _IDENTIFIER_LOCK:  # one model in memory; classification takes a fraction of a ms
        ident = _identifier(candidates)
        raw = ident._decide(text)
        classes = list(ident.nb_classes)
    return {code: float(score) for code, score in zip(classes, raw, strict=True)}


def _softmax(scores: Mapping[str, float]) -> dict[str, float]:
    top = max(scores.values())
    exp = {k: math.exp(v - top) for k, v in scores.items()}
    total = sum(exp.values())
    return {k: v / total for k, v in exp.items()}


#: The languages a chunk or document is identified among when no candidates are given: those
#: with a Snowball stemmer, Chinese and Japanese, and widely written languages with plain-word
#: analysis. Regional and classical languages the identifier also knows (Latin, Luxembourgish,
#: Nigerian Pidgin, ...) are left out: lists of names and numbers are what it mistakes for them.
DEFAULT_CANDIDATES = tuple(
    sorted(
        set(SNOWBALL_LANGUAGES)
        | set(CJK_LANGUAGES)
        | set(
            "af az be bg bn bs cs cy et fa gl gu he hr is ka kk km kn ko lv mk ml mn mr ms my "
            "pa pl si sk sl sq sw te th tl uk ur uz vi".split()
        )
    )
)


def identify(text: str, candidates: Sequence[str] | None = None) -> Identification:
    """The language of ``text`` (among ``candidates``, by default
    :data:`DEFAULT_CANDIDATES`), with its probability.

    Example:
        >>> identify("Das Erdferkel ernährt sich von Ameisen und Termiten.").language
        'de'
        >>> identify("running shoes", candidates=["en", "de"]).language
        'en'
    """
    scores = _scores(text, tuple(sorted(set(candidates or DEFAULT_CANDIDATES))))
    probs = _softmax(scores)
    best = max(probs, key=lambda code: (probs[code], code))
    return Identification(best, probs[best])


def query_languages(text: str, profile: Mapping[str, int], script: str | None) -> list[str]:
    """The languages a question's words in ``script`` are analysed in, given the collection's
    ``profile`` (chunks per language): the collection's main language of that script first,
    then the question's own language when it is another one.

    Candidates are the profile's languages written in that script. With none, the script's
    default; with one, that one. With several, the main one (most chunks) always, so a rare
    language never changes how a question in the main language is analysed; and the
    identifier's choice among them, each weighted by its share of the chunks, when it is
    another: its terms are added, and only chunks in that language hold them.

    Example:
        >>> query_languages("Wovon ernähren sich Erdferkel?", {"en": 900, "de": 40}, "Latin")
        ['en', 'de']
        >>> query_languages("running shoes", {"en": 900, "de": 40}, "Latin")
        ['en']
    """
    script = script or "Latin"
    candidates = {
        code: count
        for code, count in profile.items()
        if count > 0 and code not in CJK_LANGUAGES and script_of_language(code) == script
    }
    if not candidates:
        return [script_default(script)]
    main = max(candidates, key=lambda code: (candidates[code], code))
    if len(candidates) == 1:
        return [main]
    scores = _scores(text, tuple(sorted(candidates)))
    total = sum(candidates.values()) + len(candidates)
    floor = min(scores.values()) if scores else 0.0
    weighted = {
        code: scores.get(code, floor) + math.log((count + 1) / total)
        for code, count in candidates.items()
    }
    best = max(weighted, key=lambda code: (weighted[code], candidates[code], code))
    return [main] if best == main else [main, best]
