"""Labelled question sets: the JSONL format, a validating loader and the shipped sets.

One JSON object per line::

    {"id": "q1", "question": "Who ...?", "answers": ["..."], "relevant_ids": ["wiki:Apollo 11"],
     "evidence": ["sentence holding the answer"], "type": "entity", "corpus": "wikipedia"}

Only ``question`` is required; retrieval metrics need ``relevant_ids`` and answer metrics need
``answers``. ``corpus`` names what the ids refer to: ``wikipedia``/``lee``/``zh_tutorials``
(shipped corpora), several shipped corpora indexed together (``wikipedia+lee``) or a path to
files to index. An
optional ``split`` (``dev``/``test``) lets ``load_labelled_set(..., split=)`` keep one part. The
shipped sets live in ``benchmarks/data`` (see its README).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.schema import Document

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import parse_json, read_text_file, write_text_atomic
from llama_index_rag_pack.evaluation.datasets import shipped_data_dir

logger = logging.getLogger(__name__)

SHIPPED_CORPORA = ("wikipedia", "lee", "zh_tutorials")
_KNOWN_FIELDS = frozenset(
    {"id", "question", "answers", "relevant_ids", "evidence", "type", "corpus"}
)


def shipped_sets() -> dict[str, Path]:
    """Names and paths of the labelled sets in :func:`shipped_data_dir`."""
    root = shipped_data_dir()
    return {p.stem: p for p in sorted(root.glob("*.jsonl"))} if root.is_dir() else {}


@dataclass(frozen=True)
class LabelledExample:
    """One labelled question.

    Example:
        >>> ex = LabelledExample(
        ...     id="q1", question="What is Milvus?", answers=("a vector database",),
        ...     relevant_ids=("doc:milvus",)
        ... )
        >>> ex.has_relevance
        True
    """

    id: str
    question: str
    answers: tuple[str, ...] = ()
    relevant_ids: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    type: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def has_relevance(self) -> bool:
        return bool(self.relevant_ids)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "question": self.question}
        if self.answers:
            out["answers"] = list(self.answers)
        if self.relevant_ids:
            out["relevant_ids"] = list(self.relevant_ids)
        if self.evidence:
            out["evidence"] = list(self.evidence)
        if self.type:
            out["type"] = self.type
        out.update(self.extra)
        return out


@dataclass
class LabelledSet:
    """A named list of :class:`LabelledExample` plus the corpus its ids refer to.

    Example:
        >>> s = LabelledSet("tiny", [LabelledExample(id="q1", question="What is Milvus?")])
        >>> len(s)
        1
    """

    name: str
    examples: list[LabelledExample]
    corpus: str | None = None
    path: Path | None = None

    def __len__(self) -> int:
        return len(self.examples)

    def __iter__(self):  # noqa: ANN204 - iterator of examples
        return iter(self.examples)

    def fingerprint(self) -> str:
        """Stable hash of the questions and labels (part of every cache key)."""
        h = hashlib.sha256()
        h.update((self.corpus or "").encode())
        for ex in self.examples:
            h.update(json.dumps(ex.to_dict(), sort_keys=True, ensure_ascii=False).encode())
        return h.hexdigest()[:16]

    def subset(self, limit: int | None = None, *, seed: int = 0) -> LabelledSet:
        """At most ``limit`` examples, a seeded random sample in file order (all when ``None``)."""
        if limit is None or limit >= len(self.examples):
            return self
        if limit <= 0:
            raise ConfigurationError(f"limit must be > 0, got {limit}")
        import random

        keep = sorted(random.Random(seed).sample(range(len(self.examples)), limit))
        return LabelledSet(self.name, [self.examples[i] for i in keep], self.corpus, self.path)

    def relevant_document_ids(self) -> set[str]:
        return {rid for ex in self.examples for rid in ex.relevant_ids}


def _str_list(value: Any, name: str, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) for v in value):
        return tuple(str(v) for v in value)
    raise ConfigurationError(
        f"{where}: {name!r} must be a string or a list of strings, got {value!r}"
    )


def parse_example(obj: Any, *, where: str, default_id: str) -> LabelledExample:
    """Validate one decoded JSON object into a :class:`LabelledExample`.

    Raises:
        ConfigurationError: not an object, no question, or a field of the wrong type.
    """
    if not isinstance(obj, dict):
        raise ConfigurationError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ConfigurationError(
            f"{where}: 'question' must be a non-empty string, got {question!r}"
        )
    qid = obj.get("id", default_id)
    qtype, corpus = obj.get("type"), obj.get("corpus")
    if isinstance(qid, bool) or not isinstance(qid, (str, int)):
        raise ConfigurationError(f"{where}: 'id' must be a string or an integer, got {qid!r:.60}")
    for name, value in (("type", qtype), ("corpus", corpus)):
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(f"{where}: {name!r} must be a string, got {value!r:.60}")
    extra = {k: v for k, v in obj.items() if k not in _KNOWN_FIELDS}
    return LabelledExample(
        id=str(qid),
        question=question.strip(),
        answers=_str_list(obj.get("answers"), "answers", where),
        relevant_ids=_str_list(obj.get("relevant_ids"), "relevant_ids", where),
        evidence=_str_list(obj.get("evidence"), "evidence", where),
        type=str(qtype) if qtype is not None else None,
        extra=extra,
    )


def load_labelled_set(
    name_or_path: str | Path, *, corpus: str | None = None, split: str | None = None
) -> LabelledSet:
    """Load a shipped set by name (``wiki_qa``) or any JSONL file in the labelled format.

    Args:
        name_or_path: A name from :func:`shipped_sets` or a path to a ``.jsonl`` file.
        corpus: Override the corpus named in the file.
        split: Keep only the questions whose ``split`` field has this value (``dev``,
            ``test``); the set is then named ``<name>-<split>``. ``None`` keeps every question.

    Raises:
        ConfigurationError: unknown name, unreadable file (missing, a directory or FIFO, not
            UTF-8), invalid line (its number is given; JSON nested too deeply counts),
            duplicate ids, no questions, records naming different corpora, or a ``split`` that
            no record has.
    """
    path = _labelled_set_path(name_or_path)
    examples, corpora = _read_examples(path)
    if len(corpora) > 1 and corpus is None:
        raise ConfigurationError(
            f"{path} mixes corpora {sorted(corpora)}; use one corpus per file."
        )
    resolved = corpus or (next(iter(corpora)) if corpora else None)
    if resolved and not _is_shipped_corpus(resolved) and not Path(resolved).is_absolute():
        candidate = path.parent / resolved
        if candidate.exists():
            resolved = str(candidate)
    if split is None:
        return LabelledSet(path.stem, examples, resolved, path)
    kept = _split_examples(examples, split, path)
    return LabelledSet(f"{path.stem}-{split}", kept, resolved, path)


def _labelled_set_path(name_or_path: str | Path) -> Path:
    """The file of a shipped set name, or ``name_or_path`` itself when it exists."""
    path = Path(name_or_path)
    if not path.exists():
        sets = shipped_sets()
        if str(name_or_path) in sets:
            path = sets[str(name_or_path)]
        else:
            known = ", ".join(sets) or "(none found: run from a source checkout)"
            raise ConfigurationError(
                f"No labelled set {str(name_or_path)!r}: give a .jsonl path or one of: {known}."
            )
    return path


def _read_examples(path: Path) -> tuple[list[LabelledExample], set[str]]:
    """The validated examples of a JSONL file and the corpora its records name."""
    examples: list[LabelledExample] = []
    corpora: set[str] = set()
    seen: set[str] = set()
    text = read_text_file(path, what="the labelled set")
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        obj = parse_json(line, where=where, hint="one JSON object per line")
        ex = parse_example(obj, where=where, default_id=f"q{lineno}")
        if ex.id in seen:
            raise ConfigurationError(f"{where}: duplicate id {ex.id!r}; ids must be unique.")
        seen.add(ex.id)
        if obj.get("corpus"):
            corpora.add(str(obj["corpus"]))
        examples.append(ex)
    if not examples:
        raise ConfigurationError(f"{path} holds no questions.")
    return examples, corpora


def _split_examples(
    examples: list[LabelledExample], split: str, path: Path
) -> list[LabelledExample]:
    """The examples whose ``split`` field is ``split``.

    Raises:
        ConfigurationError: no example has that split (the message lists the splits there are).
    """
    kept = [ex for ex in examples if ex.extra.get("split") == split]
    if not kept:
        splits = sorted({str(ex.extra["split"]) for ex in examples if "split" in ex.extra})
        valid = f"one of: {', '.join(splits)}" if splits else "none: it has no 'split' field"
        raise ConfigurationError(
            f"No question of {path.name} is in split {split!r}; its splits are {valid} "
            "(no split keeps every question)."
        )
    return kept


def _is_shipped_corpus(corpus: str) -> bool:
    """``wikipedia``, ``lee`` or several of them joined by ``+`` (``wikipedia+lee``)."""
    return all(part in SHIPPED_CORPORA for part in corpus.split("+"))


def save_labelled_set(
    examples: Iterable[LabelledExample], path: str | Path, *, corpus: str | None = None
) -> None:
    """Write examples as JSONL (the format :func:`load_labelled_set` reads), atomically: a
    failed save leaves the previous file as it was.

    Raises:
        ConfigurationError: ``path`` is a directory, a text holds a lone surrogate (refused:
            nothing is written), or the write fails.
    """
    lines = []
    for ex in examples:
        rec = ex.to_dict()
        if corpus:
            rec["corpus"] = corpus
        lines.append(json.dumps(rec, ensure_ascii=False) + "\n")
    write_text_atomic(path, "".join(lines), what="the labelled set")


def load_corpus(corpus: str | None, *, titles: Sequence[str] | None = None) -> list[Document]:
    """Documents of a labelled set's corpus: a shipped name, shipped names joined by ``+``
    (``wikipedia+lee``: their documents in that order) or a path to read.

    Raises:
        ConfigurationError: no corpus given, or an unknown name / missing path.
    """
    from llama_index_rag_pack.evaluation import datasets

    if not corpus:
        raise ConfigurationError(
            "This labelled set names no corpus: pass --corpus wikipedia|lee|zh_tutorials|PATH "
            "(files to index)."
        )
    if corpus == "wikipedia":
        return datasets.load_wikipedia_documents(titles)
    if corpus == "lee":
        return datasets.load_lee_documents()
    if corpus == "zh_tutorials":
        return datasets.load_zh_tutorials()
    if "+" in corpus and _is_shipped_corpus(corpus):
        return [doc for part in corpus.split("+") for doc in load_corpus(part, titles=titles)]
    path = Path(corpus)
    if not path.exists():
        raise ConfigurationError(
            f"Unknown corpus {corpus!r}: use one of {', '.join(SHIPPED_CORPORA)} (or several "
            "joined by '+', e.g. wikipedia+lee) or a path to files."
        )
    from llama_index_rag_pack.documents.ingest import load_documents

    return load_documents(path)


__all__ = [
    "LabelledExample",
    "LabelledSet",
    "load_corpus",
    "load_labelled_set",
    "parse_example",
    "save_labelled_set",
    "shipped_data_dir",
    "shipped_sets",
]
