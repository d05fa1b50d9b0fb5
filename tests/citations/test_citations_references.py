"""ReferenceManager: the streaming rewrite of ``[N](id=M)`` markers (pure Python).

The streaming state machine is checked against an independent whole-text reference
implementation built on one regular expression, for random texts split at random places.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_rag_pack.citations.citation_markers import MAX_MARKER_LEN
from llama_index_rag_pack.citations.cited_sources import Citation, default_source_id
from llama_index_rag_pack.citations.reference_styles import (
    EmptyReferenceStyle,
    HTMLReferenceStyle,
    MarkdownReferenceStyle,
    ReferenceStyle,
    TextReferenceStyle,
    resolve_style,
)
from llama_index_rag_pack.citations.references import ReferenceManager, render_references
from llama_index_rag_pack.core.errors import ConfigurationError

# The marker grammar, written independently as one regex (the reference for the state machine).
MARKER_RE = re.compile(
    r"\[[0-9A-Za-z]{0,9}\]\(id= {0,2}(\d{1,9}(?: {0,2}, {0,2}\d{1,9}){0,15}) {0,2}\)"
)

NODES = [
    {"metadata": {"url": "a.html#chap1", "title": "a chap1"}},
    {"metadata": {"url": "a.html#chap2", "title": "a chap2"}},
    {"metadata": {"url": "b.pdf", "title": "b"}},
    {"metadata": {"url": "b.pdf", "title": "b"}},
    {"metadata": {"url": "c.pdf", "title": "c"}},
    {"metadata": {"file_path": "/data/d.csv"}},
]


def reference_rewrite(text: str, nodes: list) -> tuple[str, list[tuple[int, list[int]]]]:
    """Whole-text rewrite in the text style: adjacent markers form one group, numbers follow
    first use of a source, unknown ids vanish, everything else is copied."""
    keys = [default_source_id(n, i) for i, n in enumerate(nodes, 1)]
    numbers: dict[str, int] = {}
    positions: dict[int, list[int]] = {}
    out: list[str] = []
    last = 0
    group: list[int] = []

    def flush() -> None:
        shown: list[int] = []
        for position in group:
            if 1 <= position <= len(nodes):
                key = keys[position - 1]
                if key not in numbers:
                    numbers[key] = len(numbers) + 1
                    positions[numbers[key]] = []
                if position not in positions[numbers[key]]:
                    positions[numbers[key]].append(position)
                if numbers[key] not in shown:
                    shown.append(numbers[key])
        out.extend(f"[{n}]" for n in shown)
        group.clear()

    for m in MARKER_RE.finditer(text):
        if m.start() != last:
            flush()
            out.append(text[last : m.start()])
        group.extend(int(x) for x in re.split(r" *, *", m.group(1).strip()))
        last = m.end()
    flush()
    out.append(text[last:])
    return "".join(out), sorted(positions.items())


def stream(manager: ReferenceManager, tokens: list) -> str:
    return "".join(manager.feed(t) for t in tokens) + manager.finish()


def split_at(text: str, cuts: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


# Pieces that make adversarial answers: valid markers, near-misses, brackets, unicode.
PIECES = st.sampled_from(
    [
        "Paris",
        " is",
        " the capital",
        ".",
        " ",
        "\n",
        "é",
        "【",
        "†",
        "[",
        "]",
        "(",
        ")",
        "id=",
        ",",
        "1",
        "7",
        "[1](id=1)",
        "[2](id=3)",
        "[1](id=4)",
        "[3](id=2,5)",
        "[9](id=99)",
        "[1](id=)",
        "[see](x)",
        "[1](id=6)",
        "[](id=5)",
        "[NUMBER](id=2)",
        "[1](id= 3 , 4 )",
        "[1] (id=2)",
        "[[1](id=2)]",
        "[1](id=1)[2](id=2)",
        "[1](id=0)",
        "[1](ID=2)",
        "(id=3)",
        "[12345678901](id=1)",
    ]
)
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=4)), max_size=40).map("".join)


class TestInvariant:
    @pytest.mark.slow
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=TEXTS, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
    def test_any_split_gives_the_reference_output(self, text: str, cuts: list[int]) -> None:
        expected_text, expected_positions = reference_rewrite(text, NODES)
        manager = ReferenceManager(NODES, style="text")
        body = "".join(manager.feed(t) for t in split_at(text, cuts))
        body += manager.finish().split("\n\nSources:\n")[0]
        assert body == expected_text
        assert [(c.number, c.positions) for c in manager.citations] == expected_positions

    @pytest.mark.slow
    @settings(max_examples=300, deadline=None)
    @given(text=TEXTS, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
    def test_empty_style_keeps_every_non_marker_character_in_order(
        self, text: str, cuts: list[int]
    ) -> None:
        out = stream(ReferenceManager(NODES, style="empty"), split_at(text, cuts))
        assert out == MARKER_RE.sub("", text)

    @pytest.mark.slow
    @settings(max_examples=200, deadline=None)
    @given(text=TEXTS, data=st.data())
    def test_every_style_is_split_independent(self, text: str, data: st.DataObject) -> None:
        style = data.draw(st.sampled_from(["empty", "text", "markdown", "html"]))
        cuts = data.draw(st.lists(st.integers(min_value=0, max_value=10_000), max_size=30))
        whole = render_references(text, NODES, style=style)
        assert stream(ReferenceManager(NODES, style=style), split_at(text, cuts)) == whole
        one_char = stream(ReferenceManager(NODES, style=style), list(text))
        assert one_char == whole

    @pytest.mark.slow
    @settings(max_examples=100, deadline=None)
    @given(text=st.text(alphabet="[]()id=0123456789, abc", max_size=300))
    def test_held_back_text_never_exceeds_one_marker(self, text: str) -> None:
        """Bounded look-ahead is what makes the rewrite linear in the answer length."""
        manager = ReferenceManager(NODES, style="text")
        for ch in text:
            manager.feed(ch)
            assert len(manager._pending) < MAX_MARKER_LEN


class TestRewrite:
    def test_readme_scenario_same_source_shares_a_number(self) -> None:
        text = "Yes[1](id=3), certainly[2](id=2), no[3](id=4), yes[4](id=1), yes[5](id=5)"
        manager = ReferenceManager(NODES, style="text")
        out = stream(manager, list(text))
        assert out.startswith("Yes[1], certainly[2], no[1], yes[3], yes[4]\n\nSources:\n")
        assert "[1] b — b.pdf" in out and "d.csv" not in out
        assert [c.source_id for c in manager.citations] == [
            "b.pdf",
            "a.html#chap2",
            "a.html#chap1",
            "c.pdf",
        ]
        assert manager.citations[0].positions == [3, 4]
        assert manager.citations[0].count == 2
        assert manager.cited_positions == [3, 4, 2, 1, 5]

    def test_adjacent_markers_and_multi_ids_are_grouped_without_repeats(self) -> None:
        out = render_references(
            "X [1](id=3)[2](id=4)[3](id=2). Y [1](id=3,1).", NODES, style="text"
        )
        assert out.split("\n\n")[0] == "X [1][2]. Y [1][3]."

    def test_hallucinated_id_is_dropped_with_a_warning(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        manager = ReferenceManager(NODES, style="text")
        with caplog.at_level(logging.WARNING):
            out = stream(manager, ["Fact [1](id=", "42). Other [2](id=0)[3](id=2)."])
        assert out.split("\n\n")[0] == "Fact . Other [1]."
        assert manager.dropped_ids == [42, 0]
        assert "id=42" in caplog.text and "6 chunks" in caplog.text

    @pytest.mark.parametrize(
        "text",
        [
            "Broken [1](id=) marker",
            "a [see](x) link",
            "lone [ bracket",
            "ends with [",
            "[1](id=1",
            "[1]",
            "[1](id=1 2)",
            "[1](id=a)",
            "[1](ID=1)",
            "[1](id=1]",
            "text after a false [ keeps going: all of it",
        ],
    )
    def test_malformed_markers_pass_through_as_text(self, text: str) -> None:
        for tokens in ([text], list(text)):
            assert stream(ReferenceManager(NODES, style="markdown"), tokens) == text

    def test_single_chunk_answer_is_rewritten(self) -> None:
        manager = ReferenceManager(NODES[:1], style="text")
        assert (
            stream(manager, ["Paris [1](id=1)."])
            == "Paris [1].\n\nSources:\n  [1] a chap1 — a.html#chap1"
        )

    def test_empty_node_list_passes_the_answer_through_untouched(self) -> None:
        text = "Nothing retrieved [1](id=1), so markers stay [2](id=2)."
        assert stream(ReferenceManager([], style="markdown"), list(text)) == text
        assert stream(ReferenceManager(None, style="text"), [text]) == text

    def test_non_string_chunks(self) -> None:
        from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse

        manager = ReferenceManager(NODES, style="text")
        tokens = [
            None,
            CompletionResponse(text="Paris [", delta="Paris ["),
            CompletionResponse(text="Paris [1](id=", delta="1](id="),
            ChatResponse(message=ChatMessage(content="?"), delta="1)"),
            CompletionResponse(text="", delta=None),
            b" ok",
            "",
        ]
        assert stream(manager, tokens).split("\n\n")[0] == "Paris [1] ok"

    def test_stream_helpers(self) -> None:
        manager = ReferenceManager(NODES, style="text")
        pieces = list(manager.stream(["A [1](i", "d=5) b"]))
        assert pieces == ["A ", "[1] b", "\n\nSources:\n  [1] c — c.pdf"]

    async def test_astream(self) -> None:
        async def tokens():
            for t in ["A [1](i", "d=5) b"]:
                yield t

        manager = ReferenceManager(NODES, style="text")
        assert "".join([p async for p in manager.astream(tokens())]).startswith("A [1] b")

    def test_finish_is_idempotent_and_feed_after_finish_fails(self) -> None:
        manager = ReferenceManager(NODES, style="text")
        manager.feed("x [1](id=1)")
        assert manager.finish().startswith("[1]")
        assert manager.finish() == ""
        with pytest.raises(ConfigurationError, match="new one per answer"):
            manager.feed("more")

    @pytest.mark.slow
    def test_huge_answer_in_one_and_many_tokens(self) -> None:
        unit = "Claim [1](id=3) and a false [ bracket [x](y) then [2](id=2,4). "
        text = unit * 20_000  # 1.2 MB
        whole = render_references(text, NODES, style="text")
        body = whole.split("\n\nSources:")[0]
        assert (
            body.count("[1]") == 40_000
            and body.count("[2]") == 20_000
            and body.count("[ bracket") == 20_000
        )
        manager = ReferenceManager(NODES, style="text")
        assert stream(manager, [text[i : i + 7] for i in range(0, len(text), 7)]) == whole


class TestSources:
    def test_default_source_id_order(self) -> None:
        from llama_index.core.schema import NodeWithScore, TextNode

        assert default_source_id({"metadata": {"url": "u", "source": "s", "file_path": "f"}}) == "u"
        assert default_source_id({"metadata": {"source": "s", "file_path": "f"}}) == "s"
        assert default_source_id({"metadata": {"file_path": "f"}}) == "f"
        node = TextNode(text="x", id_="node-7")
        assert default_source_id(node) == "node-7"
        assert default_source_id(NodeWithScore(node=node, score=0.3)) == "node-7"
        assert default_source_id("plain text", 4) == "chunk-4"

    def test_llama_index_nodes_and_callable_source_id(self) -> None:
        from llama_index.core.schema import NodeWithScore, TextNode

        nodes = [
            NodeWithScore(
                node=TextNode(text="r1", metadata={"source": "d.csv", "row": 1}), score=0.9
            ),
            NodeWithScore(
                node=TextNode(text="r2", metadata={"source": "d.csv", "row": 2}), score=0.8
            ),
        ]
        shared = ReferenceManager(nodes, style="text")
        assert stream(shared, ["a [1](id=1) b [2](id=2)"]).startswith("a [1] b [1]")
        per_row = ReferenceManager(
            nodes,
            style="text",
            source_id=lambda n: f"{n.metadata['source']}#row={n.metadata['row']}",
        )
        assert stream(per_row, ["a [1](id=1) b [2](id=2)"]).startswith("a [1] b [2]")
        assert [c.source_id for c in per_row.citations] == ["d.csv#row=1", "d.csv#row=2"]
        assert per_row.cited_nodes == nodes
        by_key = ReferenceManager(nodes, style="text", source_id="row")
        assert [c.source_id for c in (stream(by_key, ["[1](id=2)"]), by_key)[1].citations] == ["2"]

    def test_bad_source_id(self) -> None:
        with pytest.raises(ConfigurationError, match="source_id must be"):
            ReferenceManager(NODES, source_id=42)  # type: ignore[arg-type]


class TestStyles:
    def test_markdown(self) -> None:
        nodes = [
            {
                "metadata": {
                    "url": "https://en.wikipedia.org/wiki/Cheetah",
                    "title": "Cheetah [cat]",
                }
            },
            {"metadata": {"title": "No link"}, "id": "n2"},
        ]
        out = render_references("Fast [1](id=1). Spotted [2](id=2).", nodes, style="markdown")
        assert out == (
            "Fast <sup>[[1](https://en.wikipedia.org/wiki/Cheetah)]</sup>. "
            "Spotted <sup>[2]</sup>.\n\n"
            "- **1** [Cheetah \\[cat\\]](https://en.wikipedia.org/wiki/Cheetah)\n- **2** No link"
        )

    def test_html_escapes_what_it_writes_and_refuses_script_links(self) -> None:
        nodes = [
            {"metadata": {"url": "javascript:alert(1)", "title": "<b>evil</b>"}},
            {"metadata": {"url": 'https://x.org/"q"', "title": "ok"}},
        ]
        out = render_references("A [1](id=1) B [2](id=2)", nodes, style="html")
        assert "javascript" not in out.split("\n")[0] and "<sup>[1]</sup>" in out
        assert "&lt;b&gt;evil&lt;/b&gt;" in out and "<b>" not in out
        assert 'href="https://x.org/&quot;q&quot;"' in out

    def test_empty_style_lists_nothing_but_keeps_citations(self) -> None:
        manager = ReferenceManager(NODES, style=EmptyReferenceStyle())
        assert stream(manager, ["A [1](id=2)."]) == "A ."
        assert manager.citations[0].to_dict() == {
            "number": 1,
            "source_id": "a.html#chap2",
            "title": "a chap2",
            "pages": [],
            "url": "a.html#chap2",
            "positions": [2],
            "count": 1,
            "origin": "model",
        }

    def test_no_citation_no_list(self) -> None:
        for style in ("text", "markdown", "html"):
            assert render_references("I don't know.", NODES, style=style) == "I don't know."

    def test_custom_style_gets_groups(self) -> None:
        class Grouped(ReferenceStyle):
            def format_reference(self, citation: Citation) -> str:
                return str(citation.number)

            def format_marker(self, citations: list[Citation]) -> str:
                return "{" + ",".join(self.format_reference(c) for c in citations) + "}"

            def format_references(self, citations: list[Citation]) -> str:
                return " | " + "; ".join(f"{c.number}={c.source_id}" for c in citations)

        out = render_references("A [1](id=1)[2](id=3,4) B [3](id=5)", NODES, style=Grouped())
        assert out == "A {1,2} B {3} | 1=a.html#chap1; 2=b.pdf; 3=c.pdf"

    def test_style_resolution(self) -> None:
        assert isinstance(resolve_style("HTML"), HTMLReferenceStyle)
        assert isinstance(resolve_style(None), MarkdownReferenceStyle)
        assert isinstance(resolve_style(TextReferenceStyle), TextReferenceStyle)
        with pytest.raises(ConfigurationError, match="empty, text, markdown, html"):
            resolve_style("latex")


def test_importable_without_llama_index() -> None:
    """The reference rewriting (core/) works where llama_index cannot be imported (benchmarks run
    beside peers in other venvs): core's modules load with llama_index blocked and without the
    package root, whose facade imports the LlamaIndex components."""
    package = Path(__file__).resolve().parents[2] / "llama_index_rag_pack"
    code = textwrap.dedent(
        f"""
        import importlib, importlib.abc, sys, types
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "llama_index":
                    raise ImportError("blocked " + name)
        sys.meta_path.insert(0, Block())
        root = types.ModuleType("llama_index_rag_pack")
        root.__path__ = [{str(package)!r}]
        sys.modules["llama_index_rag_pack"] = root
        refs = importlib.import_module("llama_index_rag_pack.citations.references")
        print(refs.render_references("A [1](id=1)", ["x"], style="text").splitlines()[0])
        styles = importlib.import_module("llama_index_rag_pack.citations.reference_styles")
        try:
            styles.resolve_style("nope")
        except ValueError as e:
            print(type(e).__name__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["A", "[1]", "ConfigurationError"]


class TestStyleDetails:
    def test_html_output_is_exact_and_both_links_are_escaped(self) -> None:
        nodes = [{"metadata": {"url": 'https://x.org/"q"', "title": 'say "hi"'}}]
        out = render_references("A [1](id=1)", nodes, style="html")
        href = 'href="https://x.org/&quot;q&quot;"'
        assert out == (
            f"A <sup><a {href}>[1]</a></sup>\n"
            '<ol class="references">\n'
            f'<li value="1"><a {href}>say &quot;hi&quot;</a></li>\n'
            "</ol>"
        )

    def test_html_lists_each_source_on_its_own_line(self) -> None:
        out = render_references("A [1](id=1) B [2](id=3)", NODES, style="html")
        assert out.endswith('</li>\n<li value="2"><a href="b.pdf">b</a></li>\n</ol>')

    def test_relative_links_with_a_colon_after_the_first_slash_are_kept(self) -> None:
        nodes = [{"metadata": {"url": "docs/v1:2/page.html", "title": "t"}}]
        assert "[t](docs/v1:2/page.html)" in render_references("A [1](id=1)", nodes)
        html = render_references("A [1](id=1)", nodes, style="html")
        assert html.count('href="docs/v1:2/page.html"') == 2

    def test_markdown_wraps_only_urls_that_would_break_the_link(self) -> None:
        nodes = [
            {"metadata": {"url": "https://x.org/a b(1)", "title": "back\\slash"}},
            {"metadata": {"url": "https://x.org/X", "title": "plain"}},
        ]
        out = render_references("A [1](id=1) B [2](id=2)", nodes, style="markdown")
        assert "[[1](<https://x.org/a b(1)>)]" in out
        assert "[back\\\\slash](<https://x.org/a b(1)>)" in out
        assert "[[2](https://x.org/X)]" in out and "[plain](https://x.org/X)" in out

    def test_text_style_shows_a_link_only_when_it_adds_something(self) -> None:
        nodes = [
            {"metadata": {"title": "No link"}},
            {"metadata": {"url": "same", "title": "same"}},
        ]
        out = render_references("A [1](id=1) B [2](id=2)", nodes, style="text")
        assert out.endswith("Sources:\n  [1] No link\n  [2] same")
