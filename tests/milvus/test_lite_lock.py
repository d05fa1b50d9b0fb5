"""Milvus Lite's database lock: held by a live process (named), left behind by a dead one
(harmless), or taken twice inside one process (never reported as "another process")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llama_index_rag_pack.core.errors import MilvusUnavailableError
from llama_index_rag_pack.milvus.connection import open_client, open_vector_store
from llama_index_rag_pack.milvus.lite import lite_lock_problem, lock_holders, lock_is_held

HOLDER = """
import sys, time
from llama_index_rag_pack.milvus.connection import open_client
client = open_client(sys.argv[1])
client.create_collection("held", dimension=4) if not client.has_collection("held") else None
print("ready", flush=True)
time.sleep(600)
"""


def start_holder(uri: str) -> subprocess.Popen[str]:
    """A second process that opens ``uri`` and keeps it open; returns once it holds the lock."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, uri], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # readiness: the child says so once its database is open
    assert line.strip() == "ready", f"holder exited with {proc.poll()}"
    return proc


def wait_until(condition: object, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@pytest.mark.integration
def test_a_lock_held_by_a_live_process_names_it(tmp_path: Path) -> None:
    uri = str(tmp_path / "held.db")
    proc = start_holder(uri)
    try:
        assert lock_is_held(uri) and lock_holders(uri) == [proc.pid]
        with pytest.raises(MilvusUnavailableError) as info:
            open_client(uri)
        message = str(info.value)
        assert f"is in use by another process, process {proc.pid} (" in message
        assert "milvus-lite server --data-dir" in message and "\n" not in message
        with pytest.raises(MilvusUnavailableError, match=f"process {proc.pid}"):
            open_vector_store(uri, "rag_pack", dim=384)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.integration
def test_a_lock_left_by_a_killed_process_is_not_reported(tmp_path: Path) -> None:
    uri = str(tmp_path / "stale.db")
    proc = start_holder(uri)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (Path(uri) / "LOCK").exists(), "the LOCK file stays behind"
    assert wait_until(lambda: not lock_is_held(uri)), "the kernel drops a dead holder's lock"
    assert lite_lock_problem(uri) is None
    client = open_client(uri)  # opens, and the data the dead process wrote is there
    assert client.has_collection("held")


@pytest.mark.slow
def test_concurrent_opens_in_one_process_do_not_lock_each_other_out(tmp_path: Path) -> None:
    # pymilvus starts one Milvus Lite server per path; two threads opening a new path at once
    # used to start two, and the second failed with "another process holds the lock"
    uri = str(tmp_path / "threads.db")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []
    clients = []

    def open_one() -> None:
        barrier.wait()
        try:
            clients.append(open_client(uri))
        except BaseException as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(clients) == 4
    clients[0].create_collection("c", dimension=4)
    assert all(c.has_collection("c") for c in clients), "one database behind every client"
    # this process holds the lock through its own open database: no lock problem to report
    assert lock_is_held(uri) and lite_lock_problem(uri) is None


def test_a_lock_taken_twice_in_this_process_is_not_blamed_on_another(tmp_path: Path) -> None:
    import fcntl

    uri = tmp_path / "self.db"
    uri.mkdir()
    fd = os.open(uri / "LOCK", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(MilvusUnavailableError) as info:
            open_client(str(uri))
        assert "already open in this process" in str(info.value)
        assert "another process" not in str(info.value)
    finally:
        os.close(fd)
