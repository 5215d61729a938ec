"""The memory side of the harness benchmark: peak RSS of every process this one started, and the machine's
lowest available memory, sampled from a thread while the sessions run."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import psutil


@dataclass
class MemorySampler:
    """Samples, every ``interval_s`` from a daemon thread, the RSS sum of this process's descendants, this
    process's own RSS and the machine's available memory; keeps the extremes."""

    interval_s: float = 0.2
    peak_children_rss: int = 0
    peak_children: int = 0
    peak_self_rss: int = 0
    start_available: int = 0
    min_available: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __enter__(self) -> MemorySampler:
        self.start_available = self.min_available = psutil.virtual_memory().available
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        me = psutil.Process()
        rss, n = 0, 0
        for child in me.children(recursive=True):
            try:
                rss += child.memory_info().rss
                n += 1
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self.peak_children_rss = max(self.peak_children_rss, rss)
        self.peak_children = max(self.peak_children, n)
        self.peak_self_rss = max(self.peak_self_rss, me.memory_info().rss)
        self.min_available = min(self.min_available, psutil.virtual_memory().available)
        self.samples += 1
