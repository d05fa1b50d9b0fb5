"""Save a :class:`~llama_index_rag_pack.routing.semantic_selector.SemanticSelector` to a file
and load it back without embedding its routes again.

The file is JSON: the routes (name, description, utterances, own threshold), the thresholds
``fit_thresholds`` found, the selector's settings (default threshold, ``top_k``, aggregation,
fallback, whether descriptions are embedded), the unit vector of every route text, and a
fingerprint of the embedding model that made them (its class, model name and dimension).
Vectors are written as the float32 values they are, so a loaded selector scores and selects
exactly as the saved one did.

Loading with another embedding model is refused with one line (vectors of two models are not
comparable), unless ``reembed=True``: then the route texts are embedded again with the new model
and the fitted thresholds are dropped (they were fitted on the old model's scores).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import in_file, read_json_file, write_json_atomic
from llama_index_rag_pack.models.settings import describe_embed_model, resolve_embed_model
from llama_index_rag_pack.routing.route_scores import Aggregation
from llama_index_rag_pack.routing.routes import Route, check_unique_names

__all__ = [
    "ROUTER_FORMAT",
    "SavedRouter",
    "embed_model_fingerprint",
    "read_router",
    "save_selector",
]

#: The ``format`` field of a saved router (and its version).
ROUTER_FORMAT = "llama-index-rag-pack/semantic-router"
_VERSION = 1
_SETTINGS = ("threshold", "top_k", "aggregation", "fallback", "use_descriptions")


def embed_model_fingerprint(embed_model: Any, dim: int | None) -> dict[str, Any]:
    """What identifies the embedding model behind saved vectors: class, model name, dimension."""
    return {
        "class": type(embed_model).__name__,
        "model": describe_embed_model(embed_model),
        "dim": dim,
    }


def save_selector(selector: Any, path: str | Path) -> Path:
    """Write ``selector`` (routes, thresholds, settings, route-text vectors) to ``path``.

    The route texts not embedded yet are embedded first (one batch).

    The file is written atomically (a temporary file renamed over ``path``): a save that fails
    leaves the previous file as it was.

    Raises:
        ConfigurationError: the selector has no configured routes, ``path`` is a directory, the
            text holds a lone surrogate (refused, nothing written), or the write fails.
    """
    routes = selector.routes
    if not routes:
        raise ConfigurationError("This selector has no configured routes to save.")
    vectors = selector.route_vectors()
    dim = len(next(iter(vectors.values()))) if vectors else None
    data = {
        "format": ROUTER_FORMAT,
        "version": _VERSION,
        "embed_model": embed_model_fingerprint(selector.embed_model, dim),
        "settings": {
            "threshold": selector.threshold,
            "top_k": selector.top_k,
            "aggregation": selector.aggregation.value,
            "fallback": selector.fallback,
            "use_descriptions": selector.use_descriptions,
        },
        "routes": [
            {
                "name": r.name,
                "description": r.description,
                "utterances": list(r.utterances),
                "threshold": r.threshold,
            }
            for r in routes
        ],
        "fitted_thresholds": selector.fitted_thresholds,
        "vectors": {text: [float(x) for x in vector] for text, vector in vectors.items()},
    }
    return write_json_atomic(path, data, what="the router")


@dataclass
class SavedRouter:
    """What a saved router holds, ready for ``SemanticSelector(routes, embed_model=...,
    **settings)``; ``vectors`` is ``None`` when the routes must be embedded again."""

    routes: list[Route]
    settings: dict[str, Any]
    embed_model: Any
    vectors: dict[str, np.ndarray] | None
    fitted: dict[str, float]


def read_router(path: str | Path, *, embed_model: Any = None, reembed: bool = False) -> SavedRouter:
    """Read the router saved in ``path``, for ``embed_model`` (default: resolved as the
    selector's constructor does). Every field is checked before anything is built: a damaged
    file is one line naming it and the field, never a failure at the first routing.

    Raises:
        ConfigurationError: a missing, unreadable or foreign file, a damaged field (settings,
            routes, thresholds, vectors of the wrong dimension), or vectors of another embedding
            model (without ``reembed=True``).
    """
    data = _read(Path(path))
    with in_file(path):
        saved = _fingerprint(data["embed_model"])
        routes = _routes(data["routes"])
        settings = _settings(data["settings"], routes)
        fitted = _fitted(data.get("fitted_thresholds"), routes)
    model = resolve_embed_model(embed_model)
    current = embed_model_fingerprint(model, saved.get("dim"))
    same = all(saved.get(k) == current[k] for k in ("class", "model"))
    if not same and not reembed:
        raise ConfigurationError(
            f"{path} holds route vectors of {saved.get('model')!r} ({saved.get('class')}), not "
            f"of {current['model']!r} ({current['class']}): load it with that model, or pass "
            "reembed=True to embed the routes again (fitted thresholds are then dropped)."
        )
    vectors = None
    if same:
        with in_file(path):
            vectors = _vectors(data["vectors"], routes, settings, saved.get("dim"), model)
    return SavedRouter(
        routes=routes,
        settings=settings,
        embed_model=model,
        vectors=vectors,
        fitted=fitted if same else {},
    )


def _damaged(problem: str) -> ConfigurationError:
    return ConfigurationError(f"damaged saved router: {problem}.")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_score(value: Any) -> bool:
    return _is_number(value) and -1.0 <= value <= 1.0


def _fingerprint(saved: Any) -> dict[str, Any]:
    if not isinstance(saved, dict) or not all(
        isinstance(saved.get(k), str) for k in ("class", "model")
    ):
        raise _damaged(f"embed_model must be an object with class and model, got {saved!r:.80}")
    dim = saved.get("dim")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
        raise _damaged(f"embed_model dim must be an integer >= 1, got {dim!r:.40}")
    return saved


def _routes(saved: Any) -> list[Route]:
    if not isinstance(saved, list) or not saved:
        raise _damaged("routes must be a non-empty list")
    routes = []
    for item in saved:
        if not isinstance(item, dict):
            raise _damaged(f"a route must be an object, got {item!r:.80}")
        name, description = item.get("name"), item.get("description", "")
        utterances, threshold = item.get("utterances", []), item.get("threshold")
        if not isinstance(name, str) or not isinstance(description, (str, type(None))):
            raise _damaged(f"route name and description must be strings, got {name!r:.80}")
        if not isinstance(utterances, list) or not all(isinstance(u, str) for u in utterances):
            raise _damaged(f"route {name!r}: utterances must be a list of strings")
        if threshold is not None and not _is_score(threshold):
            raise _damaged(f"route {name!r}: threshold must be a number in [-1, 1]")
        routes.append(Route.coerce(item))
    check_unique_names([r.name for r in routes])
    return routes


def _settings(saved: Any, routes: list[Route]) -> dict[str, Any]:
    if not isinstance(saved, dict):
        raise _damaged(f"settings must be an object, got {type(saved).__name__}")
    unknown = sorted(set(saved) - set(_SETTINGS))
    if unknown:
        raise _damaged(f"unknown settings {unknown}; valid: {', '.join(_SETTINGS)}")
    threshold, top_k = saved.get("threshold", 0.0), saved.get("top_k", 1)
    fallback = saved.get("fallback")
    if not _is_score(threshold):
        raise _damaged(f"threshold must be a number in [-1, 1], got {threshold!r:.40}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise _damaged(f"top_k must be an integer >= 1, got {top_k!r:.40}")
    if saved.get("aggregation", "max") not in [a.value for a in Aggregation]:
        raise _damaged(f"aggregation must be max or mean, got {saved.get('aggregation')!r:.40}")
    if fallback is not None and fallback not in [r.name for r in routes]:
        raise _damaged(f"fallback {fallback!r:.40} is none of the routes")
    if not isinstance(saved.get("use_descriptions", True), bool):
        raise _damaged("use_descriptions must be true or false")
    return dict(saved)


def _fitted(saved: Any, routes: list[Route]) -> dict[str, float]:
    saved = saved or {}
    names = {r.name for r in routes}
    if not isinstance(saved, dict):
        raise _damaged(f"fitted_thresholds must be an object, got {type(saved).__name__}")
    for name, value in saved.items():
        if name not in names:
            raise _damaged(f"fitted threshold for {name!r:.40}, which is none of the routes")
        if not _is_score(value):
            raise _damaged(f"fitted threshold of {name!r:.40} is {value!r:.40}, not in [-1, 1]")
    return {str(k): float(v) for k, v in saved.items()}


def _vectors(
    saved: Any, routes: list[Route], settings: dict[str, Any], dim: int | None, model: Any
) -> dict[str, np.ndarray]:
    """The saved unit vectors, one per route text, all of the model's dimension."""
    if not isinstance(saved, dict):
        raise _damaged(f"vectors must be an object, got {type(saved).__name__}")
    vectors = {}
    for text, vector in saved.items():
        if not isinstance(vector, list) or not all(_is_number(x) for x in vector):
            raise _damaged(f"the vector of {text!r:.60} is not a list of finite numbers")
        vectors[text] = np.asarray(vector, dtype=np.float32)
    use = bool(settings.get("use_descriptions", True))
    missing = sorted({t for r in routes for t in r.texts(use)} - set(vectors))
    if missing:
        raise _damaged(f"no vector for route text {missing[0]!r}")
    model_dim = getattr(model, "embed_dim", None)
    expected = {d for d in (dim, model_dim) if isinstance(d, int) and not isinstance(d, bool)}
    shapes = {v.shape[0] for v in vectors.values()}
    if len(shapes) > 1 or len(expected) > 1 or (expected and shapes != expected):
        raise _damaged(
            f"route vectors of {sorted(shapes)} dimensions, the embedding model makes "
            f"{sorted(expected) or 'unknown'}"
        )
    return vectors


def _read(path: Path) -> dict[str, Any]:
    data = read_json_file(
        path,
        what="a saved router",
        missing=f"No saved router at {path}.",
        hint="save one with SemanticSelector.save(path)",
    )
    if not isinstance(data, dict) or data.get("format") != ROUTER_FORMAT:
        raise ConfigurationError(
            f"{path} is not a saved router (no format {ROUTER_FORMAT!r}); save one with "
            "SemanticSelector.save(path)."
        )
    if data.get("version") != _VERSION:
        raise ConfigurationError(
            f"{path} is a saved router of version {data.get('version')!r:.40}; this release reads "
            f"version {_VERSION}."
        )
    missing = [k for k in ("embed_model", "settings", "routes", "vectors") if k not in data]
    if missing:
        raise ConfigurationError(f"{path} is a damaged saved router: no {', '.join(missing)}.")
    return data
