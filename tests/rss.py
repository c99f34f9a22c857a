"""Measure a process's peak anonymous RSS (RssAnon) by sampling /proc/self/status in a thread."""

from __future__ import annotations

import threading
import time


def rss_anon_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakRssAnon:
    """Context manager: ``peak`` is the highest RssAnon seen while inside, minus the start value."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.start = 0
        self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_anon_bytes() - self.start)
            time.sleep(self.interval)

    def __enter__(self) -> PeakRssAnon:
        self.start = rss_anon_bytes()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon_bytes() - self.start)
