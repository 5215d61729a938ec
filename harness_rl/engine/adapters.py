"""Which adapter versions are loaded in the engine, who is using them, and when an old one may go.

A trainer publishes `<harness>-v<k>` next to the versions still in use; rollout sessions acquire the name they
sample from and release it when done. Retiring a version below the staleness window unloads it at once when
nobody uses it, and otherwise at the last release, so a request in flight always finishes on its version.
"""

from __future__ import annotations

import logging
import threading
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
    """Publishing would exceed the harness's live-version limit (the engine's adapter slots)."""


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


class AdapterRegistry:
    """Thread-safe bookkeeping of the adapter versions loaded in one engine.

    Args:
        client: Loads and unloads adapters in the engine.
        max_live_versions: Most versions of one harness loaded at once, retired-but-in-use ones included.
    """

    def __init__(self, client: AdapterAdmin, max_live_versions: int):
        if max_live_versions < 1:
            raise ValueError("max_live_versions must be >= 1")
        self._client = client
        self._max = max_live_versions
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def publish(self, harness: str, version: int, path: str | Path) -> str:
        """Load a new adapter version into the engine next to the live ones.

        Args:
            harness: The harness (trainer) the adapter belongs to.
            version: Its version number; must be newer than every version published before for the harness.
            path: PEFT adapter directory readable by the engine.

        Returns:
            The engine-side name, `<harness>-v<version>`.

        Raises:
            ValueError: The version is not newer than the latest one.
            AdapterSlotsFull: The harness already has `max_live_versions` versions loaded.
            EngineError: The engine refused to load it (nothing is recorded then).
        """
        name = adapter_name(harness, version)
        with self._lock:
            mine = [e for e in self._entries.values() if e.harness == harness]
            if any(e.version >= version for e in mine):
                latest = max(e.version for e in mine)
                raise ValueError(f"{name}: version must be newer than the latest published v{latest}")
            if len(mine) >= self._max:
                in_use = sorted(f"v{e.version}({e.uses} in use)" for e in mine)
                raise AdapterSlotsFull(
                    f"{name}: {harness} already has {len(mine)} of {self._max} versions loaded: "
                    f"{', '.join(in_use)}; retire older versions first"
                )
            # Reserve the slot before the slow load so concurrent publishes cannot overshoot the limit.
            self._entries[name] = _Entry(harness, version, str(path), retired=True, unloading=True)
        try:
            self._client.load_adapter(name, path)
        except BaseException:
            with self._lock:
                del self._entries[name]
            raise
        with self._lock:
            entry = self._entries[name]
            entry.retired = entry.unloading = False
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

    def _unload(self, name: str) -> None:
        try:
            self._client.unload_adapter(name)
        except Exception:
            # Keep it recorded (retired, unused) so the next retire_older_than() call tries again.
            log.exception("unloading adapter %s failed; will retry on the next retire", name)
            with self._lock:
                self._entries[name].unloading = False
            return
        with self._lock:
            del self._entries[name]
        log.info("unloaded adapter %s", name)
