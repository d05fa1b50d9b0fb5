"""LLM replies that cost far more to read than their length, through the public entry points.

Each reply below took seconds (5 to 25 s) to read before its reader was fixed: a route name
repeated 16,000 times (every hit compared with every hit), runs of blanks or punctuation that
made a regex backtrack quadratically or worse, a rewrite reply whose every line got the whole
reply's bound on lenient reading, a multi-megabyte list of queries. Now each is read in a
fraction of a second and gives its documented result (a route, the fallback route, a verdict,
the original query). Then: the rewritten readers read what the old ones read (property tests
against the old definitions, on short texts made of the characters that matter).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core import Document
from llama_index.core.tools.types import ToolMetadata

from llama_index_rag_pack import JudgeQueryEngine, LogicalSelector, RagPack
from llama_index_rag_pack.judge import judge_verdicts
from llama_index_rag_pack.routing.route_names import names_in_text, normalize_name
from llama_index_rag_pack.routing.route_replies import _NUMBER_PATTERNS
from llama_index_rag_pack.testing import ScriptedLLM

SLOW_S = 2.0  # CPU seconds; generous: each reply here took 5 s or more before
QUESTION = "What is Milvus?"
STATE = {"reply": ""}
PATHS = ["sync", "async"]


def _timed(path: str, sync: Callable[[], Any], coro: Callable[[], Any]) -> tuple[Any, float]:
    """The call's result and the CPU seconds this process spent on it (every thread): unlike
    wall time, not stretched by the other test worker sharing the machine's cores."""
    start = time.process_time()
    result = sync() if path == "sync" else asyncio.run(coro())
    return result, time.process_time() - start


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> RagPack:
    docs = [Document(text="Milvus is an open-source vector database. It stores embeddings.")]
    return RagPack(
        docs,
        uri=str(tmp_path_factory.mktemp("bombs") / "p.db"),
        llm=ScriptedLLM(replies=lambda prompt: STATE["reply"]),
        embed_model=embed_model,
    )


# ----------------------------------------------------------------------------- routing
ROUTES = ["math", "physics"] + [f"topic number {i}" for i in range(30)]
CHOICES = [ToolMetadata(name=name, description=f"Questions on {name}") for name in ROUTES]
ROUTE_BOMBS = {  # reply -> (route chosen, by the fallback)
    "name_repeated": ("math " * 16_000, "math", False),  # 80 KB, 13 s: every hit against all
    "label_then_blanks": ("choice" + " " * 20_000 + "x", "physics", True),  # 7 s: \s*(..)?\s*
    "blank_lines": ("a" + "\n" * 20_000 + "a", "physics", True),  # 5 s: ^\s* across lines
    "one_name_19000_times": (json.dumps({"routes": ["Physics"] * 19_000}), "physics", False),
}  # the last took 18 s: the 32 route names normalized again for each of the 19,000


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bomb", list(ROUTE_BOMBS))
def test_route_replies_are_read_fast(bomb: str, path: str) -> None:
    reply, route, fallback = ROUTE_BOMBS[bomb]
    selector = LogicalSelector(ScriptedLLM(default_reply=reply), fallback="physics")
    result, seconds = _timed(
        path,
        lambda: selector.select(CHOICES, "What is a prime?"),
        lambda: selector.aselect(CHOICES, "What is a prime?"),
    )
    assert seconds < SLOW_S, f"{bomb}: {len(reply):,}-char reply took {seconds:.1f}s"
    assert result.names == [route] and result.fallback == fallback


