"""How citations are written: :class:`ReferenceStyle` and the built-in styles.

A style renders one citation in the answer (``[1]``, ``<sup>[1]</sup>`` ...) and the reference
list appended after it. Built in: ``empty`` (markers removed), ``text`` (console), ``markdown``
(default) and ``html``; any :class:`ReferenceStyle` subclass works too.
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import html
from collections.abc import Sequence
from enum import Enum

from llama_index_rag_pack.citations.cited_sources import Citation
from llama_index_rag_pack.core.errors import ConfigurationError

__all__ = [
    "EmptyReferenceStyle",
    "HTMLReferenceStyle",
    "MarkdownReferenceStyle",
    "ReferenceStyle",
    "ReferenceStyleName",
    "TextReferenceStyle",
    "resolve_style",
]


class ReferenceStyle:
    """How citations are written in the text and in the list at the end.

    Subclass it and override :meth:`format_reference` (one citation in the text) and
    :meth:`format_references` (the list appended at the end). :meth:`format_marker` renders a group
    of adjacent markers (``[1](id=2)[2](id=5)`` or ``[1](id=2,5)``) and joins
    :meth:`format_reference` by default.

    Example:
        >>> from llama_index_rag_pack.citations.references import render_references
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

    def format_note(self, note: str) -> str:
        """A note shown between the answer and the reference list (e.g. that citations were
        attributed by code, not written by the model); ``""`` for no note."""
        return f"\n\n{note}" if note else ""


class EmptyReferenceStyle(ReferenceStyle):
    """Markers removed, no list: the plain answer (the citations stay available for tracing).

    Example:
        >>> from llama_index_rag_pack.citations.references import render_references
        >>> render_references("Paris [1](id=1).", ["Paris is in France."], style="empty")
        'Paris .'
    """

    def format_reference(self, citation: Citation) -> str:
        return ""

    def format_references(self, citations: Sequence[Citation]) -> str:
        return ""

    def format_note(self, note: str) -> str:
        return ""


class TextReferenceStyle(ReferenceStyle):
    """Console style: ``[1]`` in the text and a ``Sources:`` list with titles and links.

    Example:
        >>> from llama_index_rag_pack.citations.references import render_references
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
            lines.append(f"  [{c.number}] {c.title}{c.where()}{link}")
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
        >>> from llama_index_rag_pack.citations.references import render_references
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
                f"- **{c.number}** [{title}]({_md_url(url)}){_md_escape(c.where())}"
                if url
                else f"- **{c.number}** {title}{_md_escape(c.where())}"
            )
        return "\n\n" + "\n".join(lines)

    def format_note(self, note: str) -> str:
        escaped = note.replace("_", "\\_")
        return f"\n\n_{escaped}_" if note else ""


class HTMLReferenceStyle(ReferenceStyle):
    """HTML: ``<sup><a href="url">[1]</a></sup>`` and an ordered list; titles and links escaped.

    Only what the style writes is escaped (titles, links); the answer text itself is left as the
    LLM wrote it. ``javascript:`` and other script links are not linked.

    Example:
        >>> from llama_index_rag_pack.citations.references import render_references
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

    def format_note(self, note: str) -> str:
        return f'\n<p class="citation-note">{html.escape(note)}</p>' if note else ""

    def format_references(self, citations: Sequence[Citation]) -> str:
        if not citations:
            return ""
        items = []
        for c in citations:
            url = _safe_href(c.url)
            title = html.escape(c.title, quote=True)
            body = f'<a href="{html.escape(url, quote=True)}">{title}</a>' if url else title
            items.append(f'<li value="{c.number}">{body}{html.escape(c.where())}</li>')
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
