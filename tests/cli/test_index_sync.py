"""``rag-pack index DIR --sync`` and ``--watch``: the report line, the checks of the flags, and
the watch loop (a change is synced once it stands still; Ctrl-C stops it cleanly)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from llama_index_rag_pack.cli import main, watch


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_index_sync_reports_what_was_removed(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    docs = Path("docs")
    docs.mkdir()
    (docs / "a.txt").write_text("Aardvarks eat ants and termites at night.", encoding="utf-8")
    (docs / "b.txt").write_text("Bonobos live in the forests of the Congo.", encoding="utf-8")
    code, out, _ = _run(capsys, "--uri", "s.db", "index", "docs", "--sync")
    assert code == 0 and "2 new, 0 changed" in out
    (docs / "b.txt").unlink()
    code, out, _ = _run(capsys, "--uri", "s.db", "index", "docs", "--sync")
    assert code == 0
    assert "0 indexed as 0 chunks (0 new, 0 changed), 1 unchanged, 1 removed (1 file gone)" in out
    assert "now holds 1 chunks" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--watch"], "--watch keeps the collection in sync: use it with --sync."),
        (["--sync", "--watch", "--watch-every", "0"], "--watch-every takes a number of seconds"),
        (["--sync", "--watch", "--overwrite"], "--watch cannot be used with --overwrite"),
    ],
)
def test_bad_watch_flags_are_one_line(tmp_path, monkeypatch, capsys, argv, message) -> None:
    monkeypatch.chdir(tmp_path)
    Path("docs").mkdir()
    code, out, err = _run(capsys, "--uri", "w.db", "index", "docs", *argv)
    assert code == 2 and err.startswith("error: ") and message in err
    assert err.count("\n") == 1 and not Path("w.db").exists()


@pytest.mark.slow
def test_watch_syncs_after_a_change_and_stops_when_asked(tmp_path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("one", encoding="utf-8")
    runs: list[float] = []
    said: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=watch.watch,
        args=(lambda: runs.append(time.monotonic()), [folder]),
        kwargs={"interval": 0.05, "say": said.append, "stop": stop},
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not runs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(runs) == 1, "a first sync at once"
    time.sleep(0.2)
    assert len(runs) == 1, "nothing changed: no sync"
    (folder / "b.md").write_text("two", encoding="utf-8")
    while len(runs) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    (folder / "a.txt").unlink()
    while len(runs) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert len(runs) == 3, "one sync per change (added, then removed)"
    assert said[0].startswith(f"Watching {folder} for changes")


def test_ctrl_c_stops_watching_cleanly(tmp_path) -> None:
    said: list[str] = []

    class Interrupted(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            raise KeyboardInterrupt

    code = watch.watch(lambda: None, [tmp_path], say=said.append, stop=Interrupted())
    assert code == 0 and said[-1] == "Stopped watching."


def test_snapshot_sees_supported_files_only(tmp_path) -> None:
    (tmp_path / "a.txt").write_text("x", encoding="utf-8")
    (tmp_path / "clip.gif").write_bytes(b"GIF89a")
    assert list(watch.snapshot([tmp_path], True)) == [str(tmp_path / "a.txt")]
    (tmp_path / "a.txt").unlink()
    assert watch.snapshot([tmp_path], True) == {}


@pytest.mark.slow
def test_a_failed_sync_round_is_one_line_and_the_watch_goes_on(tmp_path) -> None:
    from llama_index_rag_pack.core.errors import MilvusUnavailableError

    said: list[str] = []
    rounds: list[int] = []
    stop = threading.Event()

    def sync() -> None:
        rounds.append(1)
        if len(rounds) == 1:
            raise MilvusUnavailableError("Cannot reach Milvus at http://127.0.0.1:1 (refused).")
        stop.set()

    (tmp_path / "a.txt").write_text("one", encoding="utf-8")
    thread = threading.Thread(
        target=watch.watch,
        args=(sync, [tmp_path]),
        kwargs={"interval": 0.05, "say": said.append, "stop": stop},
    )
    thread.start()
    time.sleep(0.3)
    (tmp_path / "b.txt").write_text("two", encoding="utf-8")
    thread.join(10)
    assert not thread.is_alive() and len(rounds) == 2
    assert said[0] == "error: Cannot reach Milvus at http://127.0.0.1:1 (refused)."


def test_watch_and_sync_flags_parse_before_the_paths(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    Path("docs").mkdir()
    code, _, err = _run(
        capsys, "--uri", "w.db", "index", "--sync", "--watch", "--overwrite", "docs"
    )
    assert code == 2 and "--watch cannot be used with --overwrite" in err
