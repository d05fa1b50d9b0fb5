"""A collection's languages: how many of its chunks are in each (their main language), what a
question is identified among, stored with the collection as JSON.

Example:
    >>> LanguageProfile.from_json('{"en": 3, "zh": 5}').main_cjk()
    'zh'
"""

# Pure module: no LlamaIndex, no pymilvus (tests/test_architecture.py checks it).

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["LanguageProfile"]


class LanguageProfile:
    """How many chunks of a collection are in each language (their main language): what a
    question is identified among. Shared by the store and its retrievers, updated as chunks
    are written.

    Example:
        >>> profile = LanguageProfile({"en": 10})
        >>> profile.add(["zh", "en"]); profile.counts()
        {'en': 11, 'zh': 1}
        >>> profile.main_cjk()
        'zh'
    """

    def __init__(self, counts: Mapping[str, int] | None = None) -> None:
        self._counts: Counter[str] = Counter({str(k): int(v) for k, v in (counts or {}).items()})
        self._lock = threading.Lock()

    def add(self, languages: Iterable[str], times: int = 1) -> None:
        with self._lock:
            for language in languages:
                self._counts[language] += times

    def update(self, counts: Mapping[str, int]) -> None:
        with self._lock:
            self._counts.update(counts)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def main_cjk(self) -> str:
        """``ja`` when the collection has more Japanese chunks than Chinese ones, else ``zh``."""
        counts = self.counts()
        return "ja" if counts.get("ja", 0) > counts.get("zh", 0) else "zh"

    def to_json(self) -> str:
        return json.dumps(dict(sorted(self.counts().items())), separators=(",", ":"))

    @classmethod
    def from_json(cls, value: str | None) -> LanguageProfile:
        """The profile a collection recorded (an empty one for a missing or unreadable value)."""
        try:
            data = json.loads(value) if value else {}
        except (TypeError, ValueError):
            data = {}
        if not isinstance(data, dict):
            data = {}
        clean = {
            str(k): int(v)
            for k, v in data.items()
            if isinstance(v, int) and not isinstance(v, bool) and v > 0
        }
        return cls(clean)

    def __repr__(self) -> str:
        return f"LanguageProfile({self.counts()})"
