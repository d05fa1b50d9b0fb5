"""``rag-pack ask``/``chat`` sessions: input checked before anything loads, one-line errors that
leave nothing behind, each model loaded once per session, and ``ask --route`` answered by the
cited engine."""

from __future__ import annotations

import io
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document

from llama_index_rag_pack.cli import checks, main
from llama_index_rag_pack.core.errors import ConfigurationError, MilvusUnavailableError
from llama_index_rag_pack.pack.rag_pack import RagPack
from llama_index_rag_pack.pack.routed import RoutedRagPack
from llama_index_rag_pack.pack.sources import RouteSource
from llama_index_rag_pack.testing import ScriptedLLM

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "pymilvus", "llama_index", "sentence_transformers")
DOCS = [
    Document(text="Milvus is an open-source vector database built for AI.", doc_id="milvus"),
    Document(text="The aardvark eats ants and termites at night.", doc_id="aardvark"),
]
QUESTIONS = (
    "What is Milvus?",
    "What does the aardvark eat?",
    "Is Milvus open source?",
    "When does the aardvark eat?",
    "What is Milvus built for?",
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def in_empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory with the default database location (./rag_pack_data)."""
    monkeypatch.chdir(tmp_path)
    for name in ("RAG_PACK_DATA_DIR", "RAG_PACK_MILVUS_URI", "RAG_PACK_COLLECTION"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


# --------------------------------------------------------------------------- nothing heavy loads
PROBE = """
import sys
from llama_index_rag_pack.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:
    code = e.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "code", "one_line"),
    [
        (["--help"], 0, False),
        (["ask", "--help"], 0, False),
        (["chat", "--help"], 0, False),
        (["ask"], 2, False),  # argparse: a question is required (usage, then the error)
        (["ask", "q", "--top-k", "0"], 2, False),
        (["ask", ""], 2, True),
        (["ask", "   "], 2, True),
        (["--uri", "http://127.0.0.1:99999", "ask", "q"], 2, True),
        (["--uri", "ftp://milvus:19530", "ask", "q"], 2, True),
        (["ask", "q"], 2, True),  # no database in the empty directory
    ],
)
def test_help_and_bad_input_import_no_heavy_module(
    tmp_path: Path, argv: list[str], code: int, one_line: bool
) -> None:
    env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE % (HEAVY,), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == code, done.stderr
    assert "HEAVY=\n" in done.stderr, done.stderr  # none of torch, transformers, pymilvus, ...
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "rag_pack_data").exists()
    if one_line:
        assert done.stderr.startswith("error: ")
        assert done.stderr.count("\n") == 2  # the error line, then the probe's own line


# --------------------------------------------------------------------------- one-line errors
@pytest.mark.parametrize("question", ["", "   ", "\n\t"])
def test_an_empty_question_is_one_line_and_creates_nothing(
    question: str, in_empty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "ask", question)
    assert code == 2
    assert (
        err == 'error: The question is empty: ask something, e.g. rag-pack ask "What is Milvus?".\n'
    )
    assert out == ""
    assert list(in_empty_dir.iterdir()) == []


def test_an_empty_question_among_several_is_named(in_empty_dir: Path, capsys) -> None:
    code, _, err = _run(capsys, "ask", "What is Milvus?", " ", "Why?")
    assert code == 2
    assert err.startswith("error: Question 2 is empty")


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("http://127.0.0.1:99999", "has an invalid port: use a port from 1 to 65535"),
        ("http://127.0.0.1:0", "has an invalid port"),
        ("ftp://127.0.0.1:19530", "has the unknown scheme 'ftp': use http://"),
        ("http://:19530", "names no host"),
    ],
)
def test_an_invalid_uri_names_it_and_says_what_to_do(
    uri: str, message: str, in_empty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "--uri", uri, "ask", "What is Milvus?")
    assert code == 2
    assert err.startswith(f"error: --uri {uri!r} ")
    assert message in err and err.count("\n") == 1
    assert "Traceback" not in out + err
    assert list(in_empty_dir.iterdir()) == []


