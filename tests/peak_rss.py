"""``PeakRSS``: the peak growth of this process's resident memory while a block runs (the memory
guarantees of the SQL tests). Sampled every few milliseconds from ``/proc/self/statm``; on a
platform without it nothing is measured (growth 0: the tests that need it skip there)."""

from __future__ import annotations

import os
import threading

HAS_PROC = os.path.exists("/proc/self/statm")


class PeakRSS:
    """Samples this process's resident memory every few ms; ``growth`` is the peak increase."""

    def __init__(self) -> None:
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _rss(self) -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * self._page
        except OSError:  # not Linux: no measurement
            return 0

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self._rss())
            if self._stop.wait(0.003):  # wakes at once when the block is over
                return

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base
