"""Which adapter versions are loaded in the engine, who is using them, and when an old one may go.

A trainer publishes `<harness>-v<k>` next to the versions still in use; rollout sessions acquire the name they
sample from and release it when done. Retiring a version below the staleness window unloads it at once when
nobody uses it, and otherwise at the last release, so a request in flight always finishes on its version.

A slow group can pin a retired version while the trainer keeps publishing, until the harness's slots
(``max_live_versions``) are all taken. Such a group fell out of the staleness window and would be dropped by the
trainer anyway, so a full publish never fails the run: it asks the harness's evictors (the rollout worker's
``cancel_stale``) to cancel the groups pinned to retired versions, waits up to ``evict_wait_s`` for their pins to
be released, and then unloads the oldest retired version even though it is still in use (its sessions' later
engine calls fail; their group is discarded). Only slots full of *live* versions, which means the caller never
retires, raise ``AdapterSlotsFull``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)


class AdapterAdmin(Protocol):
    """The part of the engine client the registry needs (EngineClient satisfies it)."""

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Called by publish(), outside the registry lock."""

    def unload_adapter(self, name: str) -> None:
        """Called once per retired version when its use count reaches 0, outside the registry lock."""


class AdapterSlotsFull(RuntimeError):
    """Every slot of the harness holds a live version: the caller publishes without retiring old versions."""


#: ``evictor(min_version)``: stop using every version of the harness below ``min_version`` (release the pins).
Evictor = Callable[[int], object]


def adapter_name(harness: str, version: int) -> str:
    """The engine-side name of a harness's adapter version, e.g. `mini_swe_agent-v3`."""
    return f"{harness}-v{version}"


@dataclass
class _Entry:
    harness: str
    version: int
    path: str
    uses: int = 0
    retired: bool = False
    unloading: bool = False
    #: Slot reserved by a publish whose load is still running (not yet live, never unloaded by a retire).
    loading: bool = False


