"""The search tree of a judge-driven recursive RAG run, as plain data.

A :class:`SearchNode` is one question: the chunks retrieved for it, each with the judge's score
(2 answers, 1 relevant but incomplete, 0 irrelevant, ``None`` not judged), the follow-up
question asked for a chunk scored 1 and the :class:`SearchNode` that answered it, and the
question's answer. :class:`SearchTree` holds the root with the bounds it ran under and the LLM
calls it used; it round-trips through JSON (:meth:`SearchTree.to_json`,
:meth:`SearchTree.from_json`, :meth:`SearchTree.save`, :meth:`SearchTree.load`) and renders as a
text tree (:meth:`SearchTree.render_text`) or a Mermaid flowchart (:meth:`SearchTree.to_mermaid`).
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import (
    in_file,
    parse_json,
    read_json_file,
    write_text_atomic,
)

__all__ = ["JudgedChunk", "SearchNode", "SearchTree"]

SCORE_LABELS = {2: "answers", 1: "partial", 0: "irrelevant", None: "not judged"}

_TEXT, _OPT_TEXT, _INT = (str,), (str, type(None)), (int,)
_OPT_INT, _OPT_NUMBER = (int, type(None)), (int, float, type(None))
# The fields of each level read from JSON and the types they may hold (the nested ``child``,
# ``chunks`` and ``root`` are read by their own class).
_CHUNK_FIELDS: dict[str, tuple[type, ...]] = {
    "chunk_id": _TEXT, "text": _TEXT, "source": _OPT_TEXT, "retrieval_score": _OPT_NUMBER,
    "score": _OPT_INT, "follow_up": _OPT_TEXT, "child": (dict, type(None)), "problem": _TEXT,
}  # fmt: skip
_NODE_FIELDS: dict[str, tuple[type, ...]] = {
    "question": _TEXT, "depth": _INT, "chunks": (list,), "answer": _TEXT, "cited_ids": (list,),
    "llm_calls": _INT, "stop": _TEXT,
}  # fmt: skip
_TREE_FIELDS: dict[str, tuple[type, ...]] = {
    "root": (dict,), "llm_calls": _INT, "max_depth": _OPT_INT, "max_branching": _OPT_INT,
    "max_llm_calls": _OPT_INT,
}  # fmt: skip
_NESTED = ("child", "chunks", "root")


def _checked(
    data: Any, what: str, types: dict[str, tuple[type, ...]], *, required: str
) -> dict[str, Any]:
    """The fields of ``data`` but the nested ones, each of the types ``types`` allows."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"a {what} must be a JSON object, got {type(data).__name__}.")
    if required not in data:
        raise ConfigurationError(f"a {what} has no {required!r}.")
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise ConfigurationError(f"a {what} has unknown fields {unknown}.")
    for name, value in data.items():
        if not isinstance(value, types[name]) or isinstance(value, bool):
            raise ConfigurationError(f"{what} field {name!r} has the wrong type: {value!r:.60}.")
    if not all(isinstance(i, str) for i in data.get("cited_ids", [])):
        raise ConfigurationError(f"{what} field 'cited_ids' must be a list of strings.")
    return {k: v for k, v in data.items() if k not in _NESTED}


@dataclass
class JudgedChunk:
    """One retrieved chunk and what the judge made of it.

    Attributes:
        chunk_id: The node id.
        text: The chunk's text (as retrieved).
        source: Its title or link, when its metadata has one.
        retrieval_score: The retriever's score.
        score: 2, 1, 0, or ``None`` when the call budget left it unjudged.
        follow_up: The follow-up question the judge wrote (score 1 only).
        child: The search that answered ``follow_up`` (its answer is attached to this chunk).
        problem: Why the judge's reply was not read as written, if it was not.
    """

    chunk_id: str
    text: str = ""
    source: str | None = None
    retrieval_score: float | None = None
    score: int | None = None
    follow_up: str | None = None
    child: SearchNode | None = None
    problem: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JudgedChunk:
        """Read :func:`~dataclasses.asdict`'s form, every field's type checked.

        Raises:
            ConfigurationError: not an object, an unknown field or a field of the wrong type.
        """
        fields = _checked(data, "chunk", _CHUNK_FIELDS, required="chunk_id")
        if fields.get("score") not in SCORE_LABELS:
            raise ConfigurationError(f"chunk score must be 2, 1, 0 or null, got {data['score']!r}.")
        child = data.get("child")
        return cls(**fields, child=SearchNode.from_dict(child) if child is not None else None)


