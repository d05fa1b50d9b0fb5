"""What the pack's helpers read of a pack: the typed view the mode builders
(``build(pack, **kwargs)``, :mod:`~llama_index_rag_pack.pack.mode_registry`), the filter and
tenant scoping, RAPTOR, self-query, judge and deletion helpers get instead of the whole
``RagPack``. ``RagPack`` and ``RoutedRagPack`` satisfy it; so does any object with these
attributes (a test double, another pack)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.base_query_engine import BaseQueryEngine
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.llms import LLM

    from llama_index_rag_pack.fusion.fusion_config import FusionConfig

__all__ = ["PackView", "RoutedPackView"]


class PackView(Protocol):
    """A pack as its helpers see it."""

    vector_store: Any
    embed_model: BaseEmbedding
    index: VectorStoreIndex
    callback_manager: CallbackManager
    similarity_top_k: int
    fusion_config: FusionConfig
    sentence_index: Any
    uri: str | None
    self_query_config: Any

    @property
    def llm(self) -> LLM:
        """The LLM, resolved on first use."""
        ...

    @property
    def llm_or_spec(self) -> Any:
        """The LLM once resolved, else what was given for it."""
        ...

    @property
    def tenant_field(self) -> str | None:
        """The collection's tenant field (``None``: no tenants)."""
        ...

    @property
    def default_mode(self) -> str:
        """The mode a question goes to when none is named."""
        ...

    def retriever(self, mode: Any = None, **kwargs: Any) -> BaseRetriever:
        """The retriever of ``mode`` (built once per arguments)."""
        ...

    def engine_for(self, retriever: BaseRetriever, **options: Any) -> BaseQueryEngine:
        """The cited query engine over ``retriever``."""
        ...

    def schema_fields(self) -> frozenset[str]:
        """The fields of the collection."""
        ...

    def forget_engines(self, *modes: str) -> None:
        """Drop the cached retrievers and engines (of ``modes``)."""
        ...


class RoutedPackView(PackView, Protocol):
    """A pack over several sources, as the ``route`` builder sees it."""

    sources: Mapping[str, Any]
    source_packs: Mapping[str, Any]
    top_k_routes: int

    @property
    def selector(self) -> Any:
        """The selector that picks the sources of a question."""
        ...