class AdapterRegistry:
    """Thread-safe bookkeeping of the adapter versions loaded in one engine.

    Args:
        client: Loads and unloads adapters in the engine.
        max_live_versions: Most versions of one harness loaded at once, retired-but-in-use ones included.
        evict_wait_s: How long a full publish waits, after asking the evictors, for pins of retired versions to
            be released before it unloads the oldest one regardless.

    Attributes:
        evictions: Full publishes that asked the evictors to cancel stale users.
        forced_unloads: Retired versions unloaded while still in use (nobody released them in time).
    """

    def __init__(self, client: AdapterAdmin, max_live_versions: int, evict_wait_s: float = 10.0):
        if max_live_versions < 1:
            raise ValueError("max_live_versions must be >= 1")
        self._client = client
        self._max = max_live_versions
        self._evict_wait_s = evict_wait_s
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)  # notified whenever an entry leaves
        self._entries: dict[str, _Entry] = {}
        self._evictors: dict[str, list[Evictor]] = {}
        #: Versions unloaded while in use -> uses still outstanding; their releases are no-ops.
        self._evicted: dict[str, int] = {}
        self.evictions = 0
        self.forced_unloads = 0

    def add_evictor(self, harness: str, evictor: Evictor) -> None:
        """Register ``evictor(min_version)``, called when a publish of ``harness`` finds its slots full.

        It must stop the users of versions below ``min_version`` and release their pins (the rollout worker's
        ``cancel_stale``); it is called outside the registry lock, and its errors are logged, never raised.
        """
        with self._lock:
            self._evictors.setdefault(harness, []).append(evictor)

    def publish(self, harness: str, version: int, path: str | Path) -> str:
        """Load a new adapter version into the engine next to the live ones.

        When the harness's slots are full, retired versions still in use are evicted first (see the module
        docstring); this may block for up to ``evict_wait_s``.

        Args:
            harness: The harness (trainer) the adapter belongs to.
            version: Its version number; must be newer than every version published before for the harness.
            path: PEFT adapter directory readable by the engine.

        Returns:
            The engine-side name, `<harness>-v<version>`.

        Raises:
            ValueError: The version is not newer than the latest one.
            AdapterSlotsFull: Every slot holds a live (unretired) version: the caller never retires.
            EngineError: The engine refused to load it (nothing is recorded then).
        """
        name = adapter_name(harness, version)
        evicted_at: float | None = None  # when the evictors were asked
        while True:
            with self._lock:
                mine = [e for e in self._entries.values() if e.harness == harness]
                if any(e.version >= version for e in mine):
                    latest = max(e.version for e in mine)
                    raise ValueError(f"{name}: version must be newer than the latest published v{latest}")
                if len(mine) < self._max:
                    # Reserve the slot before the slow load so concurrent publishes cannot overshoot the limit.
                    self._entries[name] = _Entry(
                        harness, version, str(path), retired=True, unloading=True, loading=True
                    )
                    break
                live = [e for e in mine if not e.retired or e.loading]
                if len(live) >= self._max:
                    raise AdapterSlotsFull(
                        f"{name}: {harness} already has {len(mine)} of {self._max} live versions loaded "
                        f"({', '.join(sorted(f'v{e.version}' for e in live))}); retire older versions first "
                        "(retire_older_than after each publish)"
                    )
                if evicted_at is None:
                    # Retired unused entries are failed unloads waiting for a retry: retry them now, once.
                    retry = [n for n in (self._claim_unload(e) for e in mine) if n]
                    min_version = min((e.version for e in live), default=version)
                    evictors = list(self._evictors.get(harness, ()))
                else:
                    left_s = self._evict_wait_s - (time.monotonic() - evicted_at)
                    victim = self._claim_forced_unload(mine) if left_s <= 0 else None
                    if victim is None:  # still waiting, or another thread's unload is under way
                        self._released.wait(timeout=left_s if left_s > 0 else 1.0)
                        continue
            if evicted_at is None:
                for stale in retry:
                    self._unload(stale)
                with self._lock:
                    self.evictions += 1
                evicted_at = time.monotonic()
                log.info(
                    "%s: %s's adapter slots are full; cancelling users of versions < v%d", name, harness, min_version
                )
                for evictor in evictors:
                    try:
                        evictor(min_version)
                    except Exception:
                        log.exception("evictor of %s failed; the publish unloads a stale version itself", harness)
                continue
            log.warning(
                "%s: unloading %s although still in use (unreleased after %.0f s)", name, victim, self._evict_wait_s
            )
            if not self._unload(victim):
                raise AdapterSlotsFull(f"{name}: the engine refused to unload {victim} to free a slot for it")
        try:
            self._client.load_adapter(name, path)
        except BaseException:
            with self._lock:
                del self._entries[name]
                self._released.notify_all()
            raise
        with self._lock:
            entry = self._entries[name]
            entry.retired = entry.unloading = entry.loading = False
        log.info("published adapter %s from %s", name, path)
        return name

    def acquire(self, name: str) -> str:
        """Count one more user of a live version (e.g. a rollout session) and return its name.

        Raises:
            KeyError: The name is unknown or already retired; sessions must start on a live version.
        """
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.retired:
                state = "retired" if entry is not None else "not loaded"
                raise KeyError(f"adapter {name!r} is {state}")
            entry.uses += 1
            return name

    def release(self, name: str) -> None:
        """Count one user less; the last release of a retired version unloads it."""
        with self._lock:
            if self._evicted.get(name):  # unloaded while in use (see publish): nothing left to count
                self._evicted[name] -= 1
                if not self._evicted[name]:
                    del self._evicted[name]
                return
            entry = self._entries.get(name)
            if entry is None or entry.uses <= 0:
                raise KeyError(f"adapter {name!r} released more often than acquired")
            entry.uses -= 1
            to_unload = self._claim_unload(entry)
        if to_unload:
            self._unload(to_unload)

    def retire_older_than(self, harness: str, min_version: int) -> list[str]:
        """Retire every version of `harness` below `min_version`.

        Unused ones are unloaded now; the others when their last user releases them.

        Returns:
            The names unloaded by this call.
        """
        with self._lock:
            claimed = []
            for entry in self._entries.values():
                if entry.harness == harness and entry.version < min_version and not entry.unloading:
                    entry.retired = True
                    name = self._claim_unload(entry)
                    if name:
                        claimed.append(name)
        for name in claimed:
            self._unload(name)
        return claimed

    def live_versions(self, harness: str) -> list[int]:
        """Versions of `harness` that new sessions may acquire, oldest first."""
        with self._lock:
            return sorted(e.version for e in self._entries.values() if e.harness == harness and not e.retired)

    def latest(self, harness: str) -> str | None:
        """Name of the newest live version of `harness`, None if there is none."""
        versions = self.live_versions(harness)
        return adapter_name(harness, versions[-1]) if versions else None

    def uses(self, name: str) -> int:
        """Current use count of a loaded version (0 when unknown)."""
        with self._lock:
            entry = self._entries.get(name)
            return entry.uses if entry is not None else 0

    def loaded(self) -> list[str]:
        """Every name the registry believes is loaded in the engine, including retired ones still in use."""
        with self._lock:
            return sorted(self._entries)

    def _claim_unload(self, entry: _Entry) -> str | None:
        # Called with the lock held; marks the entry so exactly one caller performs the unload.
        if entry.retired and entry.uses == 0 and not entry.unloading:
            entry.unloading = True
            return adapter_name(entry.harness, entry.version)
        return None

    def _claim_forced_unload(self, mine: list[_Entry]) -> str | None:
        # Called with the lock held: the oldest retired version still in use gives up its slot; its users'
        # later releases are no-ops.
        in_use = sorted((e for e in mine if e.retired and not e.unloading), key=lambda e: e.version)
        if not in_use:
            return None
        entry = in_use[0]
        name = adapter_name(entry.harness, entry.version)
        self._evicted[name] = self._evicted.get(name, 0) + entry.uses
        entry.uses = 0
        entry.unloading = True
        self.forced_unloads += 1
        return name

    def _unload(self, name: str) -> bool:
        """Unload ``name`` from the engine and forget it; False (and kept for a retry) when the engine refuses."""
        try:
            self._client.unload_adapter(name)
        except Exception:
            # Keep it recorded (retired, unused) so the next retire_older_than() call tries again.
            log.exception("unloading adapter %s failed; will retry on the next retire", name)
            with self._lock:
                self._entries[name].unloading = False
            return False
        with self._lock:
            del self._entries[name]
            self._released.notify_all()
        log.info("unloaded adapter %s", name)
        return True
