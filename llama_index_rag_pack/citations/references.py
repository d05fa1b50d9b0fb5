"""Deterministic, streaming rewriting of the LLM's citation markers.

The LLM only writes ``[N](id=M)`` after a claim, ``M`` being the 1-based position of a context
chunk (also ``[N](id=M,K)`` and several markers side by side). :class:`ReferenceManager` rewrites
those markers on the streamed tokens, wherever the stream splits them:

* chunks of the same source (metadata ``url``, then ``source``, then ``file_path``, else the
  node itself, or a callable of yours) share one number;
* numbers follow first use (the first source cited is ``1``);
* sources never cited are not listed;
* an id that names no chunk is dropped with a warning;
* a malformed marker (``[1](id=)``, ``[see](x)``, a lone ``[``) is passed through as text;
* a reference list is appended at the end, in a :class:`ReferenceStyle`.

Invariant: for any split of the same text into tokens the concatenated output is identical, and
no character of the text outside markers is lost, duplicated or reordered. Work is linear in the
length of the answer: plain text is copied with ``str.find``; only a ``[`` starts a (bounded)
marker scan.

This module is pure Python (no LlamaIndex import): nodes are read by duck typing
(:mod:`~llama_index_rag_pack.citations.cited_sources`), the marker grammar lives in
:mod:`~llama_index_rag_pack.citations.citation_markers` and the styles in
:mod:`~llama_index_rag_pack.citations.reference_styles`.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any

from llama_index_rag_pack.citations.citation_markers import MATCH, PARTIAL, scan_marker
from llama_index_rag_pack.citations.cited_sources import Citation, new_citation, source_keys
from llama_index_rag_pack.citations.reference_styles import ReferenceStyle, resolve_style
from llama_index_rag_pack.core.errors import ConfigurationError

logger = logging.getLogger(__name__)

__all__ = ["ReferenceManager", "render_references"]


# --------------------------------------------------------------------------- the state machine
def _token_text(token: Any) -> str:
    """Text of a stream chunk: str, None, LlamaIndex ``CompletionResponse``/``ChatResponse`` deltas,
    message chunks with ``content``, bytes."""
    if token is None:
        return ""
    if isinstance(token, str):
        return token
    if isinstance(token, (bytes, bytearray)):
        return bytes(token).decode("utf-8", errors="replace")
    if hasattr(token, "delta"):  # CompletionResponse / ChatResponse: delta is the new text
        delta = token.delta
        return delta if isinstance(delta, str) else ""
    content = getattr(token, "content", None)
    if isinstance(content, str):
        return content
    return str(token)


class ReferenceManager:
    """Rewrites ``[N](id=M)`` citation markers in a token stream and builds the reference list.

    Feed it the LLM's tokens with :meth:`feed` (it returns what can be shown so far; a token that
    may start a marker is held back until the marker is complete or proven false), then call
    :meth:`finish` for the rest of the text plus the reference list. :attr:`citations` holds the
    structured result. One manager rewrites one answer.

    Args:
        nodes: The context chunks in prompt order (``id=1`` is the first). LlamaIndex nodes,
            ``NodeWithScore``, dicts with ``metadata``, or strings. Empty → the answer passes
            through untouched.
        style: ``"empty"``, ``"text"``, ``"markdown"`` (default), ``"html"`` or a
            :class:`~llama_index_rag_pack.citations.reference_styles.ReferenceStyle` instance.
        source_id: Which chunks share a number: a metadata key, or a callable ``node -> str``
            (it receives the node, unwrapped from ``NodeWithScore``).
            Default: :func:`~llama_index_rag_pack.citations.cited_sources.default_source_id`.

    Example:
        >>> nodes = [
        ...     {"metadata": {"url": "b.pdf", "title": "b"}},
        ...     {"metadata": {"url": "a.html#chap2", "title": "a chap2"}},
        ...     {"metadata": {"url": "b.pdf", "title": "b"}},
        ... ]
        >>> manager = ReferenceManager(nodes, style="text")
        >>> tokens = ["Yes [1](i", "d=3), sure [2](id=2), no [3](id=1)."]
        >>> out = "".join(manager.feed(t) for t in tokens)
        >>> print(out + manager.finish())
        Yes [1], sure [2], no [1].
        <BLANKLINE>
        Sources:
          [1] b — b.pdf
          [2] a chap2 — a.html#chap2
        >>> [(c.number, c.positions) for c in manager.citations]
        [(1, [3, 1]), (2, [2])]
    """

    def __init__(
        self,
        nodes: Sequence[Any] | None,
        style: str | ReferenceStyle | None = "markdown",
        source_id: str | Callable[[Any], Any] | None = None,
    ) -> None:
        self.nodes: list[Any] = list(nodes or [])
        self.style = resolve_style(style)
        self._source_keys = source_keys(self.nodes, source_id)
        self._by_source: dict[str, Citation] = {}
        self._citations: list[Citation] = []
        self._dropped: list[int] = []
        self._pending = ""  # text from an unresolved "[" onwards
        self._group: list[int] = []  # ids of adjacent markers not rendered yet
        self._group_open = False
        self._finished = False
        self._passthrough = not self.nodes
        if self._passthrough:
            logger.debug("ReferenceManager without nodes: the answer passes through untouched")

    # ------------------------------------------------------------------ results
    @property
    def citations(self) -> list[Citation]:
        """Cited sources so far, in number order."""
        return list(self._citations)

    @property
    def cited_positions(self) -> list[int]:
        """1-based context positions of every cited chunk, in first-use order (no repeats)."""
        seen: list[int] = []
        for c in self._citations:
            seen.extend(p for p in c.positions if p not in seen)
        return seen

    @property
    def cited_nodes(self) -> list[Any]:
        """The cited chunks (as given), grouped by citation number."""
        return [node for c in self._citations for node in c.nodes]

    @property
    def dropped_ids(self) -> list[int]:
        """Ids the LLM cited that name no chunk (dropped from the answer), in order."""
        return list(self._dropped)

    # ------------------------------------------------------------------ streaming
    def feed(self, token: Any) -> str:
        """Take the next token; return the text that can be shown now.

        ``token`` may be a string, ``None``, bytes, or a LlamaIndex ``CompletionResponse`` /
        ``ChatResponse`` (its ``delta`` is used).
        """
        if self._finished:
            raise ConfigurationError(
                "This ReferenceManager has finished: create a new one per answer."
            )
        text = _token_text(token)
        if self._passthrough or not text:
            return text
        return self._process(self._pending + text, final=False)

    def finish(self, references: bool = True) -> str:
        """End of the stream: the held-back text, then (unless ``references=False``) the list."""
        if self._finished:
            return ""
        out = "" if self._passthrough else self._process(self._pending, final=True)
        self._finished = True
        if self._passthrough or not references:
            return out
        return out + self.format_references()

    def format_references(self) -> str:
        """The reference list of the citations so far, in the manager's style."""
        return "" if self._passthrough else self.style.format_references(self.citations)

    def cite(self, positions: Iterable[int]) -> list[Citation]:
        """Record citations of the chunks at ``positions`` without text (after the answer has
        streamed: citations attributed by code). Ids outside the context are dropped as usual.

        Example:
            >>> manager = ReferenceManager(["a", "b"], style="text")
            >>> _ = manager.feed("Hi [1](id=2).") + manager.finish(references=False)
            >>> [c.number for c in manager.cite([1, 2])]
            [2, 1]
        """
        cited: list[Citation] = []
        for position in positions:
            citation = None if self._passthrough else self._cite(position)
            if citation is not None and citation not in cited:
                cited.append(citation)
        return cited

    def stream(self, tokens: Iterable[Any]) -> Iterator[str]:
        """Rewrite a whole token iterator (non-empty pieces only), the reference list last."""
        yield from filter(None, map(self.feed, tokens))
        if tail := self.finish():
            yield tail

    async def astream(self, tokens: AsyncIterable[Any]) -> AsyncIterator[str]:
        """Async :meth:`stream`."""
        async for token in tokens:
            if out := self.feed(token):
                yield out
        if tail := self.finish():
            yield tail

    def _process(self, buf: str, final: bool) -> str:
        out: list[str] = []
        i = 0
        n = len(buf)
        self._pending = ""
        while i < n:
            j = buf.find("[", i)
            if j < 0:
                self._close_group(out)
                out.append(buf[i:])
                break
            if j > i:
                self._close_group(out)
                out.append(buf[i:j])
            status, end, ids = scan_marker(buf, j)
            if status == MATCH:
                self._group.extend(ids)
                self._group_open = True
                i = end
                continue
            if status == PARTIAL and not final:
                self._pending = buf[j:]
                return "".join(out)
            self._close_group(out)
            out.append("[")
            i = j + 1
        if final:
            self._close_group(out)
        return "".join(out)

    def _close_group(self, out: list[str]) -> None:
        if not self._group_open:
            return
        ids, self._group, self._group_open = self._group, [], False
        cited: list[Citation] = []
        for position in ids:
            citation = self._cite(position)
            if citation is not None and citation not in cited:
                cited.append(citation)
        if cited:
            out.append(self.style.format_marker(cited))

    def _cite(self, position: int) -> Citation | None:
        if not 1 <= position <= len(self.nodes):
            if position not in self._dropped:
                logger.warning(
                    "The LLM cited id=%d but the context has %d chunks (ids 1..%d): "
                    "citation dropped",
                    position,
                    len(self.nodes),
                    len(self.nodes),
                )
            self._dropped.append(position)
            return None
        key = self._source_keys[position - 1]
        citation = self._by_source.get(key)
        node = self.nodes[position - 1]
        if citation is None:
            citation = new_citation(len(self._citations) + 1, key, node)
            self._by_source[key] = citation
            self._citations.append(citation)
        if position not in citation.positions:
            citation.positions.append(position)
            citation.nodes.append(node)
        citation.count += 1
        return citation


def render_references(
    text: str,
    nodes: Sequence[Any] | None,
    style: str | ReferenceStyle | None = "markdown",
    source_id: str | Callable[[Any], Any] | None = None,
) -> str:
    """Rewrite the markers of a whole answer and append the reference list.

    Example:
        >>> render_references("Milvus stores vectors [1](id=2).", ["a", "b"], style="text")
        'Milvus stores vectors [1].\\n\\nSources:\\n  [1] chunk-2'
    """
    manager = ReferenceManager(nodes, style=style, source_id=source_id)
    return manager.feed(text) + manager.finish()
