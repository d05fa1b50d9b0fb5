"""``rag-pack index DIR --sync --watch``: sync again whenever a file under the indexed paths is
added, changed or removed (polling: no file-system events, so it works the same on every OS and
on network drives), until Ctrl-C."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from llama_index_rag_pack.core.errors import EmptyCorpusError, RagPackError
from llama_index_rag_pack.documents.ingest import find_files

__all__ = ["DEFAULT_WATCH_SECONDS", "snapshot", "watch"]

#: Seconds between two looks at the files.
DEFAULT_WATCH_SECONDS = 2.0


def snapshot(paths: Sequence[str | Path], recursive: bool) -> dict[str, tuple[int, int]]:
    """Every supported file under ``paths`` with its modification time (ns) and size."""
    try:
        files = find_files(list(paths), recursive=recursive)
    except (EmptyCorpusError, RagPackError):  # nothing there (a folder removed): no files
        return {}
    state: dict[str, tuple[int, int]] = {}
    for path in files:
        try:
            st = path.stat()
        except OSError:  # removed between the listing and the look
            continue
        state[str(path)] = (st.st_mtime_ns, st.st_size)
    return state


def watch(
    sync: Callable[[], None],
    paths: Sequence[str | Path],
    *,
    recursive: bool = True,
    interval: float = DEFAULT_WATCH_SECONDS,
    say: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> int:
    """Run ``sync`` now and again after every change under ``paths``; 0 on Ctrl-C (or once
    ``stop`` is set). A change is acted on once it has stood still for one ``interval``, so a
    file being written is read whole; a sync that fails says why in one line and the watch
    goes on."""
    stop = stop or threading.Event()

    def sync_once() -> None:  # a failed round is said, and the next change tries again
        try:
            sync()
        except RagPackError as e:
            say(f"error: {e}")

    try:
        seen = snapshot(paths, recursive)  # before the sync: an edit during it is seen
        sync_once()
        where = ", ".join(map(str, paths))
        say(f"Watching {where} for changes (every {interval:g} s; Ctrl-C stops).")
        while not stop.wait(interval):
            now = snapshot(paths, recursive)
            if now == seen:
                continue
            if stop.wait(interval):
                break
            settled = snapshot(paths, recursive)
            if settled != now:  # still being written: look again next time
                continue
            say(f"{time.strftime('%H:%M:%S')} files changed: syncing")
            seen = settled
            sync_once()
    except KeyboardInterrupt:
        say("Stopped watching.")
    return 0
