"""Extractive answers: the answer is the retrieved passages' own sentences, ranked for the
question, under a short answer line taken from the best of them, every line cited. Nothing in it
can be invented, which is what a model too small to be believed (the bundled 135M) needs.

1. Every sentence of every retrieved passage is a candidate
   (:func:`~llama_index_rag_pack.citations.citation_attribution.passage_sentences`).
2. :func:`rank_sentences` scores each by its embedding's similarity to the question (headed by
   its passage's title, as the sentence index embeds it), the share of the question's terms it
   holds (the BM25 analysis, in the question's language), the rank of its passage, and whether
   it holds what the question asks for (a number for *how many* / *when*, a name the question
   does not hold for *who* / *where* / *which*). The weights were fitted on the dev split of
   ``wiki_qa_para`` (``benchmarks/results/offline_answers.md``).
3. The best :data:`QUOTED_SENTENCES` are quoted, each with its passage's marker.
4. The short answer line is a span of the best sentence
   (:mod:`~llama_index_rag_pack.citations.answer_spans`): by rule, the span of the kind the
   question asks for nearest its words (``short_answer="rule"``, the default); or the local
   model's pick among the rule's best spans under a JSON schema that allows those spans only
   (``"model"``, :func:`model_span`); or none (``"none"``). A question not written in Latin
   letters gets no short line: its quotes answer it.

Example:
    >>> text = extractive_text(
    ...     "Armstrong and Aldrin", [Quote(1, "Neil Armstrong and Buzz Aldrin landed.", 1.0)]
    ... )
    >>> print(text)
    Armstrong and Aldrin [1](id=1)
    <BLANKLINE>
    - "Neil Armstrong and Buzz Aldrin landed." [1](id=1)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import MetadataMode

from llama_index_rag_pack.citations.answer_spans import confident_span, ranked_spans
from llama_index_rag_pack.citations.quotes import verify_quote
from llama_index_rag_pack.citations.sentence_ranking import (
    Quote,
    arank_sentences,
    rank_sentences,
)
from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.llm_output import json_values
from llama_index_rag_pack.documents.languages import letter_script
from llama_index_rag_pack.models.json_output import supports_json_schema

logger = logging.getLogger(__name__)

__all__ = [
    "NOTHING_TO_QUOTE",
    "QUOTED_SENTENCES",
    "SHORT_ANSWERS",
    "ExtractedAnswer",
    "ExtractiveAnswerer",
    "Quote",
    "amodel_span",
    "arank_sentences",
    "extractive_text",
    "model_span",
    "rank_sentences",
]

#: Sentences quoted under the short answer line.
QUOTED_SENTENCES = 4


# --------------------------------------------------------------------------- the short line
#: Spans the local model may choose among (the rule's best first).
MODEL_CHOICES = 3

SPAN_PROMPT = (
    "Question: {question}\n"
    "Passage: {sentence}\n"
    "Which words of the passage answer the question? Reply with one of the allowed answers."
)


def _span_schema(spans: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"answer": {"type": "string", "enum": spans}},
        "required": ["answer"],
    }


def _chosen(reply: str, spans: list[str]) -> str | None:
    for data in json_values(reply):
        answer = data.get("answer") if isinstance(data, dict) else None
        if isinstance(answer, str) and answer in spans:
            return answer
    return None


def model_span(llm: Any, question: str, sentence: str) -> str | None:
    """The short answer ``llm`` picks among the rule's best :data:`MODEL_CHOICES` spans of
    ``sentence``, under a JSON schema that allows those spans only (``None`` when the LLM cannot
    be held to a schema, fails, or replies with none of them)."""
    spans = ranked_spans(question, sentence)[:MODEL_CHOICES]
    if not spans or not supports_json_schema(llm):
        return None
    prompt = SPAN_PROMPT.format(question=question, sentence=sentence)
    try:
        reply = llm.complete(prompt, json_schema=_span_schema(spans)).text
    except Exception as e:  # noqa: BLE001  (any LLM failure: the rule's span answers instead)
        logger.warning("Extractive answer: the LLM could not pick a span (%s); using the rule's", e)
        return None
    return _chosen(reply, spans)


async def amodel_span(llm: Any, question: str, sentence: str) -> str | None:
    """Async :func:`model_span`."""
    spans = ranked_spans(question, sentence)[:MODEL_CHOICES]
    if not spans or not supports_json_schema(llm):
        return None
    prompt = SPAN_PROMPT.format(question=question, sentence=sentence)
    try:
        reply = (await llm.acomplete(prompt, json_schema=_span_schema(spans))).text
    except Exception as e:  # noqa: BLE001
        logger.warning("Extractive answer: the LLM could not pick a span (%s); using the rule's", e)
        return None
    return _chosen(reply, spans)


# --------------------------------------------------------------------------- the text
#: The answer when nothing was retrieved to quote from.
NOTHING_TO_QUOTE = "No retrieved passage to quote from: nothing answers this question."
#: How the short answer line is chosen.
SHORT_ANSWERS = ("rule", "model", "none")


def extractive_text(short: str | None, quotes: Sequence[Quote]) -> str:
    """The answer: the short line cited to the best sentence's passage, then each quoted
    sentence with its passage's marker (``[k](id=N)``, renumbered like an LLM's own)."""
    if not quotes:
        return NOTHING_TO_QUOTE
    lines = []
    if short:
        lines += [f"{short} [1](id={quotes[0].position})", ""]
    lines += [f'- "{q.text}" [1](id={q.position})' for q in quotes]
    return "\n".join(lines)


@dataclass
class ExtractedAnswer:
    """An extractive answer before its markers are rewritten.

    Attributes:
        marked: The text with ``[k](id=N)`` markers.
        short: The short answer line, or ``None``.
        quotes: The quoted sentences, best first.
    """

    marked: str
    short: str | None
    quotes: list[Quote]

    def quote_checks(self, nodes: Sequence[Any]) -> list[Any]:
        """Each quote verified in its passage (``quotes`` citation mode): exact matches, by
        construction."""
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        return [verify_quote(q.text, texts, q.position) for q in self.quotes]

    def annotations(self) -> dict[str, list[int]]:
        """Which passage each line of the answer comes from (``annotate`` citation mode)."""
        positions = [self.quotes[0].position] if self.short and self.quotes else []
        positions += [q.position for q in self.quotes]
        return {str(line): [position] for line, position in enumerate(positions, start=1)}

    def metadata(self, short_answer: str) -> dict[str, Any]:
        """What the response's metadata records about it."""
        return {
            "answer_style": "extractive",
            "short_answer": self.short,
            "short_answer_by": short_answer if self.short else None,
            "citation_origin": "extracted",
            "extracted_quotes": [{"position": q.position, "text": q.text} for q in self.quotes],
        }


