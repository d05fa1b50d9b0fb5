"""A ``milvus-lite server`` on 127.0.0.1 that a test can kill and start again (same port, same
data), and a polling wait: no timing assertions, every wait polls for readiness with a generous
deadline."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DEADLINE = 120.0


def wait_for(condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class LiteServer:
    """A ``milvus-lite server`` on 127.0.0.1 that a test can kill and start again."""

    def __init__(self, data_dir: Path) -> None:
        self.exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
        self.data_dir, self.port = data_dir, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        for _ in range(5):  # the port may linger a moment after a kill: try again
            self.proc = subprocess.Popen(
                [self.exe, "server", "--data-dir", str(self.data_dir)]
                + ["--host", "127.0.0.1", "--port", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._ready(self.proc):
                return
            time.sleep(0.5)
        pytest.fail(f"milvus-lite server did not start on port {self.port}")

    def _ready(self, proc: subprocess.Popen[bytes]) -> bool:
        """Wait until ``proc`` listens (True) or exits (False: the port was still taken)."""
        wait_for(lambda: proc.poll() is not None or port_answers(self.port), "the server")
        return proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        wait_for(lambda: not port_answers(self.port), "the port to close")
