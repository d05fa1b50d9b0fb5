"""Save a :class:`~llama_index_rag_pack.components.semantic_selector.SemanticSelector` to a file
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

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_rag_pack.components.routes import Route
from llama_index_rag_pack.components.settings import describe_embed_model, resolve_embed_model
from llama_index_rag_pack.core.errors import ConfigurationError

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

    Raises:
        ConfigurationError: the selector has no configured routes.
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
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


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
    selector's constructor does).

    Raises:
        ConfigurationError: a missing, unreadable or foreign file, or vectors of another embedding
            model (without ``reembed=True``).
    """
    data = _read(Path(path))
    model = resolve_embed_model(embed_model)
    saved = data["embed_model"]
    current = embed_model_fingerprint(model, saved.get("dim"))
    same = all(saved.get(k) == current[k] for k in ("class", "model"))
    if not same and not reembed:
        raise ConfigurationError(
            f"{path} holds route vectors of {saved.get('model')!r} ({saved.get('class')}), not "
            f"of {current['model']!r} ({current['class']}): load it with that model, or pass "
            "reembed=True to embed the routes again (fitted thresholds are then dropped)."
        )
    try:
        routes = [Route.coerce(r) for r in data["routes"]]
        settings = dict(data["settings"])
        vectors = _vectors(data["vectors"], routes, settings) if same else None
        fitted = {str(k): float(v) for k, v in (data.get("fitted_thresholds") or {}).items()}
    except (TypeError, ValueError, KeyError, AttributeError, ConfigurationError) as e:
        raise ConfigurationError(f"{path} is a damaged saved router: {e}") from None
    return SavedRouter(
        routes=routes,
        settings=settings,
        embed_model=model,
        vectors=vectors,
        fitted=fitted if same else {},
    )


def _vectors(
    saved: dict[str, Any], routes: list[Route], settings: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The saved unit vectors, one per route text, all of one dimension."""
    vectors = {str(t): np.asarray(v, dtype=np.float32) for t, v in saved.items()}
    use = bool(settings.get("use_descriptions", True))
    missing = sorted({t for r in routes for t in r.texts(use)} - set(vectors))
    if missing:
        raise ValueError(f"no vector for route text {missing[0]!r}")
    if len({v.shape for v in vectors.values()}) > 1 or any(v.ndim != 1 for v in vectors.values()):
        raise ValueError("vectors of different shapes")
    return vectors


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigurationError(f"No saved router at {path}.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigurationError(f"{path} is not a saved router (unreadable JSON: {e}).") from None
    if not isinstance(data, dict) or data.get("format") != ROUTER_FORMAT:
        raise ConfigurationError(
            f"{path} is not a saved router (no format {ROUTER_FORMAT!r}); save one with "
            "SemanticSelector.save(path)."
        )
    if data.get("version") != _VERSION:
        raise ConfigurationError(
            f"{path} is a saved router of version {data.get('version')!r}; this release reads "
            f"version {_VERSION}."
        )
    missing = [k for k in ("embed_model", "settings", "routes", "vectors") if k not in data]
    if missing:
        raise ConfigurationError(f"{path} is a damaged saved router: no {', '.join(missing)}.")
    return data
