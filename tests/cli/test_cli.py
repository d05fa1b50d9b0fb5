"""The rag-pack CLI: real indexing, and errors printed without tracebacks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_rag_pack.cli import main


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "milvus.md").write_text(
        "# Milvus\n\nMilvus is an open-source vector database built for AI."
    )
    (root / "sub" / "aardvark.txt").write_text("The aardvark eats ants and termites.")
    (root / "page.html").write_text(
        "<html><body><h1>Abacus</h1><p>The abacus is a counting frame.</p></body></html>"
    )
    (root / "ignored.bin").write_bytes(b"\x00\x01")
    return root


@pytest.mark.slow
def test_index_then_reopen_from_the_cli(corpus: Path, tmp_path: Path, capsys) -> None:
    uri = str(tmp_path / "cli.db")
    assert main(["--uri", uri, "index", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "3 documents" in out
    assert "now holds 3 chunks" in out
    # indexing the same files again replaces their chunks instead of duplicating them
    assert main(["--uri", uri, "index", str(corpus)]) == 0
    assert "now holds 3 chunks" in capsys.readouterr().out


@pytest.mark.slow
def test_ask_with_an_unusable_llm_is_a_clear_error(corpus: Path, tmp_path: Path, capsys) -> None:
    uri = str(tmp_path / "cli.db")
    assert main(["--uri", uri, "index", str(corpus)]) == 0
    capsys.readouterr()
    code = main(["--uri", uri, "--llm", str(tmp_path / "nope.gguf"), "ask", "What is Milvus?"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: Local LLM file not found")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["index", "/definitely/not/here"], "error: Path not found: '/definitely/not/here'"),
        (
            ["--uri", "http://127.0.0.1:9", "ask", "hi"],
            "error: Cannot reach Milvus at http://127.0.0.1:9",
        ),
        (
            ["--uri", "not-a-db-path", "ask", "hi"],
            "error: Milvus Lite needs a path ending in '.db'",
        ),
    ],
)
def test_user_errors_print_one_line_and_exit_2(argv, message, capsys) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message)
    assert "Traceback" not in captured.err + captured.out


def test_empty_directory_and_missing_collection(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["--uri", str(tmp_path / "a.db"), "index", str(empty)]) == 2
    assert "No supported files" in capsys.readouterr().err
    assert main(["--uri", str(tmp_path / "a.db"), "ask", "anything?"]) == 2
    assert "No collection 'rag_pack'" in capsys.readouterr().err


def test_blank_files_only(tmp_path: Path, capsys) -> None:
    (tmp_path / "blank.txt").write_text("   \n\n")
    assert main(["--uri", str(tmp_path / "a.db"), "index", str(tmp_path / "blank.txt")]) == 2
    assert "blank" in capsys.readouterr().err


def test_unknown_mode_is_rejected_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["ask", "q", "--mode", "telepathy"])
    assert info.value.code == 2
    assert "invalid choice: 'telepathy'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.integration
def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "rag-pack"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    for command in ("index", "ask", "demo"):
        assert command in out.stdout


@pytest.mark.slow
@pytest.mark.integration
def test_demo_answers_offline_with_the_local_llm(tmp_path: Path) -> None:
    """The demo's three questions (its articles that answer them): right and cited, quoted from
    the passages (the bundled 135M model answers extractively)."""
    env = {**os.environ, "RAG_PACK_DATA_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    exe = Path(sys.executable).parent / "rag-pack"
    out = subprocess.run(
        [str(exe), "demo", "--titles", "Aardvark", "Apollo 11", "Albert Einstein"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for noise in ("Traceback", "GOAWAY", "too_many_pings", "NotImplementedError"):
        assert noise not in out.stdout and noise not in out.stderr, (noise, out.stderr[-2000:])
    assert "local GGUF SmolLM2-135M-Instruct" in out.stdout
    assert "all-MiniLM-L6-v2 (bundled, CPU)" in out.stdout
    assert "answers   : extractive (auto: 135M weights, below 1B)" in out.stdout
    assert "Timings:" in out.stdout
    answers = out.stdout.split("\nQ: ")[1:]
    expected = {
        "Who were the astronauts of Apollo 11?": (("Armstrong", "Aldrin", "Collins"), "Apollo 11"),
        "What does the aardvark eat?": (("ants and termites",), "Aardvark"),
        "Where was Albert Einstein born?": (("Ulm",), "Albert Einstein"),
    }
    assert [a.split("\n", 1)[0] for a in answers] == list(expected)
    for answer, (facts, title) in zip(answers, expected.values(), strict=True):
        text, _, rest = answer.split("A: ", 1)[1].partition("Sources:")
        sources, _, evidence = rest.partition("Evidence (")
        for fact in facts:
            assert fact in text, (fact, text)
        assert re.findall(r"\[\d+\]$", text.strip(), flags=re.M), text  # each line cited
        assert title in sources and "(quoted from the passage)" in evidence
        assert ">>" in evidence and "<<" in evidence, "the quoted sentences marked in the passage"
    assert answers[2].split("A: ", 1)[1].startswith("Ulm [1]")


@pytest.mark.slow
def test_a_second_demo_run_reuses_the_index_and_reads_no_article(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llama_index_rag_pack.cli import app
    from llama_index_rag_pack.evaluation import datasets

    monkeypatch.setenv("RAG_PACK_DATA_DIR", str(tmp_path))
    reads: list[list[str]] = []
    read = datasets.load_wikipedia_documents
    monkeypatch.setattr(
        datasets, "load_wikipedia_documents", lambda titles: reads.append(titles) or read(titles)
    )
    answered: list[tuple[str, int]] = []  # answering itself is the subprocess test's job
    monkeypatch.setattr(app, "answer", lambda pack, q, **_: answered.append((q, pack.count())))
    argv = ["demo", "--titles", "Transport in Angola", "--question", "Which ports?"]

    assert main(argv) == 0
    first = capsys.readouterr().out
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert main([*argv, "--rebuild"]) == 0
    third = capsys.readouterr().out

    assert reads == [["Transport in Angola"], ["Transport in Angola"]]  # not on the reuse
    assert "reusing the existing index" in second and "chunking" not in second
    for out in (first, third):
        assert "chunking, embedding and indexing" in out and "reusing" not in out
    chunks = answered[0][1]
    assert chunks > 0 and answered == [("Which ports?", chunks)] * 3
