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
(``NodeWithScore.node``, ``.metadata``, ``.node_id``; dicts with a ``metadata`` key; strings).
"""

from __future__ import annotations

import html
import logging
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

try:  # the package's error type when imported as part of llama_index_rag_pack
    from llama_index_rag_pack.core.errors import ConfigurationError
except (
    ImportError
):  # pragma: no cover - module loaded on its own (e.g. beside a peer in a benchmark)

    class ConfigurationError(ValueError):  # type: ignore[no-redef]
        """An argument has a value that cannot work."""


logger = logging.getLogger(__name__)

__all__ = [
    "Citation",
    "EmptyReferenceStyle",
    "MAX_MARKER_LEN",
    "HTMLReferenceStyle",
    "MarkdownReferenceStyle",
    "ReferenceManager",
    "ReferenceStyle",
    "ReferenceStyleName",
    "TextReferenceStyle",
    "default_source_id",
    "render_references",
    "resolve_style",
]

# Marker grammar (bounded, so a marker scan costs O(1)):
#   "[" LABEL "]" "(id=" SP ID SP ("," SP ID SP)* ")"
#   LABEL: 0..9 of [0-9A-Za-z] (the LLM's own number, ignored: we renumber)
#   ID: 1..9 digits, at most MAX_IDS of them; SP: 0..2 spaces
MAX_LABEL = 9
MAX_DIGITS = 9
MAX_SPACES = 2
MAX_IDS = 16
# The longest possible marker; text held back while a marker may be forming never exceeds it,
# which keeps the rewrite linear in the length of the answer.
MAX_MARKER_LEN = (
    1 + MAX_LABEL + 1 + len("(id=") + MAX_IDS * (2 * MAX_SPACES + MAX_DIGITS) + (MAX_IDS - 1) + 1
)
_LABEL_CHARS = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_DIGITS = frozenset("0123456789")
_FAIL = 0
_PARTIAL = 1
_MATCH = 2


def _scan_marker(s: str, j: int) -> tuple[int, int, list[int]]:
    """Scan a marker starting at ``s[j] == "["``.

    Returns:
        ``(_MATCH, end, ids)`` for a complete marker ending before ``end``; ``(_PARTIAL, 0, [])``
        when ``s`` ends while it could still become one; ``(_FAIL, 0, [])`` when it cannot.
    """
    n = len(s)
    k = j + 1
    start = k
    while k < n and s[k] in _LABEL_CHARS:
        k += 1
        if k - start > MAX_LABEL:
            return _FAIL, 0, []
    if k >= n:
        return _PARTIAL, 0, []
    if s[k] != "]":
        return _FAIL, 0, []
    k += 1
    for expected in "(id=":
        if k >= n:
            return _PARTIAL, 0, []
        if s[k] != expected:
            return _FAIL, 0, []
        k += 1
    ids: list[int] = []
    while True:
        spaces = 0
        while k < n and s[k] == " ":
            k += 1
            spaces += 1
            if spaces > MAX_SPACES:
                return _FAIL, 0, []
        start = k
        while k < n and s[k] in _DIGITS:
            k += 1
            if k - start > MAX_DIGITS:
                return _FAIL, 0, []
        if k >= n:
            return _PARTIAL, 0, []
        if k == start:
            return _FAIL, 0, []
        ids.append(int(s[start:k]))
        if len(ids) > MAX_IDS:
            return _FAIL, 0, []
        spaces = 0
        while k < n and s[k] == " ":
            k += 1
            spaces += 1
            if spaces > MAX_SPACES:
                return _FAIL, 0, []
        if k >= n:
            return _PARTIAL, 0, []
        if s[k] == ")":
            return _MATCH, k + 1, ids
        if s[k] != ",":
            return _FAIL, 0, []
        k += 1


# --------------------------------------------------------------------------- nodes, duck-typed
def _unwrap(item: Any) -> Any:
    """``NodeWithScore`` → its node; anything else unchanged."""
    inner = getattr(item, "node", None)
    return inner if inner is not None and hasattr(inner, "metadata") else item


def _metadata(item: Any) -> dict[str, Any]:
    node = _unwrap(item)
    if isinstance(node, dict):
        meta = node.get("metadata", node)
        return meta if isinstance(meta, dict) else {}
    meta = getattr(node, "metadata", None)
    return meta if isinstance(meta, dict) else {}


def _node_id(item: Any, position: int) -> str:
    node = _unwrap(item)
    if isinstance(node, dict):
        value = node.get("id") or node.get("node_id")
    else:
        value = getattr(node, "node_id", None) or getattr(node, "id_", None)
    return str(value) if value else f"chunk-{position}"


SOURCE_KEYS = ("url", "source", "file_path")


def default_source_id(node: Any, position: int = 0) -> str:
    """The source of a chunk: metadata ``url``, ``source`` or ``file_path``, else the node id.

    Args:
        node: A LlamaIndex node, ``NodeWithScore``, dict with ``metadata``, or anything else.
        position: 1-based position in the context (names nodes without an id).
    """
    meta = _metadata(node)
    for key in SOURCE_KEYS:
        value = meta.get(key)
        if value:
            return str(value)
    return _node_id(node, position)


def _link(meta: dict[str, Any]) -> str | None:
    for key in SOURCE_KEYS:
        value = meta.get(key)
        if value:
            return str(value)
    return None


def _title(meta: dict[str, Any], url: str | None, source_id: str) -> str:
    for key in ("title", "file_name", "document_title"):
        value = meta.get(key)
        if value:
            return str(value)
    if url:
        return os.path.basename(url.rstrip("/")) or url
    return source_id


# --------------------------------------------------------------------------- citations
@dataclass
class Citation:
    """One cited source.

    Attributes:
        number: The number shown to the reader (1 = first source cited).
        source_id: What identifies the source (url, file path, node id, or your callable's value).
        title: A human title (metadata ``title``/``file_name``, else derived from the link).
        url: A link to the source (metadata ``url``/``source``/``file_path``), if any.
        positions: 1-based context positions of the cited chunks, in first-use order.
        nodes: The cited chunks themselves (as given to the manager), same order as ``positions``.
        count: How many times the source was cited.
    """

    number: int
    source_id: str
    title: str
    url: str | None = None
    positions: list[int] = field(default_factory=list)
    nodes: list[Any] = field(default_factory=list, repr=False)
    count: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (without the node objects)."""
        return {
            "number": self.number,
            "source_id": self.source_id,
            "title": self.title,
            "url": self.url,
            "positions": list(self.positions),
            "count": self.count,
        }


# --------------------------------------------------------------------------- styles
class ReferenceStyle:
    """How citations are written in the text and in the list at the end.

    Subclass it and override :meth:`format_reference` (one citation in the text) and
    :meth:`format_references` (the list appended at the end). :meth:`format_marker` renders a group
    of adjacent markers (``[1](id=2)[2](id=5)`` or ``[1](id=2,5)``) and joins
    :meth:`format_reference` by default.

    Example:
        >>> class Footnotes(ReferenceStyle):
        ...     def format_reference(self, citation):
        ...         return f"^{citation.number}"
        ...     def format_references(self, citations):
        ...         return "".join(f"\\n^{c.number}: {c.title}" for c in citations)
        >>> nodes = [{"metadata": {"title": "France"}}]
        >>> render_references("Paris [1](id=1).", nodes, style=Footnotes())
        'Paris ^1.\\n^1: France'
    """

    def format_reference(self, citation: Citation) -> str:
        """Text that replaces one citation in the answer."""
        raise NotImplementedError

    def format_references(self, citations: Sequence[Citation]) -> str:
        """The reference list appended after the answer ("" when nothing was cited)."""
        raise NotImplementedError

    def format_marker(self, citations: Sequence[Citation]) -> str:
        """Text that replaces a group of adjacent markers (distinct citations, first-use order)."""
        return "".join(self.format_reference(c) for c in citations)


class EmptyReferenceStyle(ReferenceStyle):
    """Markers removed, no list: the plain answer (the citations stay available for tracing).

    Example:
        >>> render_references("Paris [1](id=1).", ["Paris is in France."], style="empty")
        'Paris .'
    """

    def format_reference(self, citation: Citation) -> str:
        return ""

    def format_references(self, citations: Sequence[Citation]) -> str:
        return ""


class TextReferenceStyle(ReferenceStyle):
    """Console style: ``[1]`` in the text and a ``Sources:`` list with titles and links.

    Example:
        >>> nodes = [{"metadata": {"title": "France", "url": "https://x.org/France"}}]
        >>> print(render_references("Paris [7](id=1).", nodes, style="text"))
        Paris [1].
        <BLANKLINE>
        Sources:
          [1] France — https://x.org/France
    """

    header = "Sources:"

    def format_reference(self, citation: Citation) -> str:
        return f"[{citation.number}]"

    def format_references(self, citations: Sequence[Citation]) -> str:
        if not citations:
            return ""
        lines = []
        for c in citations:
            link = f" — {c.url}" if c.url and c.url != c.title else ""
            lines.append(f"  [{c.number}] {c.title}{link}")
        return f"\n\n{self.header}\n" + "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _md_url(url: str) -> str:
    return f"<{url}>" if any(ch in url for ch in " ()<>") else url


_SAFE_SCHEMES = ("http://", "https://", "file://", "ftp://", "mailto:")


def _safe_href(url: str | None) -> str | None:
    """A link target that cannot run script (``javascript:``/``data:`` links are dropped)."""
    if not url:
        return None
    lowered = url.strip().lower()
    if ":" in lowered.split("/", 1)[0] and not lowered.startswith(_SAFE_SCHEMES):
        return None
    return url


class MarkdownReferenceStyle(ReferenceStyle):
    """Markdown: ``<sup>[[1](url)]</sup>`` in the text and a bulleted list of links.

    Example:
        >>> nodes = [{"metadata": {"title": "France", "url": "https://x.org/France"}}]
        >>> print(render_references("Paris [1](id=1).", nodes, style="markdown"))
        Paris <sup>[[1](https://x.org/France)]</sup>.
        <BLANKLINE>
        - **1** [France](https://x.org/France)
    """

    def format_reference(self, citation: Citation) -> str:
        url = _safe_href(citation.url)
        if url:
            return f"<sup>[[{citation.number}]({_md_url(url)})]</sup>"
        return f"<sup>[{citation.number}]</sup>"

    def format_references(self, citations: Sequence[Citation]) -> str:
        if not citations:
            return ""
        lines = []
        for c in citations:
            url = _safe_href(c.url)
            title = _md_escape(c.title)
            lines.append(
                f"- **{c.number}** [{title}]({_md_url(url)})"
                if url
                else f"- **{c.number}** {title}"
            )
        return "\n\n" + "\n".join(lines)


class HTMLReferenceStyle(ReferenceStyle):
    """HTML: ``<sup><a href="url">[1]</a></sup>`` and an ordered list; titles and links escaped.

    Only what the style writes is escaped (titles, links); the answer text itself is left as the
    LLM wrote it. ``javascript:`` and other script links are not linked.

    Example:
        >>> nodes = [{"metadata": {"title": "A & B", "url": "https://x.org/?a=1&b=2"}}]
        >>> print(render_references("Yes [1](id=1).", nodes, style="html"))
        Yes <sup><a href="https://x.org/?a=1&amp;b=2">[1]</a></sup>.
        <ol class="references">
        <li value="1"><a href="https://x.org/?a=1&amp;b=2">A &amp; B</a></li>
        </ol>
    """

    def format_reference(self, citation: Citation) -> str:
        url = _safe_href(citation.url)
        if url:
            return f'<sup><a href="{html.escape(url, quote=True)}">[{citation.number}]</a></sup>'
        return f"<sup>[{citation.number}]</sup>"

    def format_references(self, citations: Sequence[Citation]) -> str:
        if not citations:
            return ""
        items = []
        for c in citations:
            url = _safe_href(c.url)
            title = html.escape(c.title, quote=True)
            body = f'<a href="{html.escape(url, quote=True)}">{title}</a>' if url else title
            items.append(f'<li value="{c.number}">{body}</li>')
        return '\n<ol class="references">\n' + "\n".join(items) + "\n</ol>"


class ReferenceStyleName(str, Enum):
    """Built-in styles, by name."""

    EMPTY = "empty"
    TEXT = "text"
    MARKDOWN = "markdown"
    HTML = "html"


_STYLES: dict[ReferenceStyleName, type[ReferenceStyle]] = {
    ReferenceStyleName.EMPTY: EmptyReferenceStyle,
    ReferenceStyleName.TEXT: TextReferenceStyle,
    ReferenceStyleName.MARKDOWN: MarkdownReferenceStyle,
    ReferenceStyleName.HTML: HTMLReferenceStyle,
}


def resolve_style(style: str | ReferenceStyle | None) -> ReferenceStyle:
    """A style object from a name (``empty``/``text``/``markdown``/``html``) or an instance.

    Raises:
        ConfigurationError: unknown name or object; the message lists the valid names.
    """
    if style is None:
        return MarkdownReferenceStyle()
    if isinstance(style, ReferenceStyle):
        return style
    if isinstance(style, type) and issubclass(style, ReferenceStyle):
        return style()
    try:
        return _STYLES[
            ReferenceStyleName(str(style).lower() if isinstance(style, str) else style)
        ]()
    except ValueError:
        valid = ", ".join(s.value for s in ReferenceStyleName)
        raise ConfigurationError(
            f"Unknown citation style {style!r}; use one of {valid}, or a ReferenceStyle "
            "subclass instance."
        ) from None


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
            :class:`ReferenceStyle` instance.
        source_id: Which chunks share a number: a metadata key, or a callable ``node -> str``
            (it receives the node, unwrapped from ``NodeWithScore``).
            Default: :func:`default_source_id`.

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
        if source_id is not None and not (callable(source_id) or isinstance(source_id, str)):
            raise ConfigurationError(
                "source_id must be a metadata key (str) or a callable node -> str, "
                f"got {source_id!r}"
            )
        self._source_keys: list[str] = []
        for position, node in enumerate(self.nodes, 1):
            if source_id is None:
                key = default_source_id(node, position)
            elif isinstance(source_id, str):
                value = _metadata(node).get(source_id)
                key = str(value) if value else _node_id(node, position)
            else:
                key = str(source_id(_unwrap(node)))
            self._source_keys.append(key)
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

    def stream(self, tokens: Iterable[Any]) -> Iterator[str]:
        """Rewrite a whole token iterator (non-empty pieces only), the reference list last."""
        for token in tokens:
            out = self.feed(token)
            if out:
                yield out
        tail = self.finish()
        if tail:
            yield tail

    async def astream(self, tokens: AsyncIterable[Any]) -> AsyncIterator[str]:
        """Async :meth:`stream`."""
        async for token in tokens:
            out = self.feed(token)
            if out:
                yield out
        tail = self.finish()
        if tail:
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
            status, end, ids = _scan_marker(buf, j)
            if status == _MATCH:
                self._group.extend(ids)
                self._group_open = True
                i = end
                continue
            if status == _PARTIAL and not final:
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
            meta = _metadata(node)
            url = _link(meta)
            citation = Citation(
                number=len(self._citations) + 1,
                source_id=key,
                title=_title(meta, url, key),
                url=url,
            )
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
