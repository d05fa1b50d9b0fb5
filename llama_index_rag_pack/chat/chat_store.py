"""``InProcessChatStore``: core's chat-store interface over a Python list, for ``Memory``.

Core's ``Memory`` keeps its messages in an ``AsyncDBChatStore``; by default an in-memory SQLite
through SQLAlchemy and aiosqlite, whose worker thread answers each call on the event loop of that
call. The sync methods (``Memory.put``, ``get``, what ``chat`` uses) run every call on an event
loop of its own that is closed right after, and aiosqlite's thread then sometimes reports into a
closed loop: "Exception in thread ... Event loop is closed" on stderr in the middle of a
conversation. A conversation held by one process needs no database: this store keeps the
messages in order in a list, with the same semantics (statuses, FIFO archiving, ids), no threads
and no event loop.
"""

from __future__ import annotations

import functools
import inspect
import threading
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
from pydantic import PrivateAttr

__all__ = ["InProcessChatStore", "new_memory"]


@dataclass
class _Row:
    id: int
    key: str
    status: MessageStatus
    message: ChatMessage


class InProcessChatStore(AsyncDBChatStore):
    """Messages per key, in insertion order, each with a status (active or archived) and an id.

    Thread-safe. Nothing is persisted: the conversation ends with the process (pass core's
    ``SQLAlchemyChatStore`` to ``Memory.from_defaults(chat_store=...)`` to keep it).

    Example (what :func:`new_memory` builds; core's ``Memory`` calls the store):
        >>> memory = new_memory(token_limit=1000)
        >>> memory.put(ChatMessage(role="user", content="hi"))
        >>> [m.content for m in memory.get()]
        ['hi']
    """

    _rows: list[_Row] = PrivateAttr(default_factory=list)
    _next_id: int = PrivateAttr(default=1)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def class_name(cls) -> str:
        return "InProcessChatStore"

    def _select(self, key: str, status: MessageStatus | None) -> list[_Row]:
        return [r for r in self._rows if r.key == key and (status is None or r.status == status)]

    def _store(
        self, key: str, messages: list[ChatMessage], status: MessageStatus, *, replace: bool = False
    ) -> None:
        """Append ``messages`` to ``key``'s, or put them in place of all of them (``replace``)."""
        with self._lock:
            if replace:
                self._rows = [r for r in self._rows if r.key != key]
            for message in messages:
                self._rows.append(_Row(self._next_id, key, MessageStatus(status), message))
                self._next_id += 1

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[ChatMessage]:
        with self._lock:
            rows = self._select(key, status)
        start = offset or 0
        end = None if limit is None else start + limit
        return [r.message for r in rows[start:end]]

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        with self._lock:
            return len(self._select(key, status))

    async def add_message(
        self, key: str, message: ChatMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        await self.add_messages(key, [message], status)

    async def add_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        self._store(key, messages, status)

    async def set_messages(
        self,
        key: str,
        messages: list[ChatMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        self._store(key, messages, status, replace=True)

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        with self._lock:
            for position, row in enumerate(self._rows):
                if row.key == key and row.id == idx:
                    del self._rows[position]
                    return row.message
        return None

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        with self._lock:
            doomed = {id(r) for r in self._select(key, status)}
            self._rows = [r for r in self._rows if id(r) not in doomed]

    def _oldest(self, key: str, n: int) -> list[_Row]:
        """The ``n`` oldest active rows of ``key`` (call under the lock)."""
        return self._select(key, MessageStatus.ACTIVE)[: max(n, 0)]

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        with self._lock:
            oldest = self._oldest(key, n)
            doomed = {id(r) for r in oldest}
            self._rows = [r for r in self._rows if id(r) not in doomed]
        return [r.message for r in oldest]

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        with self._lock:
            oldest = self._oldest(key, n)
            for row in oldest:
                row.status = MessageStatus.ARCHIVED
        return [r.message for r in oldest]

    async def get_keys(self) -> list[str]:
        with self._lock:
            return list(dict.fromkeys(r.key for r in self._rows))


@functools.cache
def _memory_takes_a_store() -> bool:
    """Whether core's ``Memory.from_defaults`` takes ``chat_store=`` (newer 0.14 releases; in
    0.14.20 ``Memory`` holds a ``SQLAlchemyChatStore`` only)."""
    return "chat_store" in inspect.signature(Memory.from_defaults).parameters


def new_memory(token_limit: int, chat_history: list[ChatMessage] | None = None) -> Memory:
    """Core's ``Memory`` on an :class:`InProcessChatStore` (on core releases whose ``Memory``
    takes no other store: on its default in-memory SQLite)."""
    extra: dict[str, Any] = {"chat_store": InProcessChatStore()} if _memory_takes_a_store() else {}
    return Memory.from_defaults(chat_history=chat_history, token_limit=token_limit, **extra)
