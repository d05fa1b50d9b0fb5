"""Words of text in any script: the terms Milvus' ``standard`` tokenizer keeps whole, and the
words a sentence counts or shares with a passage (Chinese and Japanese runs cut by their
segmenters, bigrams for the other scripts written without spaces).

Example:
    >>> word_tokens("Milvus's new_index")
    ['milvus', 's', 'new', 'index']
    >>> lexical_words("Milvus 支持混合检索")
    ['milvus', '支持', '混合', '检索']
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import re

import regex

from llama_index_rag_pack.documents.languages import script_runs
from llama_index_rag_pack.documents.segmenters import chinese_words, japanese_surface_words

__all__ = [
    "bigrams",
    "count_words",
    "cut_after",
    "join_sentence_parts",
    "lexical_words",
    "split_cjk_sentences",
    "word_tokens",
]

#: Runs of Unicode letters and digits: the words Milvus' ``standard`` tokenizer keeps whole, so
#: an analysed copy (terms joined by spaces) is split back into exactly these terms.
_WORD = re.compile(r"[^\W_]+")
_KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")


def word_tokens(text: str) -> list[str]:
    """Lower-cased runs of letters and digits (``_`` and punctuation separate words)."""
    return _WORD.findall(text.lower())


def bigrams(run: str) -> list[str]:
    """Overlapping character pairs of a run (one character alone is its own term).

    Example:
        >>> bigrams("검색엔진"), bigrams("中")
        (['검색', '색엔', '엔진'], ['中'])
    """
    chars = [c for c in run.lower() if not c.isspace()]
    if len(chars) < 2:
        return chars
    return [chars[i] + chars[i + 1] for i in range(len(chars) - 1)]


_LEXICAL = re.compile(r"\w+")


def lexical_words(text: str) -> list[str]:
    """The lower-cased words of ``text`` in any script, for word counts and word overlap:
    ``\\w+`` runs outside CJK (exactly the words of English text), segmented words inside
    Chinese and Japanese runs, bigrams for the other scripts without spaces.

    Example:
        >>> lexical_words("Milvus 支持混合检索")
        ['milvus', '支持', '混合', '检索']
    """
    if not _RUNS_HINT.search(text):
        return _LEXICAL.findall(text.lower())
    out: list[str] = []
    for kind, run in script_runs(text):
        if kind == "cjk":
            words = japanese_surface_words(run) if _KANA.search(run) else chinese_words(run)
            out.extend(w.lower() for w in words if _LEXICAL.search(w))
        elif kind == "bigram":
            out.extend(bigrams(run))
        else:
            out.extend(_LEXICAL.findall(run.lower()))
    return out


def count_words(text: str) -> int:
    """How many words ``text`` has: its whitespace-separated pieces (what an English sentence
    counts), or, in text with CJK runs, the segmented words of those runs plus the pieces with
    a letter or digit outside them.

    Example:
        >>> count_words("Dr. Smith arrived."), count_words("它先对文本块聚类！")
        (3, 7)
    """
    if not _RUNS_HINT.search(text):
        return len(text.split())
    count = 0
    rest: list[str] = []
    for kind, run in script_runs(text):
        if kind == "rest":
            rest.append(run)
            continue
        rest.append(" ")
        if kind == "cjk":
            words = japanese_surface_words(run) if _KANA.search(run) else chinese_words(run)
            count += sum(1 for w in words if _LEXICAL.search(w))
        else:
            count += len(bigrams(run))
    return count + sum(1 for piece in "".join(rest).split() if _LEXICAL.search(piece))


#: Any character of a script the runs tell apart (a quick test before cutting text in runs).
_RUNS_HINT = regex.compile(
    r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]"
)


# --------------------------------------------------------------------------- sentence ends
_CJK_END = re.compile(r"[。！？]+[”’」』）】]*\s*")
#: Kana, Han and the CJK punctuation written between them without spaces.
_CJK_CHAR = re.compile(
    r"[\u3000-\u303f\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff\uff01-\uff0f\uff1a-\uff1f]"
)


def cut_after(pattern: re.Pattern[str], text: str) -> list[str]:
    """``text`` cut after each match of ``pattern``, the match kept with the piece before it."""
    pieces: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        pieces.append(text[last : m.end()])
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
    return pieces


def split_cjk_sentences(text: str) -> list[str]:
    """``text`` cut after each 。！？ (with the closing quotes or brackets after it); lossless.

    Example:
        >>> split_cjk_sentences("它先聚类。然后“总结！”最后")
        ['它先聚类。', '然后“总结！”', '最后']
    """
    return cut_after(_CJK_END, text)


def join_sentence_parts(*parts: str) -> str:
    """Parts of one sentence joined with single spaces, except between two CJK characters
    (``"检索" + "方法"`` is ``"检索方法"``): the whitespace-normalised form of a sentence.

    Example:
        >>> join_sentence_parts("Dr.", " Smith  arrived."), join_sentence_parts("短句。", "下一句")
        ('Dr. Smith arrived.', '短句。下一句')
    """
    words = " ".join(parts).split()
    if not _CJK_CHAR.search("".join(words)):  # no two CJK characters to keep together
        return " ".join(words)
    out = ""
    for word in words:
        if out and not (_CJK_CHAR.match(out[-1]) and _CJK_CHAR.match(word[0])):
            out += " "
        out += word
    return out
