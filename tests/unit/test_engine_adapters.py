"""Adapter versions load next to live ones, and a retired version is unloaded only once nobody uses it."""

from __future__ import annotations

import threading

import pytest

from harness_rl.engine.adapters import AdapterRegistry, AdapterSlotsFull, adapter_name
from harness_rl.engine.client import EngineError


class RecordingEngine:
    """Test double for the engine's LoRA admin endpoints: records loads and unloads."""

    def __init__(self):
        self.loaded: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_next_unload = False

    def load_adapter(self, name, path):
        if name in self.loaded:
            raise EngineError(f"{name} already loaded", 400)
        self.calls.append(("load", name))
        self.loaded[name] = str(path)

    def unload_adapter(self, name):
        if self.fail_next_unload:
            self.fail_next_unload = False
            raise EngineError("engine busy", 503)
        self.calls.append(("unload", name))
        del self.loaded[name]


@pytest.fixture
def engine():
    return RecordingEngine()


def test_publish_names_and_loads(engine):
    reg = AdapterRegistry(engine, max_live_versions=3)
    assert reg.publish("pi", 0, "/a/v0") == "pi-v0" == adapter_name("pi", 0)
    assert reg.publish("pi", 1, "/a/v1") == "pi-v1"
    assert engine.loaded == {"pi-v0": "/a/v0", "pi-v1": "/a/v1"}
    assert reg.live_versions("pi") == [0, 1]
    assert reg.latest("pi") == "pi-v1"
    assert reg.latest("codex") is None


def test_versions_must_increase(engine):
    reg = AdapterRegistry(engine, max_live_versions=3)
    reg.publish("pi", 2, "/a")
    with pytest.raises(ValueError, match="newer"):
        reg.publish("pi", 2, "/b")


def test_unused_retired_version_unloads_at_once(engine):
    reg = AdapterRegistry(engine, max_live_versions=3)
    for v in range(3):
        reg.publish("pi", v, f"/a/v{v}")
    assert reg.retire_older_than("pi", 2) == ["pi-v0", "pi-v1"]
    assert sorted(engine.loaded) == ["pi-v2"]
    assert reg.live_versions("pi") == [2]


def test_in_use_version_unloads_at_last_release(engine):
    reg = AdapterRegistry(engine, max_live_versions=3)
    reg.publish("pi", 0, "/a/v0")
    reg.publish("pi", 1, "/a/v1")
    reg.acquire("pi-v0")
    reg.acquire("pi-v0")
    assert reg.retire_older_than("pi", 1) == []
    assert "pi-v0" in engine.loaded
    assert reg.live_versions("pi") == [1]
    with pytest.raises(KeyError, match="retired"):
        reg.acquire("pi-v0")  # new sessions must start on a live version
    reg.release("pi-v0")
    assert "pi-v0" in engine.loaded
    reg.release("pi-v0")
    assert "pi-v0" not in engine.loaded
    assert reg.loaded() == ["pi-v1"]


def test_slots_are_per_harness(engine):
    reg = AdapterRegistry(engine, max_live_versions=2)
    reg.publish("pi", 0, "/a")
    reg.publish("pi", 1, "/a")
    reg.publish("codex", 0, "/b")
    assert reg.publish("codex", 1, "/b") == "codex-v1"  # pi's two versions take none of codex's slots
    with pytest.raises(AdapterSlotsFull, match="retire older versions first"):
        reg.publish("pi", 2, "/a")  # both slots hold live versions: the caller forgot to retire
    assert reg.evictions == 0 and engine.loaded.keys() == {"pi-v0", "pi-v1", "codex-v0", "codex-v1"}