@dataclass
class SearchNode:
    """One question of the search and its judged chunks.

    Attributes:
        question: The question asked at this node.
        depth: 0 for the user's question, 1 for its follow-ups, ...
        chunks: The retrieved chunks, in retrieval order.
        answer: The answer (without its reference list); empty when none was generated.
        cited_ids: The ids of the chunks the answer cites.
        llm_calls: LLM calls made for this node itself (judging and answering).
        stop: Why the search stopped here: ``answered`` (a chunk scored 2), ``followed_up``,
            ``max_depth``, ``budget``, ``no_follow_up`` (scored 1, no usable follow-up),
            ``no_relevant_chunk``, ``no_chunks``.
    """

    question: str
    depth: int = 0
    chunks: list[JudgedChunk] = field(default_factory=list)
    answer: str = ""
    cited_ids: list[str] = field(default_factory=list)
    llm_calls: int = 0
    stop: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchNode:
        """Read :func:`~dataclasses.asdict`'s form, every field's type checked.

        Raises:
            ConfigurationError: not an object, an unknown field or a field of the wrong type.
        """
        fields = _checked(data, "question node", _NODE_FIELDS, required="question")
        chunks = data.get("chunks", [])
        if not isinstance(chunks, list):
            raise ConfigurationError(f"chunks must be a list, got {type(chunks).__name__}.")
        return cls(**fields, chunks=[JudgedChunk.from_dict(c) for c in chunks])

    def walk(self) -> Iterator[SearchNode]:
        """This node, then every node below it (depth first)."""
        yield self
        for chunk in self.chunks:
            if chunk.child is not None:
                yield from chunk.child.walk()


@dataclass
class SearchTree:
    """A judged search: the root question's node, the bounds and the LLM calls used.

    Example:
        >>> root = SearchNode("Who?", chunks=[JudgedChunk("n1", "Ada wrote it.", score=2)],
        ...                   answer="Ada.", llm_calls=2, stop="answered")
        >>> tree = SearchTree(root, llm_calls=2)
        >>> SearchTree.from_json(tree.to_json()) == tree
        True
        >>> print(tree.render_text())
        Q: Who?  (answered, 2 LLM calls)
        │  A: Ada.
        └── [2 answers] n1: Ada wrote it.
    """

    root: SearchNode
    llm_calls: int = 0
    max_depth: int | None = None
    max_branching: int | None = None
    max_llm_calls: int | None = None

    # ------------------------------------------------------------------ data
    def nodes(self) -> list[SearchNode]:
        """Every question node, depth first from the root."""
        return list(self.root.walk())

    @property
    def depth(self) -> int:
        """The deepest node's depth (0: no follow-up was searched)."""
        return max(node.depth for node in self.root.walk())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchTree:
        """Read :meth:`to_dict`'s form, every field's type checked.

        Raises:
            ConfigurationError: not an object, no root, an unknown field or a field of the wrong
                type (anywhere in the tree).
        """
        fields = _checked(data, "search tree", _TREE_FIELDS, required="root")
        return cls(root=SearchNode.from_dict(data["root"]), **fields)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> SearchTree:
        """Read :meth:`to_json`'s text.

        Raises:
            ConfigurationError: not JSON, nested too deeply, or not a search tree.
        """
        return cls.from_dict(parse_json(text, where="Cannot read a search tree"))

    def save(self, path: str | Path) -> Path:
        """Write the tree as JSON to ``path`` atomically (a failed save leaves the previous file
        as it was); returns the path.

        Raises:
            ConfigurationError: ``path`` is a directory, a text holds a lone surrogate (refused:
                nothing is written), or the write fails.
        """
        return write_text_atomic(path, self.to_json() + "\n", what="the search tree")

    @classmethod
    def load(cls, path: str | Path) -> SearchTree:
        """Reopen a tree written by :meth:`save`.

        Raises:
            ConfigurationError: a missing file, not a regular file, not UTF-8 JSON, or not a
                search tree; the message names the file.
        """
        hint = "give a file written by `rag-pack judge --save-tree`"
        data = read_json_file(path, what="a search tree", hint=hint)
        with in_file(path):
            return cls.from_dict(data)

    # ------------------------------------------------------------------ rendering
    def render_text(self, width: int = 90) -> str:
        """The tree as indented text with box-drawing branches (what ``rag-pack judge`` shows)."""
        lines: list[str] = []
        _render_node(self.root, "", "", lines, width)
        return "\n".join(lines)

    def to_mermaid(self, width: int = 60) -> str:
        """A Mermaid flowchart: question nodes, chunk nodes labelled with their score, and the
        follow-up edges."""
        lines = ["flowchart TD"]
        _mermaid_node(self.root, "q0", lines, width)
        lines += [
            "    classDef s2 fill:#c8f7c5,stroke:#2e7d32",
            "    classDef s1 fill:#fff3c4,stroke:#b08900",
            "    classDef s0 fill:#eeeeee,stroke:#9e9e9e",
        ]
        return "\n".join(lines) + "\n"