def test_an_unreachable_server_is_one_line_naming_the_uri(
    in_empty_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"http://127.0.0.1:{_closed_port()}"
    for argv in (["ask", "What is Milvus?"], ["chat"], ["route", "What is Milvus?"]):
        code, out, err = _run(capsys, "--uri", uri, *argv)
        assert code == 2
        assert err.startswith(f"error: Cannot reach Milvus at {uri} (")
        assert "milvus-lite server" in err and err.count("\n") == 1
        assert out == ""  # nothing loaded, no model lines
    assert list(in_empty_dir.iterdir()) == []


def test_a_silent_server_fails_within_the_connect_timeout(monkeypatch) -> None:
    seen: dict[str, Any] = {}

    def hangs(address: tuple[str, int], timeout: float) -> None:
        seen.update(address=address, timeout=timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(checks.socket, "create_connection", hangs)
    with pytest.raises(MilvusUnavailableError, match=r"Cannot reach Milvus at http://10\.1\.2\.3"):
        checks.check_uri("http://10.1.2.3")
    assert seen == {"address": ("10.1.2.3", 19530), "timeout": checks.CONNECT_TIMEOUT_S}
    assert checks.CONNECT_TIMEOUT_S < 5


def test_a_failed_first_ask_leaves_no_database_behind(in_empty_dir: Path, capsys) -> None:
    code, _, err = _run(capsys, "ask", "What is Milvus?")
    assert code == 2
    assert err.startswith("error: No collection 'rag_pack' in Milvus at rag_pack_data/milvus.db")
    assert "rag-pack index PATH" in err
    code, _, err = _run(capsys, "chat")
    assert code == 2 and err.startswith("error: No collection 'rag_pack'")
    assert not (in_empty_dir / "rag_pack_data").exists()


def test_uri_and_question_checks() -> None:
    assert checks.server_address("grpc://milvus.internal") == ("milvus.internal", 19530)
    assert checks.server_address("unix:/tmp/milvus.sock") is None
    assert not checks.is_server_uri("./data/milvus.db")
    with pytest.raises(ConfigurationError, match="path ending in '.db'"):
        checks.check_uri("./data/milvus")
    assert checks.questions_from(["a?", "-"], io.StringIO("b?\n\n  c? \n")) == ["a?", "b?", "c?"]
    with pytest.raises(ConfigurationError, match="No question on stdin"):
        checks.questions_from(["-"], io.StringIO("\n  \n"))
    lines = ["q1\n", "\n", " q2 ", "EXIT\n", "q3\n"]
    assert list(checks.lines_until_exit(lines)) == ["q1", "q2"]


# --------------------------------------------------------------------------- sessions
@pytest.fixture(scope="module")
def index_uri(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("session") / "milvus.db")
    RagPack(DOCS, uri=uri, embed_model=embed_model, llm=ScriptedLLM(replies=[]))
    return uri


def _last_message(prompt: str) -> str:
    return prompt.split("Last message:", 1)[1].split("\n", 1)[0].strip()


def _context_answer(prompt: str) -> str:
    """A chat follow-up kept as it stands; an answer citing the first chunk."""
    if "Standalone question:" in prompt:
        return _last_message(prompt)
    return "It is in the context [1](id=1)."


def _resolving_answer(prompt: str) -> str:
    """A chat follow-up's "it" resolved to the thing the conversation asked about first."""
    if "Standalone question:" in prompt:
        thing = re.search(r"user: What is (\w+)\?", prompt)
        return "Standalone question: " + _last_message(prompt).replace(" it ", f" {thing[1]} ")
    return "It is in the context [1](id=1)."


@pytest.fixture()
def counted_models(monkeypatch: pytest.MonkeyPatch, embed_model: Any) -> dict[str, int]:
    """Every LLM the CLI resolves and every embedding model it would load from disk, counted
    (the loaded model is the session's one; the LLM is scripted)."""
    calls = {"llm": 0, "embed": 0}
    llm = ScriptedLLM(replies=_context_answer)

    def resolve_llm(spec: Any = None) -> ScriptedLLM:
        calls["llm"] += 1
        return llm

    def load_embedding(*args: Any) -> Any:
        calls["embed"] += 1
        return embed_model

    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", resolve_llm)
    monkeypatch.setattr(
        "llama_index_rag_pack.models.settings._load_local_embedding", load_embedding
    )
    monkeypatch.delenv("RAG_PACK_EMBED_MODEL", raising=False)
    return calls


def _timing_rows(err: str) -> list[str]:
    return err.split("\nTimings:\n", 1)[1].splitlines()


@pytest.mark.slow
def test_a_chat_session_of_five_questions_loads_each_model_once(
    index_uri: str, counted_models: dict[str, int], monkeypatch, capsys
) -> None:
    script = "\n".join([QUESTIONS[0], "", *QUESTIONS[1:], "exit", "never asked?"]) + "\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    code, out, err = _run(capsys, "--uri", index_uri, "chat", "--no-stream", "--format", "text")
    assert code == 0, err
    assert counted_models == {"llm": 1, "embed": 1}
    assert re.findall(r"^Q: (.*)$", out, flags=re.M) == list(QUESTIONS)
    assert out.count("It is in the context [1].") == 5
    # the progress lines: each model once, with the seconds it took
    assert len(re.findall(r"^loading embedding model \.\.\. \d+\.\d s$", err, re.M)) == 1
    assert len(re.findall(r"^loading LLM \(ScriptedLLM.*\) \.\.\. \d+\.\d s$", err, re.M)) == 1
    rows = _timing_rows(err)
    assert sum("loading embedding model" in r for r in rows) == 1
    assert sum("loading LLM" in r for r in rows) == 1
    assert [r.split(": ", 1)[1] for r in rows if " s  answer " in r] == list(QUESTIONS)


@pytest.mark.slow
def test_chat_keeps_the_conversation_and_its_commands(
    index_uri: str, counted_models: dict[str, int], monkeypatch, capsys
) -> None:
    llm = ScriptedLLM(replies=_resolving_answer)
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    script = "What is Milvus?\nIs it open source?\n/sources\n/history\n/reset\n/history\n/x\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(script))
    code, out, err = _run(capsys, "--uri", index_uri, "chat", "--format", "text")
    assert code == 0, err
    assert "(searched: Is Milvus open source?)" in err  # the follow-up, resolved
    assert out.count("It is in the context [1].") == 2  # streamed, with citations
    history = out.split("user: What is Milvus?", 1)[1]
    assert "assistant: It is in the context.\nuser: Is it open source?" in history
    assert "(conversation forgotten)" in out and "(no conversation yet)" in out
    after = out.split("Is it open source?", 1)[1]
    assert after.count("Sources:") == 2  # the answer's references, then /sources' listing
    assert "unknown command '/x'" in err and "/reset" in out.rsplit("/x", 1)[-1]
    assert re.findall(r"^Q: (.*)$", out, flags=re.M) == ["What is Milvus?", "Is it open source?"]


def test_chat_show_sources_prints_each_turns_evidence(
    index_uri: str, counted_models: dict[str, int], monkeypatch, capsys
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("What is Milvus?\nIs it open source?\n"))
    code, out, err = _run(capsys, "--uri", index_uri, "chat", "--no-stream", "--show-sources")
    assert code == 0, err
    assert out.count("Evidence (") == 2  # the cited passage of every turn, highlighted
    assert "Milvus is an open-source vector database" in out.split("Evidence (", 1)[1]


def test_chat_goes_on_after_a_failing_question(
    index_uri: str, counted_models: dict[str, int], monkeypatch, capsys
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("What is Milvus?\nWhy?\n"))
    code, out, err = _run(
        capsys, "--uri", index_uri, "chat", "--no-stream", "--mode", "raptor"
    )  # no RAPTOR tree here: every question fails with the same one-line error
    assert code == 0
    assert err.count("error: No RAPTOR tree for collection 'rag_pack': build one with") == 2
    assert "Traceback" not in err and out.count("Q: ") == 2


def test_ask_answers_several_questions_from_arguments_and_stdin(
    index_uri: str, counted_models: dict[str, int], monkeypatch, capsys
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{QUESTIONS[2]}\n\n{QUESTIONS[3]}\n"))
    code, out, err = _run(
        capsys, "--uri", index_uri, "ask", QUESTIONS[0], "-", QUESTIONS[4], "--no-stream"
    )
    assert code == 0, err
    assert counted_models == {"llm": 1, "embed": 1}
    expected = [QUESTIONS[0], QUESTIONS[2], QUESTIONS[3], QUESTIONS[4]]
    assert re.findall(r"^Q: (.*)$", out, flags=re.M) == expected
    assert sum(" s  answer " in r for r in _timing_rows(err)) == 4


@pytest.mark.slow
@pytest.mark.integration
def test_chat_reads_piped_stdin_in_a_subprocess(tmp_path: Path) -> None:
    # its own database: Milvus Lite serves one process per database
    (tmp_path / "docs").mkdir()
    for doc in DOCS:
        (tmp_path / "docs" / f"{doc.doc_id}.txt").write_text(doc.text)
    driver = (
        "import sys\n"
        "from llama_index.core import Settings\n"
        "from llama_index_rag_pack.testing import ScriptedLLM\n"
        "Settings.llm = ScriptedLLM(replies=lambda p: 'Scripted answer [1](id=1).')\n"
        "from llama_index_rag_pack.cli import main\n"
        "assert main(['--uri', 'chat.db', 'index', 'docs']) == 0\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", driver, "--uri", "chat.db", "chat", "--format", "text"],
        input="\n".join(QUESTIONS) + "\nquit\n",
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("Scripted answer [1].") == 5
    # one progress line per model, and one row per model in the timings
    assert len(re.findall(r"^loading embedding model \.\.\. ", done.stderr, re.M)) == 1
    assert len(re.findall(r"^loading LLM \(ScriptedLLM", done.stderr, re.M)) == 1
    rows = _timing_rows(done.stderr)
    assert sum("loading" in r for r in rows) == 2 and sum("answer" in r for r in rows) == 5
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- ask --route
@pytest.fixture(scope="module")
def routed_uri(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> str:
    uri = str(tmp_path_factory.mktemp("routed") / "milvus.db")
    RoutedRagPack(
        [
            RouteSource(
                "space",
                "Astronomy: planets, stars, the Moon",
                ("Which planet is the biggest?",),
                documents=[
                    Document(
                        text="Jupiter is the largest planet in the Solar System.",
                        metadata={"title": "Jupiter", "url": "https://example.org/jupiter"},
                    )
                ],
            ),
            RouteSource(
                "food",
                "Cooking: recipes, bread, onions",
                ("How do I bake bread?",),
                collection_name="food_docs",
                documents=[
                    Document(
                        text="Bread dough rises because yeast ferments sugar.",
                        metadata={"title": "Bread", "url": "https://example.org/bread"},
                    )
                ],
            ),
        ],
        uri=uri,
        embed_model=embed_model,
        llm=ScriptedLLM(replies=[]),
    )
    return uri


@pytest.fixture()
def routes_file(tmp_path: Path) -> str:
    path = tmp_path / "routes.json"
    path.write_text(
        json.dumps(
            [
                {"name": "space", "collection": "space", "description": "Astronomy, planets"},
                {"name": "cooking", "collection": "food_docs", "description": "Cooking, baking"},
            ]
        )
    )
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "marker", "listing"),
    [
        ("text", "Yeast ferments sugar [1].", "  [1] Bread — https://example.org/bread"),
        ("markdown", "<sup>[[1](https://example.org/bread)]</sup>", "- **1** [Bread]"),
    ],
)
def test_ask_route_answers_through_the_cited_engine(
    routed_uri: str, routes_file: str, counted_models, monkeypatch, capsys, fmt, marker, listing
) -> None:
    llm = ScriptedLLM(replies=lambda prompt: "Yeast ferments sugar [1](id=1).")
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    code, out, err = _run(
        capsys,
        *("--uri", routed_uri, "ask", "Why does bread dough rise?", "--routes", routes_file),
        *("--format", fmt),
    )
    assert code == 0, err
    assert "route     : cooking" in out
    assert marker in out and listing in out
    assert "](id=" not in out and "Empty Response" not in out
    assert len(llm.prompts) == 1  # routing made no LLM call; the question was routed once


@pytest.mark.slow
def test_ask_route_without_a_match_names_the_closest_route(
    routed_uri: str, routes_file: str, counted_models, monkeypatch, capsys
) -> None:
    llm = ScriptedLLM(replies=[])  # any LLM call would fail the test
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    argv = ["--uri", routed_uri, "ask", "Who won the 1998 world cup?", "--routes", routes_file]
    code, out, err = _run(capsys, *argv, "--route-threshold", "0.6")
    assert code == 1, err
    line = next(x for x in out.splitlines() if x.startswith("No route fits"))
    assert re.search(
        r"the closest route is '(space|cooking)' with score 0\.\d{3} < threshold 0\.600", line
    )
    assert "--route-fallback NAME" in line and "Empty Response" not in out

    llm = ScriptedLLM(replies=lambda prompt: "The context does not say [1](id=1).")
    monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda spec=None: llm)
    code, out, err = _run(
        capsys, *argv, "--route-threshold", "0.6", "--route-fallback", "space", "--format", "text"
    )
    assert code == 0, err
    assert "route     : space (fallback)" in out
    assert re.search(r"why       : space: no route reached its threshold \(best '\w+'", out)
    assert "The context does not say [1]." in out and "  [1] Jupiter" in out


# --------------------------------------------------------------------------- --filter / --tenant
@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("doc_id => 'x'", "Bad filter at column 8: unknown operator '=>'"),
        ('doc_id == "x', "Bad filter at column 11: a string is not closed"),
        ("colour == 'red'", "--filter names 'colour', which no chunk"),
        ("lower(doc_id) == 'x'", "Bad filter at column 1: unknown function 'lower'"),
    ],
)
def test_a_bad_filter_is_one_line_before_any_model_loads(
    index_uri: str, counted_models: dict[str, int], capsys, expression: str, message: str
) -> None:
    code, _, err = _run(capsys, "--uri", index_uri, "ask", "What?", "--filter", expression)
    assert code == 2
    assert err.startswith(f"error: {message}"), err
    assert len(err.strip().splitlines()) == 1
    assert counted_models == {"llm": 0, "embed": 0}