# ----------------------------------------------------------------------------- judging
JUDGE_BOMBS = {  # reply -> (score, follow-up, problem)
    "label_then_blanks": ("score" + " " * 20_000 + "x", 0, None, "no score in the reply"),  # 5 s
    "capital_run": ("Score: 1\n" + "A" * 40_000, 1, None, "score 1 without a new follow-up"),
    "follow_up_blanks": ("Score: 1\nfollow up: x" + " " * 1_500 + "y", 1, "x y", ""),  # 5 s
    "punctuation_lines": ("Score: 1\n" + "-\n" * 10_000 + "x", 1, None, "score 1 without"),
}


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bomb", list(JUDGE_BOMBS))
def test_judge_replies_are_read_fast(pack: RagPack, bomb: str, path: str) -> None:
    reply, score, follow_up, problem = JUDGE_BOMBS[bomb]
    llm = ScriptedLLM(replies=lambda p: "I don't know." if "<document id=" in p else reply)
    engine = JudgeQueryEngine(pack.retriever("vector", similarity_top_k=1), llm, max_depth=0)
    response, seconds = _timed(
        path, lambda: engine.query(QUESTION), lambda: engine.aquery(QUESTION)
    )
    assert seconds < SLOW_S, f"{bomb}: {len(reply):,}-char judge reply took {seconds:.1f}s"
    (chunk,) = response.search_tree.root.chunks
    assert (chunk.score, chunk.follow_up) == (score, follow_up)
    assert chunk.problem.startswith(problem) and (problem or chunk.problem == "")


# ----------------------------------------------------------------------------- query writers
LENIENT_LINE = "{a: [" + ", ".join(["1"] * 4000) + "]}:"  # YAML reads it; 12,000 characters
REWRITE_BOMBS = {
    "lenient_lines": "\n".join([LENIENT_LINE] * 40),  # 480 KB, 4.5 s: a lenient budget a line
    "empty_items": "1. \n" * 250_000,  # 1 MB, 4.6 s: 250,000 lines read one by one
}


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bomb", list(REWRITE_BOMBS))
def test_rewrite_replies_are_read_fast(pack: RagPack, bomb: str, path: str) -> None:
    STATE["reply"] = REWRITE_BOMBS[bomb]
    retriever = pack.retriever("rewrite")
    nodes, seconds = _timed(
        path, lambda: retriever.retrieve(QUESTION), lambda: retriever.aretrieve(QUESTION)
    )
    assert seconds < SLOW_S, f"{bomb}: {len(STATE['reply']):,}-char reply took {seconds:.1f}s"
    assert nodes and nodes[0].node.metadata["rewritten_query"] == QUESTION  # the fallback


@pytest.mark.slow
def test_rewrite_reads_only_the_head_of_a_reply(pack: RagPack) -> None:
    STATE["reply"] = "Here is the query:\n" * 2_000 + "milvus vector database"  # 38 KB
    nodes = pack.retriever("rewrite").retrieve(QUESTION)
    assert nodes[0].node.metadata["rewritten_query"] == QUESTION
    STATE["reply"] = "Here is the query:\n" * 100 + "milvus vector database"
    nodes = pack.retriever("rewrite").retrieve(QUESTION)
    assert nodes[0].node.metadata["rewritten_query"] == "milvus vector database"


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_fusion_replies_are_read_fast(pack: RagPack, path: str) -> None:
    STATE["reply"] = "1. \n" * 2_000_000  # 8 MB of empty items: 5 s
    retriever = pack.retriever("fusion")
    nodes, seconds = _timed(
        path, lambda: retriever.retrieve(QUESTION), lambda: retriever.aretrieve(QUESTION)
    )
    assert seconds < SLOW_S, f"{len(STATE['reply']):,}-char reply took {seconds:.1f}s"
    assert nodes and nodes[0].node.metadata["fusion_queries"] == [QUESTION]  # the fallback


# ----------------------------------------------------------------------------- same readings
def _names_by_definition(text: str, names: list[str]) -> list[int]:
    """names_in_text's shadowing as first written: every hit compared with every hit."""
    norm = " " + normalize_name(text) + " "
    hits = []
    for i, name in enumerate(names):
        n = normalize_name(name)
        if n:
            hits += [
                (m.start(), m.end(), i) for m in re.finditer(f"(?<= ){re.escape(n)}(?= )", norm)
            ]
    if not hits:
        compact = norm.replace(" ", "")
        for i, name in enumerate(names):
            n = normalize_name(name).replace(" ", "")
            if n and n in compact:
                hits.append((compact.index(n), compact.index(n) + len(n), i))
    kept = sorted(
        h for h in hits
        if not any(o[0] <= h[0] and h[1] <= o[1] and o[1] - o[0] > h[1] - h[0] for o in hits)
    )  # fmt: skip
    return list(dict.fromkeys(h[2] for h in kept))


