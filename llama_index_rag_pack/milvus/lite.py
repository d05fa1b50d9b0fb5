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

:func:`lite_columns` reads every live row of a collection served in this process straight from
Milvus Lite's segments (the in-memory copies' source): Lite answers each page of a query
iterator by gathering and sorting the whole collection, so the copies of 100,000 documents and
their sentences took 99 s page by page.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_rag_pack.core.similarity import UnitRows

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
    "BACKGROUND_WAIT_S",
    "discard_new_lite_db_on_failure",
    "lite_columns",
    "served_here",
    "is_lite_path",
    "LITE_OPEN_LOCK",
    "describe_process",
    "lite_lock_problem",
    "lock_holders",
    "lock_is_held",
]


#: The longest :func:`lite_columns` waits for Lite's background merge of a flush's files.
BACKGROUND_WAIT_S = 600


def _lite_database(client: Any) -> Any:
    """The Milvus Lite database this process serves ``client`` from, else ``None``."""
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError:  # pragma: no cover - milvus-lite is a dependency
        return None
    config = getattr(client, "_config", None)  # MilvusClient: its server, its database
    address = getattr(config, "address", None)
    servers = getattr(server_manager_instance, "_servers", {})
    dbs = [db for _, db, port in list(servers.values()) if f"127.0.0.1:{port}" == address]
    return dbs[0] if len(dbs) == 1 else None


def served_here(client: Any) -> bool:
    """Whether ``client`` is served by Milvus Lite in this process, so :func:`lite_columns`
    reads its collections' vectors without copying them."""
    try:
        return _lite_database(client) is not None
    except Exception:  # any other client
        return False


def lite_columns(client: Any, collection_name: str, fields: Sequence[str]) -> dict[str, Any] | None:
    """``fields`` of every live row of ``collection_name``, read from the segments and the
    unflushed rows of the Milvus Lite database ``client`` is served by in this process: the
    collection's vector field as a :class:`~llama_index_rag_pack.core.similarity.UnitRows` over
    Lite's own arrays (no copy of the vectors), any other field as a list, row ``i`` of each
    the same row. A row deleted or written again counts as Lite's own queries count it
    (Lite's own mask of live rows).

    ``None`` when the client is not served by Milvus Lite in this process, or this Lite release
    keeps its rows differently: then read the rows with queries (the result is the same,
    slower; ``tests/milvus/test_vector_memory.py`` checks that this release is read here).
    """
    try:
        from milvus_lite.search.bitmap import build_valid_mask

        db = _lite_database(client)
        if db is None:
            return None
        config = getattr(client, "_config", None)
        collection = db.get_collection(collection_name, config.db_name or "default")
        # Lite merges a flush's data files in the background: the arrays read are the merged
        # ones, not those about to be dropped (which the search would keep alive)
        collection._wait_for_bg(timeout=BACKGROUND_WAIT_S)
        segments, deltas = collection._read_snapshot()  # as Lite's own query reads them
        memtable, vector_field = collection._memtable, collection._vector_name
        segments = [segment for segment in segments if segment.num_rows]
        unflushed = memtable.to_search_snapshot(vector_field=vector_field)
        # every candidate row, as Lite's query lists them: the segments', then the unflushed
        pks = [pk for segment in segments for pk in segment.pks] + list(unflushed[0])
        seqs = np.concatenate([*(segment.seqs for segment in segments), unflushed[1]])
        live = build_valid_mask(pks, seqs.astype(np.uint64), deltas, memtable=memtable)
        sources: list[Any] = [*segments, unflushed]
        return {
            field: _live_column(field, field == vector_field, sources, live, memtable)
            for field in fields
        }
    except Exception as e:  # not Lite, or a Lite release whose internals differ
        logger.debug("Collection %r not read from Lite's segments: %s", collection_name, e)
        return None


def _live_column(
    field: str, vectors: bool, sources: list[Any], live: np.ndarray, memtable: Any
) -> Any:
    """One field of :func:`lite_columns`: the live rows of each source in turn (a segment, then
    the unflushed rows' snapshot ``(pks, seqs, vectors, row references, table)``). Vectors are
    not copied: a :class:`~llama_index_rag_pack.core.similarity.UnitRows` over each source's
    own array and the rows it keeps."""
    from milvus_lite.search.assembler import materialize_record

    blocks: list[tuple[np.ndarray, np.ndarray | None]] = []
    values: list[Any] = []
    start = 0
    for source in sources:
        unflushed = isinstance(source, tuple)
        rows = len(source[0]) if unflushed else source.num_rows
        keep = live[start : start + rows]
        start += rows
        if vectors:
            if rows and keep.any():
                block = np.asarray(source[2] if unflushed else source.vectors, dtype=np.float32)
                kept = None if keep.all() else np.flatnonzero(keep)
                blocks.append((block.reshape(rows, -1), kept))
        elif unflushed:  # materialised as Lite's query does
            kept = [ref for ref, k in zip(source[3], keep.tolist(), strict=True) if k]
            values.extend(materialize_record((memtable, ref))[field] for ref in kept)
        else:  # a flushed segment's column
            column = source.table.column(field).to_pylist()
            values.extend(v for v, k in zip(column, keep.tolist(), strict=True) if k)
    return UnitRows(blocks) if vectors else values
