"""What routing is about: :class:`Route` (a named destination), :class:`RouteSelection` (what a
selector chose and why) and :class:`RoutingError`, plus the checks every selector applies to the
route names it is given.

Both selectors (:mod:`~llama_index_rag_pack.routing.semantic_selector`,
:mod:`~llama_index_rag_pack.routing.logical_selector`), the fusing router and the pack share
these types.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llama_index.core.base.base_selector import MultiSelection
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack.core.errors import ConfigurationError, RagPackError

if TYPE_CHECKING:  # pragma: no cover
    from llama_index_rag_pack.routing.threshold_calibration import RobustThresholdFit

__all__ = [
    "Route",
    "RouteSelection",
    "RoutingError",
    "ThresholdReport",
    "check_unique_names",
    "fallback_index",
    "route_names",
]


class RoutingError(RagPackError, ValueError):
    """No usable route could be chosen and no fallback route was configured."""


@dataclass(frozen=True)
class Route:
    """A named destination: a data source, a retriever or a prompt.

    Args:
        name: Unique name (what a selection reports and what an LLM is asked to answer with).
        description: What the route holds / is for.
        utterances: Example questions that belong to the route (semantic routing).
        threshold: Cosine score the route must reach (semantic routing); ``None`` = the selector's.

    Example:
        >>> Route("physics", "Questions about physics", utterances=("What is a black hole?",))
        Route(name='physics', description='Questions about physics', utterances=('What is a black hole?',), threshold=None)
    """  # noqa: E501  (doctest output: the dataclass repr is one line)

    name: str
    description: str = ""
    utterances: tuple[str, ...] = field(default_factory=tuple)
    threshold: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigurationError(f"A route needs a non-empty name, got {self.name!r}.")
        if isinstance(self.utterances, str):
            raise ConfigurationError(
                f"Route {self.name!r}: utterances must be a list of strings, not one string."
            )
        object.__setattr__(self, "utterances", tuple(u for u in self.utterances if u and u.strip()))
        if not self.description.strip() and not self.utterances:
            raise ConfigurationError(
                f"Route {self.name!r} has neither a description nor utterances: give at least one."
            )
        if self.threshold is not None and not -1.0 <= float(self.threshold) <= 1.0:
            raise ConfigurationError(
                f"Route {self.name!r}: threshold must be a cosine score in [-1, 1], "
                f"got {self.threshold!r}."
            )

    def texts(self, use_description: bool = True) -> list[str]:
        """The texts embedded for this route."""
        texts = list(self.utterances)
        if self.description.strip() and (use_description or not texts):
            texts.insert(0, self.description)
        return texts

    @classmethod
    def coerce(cls, value: Route | Mapping[str, Any] | ToolMetadata) -> Route:
        """A route from a ``Route``, a dict (name/description/utterances/threshold) or a core
        ``ToolMetadata``.

        Raises:
            ConfigurationError: unknown dict keys or an unsupported type.
        """
        if isinstance(value, Route):
            return value
        if isinstance(value, ToolMetadata):
            return cls(name=value.name or "", description=value.description)
        if isinstance(value, Mapping):
            unknown = set(value) - {"name", "description", "utterances", "threshold"}
            if unknown:
                raise ConfigurationError(
                    f"Unknown route field(s) {sorted(unknown)}; "
                    "use name, description, utterances, threshold."
                )
            return cls(
                name=value.get("name", ""),
                description=value.get("description") or "",
                utterances=tuple(value.get("utterances") or ()),
                threshold=value.get("threshold"),
            )
        raise ConfigurationError(
            f"Cannot make a route from {type(value).__name__}: give a Route or a dict."
        )


class RouteSelection(MultiSelection):
    """A core ``MultiSelection`` (``.inds``, ``.reasons``) plus what routing knows beyond it.

    Attributes:
        names: Names of the selected routes, best first (same order as ``selections``).
        scores: Semantic score of every route (empty for an LLM decision).
        fallback: True when the fallback route was used because nothing else fit.
        reply: The LLM's raw reply (logical routing).
    """

    names: list[str] = []
    scores: dict[str, float] = {}
    fallback: bool = False
    reply: str | None = None

    @property
    def route(self) -> str | None:
        """The best route's name, or None when no route was selected."""
        return self.names[0] if self.names else None

    def explain(self) -> str:
        """One line saying what was chosen and why (for logs and the CLI)."""
        if not self.selections:
            return "no route: " + (self.reply or "nothing matched")
        parts = [
            f"{name} ({sel.reason})" for name, sel in zip(self.names, self.selections, strict=False)
        ]
        return ("fallback → " if self.fallback else "") + "; ".join(parts)


def route_names(choices: Sequence[ToolMetadata]) -> list[str]:
    """Names of ``choices`` (``choice_<n>`` for unnamed ones), checked for emptiness and
    duplicates.

    Raises:
        ConfigurationError: no choices, or two with the same name.
    """
    if not choices:
        raise ConfigurationError("No routes to choose from: give at least one route (choice).")
    names = [c.name or f"choice_{i + 1}" for i, c in enumerate(choices)]
    check_unique_names(names)
    return names


def check_unique_names(names: Sequence[str]) -> None:
    """Raise :class:`ConfigurationError` naming the duplicates when a name repeats."""
    seen: set[str] = set()
    dupes = sorted({n for n in names if n in seen or seen.add(n)})
    if dupes:
        raise ConfigurationError(f"Duplicate route names {dupes}: every route needs its own name.")


def fallback_index(fallback: str | None, names: Sequence[str]) -> int | None:
    """Position of the ``fallback`` route among ``names`` (``None`` when there is no fallback).

    Raises:
        ConfigurationError: ``fallback`` is not one of ``names``.
    """
    if fallback is None:
        return None
    if fallback not in names:
        raise ConfigurationError(
            f"Fallback route {fallback!r} is not among the routes {list(names)}: "
            "add it or change fallback."
        )
    return list(names).index(fallback)


@dataclass(frozen=True)
class ThresholdReport:
    """What :meth:`SemanticSelector.fit_thresholds` did; ``fit`` (robust method only) holds the
    shrinkage, the cross-validated objective per shrinkage and whether the default was kept."""

    thresholds: dict[str, float]
    accuracy_before: float
    accuracy_after: float
    n_examples: int
    method: str = "exact"
    fit: RobustThresholdFit | None = None
