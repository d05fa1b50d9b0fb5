"""``async_twin``: an async function that takes exactly its sync twin's parameters."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from llama_index_rag_pack import RaptorRetriever
from llama_index_rag_pack.components.fusion_queries import agenerate_queries, generate_queries
from llama_index_rag_pack.core.twins import async_twin
from llama_index_rag_pack.testing import ScriptedLLM


def build(source: str, *, limit: int = 3, label: str | None = None, **extra: Any) -> dict:
    return {"source": source, "limit": limit, "label": label, "extra": extra}


@async_twin(build)
async def abuild(source: str, **options: Any) -> dict:
    await asyncio.sleep(0)
    return {"source": source, **options}


def test_the_body_gets_every_parameter_by_name_with_defaults_and_kwargs_spread() -> None:
    assert asyncio.run(abuild("s")) == {"source": "s", "limit": 3, "label": None}
    got = asyncio.run(abuild("s", limit=5, label="x", colour="red"))
    assert got == {"source": "s", "limit": 5, "label": "x", "colour": "red"}


@pytest.mark.parametrize(
    ("args", "kwargs", "problem"),
    [
        ((), {}, "source"),
        (("s", 1), {}, "positional"),
        (("s",), {"source": "t"}, "source"),
        (("s",), {"limit": 1, "label": 2}, "label"),
    ],
)
def test_a_wrong_call_is_a_type_error_as_for_the_sync_twin_and_runs_nothing(
    args: tuple, kwargs: dict, problem: str
) -> None:
    ran = []

    def sync(source: str, *, limit: int = 3) -> None:
        ran.append("sync")

    @async_twin(sync)
    async def twin(**options: Any) -> None:
        ran.append(options)

    with pytest.raises(TypeError, match=problem):
        sync(*args, **kwargs)
    with pytest.raises(TypeError, match=problem) as error:
        asyncio.run(twin(*args, **kwargs))
    assert str(error.value).startswith(twin.__qualname__ + "(): ")
    assert ran == []


def test_callers_and_tools_see_the_sync_parameters_and_a_coroutine_function() -> None:
    assert inspect.signature(abuild) == inspect.signature(build)
    assert inspect.iscoroutinefunction(abuild)
    assert abuild.__name__ == "abuild"
    for sync, twin in [
        (generate_queries, agenerate_queries),
        (RaptorRetriever.from_documents, RaptorRetriever.afrom_documents),
    ]:
        assert inspect.signature(twin) == inspect.signature(sync)
        assert inspect.iscoroutinefunction(twin)
        assert twin.__doc__ and "Async" in twin.__doc__


def test_the_public_twins_take_options_by_name() -> None:
    llm = ScriptedLLM(replies=["1. milvus bm25\n2. milvus sparse"], forbid_sync=True)
    got = asyncio.run(agenerate_queries(llm, "bm25?", 1, raise_on_failure=True))
    assert got == ["milvus bm25"]
    with pytest.raises(TypeError, match="promt"):
        asyncio.run(agenerate_queries(llm, "bm25?", 1, promt="x"))


def test_it_refuses_what_it_cannot_twin() -> None:
    with pytest.raises(TypeError, match="coroutine function"):
        async_twin(build)(build)

    def positional(x: int, /) -> int:
        return x

    with pytest.raises(TypeError, match="by name"):
        async_twin(positional)
