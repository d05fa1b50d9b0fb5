"""Stop words per language for the BM25 analyses: Lucene's English list (Milvus'
``_english_``), the Snowball project's lists for the other Snowball languages that have one
(``data/snowball_stopwords.json``, BSD licence inside), and the pack's own Chinese and Japanese
lists.

Example:
    >>> "und" in stop_words("de"), "什么" in stop_words("zh"), stop_words("xx")
    (True, True, frozenset())
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import functools
import json
from importlib import resources

from llama_index_rag_pack.documents.languages import SNOWBALL_LANGUAGES

__all__ = [
    "CHINESE_STOP_WORDS",
    "ENGLISH_FUNCTION_WORDS",
    "ENGLISH_STOP_WORDS",
    "JAPANESE_STOP_WORDS",
    "stop_words",
]


@functools.lru_cache(maxsize=1)
def _snowball_stop_lists() -> dict[str, list[str]]:
    path = resources.files("llama_index_rag_pack.documents").joinpath(
        "data/snowball_stopwords.json"
    )
    data = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


#: Lucene's English stop words: Milvus' ``_english_`` list, what a server's ``english``
#: analyzer removes.
ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)
#: English function words: the Snowball English stop list (pronouns, auxiliaries, question
#: words, prepositions, ...), for telling a sentence's content words from the rest (short
#: answers, chat follow-ups), not for BM25.
ENGLISH_FUNCTION_WORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom
    this that these those am is are was were be been being have has had having do does did
    doing would should could ought i'm you're he's she's it's we're they're i've you've we've
    they've i'd you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't
    aren't wasn't weren't hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't
    shouldn't can't cannot couldn't mustn't let's that's who's what's here's there's when's
    where's why's how's a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on off
    over under again further then once here there when where why how all any both each few
    more most other some such no nor not only own same so than too very
    """.split()
)
#: Chinese function words and question words: what a question adds around its content words
#: (的, 了, 是, 什么, 怎么, 如何, 为什么, ...), as the segmenter cuts them.
CHINESE_STOP_WORDS = frozenset(
    """
    的 地 得 了 着 过 是 在 和 与 及 或 也 都 就 而 但 并 把 被 对 从 向 于 以 为 之 其 这 那
    个 些 一 一个 一些 一种 这个 那个 这些 那些 这样 那样 这种 那种 这里 那里 此 该 每 各
    有 没有 没 不 很 还 又 再 才 只 已 已经 会 能 可 可以 要 需要 应该 让 使 给 用 来 去 上
    下 中 里 后 前 时 时候 吗 呢 吧 啊 呀 嘛 么 哪 哪个 哪些 哪里 哪儿 谁 什么 啥 怎么 怎样
    怎么样 如何 为什么 为何 多少 几 是否 是不是 有没有 能否 能不能 请问 请 一下 呢 我 你
    您 他 她 它 我们 你们 他们 它们 自己 吗 如果 因为 所以 但是 然后 以及 或者 还是 而且
    并且 即 即可 等 等等 比如 例如 就是 通过 进行 使用 哪种 什么样 怎么办 得到 所 由 将 则
    若 当 如 比 更 最 太 非常 啦 呗 哦 嗯 么 吧
    """.split()
)
#: Japanese words kept after particles, auxiliary verbs and symbols are dropped (by part of
#: speech) that carry no topic: light verbs, formal nouns, demonstratives, question words.
JAPANESE_STOP_WORDS = frozenset(
    """
    為る 居る 有る 成る 出来る 言う 事 物 者 為 所 様 筈 訳 積もり 時 中 上 下 これ それ あれ
    どれ この その あの どの ここ そこ あそこ どこ こちら そちら 何 なに なん 誰 いつ どう
    どうして 何故 なぜ 如何 よう ため とき もの こと ところ 私 僕 貴方 あなた 彼 彼女 又 及び
    並びに 若しくは 或いは 又は 更に 但し 即ち ない 無い 良い いい です ます
    """.split()
)


def stop_words(code: str) -> frozenset[str]:
    """The stop words of a language: Lucene's English list for ``en`` (Milvus' ``_english_``),
    the Snowball list for the other Snowball languages that have one, the pack's own Chinese
    and Japanese lists; none otherwise."""
    if code == "en":
        return ENGLISH_STOP_WORDS
    if code == "zh":
        return CHINESE_STOP_WORDS
    if code == "ja":
        return JAPANESE_STOP_WORDS
    name = SNOWBALL_LANGUAGES.get(code)
    return frozenset(_snowball_stop_lists().get(name or "", ()))
