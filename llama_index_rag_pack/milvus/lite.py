"""Who holds a Milvus Lite database, and opening one safely inside a process.

Milvus Lite keeps an advisory ``flock`` on ``<name>.db/LOCK`` while a database is open. The
kernel drops that lock when its holder exits, even after ``kill -9``: a ``LOCK`` *file* left
behind is harmless and a lock is never stale, but it may be held by a process the user does not
think of (another ``rag-pack``, a notebook kernel, a forked child that inherited the descriptor).

A ``flock`` also conflicts between two descriptors of *one* process. pymilvus starts one Milvus
Lite server per path and reuses it, but two threads opening the same path at once both start
one, and the later gets "another process holds the lock" from its own process. Opens of a Lite
path therefore go through :data:`LITE_OPEN_LOCK`.

When an open fails, :func:`lite_lock_problem` says which of these it is, naming the process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

LOCK_FILENAME = "LOCK"

#: Held while a ``MilvusClient`` or ``MilvusVectorStore`` opens a Milvus Lite path (reentrant:
#: opening a store opens a client first).
LITE_OPEN_LOCK = threading.RLock()


def lock_is_held(uri: str) -> bool:
    """True when some process (this one included) holds the lock of the Lite database ``uri``."""
    lock = Path(uri) / LOCK_FILENAME
    if not lock.is_file():
        return False
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        return False
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:  # unreadable: say nothing rather than guess
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing our descriptor drops the lock we may have taken
    return False


def lock_holders(uri: str) -> list[int]:
    """Process ids that have the ``LOCK`` file of ``uri`` open (Linux ``/proc``; empty
    elsewhere or when it cannot be read)."""
    lock = Path(uri) / LOCK_FILENAME
    try:
        target = os.stat(lock)
    except OSError:
        return []
    proc = Path("/proc")
    if not proc.is_dir():  # pragma: no cover - not Linux
        return []
    pids = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and _has_open(entry / "fd", target):
            pids.append(int(entry.name))
    return sorted(pids)


def _has_open(fd_dir: Path, target: os.stat_result) -> bool:
    try:
        fds = list(fd_dir.iterdir())
    except OSError:  # another user's process, or it just exited
        return False
    for fd in fds:
        try:
            st = os.stat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def describe_process(pid: int) -> str:
    """``pid`` and its command line, e.g. ``process 4242 (python -m http.server)``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"process {pid}"
    cmd = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())
    if len(cmd) > 80:
        cmd = cmd[:77] + "..."
    return f"process {pid} ({cmd})" if cmd else f"process {pid}"


def lite_lock_problem(uri: str) -> str | None:
    """Why the Lite database ``uri`` cannot be opened because of its lock, or ``None`` when its
    lock is free (a ``LOCK`` file without a holder is left from an earlier run and harmless).
    """
    if not lock_is_held(uri):
        return None
    holders = lock_holders(uri)
    if holders == [os.getpid()]:
        if _served_here(uri):  # our own open database: the failure was something else
            return None
        return (
            f"Milvus Lite database {uri} is already open in this process through another "
            "Milvus Lite instance (an earlier open failed part-way). Restart the program; reuse "
            "one client or vector store per database."
        )
    others = [pid for pid in holders if pid != os.getpid()]
    who = (", " + ", ".join(describe_process(pid) for pid in others)) if others else ""
    return (
        f"Milvus Lite database {uri} is in use by another process{who} (one process per "
        "database). Close that process, or serve the directory with `milvus-lite server "
        f"--data-dir {uri} --host 127.0.0.1 --port 19530` and connect every process to "
        "uri=http://127.0.0.1:19530."
    )


def _served_here(uri: str) -> bool:
    """True when this process's Milvus Lite server manager has ``uri`` open."""
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # pragma: no cover - milvus-lite is a dependency
        return False
    return os.path.abspath(uri) in getattr(server_manager_instance, "_servers", {})


def is_lite_path(uri: str | None) -> bool:
    """True for a Milvus Lite database path (``*.db``, no ``scheme://``)."""
    return bool(uri) and "://" not in str(uri) and str(uri).endswith(".db")


@contextlib.contextmanager
def discard_new_lite_db_on_failure(uri: str | None) -> Iterator[None]:
    """Remove the Milvus Lite database ``uri`` (and the folder made for it) when the block fails
    and the database did not exist before it: a failed or interrupted first ingest leaves nothing
    behind. An existing database, or a server ``uri``, is never touched.
    """
    if not is_lite_path(uri):
        yield
        return
    path = Path(os.path.abspath(str(uri)))
    new_parents = [p for p in (path, path.parent) if not p.exists()]
    try:
        yield
    except BaseException:
        if new_parents:
            _release_lite_server(path)
            for folder in new_parents:
                shutil.rmtree(folder, ignore_errors=True)
            logger.info("Removed the half-created Milvus Lite database %s", path)
        raise


def _release_lite_server(path: Path) -> None:
    """Stop this process's Milvus Lite server of ``path`` (and release its lock)."""
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # pragma: no cover - milvus-lite is a dependency
        return
    server_manager_instance.release_server(str(path))


__all__ = [
    "discard_new_lite_db_on_failure",
    "is_lite_path",
    "LITE_OPEN_LOCK",
    "describe_process",
    "lite_lock_problem",
    "lock_holders",
    "lock_is_held",
]
