"""``SentenceAttributor``: citations for the sentences the LLM left without a valid marker.

Small local models (the bundled SmolLM2-135M) never write ``[N](id=M)``. The attributor splits the
answer into sentences, embeds them together with the sentences of every context passage (one batch
call of the engine's embedding model, sync or async), scores each passage for each sentence
(semantic and lexical, :mod:`~llama_index_rag_pack.citations.attribution_scores`) and puts
``[k](id=M)`` markers on the sentences a passage supports; the
:class:`~llama_index_rag_pack.citations.references.ReferenceManager` then renumbers them like the
model's own. The rule (:func:`~llama_index_rag_pack.citations.attribution.decide_support`):

* a sentence with a valid marker keeps the model's citations, untouched;
* every other sentence with content words is attributed, or flagged ``unsupported`` when no
  passage reaches the threshold. So an answer without markers is attributed sentence by sentence,
  and an answer where the model cited some sentences gets the gaps filled; the response metadata
  says which citation came from where.

For every cited passage it also records the passage sentence that supports the answer sentence
best (:class:`~llama_index_rag_pack.citations.attribution.Evidence`), which ``rag-pack ask
--show-sources`` highlights.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import MetadataMode

from llama_index_rag_pack.citations.annotations import split_prose_sentences
from llama_index_rag_pack.citations.attribution import (
    AnswerSentence,
    SentenceOrigin,
    SentenceSupport,
    answer_sentences,
    attribution_note,
    check_attribution_options,
    decide_support,
    marked_answer,
)
from llama_index_rag_pack.citations.attribution_scores import (
    DEFAULT_MARGIN,
    DEFAULT_MAX_SOURCES,
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHT,
    Passage,
    content_tokens,
    support_matrix,
)
from llama_index_rag_pack.citations.cited_sources import unwrap_node
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.documents.sentences import chunk_sentences

logger = logging.getLogger(__name__)

__all__ = ["Attribution", "SentenceAttributor", "passage_sentences", "resolve_attributor"]

_CACHE_SIZE = 4096
#: Sentences of one answer that are scored against the passages (in answer order); the rest
#: are ``skipped``, as a sentence without a content word is. An answer is a few sentences: this
#: only bounds the time (sentences x passage sentences) of a runaway reply.
MAX_SCORED_SENTENCES = 200


@dataclass
class Attribution:
    """What the attributor found for one answer.

    Attributes:
        marked: The answer with markers added on the attributed sentences (the model's own markers
            as written).
        sentences: The answer's sentences.
        verdicts: One :class:`~llama_index_rag_pack.citations.attribution.SentenceSupport` per
            sentence.
        passages: The context passages (whitespace-normalised text, sentence spans); evidence
            spans index into their ``text``.
    """

    marked: str
    sentences: list[AnswerSentence] = field(default_factory=list)
    verdicts: list[SentenceSupport] = field(default_factory=list)
    passages: list[Passage] = field(default_factory=list)

    def positions(self, origin: SentenceOrigin) -> set[int]:
        """Context positions cited by the sentences of ``origin``."""
        return {p for v in self.verdicts if v.origin is origin for p in v.positions}

    @property
    def origin(self) -> str:
        """``model``, ``attributed``, ``mixed`` (both) or ``none`` (nothing cited)."""
        model = any(v.origin is SentenceOrigin.MODEL for v in self.verdicts)
        attributed = any(v.origin is SentenceOrigin.ATTRIBUTED for v in self.verdicts)
        return {(True, True): "mixed", (True, False): "model", (False, True): "attributed"}.get(
            (model, attributed), "none"
        )

    @property
    def note(self) -> str:
        """The plain note line ("" when nothing was attributed and nothing is unsupported)."""
        return attribution_note(self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "sentences": [v.to_dict() for v in self.verdicts],
            "unsupported": [
                v.index for v in self.verdicts if v.origin is SentenceOrigin.UNSUPPORTED
            ],
            "note": self.note,
        }


@dataclass
class _Prepared:
    sentences: list[AnswerSentence]
    scored: list[int]
    tokens: list[list[str]]
    passages: list[Passage]


def passage_sentences(text: str) -> list[str]:
    """The sentences of a context passage, as attribution compares them with the answer's:
    cut by :func:`~llama_index_rag_pack.citations.annotations.split_prose_sentences` (pure Python,
    so a question never waits about 2 s for NLTK to import; initials and abbreviations such as
    "Dr." do not end a sentence), with fragments under three words joined to the next sentence
    as the chunk-side splitter joins them.

    Example:
        >>> passage_sentences("Dr. Smith arrived. He spoke at length about the budget.")
        ['Dr. Smith arrived.', 'He spoke at length about the budget.']
    """
    return chunk_sentences(text, split=split_prose_sentences)


@functools.cache
def english_stopwords() -> frozenset[str]:
    """NLTK's English stop words, read from the copy LlamaIndex ships (core's
    ``globals_helper.stopwords`` imports nltk and with it scipy: ≈1.7 s of a one-question run);
    through ``globals_helper`` where that file is not found."""
    import llama_index.core

    folder = Path(llama_index.core.__file__).parent / "_static" / "nltk_cache" / "corpora"
    try:
        return frozenset((folder / "stopwords" / "english").read_text(encoding="utf-8").split())
    except OSError:
        from llama_index.core.utils import globals_helper

        return frozenset(globals_helper.stopwords)


class SentenceAttributor:
    """Attributes answer sentences to the context passages that support them.

    Args:
        embed_model: A LlamaIndex embedding model (the one the index uses; the bundled MiniLM by
            default in the pack). Sentences are embedded in one batch per answer; passage
            sentences are cached (by text) across answers.
        threshold: Support needed to cite a passage, in (0, 1].
        weight: Weight of the semantic signal in [0, 1] (the rest is lexical overlap).
        margin: Passages within this much of the best are cited too.
        max_sources: At most this many passages per sentence.
        stopwords: Words ignored by the lexical signal (default: LlamaIndex's English list).

    Example:
        >>> attributor = SentenceAttributor(embed_model)  # doctest: +SKIP
        >>> result = attributor.attribute("Armstrong walked on the Moon.", nodes)  # doctest: +SKIP
        >>> result.marked, result.origin  # doctest: +SKIP
        ('Armstrong walked on the Moon [1](id=2).', 'attributed')
    """

    def __init__(
        self,
        embed_model: Any,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        weight: float = DEFAULT_WEIGHT,
        margin: float = DEFAULT_MARGIN,
        max_sources: int = DEFAULT_MAX_SOURCES,
        stopwords: Sequence[str] | None = None,
    ) -> None:
        if not hasattr(embed_model, "get_text_embedding_batch"):
            raise ConfigurationError(
                "SentenceAttributor needs a LlamaIndex embedding model (e.g. the pack's "
                f"embed_model), got {type(embed_model).__name__}"
            )
        check_attribution_options(threshold, weight, margin, max_sources)
        self.embed_model = embed_model
        self.threshold = threshold
        self.weight = weight
        self.margin = margin
        self.max_sources = max_sources
        self.stopwords = english_stopwords() if stopwords is None else frozenset(stopwords)
        self._cache: OrderedDict[str, list[float]] = OrderedDict()

    # ------------------------------------------------------------------ public
    def attribute(self, answer: str, nodes: Sequence[Any]) -> Attribution:
        """Attribute the sentences of ``answer`` (markers included) to ``nodes`` (context order)."""
        prepared = self._prepare(answer, nodes)
        missing = self._missing(prepared)
        if missing:
            self._store(missing, self.embed_model.get_text_embedding_batch(missing))
        return self._finish(answer, prepared)

    async def aattribute(self, answer: str, nodes: Sequence[Any]) -> Attribution:
        """Async :meth:`attribute` (the embedding model's async batch call)."""
        prepared = self._prepare(answer, nodes)
        missing = self._missing(prepared)
        if missing:
            self._store(missing, await self.embed_model.aget_text_embedding_batch(missing))
        return self._finish(answer, prepared)

    # ------------------------------------------------------------------ steps
    def _prepare(self, answer: str, nodes: Sequence[Any]) -> _Prepared:
        sentences = answer_sentences(answer or "")
        scored: list[int] = []
        tokens: list[list[str]] = []
        for i, sentence in enumerate(sentences):
            if len(scored) == MAX_SCORED_SENTENCES:
                break
            words = content_tokens(sentence.text, self.stopwords)
            if words:
                scored.append(i)
                tokens.append(words)
        passages = []
        for node in nodes:
            text = _node_text(node)
            passages.append(Passage.from_sentences(text, passage_sentences(text) if text else []))
        return _Prepared(sentences, scored, tokens, passages)

    def _texts(self, prepared: _Prepared) -> list[str]:
        if not prepared.scored or not prepared.passages:
            return []
        answer_texts = [prepared.sentences[i].text for i in prepared.scored]
        passage_texts = [
            p.sentence(k) or " " for p in prepared.passages for k in range(len(p.spans))
        ]
        return answer_texts + passage_texts

    def _missing(self, prepared: _Prepared) -> list[str]:
        return list(dict.fromkeys(t for t in self._texts(prepared) if t not in self._cache))

    def _store(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        for text, vector in zip(texts, vectors, strict=True):
            self._cache[text] = list(vector)
            self._cache.move_to_end(text)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)

    def _finish(self, answer: str, prepared: _Prepared) -> Attribution:
        texts = self._texts(prepared)
        n = len(prepared.scored)
        if texts:
            vectors = np.asarray([self._cache[t] for t in texts], dtype=np.float64)
            support, best = support_matrix(
                prepared.tokens,
                vectors[:n],
                prepared.passages,
                vectors[n:],
                self.stopwords,
                self.weight,
            )
        else:
            support = np.zeros((n, len(prepared.passages)))
            best = np.zeros((n, len(prepared.passages)), dtype=np.int64)
        verdicts = decide_support(
            prepared.sentences,
            prepared.scored,
            support,
            best,
            prepared.passages,
            threshold=self.threshold,
            margin=self.margin,
            max_sources=self.max_sources,
        )
        marked = marked_answer(prepared.sentences, verdicts) if prepared.sentences else answer
        result = Attribution(marked, prepared.sentences, verdicts, prepared.passages)
        if logger.isEnabledFor(logging.DEBUG):  # the dict costs as much as the scoring
            logger.debug("Attribution: %s", result.to_dict())
        return result


def _node_text(node: Any) -> str:
    inner = unwrap_node(node)
    if hasattr(inner, "get_content"):
        return inner.get_content(metadata_mode=MetadataMode.NONE) or ""
    if isinstance(inner, dict):
        return str(inner.get("text", ""))
    return str(inner or "")


def resolve_attributor(attribution: Any, embed_model: Any) -> SentenceAttributor | None:
    """The engine's attributor: ``attribution`` itself when it is one, a default one over
    ``embed_model`` for ``True`` (none without an embedding model), none for ``False``.

    Raises:
        ConfigurationError: ``attribution`` is neither a bool nor a ``SentenceAttributor``.
    """
    if isinstance(attribution, SentenceAttributor):
        return attribution
    if attribution is True:
        if embed_model is None:
            logger.info("No embed_model: sentences without citation markers stay uncited")
            return None
        return SentenceAttributor(embed_model)
    if attribution is False:
        return None
    raise ConfigurationError(
        f"attribution must be True, False or a SentenceAttributor, got {attribution!r}"
    )