class ExtractiveAnswerer:
    """Builds extractive answers (sync and async).

    Args:
        embed_model: Ranks the sentences by similarity (``None``: by terms, rank and answer type).
        llm: Picks the short answer when ``short_answer="model"``.
        short_answer: ``rule`` (default: the span
            :func:`~llama_index_rag_pack.citations.answer_spans.confident_span` finds, when the
            question asks for a date, number, name or term and one span clearly fits), ``model``
            (where the rule would show a line, the LLM picks among its best spans under a JSON
            schema; the rule's span when it cannot) or ``none`` (no short line: the quotes
            alone).
        quoted: How many sentences are quoted.
    """

    def __init__(
        self,
        embed_model: Any = None,
        llm: Any = None,
        *,
        short_answer: str = "rule",
        quoted: int = QUOTED_SENTENCES,
    ) -> None:
        if short_answer not in SHORT_ANSWERS:
            raise ConfigurationError(
                f"unknown short_answer {short_answer!r}; choose one of {', '.join(SHORT_ANSWERS)}"
            )
        if quoted < 1:
            raise ConfigurationError(f"quoted must be at least 1, got {quoted}")
        self.embed_model = embed_model
        self.llm = llm
        self.short_answer = short_answer
        self.quoted = quoted

    def _rule_span(self, question: str, quotes: list[Quote]) -> str | None:
        """The rule's confident span of the best sentence (``None``: no short line)."""
        if not quotes or self.short_answer == "none" or letter_script(question) != "Latin":
            return None
        return confident_span(question, quotes[0].text)

    def _finish(self, short: str | None, quotes: list[Quote]) -> ExtractedAnswer:
        if short is not None and short.strip(" .") == quotes[0].text.strip(" ."):
            short = None  # the whole sentence: it is quoted below already
        return ExtractedAnswer(extractive_text(short, quotes), short, quotes)

    def answer(self, question: str, nodes: Sequence[Any]) -> ExtractedAnswer:
        """The extractive answer to ``question`` from the retrieved ``nodes``."""
        quotes = rank_sentences(question, nodes, self.embed_model)[: self.quoted]
        short = self._rule_span(question, quotes)
        if short is not None and self.short_answer == "model":
            short = model_span(self.llm, question, quotes[0].text) or short
        return self._finish(short, quotes)

    def _response(self, builder: Any, nodes: Sequence[Any], extracted: ExtractedAnswer) -> Any:
        quotes = extracted.quote_checks(nodes) if builder.mode == "quotes" else None
        response = builder.build(nodes, extracted.marked, extracted.marked, quotes=quotes)
        if builder.mode == "annotate":
            response.metadata["annotations"] = {
                str(k): v for k, v in extracted.annotations().items()
            }
        response.metadata.update(extracted.metadata(self.short_answer))
        return response

    def response(self, builder: Any, nodes: Sequence[Any], question: str) -> Any:
        """The cited response: :meth:`answer`, its markers rewritten by ``builder`` (a
        :class:`~llama_index_rag_pack.citations.cited_responses.CitedResponseBuilder`), with the
        quotes verified (``quotes`` mode) or the lines annotated (``annotate`` mode)."""
        return self._response(builder, nodes, self.answer(question, nodes))

    async def aresponse(self, builder: Any, nodes: Sequence[Any], question: str) -> Any:
        """Async :meth:`response`."""
        return self._response(builder, nodes, await self.aanswer(question, nodes))

    async def aanswer(self, question: str, nodes: Sequence[Any]) -> ExtractedAnswer:
        """Async :meth:`answer`."""
        quotes = (await arank_sentences(question, nodes, self.embed_model))[: self.quoted]
        short = self._rule_span(question, quotes)
        if short is not None and self.short_answer == "model":
            short = await amodel_span(self.llm, question, quotes[0].text) or short
        return self._finish(short, quotes)
