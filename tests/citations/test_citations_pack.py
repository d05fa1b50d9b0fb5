"""Citations in RagPack (default query engine) and in ``rag-pack ask --format``."""

from __future__ import annotations

import re
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_rag_pack import RagPack, cli
from llama_index_rag_pack.citations.cited_query_engine import CitedQueryEngine
from llama_index_rag_pack.citations.cited_responses import CitedResponse
from llama_index_rag_pack.cli import output as cli_output
from llama_index_rag_pack.testing import ScriptedLLM

pytestmark = pytest.mark.slow

DOCS = [
    Document(
        id_="apollo",
        text="Apollo 11 landed Neil Armstrong and Buzz Aldrin on the Moon in July 1969.",
        metadata={"title": "Apollo 11", "url": "https://en.wikipedia.org/wiki/Apollo_11"},
    ),
    Document(
        id_="aardvark",
        text="The aardvark is a nocturnal mammal of Africa. It eats ants and termites.",
        metadata={"title": "Aardvark", "url": "https://en.wikipedia.org/wiki/Aardvark"},
    ),
]


def cite_apollo(prompt: str) -> str:
    """Cites whichever document id holds the Apollo text, plus one id that does not exist."""
    ids = dict(re.findall(r"<document id=(\d+)[^>]*>\n(\w+)", prompt))
    apollo = next(
        (i for i, first in ids.items() if first == "Apollo"), "1"
    )  # core's prompt has no ids
    return f"Neil Armstrong and Buzz Aldrin walked on the Moon [1](id={apollo})[2](id=9)."


@pytest.fixture(scope="module")
def pack(tmp_path_factory, embed_model) -> RagPack:
    """One pack for the module: no test writes to it (the CLI tests reopen its database)."""
    llm = ScriptedLLM(replies=cite_apollo)
    return RagPack(
        DOCS,
        uri=str(tmp_path_factory.mktemp("cited") / "milvus.db"),
        collection_name="cited",
        llm=llm,
        embed_model=embed_model,
        similarity_top_k=2,
    )


def test_pack_answers_with_citations_by_default(pack) -> None:
    assert isinstance(pack.query_engine, CitedQueryEngine)
    response = pack.run("Who walked on the Moon?")
    assert isinstance(response, CitedResponse)
    assert response.answer == (
        "Neil Armstrong and Buzz Aldrin walked on the Moon <sup>[[1](https://en.wikipedia.org/wiki/Apollo_11)]</sup>."
    )
    assert [n.node.ref_doc_id for n in response.source_nodes] == ["apollo"]
    assert isinstance(pack.get_modules()["plain_query_engine"], RetrieverQueryEngine)


def test_plain_engine_on_request(pack) -> None:
    engine = pack.make_query_engine(citations=False)
    assert isinstance(engine, RetrieverQueryEngine)
    assert "](id=" in str(engine.query("Who walked on the Moon?"))  # the raw marker, not rewritten


async def test_arun_with_style(pack) -> None:
    response = await pack.arun("Who walked on the Moon?", citation_style="text")
    assert str(response).startswith(
        "Neil Armstrong and Buzz Aldrin walked on the Moon [1].\n\nSources:\n  [1] Apollo 11"
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("fmt", "marker", "listing"),
    [
        ("text", "the Moon [1].", "  [1] Apollo 11 — https://en.wikipedia.org/wiki/Apollo_11"),
        (
            "markdown",
            "<sup>[[1](https://en.wikipedia.org/wiki/Apollo_11)]</sup>",
            "- **1** [Apollo 11]",
        ),
        (
            "html",
            '<sup><a href="https://en.wikipedia.org/wiki/Apollo_11">[1]</a></sup>',
            '<li value="1">',
        ),
    ],
)
def test_cli_ask_streams_the_rewritten_answer(pack, monkeypatch, fmt, marker, listing) -> None:
    printed: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(cli_output, "out", lambda text="", **kw: printed.append((text, kw)))
    monkeypatch.setattr(
        "llama_index_rag_pack.pack.pack_base.resolve_llm",
        lambda spec=None: ScriptedLLM(replies=cite_apollo),
    )
    code = cli.main(
        [
            "--uri",
            pack.uri,
            "--collection",
            "cited",
            "ask",
            "Who walked on the Moon?",
            "--format",
            fmt,
        ]
    )
    assert code == 0
    streamed = [text for text, kw in printed if kw.get("end") == ""]
    assert len(streamed) > 5, "the answer must reach the terminal piece by piece"
    output = "".join(text + kw.get("end", "\n") for text, kw in printed)
    assert marker in output and listing in output
    assert "](id=" not in output and "Aardvark" not in output


