"""Corpora that ship offline inside Python packages, as LlamaIndex ``Document`` lists.

* :func:`load_wikipedia_documents`: 206 pages of an English Wikipedia dump shipped in the
  ``gensim`` wheel (``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``);
  about 100 are real articles (the rest are redirects), many of them long (30k–180k characters
  of wiki markup).
* :func:`load_lee_documents`: the Lee news corpus (300 short Australian news articles), also in
  the gensim wheel.
* :func:`load_zh_tutorials`: five developer tutorials (four in Chinese), shipped with the
  labelled sets (the ``zh_qa`` set's corpus).

Install them with ``pip install 'llama-index-rag-pack[data]'``. Nothing is downloaded.
"""

from __future__ import annotations

import bz2
import functools
import html
import importlib.util
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from pathlib import Path

from llama_index.core.schema import Document

from llama_index_rag_pack.core.errors import ConfigurationError

WIKI_DUMP = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
LEE_BACKGROUND = "lee_background.cor"


def gensim_test_data_dir() -> Path:
    """Directory of the data files shipped in the gensim wheel (without importing gensim).

    Raises:
        ConfigurationError: gensim is not installed.
    """
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "The offline corpora ship inside the gensim wheel: "
            "`pip install 'llama-index-rag-pack[data]'` (or `pip install gensim`)."
        )
    return Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"


# --------------------------------------------------------------------------- wiki markup
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I)
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_FILE_LINK_START = re.compile(r"\[\[(?:File|Image|Category|Media):", re.I)
_INTERWIKI = re.compile(r"\[\[[a-z]{2,3}(?:-[a-z]+)?:[^\]]*\]\]")
_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")
_EXT_LINK = re.compile(r"\[(?:https?|ftp)://[^\s\]]+\s*([^\]]*)\]")
_HEADING = re.compile(r"^(=+)\s*(.*?)\s*\1\s*$", re.M)
_EMPHASIS = re.compile(r"'{2,}")
_LIST_MARK = re.compile(r"^[*#:;]+\s*", re.M)
_BLANKS = re.compile(r"\n{3,}")


def _strip_balanced(text: str, opener: str, closer: str) -> str:
    """Remove (possibly nested) ``opener ... closer`` spans in linear time."""
    out: list[str] = []
    depth = 0
    i = 0
    n = len(text)
    lo, lc = len(opener), len(closer)
    while i < n:
        if text.startswith(opener, i):
            depth += 1
            i += lo
        elif depth and text.startswith(closer, i):
            depth -= 1
            i += lc
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


def _strip_file_links(text: str) -> str:
    """Remove ``[[File:...]]`` / ``[[Category:...]]`` links, whose captions nest other links."""
    out: list[str] = []
    pos = 0
    for m in _FILE_LINK_START.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        depth, i = 0, m.start()
        while i < len(text):
            if text.startswith("[[", i):
                depth += 1
                i += 2
            elif text.startswith("]]", i):
                depth -= 1
                i += 2
                if depth == 0:
                    break
            else:
                i += 1
        pos = i
    out.append(text[pos:])
    return "".join(out)


def clean_wiki_markup(text: str) -> str:
    """Turn MediaWiki markup into readable plain text (templates, tables, refs removed).

    Not gensim's ``filter_wiki``: on the shipped dump its tag pattern deletes from a stray ``<``
    ("<10 ppm") to the next ``>`` (80% of "Asphalt"), it drops every ``[``/``]`` of the text
    ("for [a] man", ``L[0]``), leaves image sizes ("30px") as captions and keeps headings, bold
    and list markup.
    """
    text = html.unescape(text)
    text = _COMMENT.sub("", text)
    text = _REF.sub("", text)
    text = _strip_balanced(text, "{{", "}}")
    text = _strip_balanced(text, "{|", "|}")
    text = _strip_file_links(text)
    text = _INTERWIKI.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _EXT_LINK.sub(r"\1", text)
    text = _TAG.sub("", text)
    text = _HEADING.sub(lambda m: f"\n{m.group(2)}\n", text)
    text = _EMPHASIS.sub("", text)
    text = _LIST_MARK.sub("- ", text)
    text = "\n".join(line.rstrip() for line in text.splitlines())
    return _BLANKS.sub("\n\n", text).strip()


