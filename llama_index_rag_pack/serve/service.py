"""The pack behind ``rag-pack serve``: opened once (lazily, or warmed in the background), the
modes it can serve, and each request's search or cited chat turn, scoped to the caller's tenant.

Every public coroutine runs the pack's blocking parts in worker threads and its async paths on
the loop, so requests run concurrently (at most ``max_concurrent`` answers at once, the rest
wait their turn). Errors are the pack's own; :mod:`~llama_index_rag_pack.serve.api_errors` turns
them into HTTP answers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from llama_index_rag_pack.core.errors import ConfigurationError, RagPackError, check_query
from llama_index_rag_pack.serve.api_errors import ApiError
from llama_index_rag_pack.serve.keys import ALL_TENANTS, KeyRing

__all__ = ["ChatRequest", "PackService", "MAX_TOP_K", "CITATION_STYLES"]

logger = logging.getLogger(__name__)

#: The most passages one search returns.
MAX_TOP_K = 50
#: Citation styles a chat request may ask for.
CITATION_STYLES = ("markdown", "text", "html", "empty")
#: Modes never served: ``route`` needs a routed pack's sources.
_NOT_SERVED = frozenset({"route"})


@dataclass(frozen=True)
class ChatRequest:
    """One chat turn, checked: the question, the earlier turns, and where to search."""

    question: str
    history: Sequence[Any]
    mode: str
    filters: str | None = None
    tenant: str | None = None
    citation_style: str = "markdown"


class PackService:
    """The served pack, opened by ``open_pack`` on first use (or by :meth:`warm`).

    Args:
        open_pack: Returns the pack (e.g. ``lambda: RagPack.open(uri=...)``); called in a worker
            thread, once it succeeds.
        keys: The API keys and their tenants.
        answer_style: The answers' style (``auto``, ``extractive``, ``generative``).
        max_concurrent: Answers and searches run at once; later ones wait.
    """

    def __init__(
        self,
        open_pack: Callable[[], Any],
        *,
        keys: KeyRing | None = None,
        answer_style: str = "auto",
        max_concurrent: int = 8,
    ) -> None:
        if max_concurrent < 1:
            raise ConfigurationError(f"max_concurrent must be >= 1, got {max_concurrent}.")
        self.keys = keys if keys is not None else KeyRing()
        self.answer_style = answer_style
        self.max_concurrent = max_concurrent
        self._open = open_pack
        self._pack: Any = None
        self._modes: list[str] | None = None
        self._lock = threading.Lock()
        self._slots: asyncio.Semaphore | None = None
        self._warming = False

    # ------------------------------------------------------------------ the pack
    @property
    def ready(self) -> bool:
        """Whether the pack is open and :meth:`warm` is not loading a model any more (a request
        then waits for nothing)."""
        return self._pack is not None and self._modes is not None and not self._warming

    @property
    def opened(self) -> bool:
        """Whether the pack is open and its modes are listed (a model may still be loading)."""
        return self._pack is not None and self._modes is not None

    def _open_pack(self) -> Any:
        with self._lock:  # one opening, however many requests wait for it
            if self._pack is None:
                pack = self._open()
                try:
                    self.keys.check_collection(pack.tenant_field is not None)
                except ConfigurationError as e:  # the server's setting, not the request's
                    raise ApiError(500, str(e), type="server_error", code="misconfigured") from None
                self._pack = pack
            if self._modes is None:
                self._modes = _served_modes(self._pack)
            return self._pack

    async def pack(self) -> Any:
        """The pack, opened on first use (a failure is raised, and the next call tries again)."""
        if self.opened:
            return self._pack
        return await anyio.to_thread.run_sync(self._open_pack)

    def warm(self) -> None:
        """Open the pack, list its modes and load the LLM when answers need it (blocking; the
        server runs it in a thread at start, so the first request finds all of it ready)."""
        from llama_index_rag_pack.models.answer_style import resolve_answer_style

        self._warming = True
        try:
            pack = self._open_pack()
            if resolve_answer_style(self.answer_style, pack.llm) == "generative":
                load = getattr(pack.llm, "load", None)
                if load is not None:
                    load()
            logger.info("ready: %d modes served", len(self._modes or ()))
        except Exception as e:  # the first request reports it, with its status
            logger.warning("warming up failed (the first request tries again): %s", e)
        finally:
            self._warming = False

    async def modes(self) -> list[str]:
        """The modes this collection can serve, the default first."""
        await self.pack()
        return list(self._modes or ())

    async def check_mode(self, model: str | None) -> str:
        """``model`` as a served mode (``None``: the default).

        Raises:
            ApiError: 404 for a mode this server does not serve.
        """
        modes = await self.modes()
        if model is None:
            return modes[0]
        if model not in modes:
            raise ApiError(
                404,
                f"The model {model!r} does not exist here: this collection serves "
                f"{', '.join(modes)} (GET /v1/models).",
                param="model",
                code="model_not_found",
            )
        return model

    def tenant_for(self, token: str | None) -> str | None:
        """The tenant a request with API key ``token`` searches (``None``: no tenants).

        Raises:
            AccessDenied: as :meth:`KeyRing.tenant_of`.
        """
        has_tenants = self._pack is not None and self._pack.tenant_field is not None
        return self.keys.tenant_of(token, has_tenants=has_tenants)

    def _slots_now(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrent)
        return self._slots

    # ------------------------------------------------------------------ requests
    async def retrieve(
        self, query: str, *, mode: str, top_k: int, filters: str | None, tenant: str | None
    ) -> list[Any]:
        """The ``top_k`` passages of ``mode`` for ``query`` (``NodeWithScore``)."""
        query = check_query(query)
        pack = await self.pack()
        async with self._slots_now():
            retriever = await anyio.to_thread.run_sync(
                lambda: pack.retriever(
                    mode, similarity_top_k=top_k, filters=filters, **_scope(pack, tenant)
                )
            )
            nodes = await retriever.aretrieve(query)
        return list(nodes)[:top_k]

    async def chat_engine(self, request: ChatRequest) -> Any:
        """A cited chat engine for ``request`` (built in a worker thread)."""
        pack = await self.pack()
        return await anyio.to_thread.run_sync(
            lambda: pack.make_chat_engine(
                request.mode,
                filters=request.filters,
                citation_style=request.citation_style,
                answer_style=self.answer_style,
                **_scope(pack, request.tenant),
            )
        )

    async def chat(self, request: ChatRequest) -> Any:
        """The cited answer to ``request`` (a ``CitedChatResponse``)."""
        check_query(request.question)
        async with self._slots_now():
            engine = await self.chat_engine(request)
            return await engine.achat(request.question, chat_history=list(request.history))

    def slot(self) -> asyncio.Semaphore:
        """The semaphore a streamed answer holds while it streams."""
        return self._slots_now()


def _scope(pack: Any, tenant: str | None) -> dict[str, Any]:
    """``tenant=`` for the pack's calls: only on a collection with tenants."""
    if pack.tenant_field is None:
        return {}
    if tenant is None:  # keys were checked before: never search unscoped by mistake
        raise ApiError(403, "This collection needs a tenant.", code="tenant_required")
    return {"tenant": tenant}


def _served_modes(pack: Any) -> list[str]:
    """The modes whose retriever builds on ``pack``'s collection, the default first (on a
    collection with tenants, built for every tenant: a mode that cannot search them all, such
    as one tree per tenant, is left out)."""
    from llama_index_rag_pack.pack.modes import mode_names

    scope = {"tenant": ALL_TENANTS} if pack.tenant_field is not None else {}
    default = pack.default_mode
    served = []
    for mode in [default] + [m for m in mode_names() if m != default]:
        if mode in _NOT_SERVED or mode in served:
            continue
        try:
            pack.retriever(mode, **scope)
        except RagPackError as e:
            logger.info("mode %s not served: %s", mode, e)
            continue
        served.append(mode)
    if not served:
        raise ConfigurationError(f"No retrieval mode can search this collection ({default}).")
    return served