def _short(text: str, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: max(width - 1, 1)] + "…"


def _label(chunk: JudgedChunk) -> str:
    """``title (id…)`` or the id: what names a chunk in the renderings."""
    short = chunk.chunk_id if len(chunk.chunk_id) <= 12 else chunk.chunk_id[:8] + "…"
    return f"{chunk.source} ({short})" if chunk.source and chunk.source != chunk.chunk_id else short


def _render_node(node: SearchNode, first: str, prefix: str, lines: list[str], width: int) -> None:
    calls = f"{node.llm_calls} LLM call" + ("" if node.llm_calls == 1 else "s")
    lines.append(f"{first}Q: {_short(node.question, width)}  ({node.stop or 'open'}, {calls})")
    bar = "│  " if node.chunks else "   "
    if node.answer:
        lines.append(f"{prefix}{bar}A: {_short(node.answer, width)}")
    for i, chunk in enumerate(node.chunks):
        last = i == len(node.chunks) - 1
        branch, inner = ("└── ", "    ") if last else ("├── ", "│   ")
        label = f"{chunk.score} {SCORE_LABELS.get(chunk.score, '?')}"
        if chunk.score is None:
            label = SCORE_LABELS[None]
        lines.append(f"{prefix}{branch}[{label}] {_label(chunk)}: {_short(chunk.text, width)}")
        if chunk.problem:
            lines.append(f"{prefix}{inner}! {chunk.problem}")
        if chunk.child is not None:
            _render_node(chunk.child, prefix + inner + "↳ ", prefix + inner + "  ", lines, width)
        elif chunk.follow_up:
            lines.append(
                f"{prefix}{inner}↳ follow-up not searched: {_short(chunk.follow_up, width)}"
            )


def _mermaid_text(text: str, width: int) -> str:
    return _short(text, width).replace('"', "#quot;").replace("\n", " ")


def _mermaid_node(node: SearchNode, node_id: str, lines: list[str], width: int) -> None:
    label = f"Q: {_mermaid_text(node.question, width)}"
    if node.answer:
        label += f"<br/>A: {_mermaid_text(node.answer, width)}"
    lines.append(f'    {node_id}["{label}"]')
    for i, chunk in enumerate(node.chunks, 1):
        chunk_node = f"{node_id}_c{i}"
        score = "-" if chunk.score is None else str(chunk.score)
        text = _mermaid_text(f"{_label(chunk)}: {chunk.text}", width)
        lines.append(f'    {node_id} --> {chunk_node}["score {score}<br/>{text}"]')
        if chunk.score is not None:
            lines.append(f"    class {chunk_node} s{chunk.score}")
        if chunk.child is not None:
            child_id = f"{chunk_node}_q"
            follow = _mermaid_text(chunk.follow_up or chunk.child.question, width)
            lines.append(f'    {chunk_node} -- "follow-up: {follow}" --> {child_id}')
            _mermaid_node(chunk.child, child_id, lines, width)
