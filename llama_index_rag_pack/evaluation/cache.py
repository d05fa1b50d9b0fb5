"""The per-strategy result cache and the keys it is filed under.

One JSON file per strategy configuration holds every scored question (keyed by question id, with
a hash of the question and its labels) and the wall time spent computing them. A file's name
carries a hash of everything that changes results (see
:class:`~llama_index_rag_pack.evaluation.harness.EvalHarness`), so a changed strategy writes a new
file, and an edited question is recomputed alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import read_json_file, write_json_atomic
from llama_index_rag_pack.evaluation.labelled import LabelledExample

logger = logging.getLogger(__name__)

__all__ = ["ResultCache", "example_key", "slug", "stable_hash"]


def stable_hash(*parts: Any) -> str:
    """A short hash of JSON-able ``parts`` that is stable across runs and processes.

    Example:
        >>> stable_hash("a", [1, 2]) == stable_hash("a", [1, 2]) != stable_hash("a", [2, 1])
        True
    """
    h = hashlib.sha256()
    for p in parts:
        h.update(json.dumps(p, sort_keys=True, default=repr, ensure_ascii=False).encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_cache(data: Any) -> bool:
    """Whether ``data`` has a cache file's form: ``results`` maps question ids to objects,
    ``timing`` (when present) holds numbers of questions and seconds."""
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        return False
    if not all(isinstance(r, dict) for r in data["results"].values()):
        return False
    timing = data.get("timing", {"questions": 0, "seconds": 0.0})
    return isinstance(timing, dict) and all(
        _is_number(timing.get(k, 0)) for k in ("questions", "seconds")
    )


def example_key(ex: LabelledExample) -> str:
    """Hash of a question and its labels: a cached result is reused only while it is unchanged."""
    return stable_hash(ex.question, ex.relevant_ids, ex.answers, ex.evidence)


def slug(text: str) -> str:
    """A file- and collection-name-safe form of ``text``.

    Example:
        >>> slug("Wiki QA (small)")
        'wiki_qa_small'
    """
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "corpus"


@dataclass
class ResultCache:
    """The result file of one strategy configuration.

    Attributes:
        path: The JSON file.
        force: Ignore what the file holds (it is still written).
        timing: Questions computed and seconds spent on them, over every run that wrote the file.
    """

    path: Path
    force: bool = False
    timing: dict[str, Any] = field(default_factory=lambda: {"questions": 0, "seconds": 0.0})

    def load(self) -> dict[str, dict[str, Any]]:
        """Cached results by question id: empty (with a warning, the results are recomputed and
        the file rewritten) when forced, missing, unreadable (a directory or FIFO, not UTF-8 JSON,
        nested too deeply) or not a cache's form."""
        if self.force or not self.path.exists():
            return {}
        try:
            data = read_json_file(self.path, what="the result cache")
        except ConfigurationError as e:
            logger.warning("%s Recomputing.", e)
            return {}
        if not _is_cache(data):
            logger.warning("%s is not a result cache: recomputing", self.path)
            return {}
        self.timing = data.get("timing", {"questions": 0, "seconds": 0.0})
        return data["results"]

    def save(
        self, strategy: str, results: dict[str, dict[str, Any]], computed: int, seconds: float
    ) -> None:
        """Write ``results`` (atomically), adding ``computed`` questions in ``seconds`` to the
        timing.

        Raises:
            ConfigurationError: the path is a directory, a text holds a lone surrogate (refused:
                nothing is written), or the write fails; the previous file is left as it was.
        """
        self.timing = {
            "questions": self.timing.get("questions", 0) + computed,
            "seconds": self.timing.get("seconds", 0.0) + seconds,
        }
        payload = {"strategy": strategy, "timing": self.timing, "results": results}
        write_json_atomic(self.path, payload, what="the result cache")

    @staticmethod
    def stale(
        examples: Sequence[LabelledExample], results: dict[str, dict[str, Any]]
    ) -> list[LabelledExample]:
        """The examples without a cached result for their current question and labels."""
        return [ex for ex in examples if results.get(ex.id, {}).get("key") != example_key(ex)]
