"""The fusion settings a pack's hybrid modes start from, and the JSON file that keeps them.

``rag-pack eval --fit`` fits the dense weight ``alpha`` of ``hybrid_convex`` and the RRF ``k`` of
``hybrid`` on labelled questions and saves them with :func:`save_fusion_config`, by default to
``<data_dir>/fusion.json`` (``RAG_PACK_DATA_DIR``, default ``./rag_pack_data``). A
:class:`~llama_index_rag_pack.RagPack` loads that file when it opens. What a hybrid mode uses,
first match wins:

1. the keyword arguments of ``pack.retriever(mode, alpha=..., rrf_k=...)``;
2. ``RagPack(fusion_config=...)``: a :class:`FusionConfig` or the path of a saved one;
3. the saved ``<data_dir>/fusion.json``, when it exists;
4. the built-in defaults of :class:`FusionConfig`: ``alpha=0.75`` and ``sentence_weight=0.4``,
   fitted on the dev split of the shipped ``wiki_qa_para`` set.

Example:
    >>> config = FusionConfig(alpha=0.35, rrf_k=20)
    >>> FusionConfig.from_dict(config.to_dict()) == config
    True
    >>> FusionConfig(alpha=1.5)
    Traceback (most recent call last):
    ...
    llama_index_rag_pack.core.errors.ConfigurationError: alpha (the dense weight) must be a number in [0, 1], got 1.5.
"""  # noqa: E501  (doctest output is one line)

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from llama_index_rag_pack.core.errors import ConfigurationError
from llama_index_rag_pack.core.json_files import read_json_file, write_json_atomic
from llama_index_rag_pack.fusion.convex_fusion import (
    DEFAULT_CANDIDATE_POOL,
    TUNED_ALPHA,
    TUNED_SENTENCE_WEIGHT,
    TUNED_UNREAD_ALPHA,
    TUNED_UNREAD_SENTENCE_WEIGHT,
    ScoreNormalization,
    check_alpha,
    check_convex_settings,
    check_rrf_k,
    check_sentence_weight,
)
from llama_index_rag_pack.fusion.rank_fusion import DEFAULT_RRF_K
from llama_index_rag_pack.models.settings import data_dir

logger = logging.getLogger(__name__)

__all__ = [
    "FUSION_CONFIG_FILE",
    "FusionConfig",
    "default_fusion_config_path",
    "load_fusion_config",
    "resolve_fusion_config",
    "save_fusion_config",
]

FUSION_CONFIG_FILE = "fusion.json"