def iter_wikipedia_pages(path: str | Path | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(title, raw wiki markup)`` for each main-namespace page of the shipped dump."""
    path = Path(path) if path else gensim_test_data_dir() / WIKI_DUMP
    with bz2.open(path) as fh:
        for _, el in ET.iterparse(fh):
            if el.tag.rsplit("}", 1)[-1] != "page":
                continue
            ns = el.find("{*}ns")
            title = el.find("{*}title")
            body = el.find(".//{*}text")
            if ns is not None and ns.text == "0" and title is not None and body is not None:
                yield title.text or "", body.text or ""
            el.clear()


def _shipped_pages() -> Iterable[tuple[str, str]]:
    """The pages of the shipped dump (5.7 MB of text), read once per process and version of the
    file: an evaluation or a test run loads articles many times. Another dump is streamed."""
    shipped = gensim_test_data_dir() / WIKI_DUMP
    try:
        stat = shipped.stat()
    except OSError:
        return iter_wikipedia_pages(shipped)  # the reader gives the error
    return _shipped_pages_of(str(shipped), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1)
def _shipped_pages_of(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, str], ...]:
    return tuple(iter_wikipedia_pages(path))


@functools.lru_cache(maxsize=256)
def _cleaned_shipped(raw: str) -> str:
    return clean_wiki_markup(raw)


def load_wikipedia_documents(
    titles: Iterable[str] | None = None,
    *,
    limit: int | None = None,
    min_chars: int = 1000,
    path: str | Path | None = None,
) -> list[Document]:
    """The Wikipedia articles shipped in the gensim wheel, cleaned to plain text.

    Redirects and pages shorter than ``min_chars`` after cleaning are skipped.

    Args:
        titles: Only these article titles (in this order). Unknown titles raise an error.
        limit: At most this many articles (in dump order).
        min_chars: Skip pages shorter than this after cleaning.
        path: Another MediaWiki XML ``.bz2`` dump.

    Returns:
        Documents with ``id_`` ``wiki:<title>`` and metadata ``title``, ``url``, ``source``.
    """
    wanted = list(titles) if titles is not None else None
    found: dict[str, Document] = {}
    pages, clean = (
        (iter_wikipedia_pages(path), clean_wiki_markup)
        if path
        else (_shipped_pages(), _cleaned_shipped)
    )
    for title, raw in pages:
        if raw.lstrip().upper().startswith("#REDIRECT"):
            continue
        if wanted is not None and title not in wanted:
            continue
        text = clean(raw)
        if len(text) < min_chars:
            continue
        url = "https://en.wikipedia.org/wiki/" + title.replace(" ", "_")
        found[title] = Document(
            id_=f"wiki:{title}",
            text=f"{title}\n\n{text}",
            metadata={"title": title, "url": url, "source": "wikipedia"},
            excluded_embed_metadata_keys=["url", "source"],
            excluded_llm_metadata_keys=["source"],
        )
        if wanted is None and limit is not None and len(found) >= limit:
            break
    if wanted is not None:
        missing = [t for t in wanted if t not in found]
        if missing:
            raise ConfigurationError(
                f"Not in the shipped Wikipedia dump (or too short): {missing}. "
                "List the available titles with wikipedia_titles()."
            )
        docs = [found[t] for t in wanted]
        return docs[:limit] if limit is not None else docs
    return list(found.values())


def wikipedia_titles(min_chars: int = 1000) -> list[str]:
    """Titles of the usable articles in the shipped dump."""
    return [d.metadata["title"] for d in load_wikipedia_documents(min_chars=min_chars)]


def load_lee_documents(limit: int | None = None) -> list[Document]:
    """The Lee background news corpus (300 articles, one per line) shipped in the gensim wheel."""
    path = gensim_test_data_dir() / LEE_BACKGROUND
    docs = []
    with open(path, encoding="latin-1") as fh:
        for i, line in enumerate(fh):
            line = line.strip()
            if not line:
                continue
            docs.append(
                Document(
                    id_=f"lee:{i}", text=line, metadata={"source": "lee_background", "line": i}
                )
            )
            if limit is not None and len(docs) >= limit:
                break
    return docs


def shipped_data_dir() -> Path:
    """Where the shipped labelled sets (and the ``zh_tutorials`` corpus) live:
    ``evaluation/data`` inside an installed wheel (when packaged there), else ``benchmarks/data``
    of a source checkout."""
    packaged = Path(__file__).resolve().parent / "data"
    if packaged.is_dir() and any(packaged.glob("*.jsonl")):
        return packaged
    return Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def load_zh_tutorials() -> list[Document]:
    """Five developer tutorials, four in Chinese with English code and one English README
    (``zh_tutorials``: RAPTOR, hybrid retrieval on Milvus, query transformation and routing,
    citations), the corpus of the ``zh_qa`` labelled set. Ids ``zh:<file stem>``; they ship with
    the labelled sets.

    Raises:
        ConfigurationError: the files are not there (an install without the shipped data).
    """
    folder = shipped_data_dir() / "zh_tutorials"
    files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    if not files:
        raise ConfigurationError(
            f"The zh_tutorials corpus is missing from {folder}: reinstall llama-index-rag-pack."
        )
    return [
        Document(
            id_=f"zh:{path.stem}",
            text=path.read_text(encoding="utf-8"),
            metadata={"title": path.stem.replace("-", " "), "file_name": path.name},
        )
        for path in files
    ]


def _flatten_answer(answer: object) -> str:
    if isinstance(answer, dict):
        return "; ".join(f"{k}: {_flatten_answer(v)}" for k, v in answer.items())
    if isinstance(answer, (list, tuple)):
        return ", ".join(_flatten_answer(v) for v in answer)
    return str(answer)


def load_fanoutqa_questions(split: str = "dev", limit: int | None = None) -> list[dict]:
    """FanOutQA multi-hop questions with gold answers, shipped in the ``fanoutqa`` wheel.

    The evidence pages are *not* shipped (and none is among the gensim Wikipedia articles), so
    these records carry no ``relevant_ids``: use them for answer metrics over your own corpus.

    Args:
        split: ``dev`` (310 questions) or ``test`` (answers withheld upstream: empty ``answers``).
        limit: At most this many questions.

    Returns:
        Records in the labelled-set format (``id``, ``question``, ``answers``, ``type``);
        structured answers (lists, dicts) are flattened to one string.

    Raises:
        ConfigurationError: fanoutqa is not installed or ``split`` is unknown.
    """
    import json

    if split not in ("dev", "test"):
        raise ConfigurationError(f"split must be 'dev' or 'test', got {split!r}")
    spec = importlib.util.find_spec("fanoutqa")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "FanOutQA ships in the fanoutqa wheel: `pip install 'llama-index-rag-pack[data]'`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"fanout-final-{split}.json"
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    out = []
    for item in raw[:limit] if limit is not None else raw:
        answer = item.get("answer")
        out.append(
            {
                "id": str(item["id"]),
                "question": item["question"],
                "answers": [] if answer is None else [_flatten_answer(answer)],
                "type": "fanoutqa",
            }
        )
    return out


__all__ = [
    "clean_wiki_markup",
    "load_fanoutqa_questions",
    "gensim_test_data_dir",
    "iter_wikipedia_pages",
    "load_lee_documents",
    "load_wikipedia_documents",
    "load_zh_tutorials",
    "shipped_data_dir",
    "wikipedia_titles",
]