@pytest.mark.integration
def test_cli_no_citations_and_no_stream(pack, monkeypatch, capsys) -> None:
    monkeypatch.setattr(
        "llama_index_rag_pack.pack.pack_base.resolve_llm",
        lambda spec=None: ScriptedLLM(replies=cite_apollo),
    )
    assert (
        cli.main(
            [
                "--uri",
                pack.uri,
                "--collection",
                "cited",
                "ask",
                "Who walked?",
                "--no-citations",
                "--no-stream",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "[1](id=" in out and "Sources:" in out  # raw answer, retrieved chunks listed


def ask(milvus_uri: str, *args: str) -> int:
    return cli.main(["--uri", milvus_uri, "--collection", "cited", "ask", *args])


@pytest.mark.integration
def test_cli_answer_without_markers_gets_attributed_citations(pack, monkeypatch, capsys) -> None:
    monkeypatch.setattr(
        "llama_index_rag_pack.pack.pack_base.resolve_llm",
        lambda spec=None: ScriptedLLM(default_reply="Armstrong and Aldrin walked on the Moon."),
    )
    assert ask(pack.uri, "Who walked on the Moon?") == 0
    out = capsys.readouterr().out
    assert "Armstrong and Aldrin walked on the Moon." in out
    assert "Note: citations on 1 of 1 sentences were attributed" in out
    assert "Sources:\n  [1] Apollo 11 — https://en.wikipedia.org/wiki/Apollo_11" in out
    assert "Evidence" not in out and "Aardvark" not in out


@pytest.mark.integration
def test_cli_show_sources_highlights_the_supporting_sentence(pack, monkeypatch, capsys) -> None:
    monkeypatch.setattr(
        "llama_index_rag_pack.pack.pack_base.resolve_llm",
        lambda spec=None: ScriptedLLM(
            default_reply="Armstrong and Aldrin walked on the Moon. Aardvarks can fly to Mars."
        ),
    )
    assert ask(pack.uri, "Who walked on the Moon?", "--show-sources", "--no-stream") == 0
    out = capsys.readouterr().out
    evidence = out[out.index("Evidence") :]
    assert "[1] Apollo 11 — https://en.wikipedia.org/wiki/Apollo_11 (attributed by similarity)" in (
        evidence
    )
    assert "answer: “Armstrong and Aldrin walked on the Moon.”" in evidence
    assert ">>Apollo 11 landed Neil Armstrong and Buzz Aldrin on the Moon in July 1969.<<" in (
        evidence
    )
    assert "unsupported: “Aardvarks can fly to Mars.”" in evidence
    assert "\033[" not in out  # not a terminal: plain markers


@pytest.mark.integration
def test_cli_unsupported_answer_lists_retrieved_chunks(pack, monkeypatch, capsys) -> None:
    monkeypatch.setattr(
        "llama_index_rag_pack.pack.pack_base.resolve_llm",
        lambda spec=None: ScriptedLLM(default_reply="Bananas are yellow."),
    )
    assert ask(pack.uri, "Who walked on the Moon?") == 0
    out = capsys.readouterr().out
    assert "no passage supports “Bananas are yellow.”" in out
    assert "(the answer cites no source; retrieved chunks:)" in out