@dataclass(frozen=True)
class FusionConfig:
    """Defaults of the hybrid modes (``hybrid``, ``hybrid_weighted``, ``hybrid_convex``).

    Args:
        alpha: Dense weight of ``hybrid_convex``, in [0, 1].
        normalization: Score normalization of ``hybrid_convex``: ``min_max`` or ``dist_based``.
        rrf_k: RRF constant of ``hybrid``.
        candidate_pool: Candidates each side of every hybrid search fetches.
        sentence_weight: Weight of the sentence list in ``hybrid_convex`` (chunks scored by
            their best sentence; used when the collection has a sentence index), in [0, 1].
        unread_alpha: ``alpha`` for a question the embedding model cannot read: in a language
            it was not trained on, or over chunks mostly in one (the bundled model reads
            English only; docs/languages.md).
        unread_sentence_weight: ``sentence_weight`` for such a question.
        fitted_on: Where the values come from (dataset, metric, scores); informative only.

    Raises:
        ConfigurationError: a value out of range.
    """

    alpha: float = TUNED_ALPHA
    normalization: str = ScoreNormalization.MIN_MAX.value
    rrf_k: float = DEFAULT_RRF_K
    candidate_pool: int = DEFAULT_CANDIDATE_POOL
    sentence_weight: float = TUNED_SENTENCE_WEIGHT
    unread_alpha: float = TUNED_UNREAD_ALPHA
    unread_sentence_weight: float = TUNED_UNREAD_SENTENCE_WEIGHT
    fitted_on: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.fitted_on, Mapping):
            raise ConfigurationError(
                f"fitted_on must be an object (dataset, metric, scores), got "
                f"{type(self.fitted_on).__name__}."
            )
        alpha, normalization, candidate_pool, sentence_weight = check_convex_settings(
            self.alpha, self.normalization, self.candidate_pool, self.sentence_weight
        )
        unread_alpha = check_alpha(self.unread_alpha, "unread_alpha")
        unread_sentence_weight = check_sentence_weight(
            self.unread_sentence_weight, "unread_sentence_weight"
        )
        checked = {
            "alpha": alpha,
            "normalization": normalization.value,
            "rrf_k": check_rrf_k(self.rrf_k),
            "candidate_pool": candidate_pool,
            "sentence_weight": sentence_weight,
            "unread_alpha": unread_alpha,
            "unread_sentence_weight": unread_sentence_weight,
            "fitted_on": dict(self.fitted_on),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form :meth:`from_dict` reads."""
        return asdict(self)

    def settings(self) -> dict[str, Any]:
        """The values retrieval uses, without ``fitted_on`` (e.g. for a result cache key)."""
        return {k: v for k, v in self.to_dict().items() if k != "fitted_on"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "fusion config") -> FusionConfig:
        """Read :meth:`to_dict`'s form.

        Raises:
            ConfigurationError: not a mapping, an unknown key, or a value out of range.
        """
        if not isinstance(data, Mapping):
            raise ConfigurationError(
                f"{source} must hold a JSON object, got {type(data).__name__}."
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigurationError(
                f"{source} has unknown keys {unknown}; valid keys: {', '.join(sorted(known))}."
            )
        try:
            return cls(**dict(data))
        except ConfigurationError as e:
            raise ConfigurationError(f"{source}: {e}") from None


def default_fusion_config_path() -> Path:
    """``<data_dir>/fusion.json``: where ``rag-pack eval --fit`` writes and packs look."""
    return data_dir() / FUSION_CONFIG_FILE


def load_fusion_config(path: str | Path) -> FusionConfig:
    """The config saved at ``path``.

    Raises:
        ConfigurationError: the file is missing, is not a regular file, is not UTF-8 JSON, nests
            too deeply, or holds bad values (one line naming the file).
    """
    path = Path(path)
    data = read_json_file(
        path,
        what="the fusion config",
        missing=f"No fusion config at {path}: write one with `rag-pack eval --fit --fit-out "
        f"{path}` or leave fusion_config unset.",
        hint="fit it again with `rag-pack eval --fit`",
    )
    return FusionConfig.from_dict(data, source=str(path))


def save_fusion_config(config: FusionConfig, path: str | Path | None = None) -> Path:
    """Write ``config`` as JSON (atomically) to ``path`` (default
    :func:`default_fusion_config_path`); returns the path.

    Raises:
        ConfigurationError: ``path`` is a directory or the write fails (the previous file is
            left as it was).
    """
    path = Path(path) if path is not None else default_fusion_config_path()
    data = config.to_dict()
    return write_json_atomic(path, data, what="the fusion config", indent=2, sort_keys=True)


def resolve_fusion_config(spec: FusionConfig | str | Path | None = None) -> FusionConfig:
    """The config a pack uses: ``spec`` itself, the file it names, or (``None``) the saved
    ``<data_dir>/fusion.json`` when it exists, else the built-in defaults.

    Raises:
        ConfigurationError: a named file that is missing or invalid, or a saved default file
            that is invalid.
    """
    if isinstance(spec, FusionConfig):
        return spec
    if spec is not None:
        return load_fusion_config(spec)
    path = default_fusion_config_path()
    if not path.exists():
        return FusionConfig()
    config = load_fusion_config(path)
    logger.info(
        "Fusion config from %s: alpha=%s (%s), rrf_k=%s, candidate_pool=%s",
        path,
        config.alpha,
        config.normalization,
        config.rrf_k,
        config.candidate_pool,
    )
    return config