def test_full_slots_ask_the_evictor_to_release_stale_pins(engine):
    """A retired version pinned by a slow group: the publish asks the harness's evictor, which releases it."""
    reg = AdapterRegistry(engine, max_live_versions=2, evict_wait_s=30)
    asked: list[int] = []

    def cancel_stale(min_version):
        asked.append(min_version)
        reg.release("pi-v0")

    reg.add_evictor("pi", cancel_stale)
    reg.add_evictor("codex", lambda v: pytest.fail("another harness's evictor was asked"))
    reg.publish("pi", 0, "/a")
    reg.publish("pi", 1, "/a")
    reg.acquire("pi-v0")
    reg.retire_older_than("pi", 1)
    assert reg.publish("pi", 2, "/a") == "pi-v2"
    assert asked == [1]
    assert ("unload", "pi-v0") in engine.calls and reg.loaded() == ["pi-v1", "pi-v2"]
    assert reg.evictions == 1 and reg.forced_unloads == 0


def test_unreleased_stale_pin_is_unloaded_after_the_wait(engine):
    """Nobody releases the retired version in time: the publish unloads it anyway instead of failing the run."""
    reg = AdapterRegistry(engine, max_live_versions=2, evict_wait_s=0.05)
    reg.add_evictor("pi", lambda v: None)  # an evictor that cannot help
    reg.publish("pi", 0, "/a")
    reg.publish("pi", 1, "/a")
    reg.acquire("pi-v0")
    reg.acquire("pi-v0")
    reg.retire_older_than("pi", 1)
    assert reg.publish("pi", 2, "/a") == "pi-v2"
    assert "pi-v0" not in engine.loaded and reg.loaded() == ["pi-v1", "pi-v2"]
    assert reg.forced_unloads == 1
    reg.release("pi-v0")  # its users still release it: no error, no second unload
    reg.release("pi-v0")
    with pytest.raises(KeyError):
        reg.release("pi-v0")  # but not more often than they acquired it
    assert engine.calls.count(("unload", "pi-v0")) == 1


def test_a_release_during_the_wait_frees_the_slot(engine):
    reg = AdapterRegistry(engine, max_live_versions=2, evict_wait_s=30)
    reg.publish("pi", 0, "/a")
    reg.publish("pi", 1, "/a")
    reg.acquire("pi-v0")
    reg.retire_older_than("pi", 1)
    # The evictor hands the release to another thread (as a worker's group thread would) and returns.
    reg.add_evictor("pi", lambda v: threading.Timer(0.05, reg.release, args=("pi-v0",)).start())
    assert reg.publish("pi", 2, "/a") == "pi-v2"
    assert reg.forced_unloads == 0 and reg.loaded() == ["pi-v1", "pi-v2"]


def test_failed_load_records_nothing(engine):
    reg = AdapterRegistry(engine, max_live_versions=2)
    engine.loaded["pi-v0"] = "/elsewhere"
    with pytest.raises(EngineError):
        reg.publish("pi", 0, "/a")
    assert reg.loaded() == []


def test_failed_unload_is_retried(engine):
    reg = AdapterRegistry(engine, max_live_versions=2)
    reg.publish("pi", 0, "/a")
    engine.fail_next_unload = True
    assert reg.retire_older_than("pi", 1) == ["pi-v0"]
    assert reg.loaded() == ["pi-v0"]
    reg.retire_older_than("pi", 1)
    assert reg.loaded() == []
    assert engine.loaded == {}


def test_release_without_acquire_is_an_error(engine):
    reg = AdapterRegistry(engine, max_live_versions=2)
    reg.publish("pi", 0, "/a")
    with pytest.raises(KeyError):
        reg.release("pi-v0")


def test_concurrent_use_unloads_exactly_once(engine):
    reg = AdapterRegistry(engine, max_live_versions=2)
    reg.publish("pi", 0, "/a")
    n = 64
    for _ in range(n):
        reg.acquire("pi-v0")
    barrier = threading.Barrier(n + 1)

    def user():
        barrier.wait()
        reg.release("pi-v0")

    threads = [threading.Thread(target=user) for _ in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    reg.retire_older_than("pi", 1)
    for t in threads:
        t.join()
    assert engine.calls.count(("unload", "pi-v0")) == 1
    assert reg.loaded() == []
