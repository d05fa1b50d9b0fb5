"""Compatibility with the supported range of llama-index-core (0.14.20 to the newest 0.14.x)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

try:  # llama-index-core <= 0.14.20 still ships the pack base class.
    from llama_index.core.llama_pack import BaseLlamaPack  # type: ignore[attr-defined]

    HAS_CORE_LLAMA_PACK = True
except ImportError:  # pragma: no cover - depends on the installed core version
    HAS_CORE_LLAMA_PACK = False

    class BaseLlamaPack(ABC):  # type: ignore[no-redef]
        """The pack contract of ``llama_index.core.llama_pack.BaseLlamaPack`` (removed in 0.14.21).

        A pack exposes its parts through :meth:`get_modules` and does its main job in :meth:`run`.
        """

        @abstractmethod
        def get_modules(self) -> dict[str, Any]:
            """Get modules."""

        @abstractmethod
        def run(self, *args: Any, **kwargs: Any) -> Any:
            """Run."""


__all__ = ["BaseLlamaPack", "HAS_CORE_LLAMA_PACK"]