_WORDS = ["a", "b", "ab", "a b", "b a", "a_b", "A-B", "ba", "a b a", ""]


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(text=st.text("ab _-.", max_size=16), names=st.lists(st.sampled_from(_WORDS), max_size=5))
def test_property_names_in_text_matches_its_definition(text: str, names: list[str]) -> None:
    assert names_in_text(text, names) == _names_by_definition(text, names)


_OLD_NUMBER = (
    re.compile(
        r"\b(?:choice|route|option|number|answer|source|index|selection|pick)\s*"
        r"(?:is|:|=|#|no\.?)?\s*#?(\d{1,3})\b",
        re.I,
    ),
    re.compile(r"^\s*\(?(\d{1,3})[.):]\s", re.M),
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["choice", "no.", "is", ":", "#", " ", "\n", "\t", "\r", "(",
                                 "1", "234", ".", ")", "x", " \n "]), max_size=12))  # fmt: skip
def test_property_route_numbers_are_read_as_before(parts: list[str]) -> None:
    text = "".join(parts)
    for old, new in zip(_OLD_NUMBER, _NUMBER_PATTERNS[1:], strict=True):
        assert new.findall(text) == old.findall(text)


_OLD_LABELLED = re.compile(
    r"\b(?:score|relevance|rating|grade|label|judge?ment)\b[\s*\"']*(?:is|of|:|=|-)?"
    r"[\s*\"'(\[]*(-?\d+(?:\.\d+)?)",
    re.I,
)
_OLD_QUESTION = re.compile(r"[A-Z][^.?!\n]*\?")
_OLD_FOLLOW_UP = re.compile(
    r"^\W*(?:follow[\s_-]*up(?:[\s_]+question)?|new[\s_]+question|next[\s_]+question)"
    r"[\s*\"']*[:=-]\s*[\"']?(.+?)[\"']?\s*[,}]?\s*$",
    re.I | re.M,
)
_JUDGE_PARTS = ["score", "Rating", "is", "of", ":", "=", "-", "(", "[", "*", '"', "'", " ", "\n",
                "\t", "\r", "1", "2.5", ".", "x", "A", "Why", "?", "!", "follow", "up", "_",
                "Follow-up", "question", "new", ",", "}", "#"]  # fmt: skip


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(_JUDGE_PARTS), max_size=14))
def test_property_judge_replies_are_read_as_before(parts: list[str]) -> None:
    text = "".join(parts)
    old, new = _OLD_LABELLED.search(text), judge_verdicts._LABELLED.search(text)
    assert (old and (old.span(), old[1])) == (new and (new.span(), new[1]))
    assert judge_verdicts._questions(text) == _OLD_QUESTION.findall(text)
    old, new = _OLD_FOLLOW_UP.search(text), judge_verdicts._FOLLOW_UP_LINE.search(text)
    assert (old and old[1]) == (new and judge_verdicts._without_tail(new[1]))


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS)
def test_an_answer_with_a_long_run_of_blanks_is_tidied_fast(pack: RagPack, path: str) -> None:
    answer = "Milvus stores vectors" + " " * 20_000 + "."  # 3 s: \s+ retried inside the run
    llm = ScriptedLLM(replies=lambda p: answer if "<document id=" in p else "Score: 2")
    engine = JudgeQueryEngine(pack.retriever("vector", similarity_top_k=1), llm, max_depth=0)
    response, seconds = _timed(
        path, lambda: engine.query(QUESTION), lambda: engine.aquery(QUESTION)
    )
    assert seconds < SLOW_S, f"a {len(answer):,}-character answer took {seconds:.1f}s"
    assert response.search_tree.root.answer == "Milvus stores vectors."  # the tree's plain text
