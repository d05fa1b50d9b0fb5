"""InProcessChatStore: core's AsyncDBChatStore semantics without a database or threads."""

from __future__ import annotations

import asyncio
import threading

import hypothesis
import hypothesis.strategies as st
import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus

from llama_index_rag_pack.chat.chat_store import (
    InProcessChatStore,
    _memory_takes_a_store,
    new_memory,
)


def msg(text: str, role: str = "user") -> ChatMessage:
    return ChatMessage(role=role, content=text)


def contents(messages) -> list[str]:
    return [m.content for m in messages]


def test_messages_keep_their_order_key_and_status():
    store = InProcessChatStore()

    async def main():
        await store.add_messages("a", [msg("1"), msg("2"), msg("3")])
        await store.add_message("b", msg("other"))
        await store.add_message("a", msg("old"), status=MessageStatus.ARCHIVED)
        assert contents(await store.get_messages("a")) == ["1", "2", "3"]
        assert contents(await store.get_messages("a", status=None)) == ["1", "2", "3", "old"]
        assert contents(await store.get_messages("a", limit=2, offset=1)) == ["2", "3"]
        assert await store.count_messages("a") == 3
        assert await store.count_messages("a", status=MessageStatus.ARCHIVED) == 1
        assert await store.get_keys() == ["a", "b"]
        assert contents(await store.archive_oldest_messages("a", 2)) == ["1", "2"]
        assert contents(await store.get_messages("a")) == ["3"]
        assert contents(await store.delete_oldest_messages("a", 5)) == ["3"]
        assert contents(await store.get_messages("a", status=None)) == ["1", "2", "old"]
        await store.set_messages("a", [msg("new")])
        assert contents(await store.get_messages("a", status=None)) == ["new"]
        assert contents(await store.get_messages("b")) == ["other"]
        assert (await store.delete_message("b", 4)).content == "other"  # ids count from 1
        assert await store.delete_message("b", 4) is None
        await store.delete_messages("a")
        assert await store.get_keys() == []

    asyncio.run(main())


@pytest.mark.slow
@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 4)), max_size=30))
def test_archiving_matches_a_list_model(operations):
    """Adding n messages or archiving the n oldest, in any order, leaves exactly the messages a
    plain FIFO list model says, active and archived."""
    store = InProcessChatStore()
    active: list[str] = []
    archived: list[str] = []

    async def main():
        for i, (op, n) in enumerate(operations):
            if op == "a":
                texts = [f"{i}.{k}" for k in range(n)]
                await store.add_messages("s", [msg(t) for t in texts])
                active.extend(texts)
            else:
                moved = contents(await store.archive_oldest_messages("s", n))
                assert moved == active[:n]
                archived.extend(moved)
                del active[:n]
        assert contents(await store.get_messages("s")) == active
        got = contents(await store.get_messages("s", status=MessageStatus.ARCHIVED))
        assert got == archived

    asyncio.run(main())


def test_core_memory_gives_what_it_gives_on_its_own_sql_store():
    """The same conversation through core's Memory on its default SQLite store and on ours:
    the same recent history, the same flushed (archived) messages."""

    def converse(memory: Memory) -> tuple[list[str], list[str], list[str]]:
        for i in range(6):
            memory.put(msg(f"question {i} " + "word " * 10))
            memory.put(msg(f"answer {i}", role="assistant"))
        asyncio.run(memory.aput(msg("async question")))
        return (
            contents(memory.get()),
            contents(memory.get_all(status=MessageStatus.ACTIVE)),
            contents(memory.get_all(status=MessageStatus.ARCHIVED)),
        )

    memory = new_memory(40)
    if _memory_takes_a_store():  # core 0.14.20's Memory holds its SQLite store only
        assert isinstance(memory.sql_store, InProcessChatStore)
    ours = converse(memory)
    core = converse(Memory.from_defaults(token_limit=40))
    assert ours == core
    recent, active, archived = ours
    assert recent[-1] == "async question" and archived  # the oldest were flushed out
    assert len(active) + len(archived) == 13


@pytest.mark.skipif(not _memory_takes_a_store(), reason="core 0.14.20: Memory uses its SQLite")
def test_no_thread_is_left_behind_by_a_sync_conversation():
    before = {t.ident for t in threading.enumerate()}
    memory = new_memory(4096)
    for i in range(5):
        memory.put(msg(f"turn {i}"))
        memory.get()
    assert {t.ident for t in threading.enumerate()} <= before
