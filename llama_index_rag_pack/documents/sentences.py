"""The sentences of each chunk: the small retrieval units of the sentence index.

A 256-token chunk embedded as one vector matches a question about one of its sentences only
weakly (MiniLM reads at most 256 word pieces, and a chunk's other sentences dilute the match).
The pack therefore also embeds every sentence of every chunk, prefixed with a short contextual
header (the document's title, else its file name), and hybrid search scores a chunk by its
best-matching sentence beside its own dense and BM25 scores. The chunk stays what is returned
and what the LLM reads; sentences only decide the ranking.

Example:
    >>> chunk_sentences("Dr. Smith arrived. He spoke at length about the budget.")
    ['Dr. Smith arrived.', 'He spoke at length about the budget.']
    >>> chunk_sentences("RAPTOR 先对文本块聚类。然后总结每个聚类！")
    ['RAPTOR 先对文本块聚类。', '然后总结每个聚类！']
    >>> table = "| No. | Ministry | Total |\\n|---|---|---|\\n| 12. | Posts | 6912.76 |"
    >>> chunk_sentences(f"Budget 2014.\\n\\n{table}")
    ['Budget 2014.', '| No. | Ministry | Total |', '| 12. | Posts | 6912.76 |']
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePath
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode, MetadataMode

from llama_index_rag_pack.documents.words import (
    count_words,
    join_sentence_parts,
    split_cjk_sentences,
)

__all__ = [
    "MIN_SENTENCE_WORDS",
    "SentenceUnit",
    "chunk_sentences",
    "context_header",
    "embed_sentence_units",
    "punkt_sentences",
    "sentence_units",
]

#: A sentence shorter than this (in words) is joined to the next one: a lone "Dr." joins
#: "Smith arrived.".
MIN_SENTENCE_WORDS = 3


@dataclass(frozen=True)
class SentenceUnit:
    """One sentence of one chunk, as the sentence index stores it.

    Attributes:
        id: Stable id derived from the chunk id and the sentence's position in it.
        chunk_id: The chunk it belongs to (what retrieval returns).
        doc_id: The chunk's source document (to delete a document's sentences with it).
        text: What is embedded: the contextual header and the sentence.
    """

    id: str
    chunk_id: str
    doc_id: str
    text: str


@lru_cache(maxsize=1)
def _punkt() -> Callable[[str], list[str]]:
    # LlamaIndex's own sentence tokenizer (NLTK punkt, shipped with llama-index-core)
    from llama_index.core.node_parser.text.utils import split_by_sentence_tokenizer

    return split_by_sentence_tokenizer()


#: Punkt's sentence-end characters: a text with none of them but one at its very end is one
#: sentence to punkt, which needs no candidate break to say so.
_SENTENCE_ENDS = frozenset(".?!")


def punkt_sentences(text: str) -> list[str]:
    """LlamaIndex's punkt sentence splitter, which NLTK (about 100 MB with the scikit-learn and
    SciPy modules it imports, and 2 s) is loaded for only when ``text`` holds a sentence-end
    character before its last one: a text without one is one sentence, as punkt returns it."""
    body = text.rstrip()
    if body[-1:] in _SENTENCE_ENDS:
        body = body[:-1]
    if _SENTENCE_ENDS.isdisjoint(body):
        return [text] if text.strip() else []
    return _punkt()(text)


def _splitter() -> Callable[[str], list[str]]:
    return punkt_sentences


def chunk_sentences(
    text: str,
    *,
    min_words: int = MIN_SENTENCE_WORDS,
    split: Callable[[str], list[str]] | None = None,
) -> list[str]:
    """The sentences of ``text``, whitespace-normalised; fragments shorter than ``min_words``
    words are joined to the sentence after them (a trailing fragment to the one before).
    Chinese and Japanese sentences end at 。！？ (and their full-width forms), and their words
    are counted as the segmenter cuts them.

    The chunk-side splitter: ``split`` cuts the text, by default LlamaIndex's punkt tokenizer
    ("Dr. Smith" stays one sentence; importing NLTK takes about 2 s). Answers are split by
    :func:`~llama_index_rag_pack.citations.annotations.split_sentences`, which keeps every character
    so citation markers can be put back into the answer text."""
    out: list[str] = []
    pending = ""
    for piece in _pieces(text, split or _splitter()):
        if _TABLE_ROW.match(piece):  # a table row: a unit of its own, never joined or cut
            if pending:
                out.append(pending)
                pending = ""
            out.append(piece)
            continue
        sentence = join_sentence_parts(pending, piece)
        if not sentence:
            continue
        if count_words(sentence) < min_words:
            pending = sentence
            continue
        out.append(sentence)
        pending = ""
    if pending:
        if out and not _TABLE_ROW.match(out[-1]):
            out[-1] = join_sentence_parts(out[-1], pending)
        else:
            out.append(pending)
    return out


#: A Markdown table row (what readers write tables as), and its header's separator row.
_TABLE_ROW = re.compile(r"^\|.*\|$")
_SEPARATOR_ROW = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")


def _pieces(text: str, split: Callable[[str], list[str]]) -> list[str]:
    """``text`` cut into sentences, each row of a Markdown table one piece (separator rows
    left out): a row is what holds a table's fact, and a sentence splitter cuts rows at the
    period of ``12.`` or joins them."""
    out: list[str] = []
    prose: list[str] = []

    def flush() -> None:
        if prose:
            for whole in split("\n".join(prose)):
                out.extend(split_cjk_sentences(whole))
            prose.clear()

    for line in text.splitlines():
        row = " ".join(line.split())
        if _TABLE_ROW.match(row):
            flush()
            if not _SEPARATOR_ROW.match(row):
                out.append(row)
        else:
            prose.append(line)
    flush()
    return out


def context_header(node: BaseNode) -> str:
    """A short header naming where a chunk comes from: its ``title`` metadata, else its file
    name without the extension, else nothing."""
    meta = node.metadata or {}
    title = str(meta.get("title") or "").strip()
    if title:
        return title
    name = str(meta.get("file_name") or meta.get("file_path") or "").strip()
    return PurePath(name).stem.replace("_", " ") if name else ""


def sentence_units(
    nodes: Sequence[BaseNode], *, min_words: int = MIN_SENTENCE_WORDS
) -> list[SentenceUnit]:
    """Every sentence of every chunk in ``nodes``, headed by :func:`context_header`."""
    units = []
    for node in nodes:
        header = context_header(node)
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        doc_id = node.ref_doc_id or node.node_id
        for position, sentence in enumerate(chunk_sentences(text, min_words=min_words)):
            key = f"llama-index-rag-pack:{node.node_id}:s{position}"
            unit_id = uuid.uuid5(uuid.NAMESPACE_URL, key)
            units.append(
                SentenceUnit(
                    id=str(unit_id),
                    chunk_id=node.node_id,
                    doc_id=str(doc_id),
                    text=f"{header}: {sentence}" if header else sentence,
                )
            )
    return units


#: Distinct sentence texts embedded per call: each call's reply (Python floats, about eight
#: times a float32 row) becomes float32 before the next, so an insert never holds every
#: sentence's vector as a list.
EMBED_BATCH = 2048


def embed_sentence_units(
    units: Sequence[SentenceUnit], embed_model: Any, *, show_progress: bool = False
) -> np.ndarray:
    """The embeddings of ``units``, row ``i`` the vector of ``units[i]`` (float32): calls of
    ``embed_model`` (its ``embed_sentences`` where it has one, e.g.
    :class:`~llama_index_rag_pack.models.local_embedding.LocalEmbedding`'s int8 sentence pass)
    of :data:`EMBED_BATCH` texts, each distinct text embedded once (the sentences a chunk
    shares with its neighbour through the chunk overlap are the usual repeats)."""
    if not units:
        return np.zeros((0, 0), np.float32)
    position: dict[str, int] = {}
    for u in units:
        position.setdefault(u.text, len(position))
    distinct = list(position)
    embed = getattr(embed_model, "embed_sentences", None)
    if not callable(embed):
        embed = embed_model.get_text_embedding_batch
    matrix: np.ndarray | None = None
    for start in range(0, len(distinct), EMBED_BATCH):
        part = distinct[start : start + EMBED_BATCH]
        block = np.asarray(embed(part, show_progress=show_progress), dtype=np.float32)
        if block.ndim != 2 or len(block) != len(part):
            raise ValueError(f"{len(part)} sentences embedded as an array of shape {block.shape}")
        if matrix is None:
            matrix = np.empty((len(distinct), block.shape[1]), np.float32)
        matrix[start : start + len(part)] = block
    assert matrix is not None
    return matrix[[position[u.text] for u in units]]