@pytest.mark.slow
def test_a_filter_scopes_every_answer(
    index_uri: str, counted_models: dict[str, int], capsys
) -> None:
    code, out, err = _run(
        capsys, "--uri", index_uri, "ask", "What is Milvus?", "--no-stream",
        "--no-citations", "--filter", 'doc_id == "aardvark"',
    )  # fmt: skip
    assert code == 0, err
    assert "aardvark eats ants" in out and "vector database" not in out


def test_a_tenant_on_a_collection_without_tenants_is_refused(
    index_uri: str, counted_models: dict[str, int], capsys
) -> None:
    code, _, err = _run(capsys, "--uri", index_uri, "ask", "What?", "--tenant", "acme")
    assert code == 2 and "has no tenants" in err
    assert counted_models == {"llm": 0, "embed": 0}


@pytest.mark.slow
def test_show_usage_prints_what_the_llm_reported_for_each_answer_and_the_total(
    index_uri: str, counted_models: dict[str, int], monkeypatch, capsys
) -> None:
    from fake_openai_llm import fake_openai_server, pack_llm

    def usage_lines(err: str) -> list[tuple[int, ...]]:
        pattern = r"\(usage: ([\d,]+) prompt \+ ([\d,]+) completion = ([\d,]+) tokens in (\d+)"
        found = re.findall(pattern, err)
        return [tuple(int(n.replace(",", "")) for n in row) for row in found]

    with fake_openai_server() as fake:
        llm = pack_llm(fake)
        monkeypatch.setattr("llama_index_rag_pack.pack.pack_base.resolve_llm", lambda s=None: llm)
        code, out, err = _run(
            capsys,
            "--uri",
            index_uri,
            "ask",
            "What is Milvus?",
            "--show-usage",
            "--answer-style",
            "generative",
        )  # streamed: the answer's call ends with the stream
        assert code == 0, err
        spent = fake.spent()
        expected = (spent["prompt_tokens"], spent["completion_tokens"], spent["total_tokens"], 1)
        assert usage_lines(err) == [expected]
        assert "counted" not in err
        fake.clear()
        monkeypatch.setattr(sys, "stdin", io.StringIO("What is Milvus?\nIs it open source?\n"))
        code, out, err = _run(
            capsys, "--uri", index_uri, "chat", "--show-usage", "--answer-style", "generative"
        )
        assert code == 0, err
        turns = usage_lines(err)
        assert [t[3] for t in turns] == [1, 2]  # the follow-up was condensed first
        assert sum(t[2] for t in turns) == fake.spent()["total_tokens"]
        total = f"Usage, all answers: {fake.spent()['prompt_tokens']:,} prompt"
        assert total in err
