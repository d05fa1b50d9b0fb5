"""Every Python block of README.md and the pages under docs/ runs as pasted.

Each block runs on its own (a fresh namespace, in an empty working directory), offline, with the
real bundled embedding model and Milvus Lite. An LLM that a block resolves by default (LlamaIndex's
``Settings.llm``, the documented first choice of ``resolve_llm``) is the project's scripted fake,
so no model is downloaded or loaded. A block preceded by ``<!-- snippet: skip REASON -->`` is
reported as skipped with that reason; one preceded by ``<!-- snippet: continues -->`` runs after
the block before it on the same page (a one-line variation of it), in that block's namespace.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!--\s*snippet:\s*skip\s+(.+?)\s*-->\s*$")
CONTINUES = re.compile(r"<!--\s*snippet:\s*continues\s*-->\s*$")
# What the scripted LLM answers: a cited sentence, or numbered lines where a list is asked for.
ANSWER = "Milvus is an open-source vector database [1](id=1)."
QUERIES = "1. keyword ranking function\n2. BM25 scoring in Milvus"


class Snippet:
    def __init__(
        self, path: Path, line: int, code: str, skip: str | None, previous: Snippet | None
    ) -> None:
        self.path, self.line, self.code, self.skip = path, line, code, skip
        self.previous = previous  # the block this one continues

    def chain(self) -> list[Snippet]:
        """The blocks to run, in order: those this one continues, then itself."""
        return [*(self.previous.chain() if self.previous else []), self]

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def snippets() -> Iterator[Snippet]:
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        last: Snippet | None = None
        for match in BLOCK.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = SKIP.search(before)
            line = text[: match.start()].count("\n") + 1
            previous = last if CONTINUES.search(before) else None
            last = Snippet(path, line, match.group(1), skip.group(1) if skip else None, previous)
            yield last


SNIPPETS = list(snippets())


def scripted_reply(prompt: str) -> str:
    lowered = prompt.lower()
    if "queries" in lowered or "search queries" in lowered:
        return QUERIES
    return ANSWER


@pytest.fixture()
def registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Modes and strategies a block registers stay in that block."""
    from llama_index_rag_pack.evaluation import strategies
    from llama_index_rag_pack.pack import mode_registry

    monkeypatch.setattr(mode_registry, "_MODES", dict(mode_registry._MODES))
    monkeypatch.setattr(strategies, "_REGISTRY", dict(strategies._REGISTRY))


@pytest.fixture()
def scripted_settings_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from llama_index.core import Settings

    from llama_index_rag_pack.testing import ScriptedLLM

    llm = ScriptedLLM(replies=scripted_reply)
    previous = Settings._llm
    Settings.llm = llm
    yield llm
    Settings._llm = previous


def test_every_doc_has_its_blocks_found() -> None:
    assert len(SNIPPETS) >= 20
    assert {s.path.name for s in SNIPPETS} >= {
        "README.md",
        "getting-started.md",
        "citations.md",
        "routing.md",
    }


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs_as_pasted(
    snippet: Snippet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scripted_settings_llm: Any,
    registries: None,
    embed_model: Any,  # loaded once for the session: every block resolves the same model
) -> None:
    if snippet.skip:
        pytest.skip(f"{snippet.id}: {snippet.skip}")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__snippet__"}
    for block in snippet.chain():
        exec(compile(block.code, block.id, "exec"), namespace)
