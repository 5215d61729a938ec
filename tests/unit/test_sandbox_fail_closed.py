"""Fail closed: without bubblewrap, train.py and eval.py refuse to start unless ``sandbox.allow_unisolated=true``,
which is then logged and recorded in metadata.json. "No bubblewrap" is the detection monkeypatched, not an
uninstalled package."""

from __future__ import annotations

import json
import logging
from contextlib import ExitStack
from pathlib import Path

import pytest

import harness_rl.launch.train_run as train_run
from harness_rl.config.compose import compose_config
from harness_rl.launch.errors import USER_ERRORS
from harness_rl.sandbox import local
from harness_rl.sandbox.isolation import UnisolatedSandboxError, require_isolation


class _Stop(Exception):
    """Raised by a stand-in right after the step under test, so nothing heavy starts."""


@pytest.fixture
def no_bwrap(monkeypatch):
    monkeypatch.setattr(local, "bwrap_usable", lambda: False)
    monkeypatch.setattr("harness_rl.models.fetch.resolve_model_path", lambda path: "model")
    monkeypatch.setattr(train_run, "build_harness", lambda name, cfg, sandbox: _Harness())
    monkeypatch.setattr(train_run, "check_harnesses_installed", lambda harnesses: None)
    monkeypatch.setattr(train_run, "start_serving", _raise_stop)


def _raise_stop(*args, **kwargs):
    raise _Stop


class _Harness:
    """Stands in for an installed harness (metadata.json asks each for its version)."""

    def version(self) -> str:
        return "0"


def test_train_without_bwrap_refuses_and_names_both_fixes(tmp_path, no_bwrap):
    run_dir = tmp_path / "run"
    cfg = compose_config([f"run_dir={run_dir}", "harness=mini_swe_agent"])
    assert cfg.sandbox.allow_unisolated is False  # the default
    with pytest.raises(UnisolatedSandboxError) as err:
        train_run.run_training(cfg)
    assert "make system-deps" in str(err.value) and "sandbox.allow_unisolated=true" in str(err.value)
    assert not run_dir.exists()  # refused before the run folder exists
    assert isinstance(err.value, USER_ERRORS)  # train.py prints it as one line, no traceback


def test_train_without_bwrap_runs_when_allowed_and_records_it(tmp_path, no_bwrap, caplog):
    run_dir = tmp_path / "run"
    cfg = compose_config([f"run_dir={run_dir}", "harness=mini_swe_agent", "sandbox.allow_unisolated=true"])
    with caplog.at_level(logging.WARNING), pytest.raises(_Stop):
        train_run.run_training(cfg)
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["sandbox_isolation"] == "none" and meta["sandbox_allow_unisolated"] is True
    assert "sandbox.allow_unisolated=true" in caplog.text and "WITHOUT isolation" in caplog.text


def test_train_with_bwrap_starts_without_the_flag(tmp_path, no_bwrap, monkeypatch):
    monkeypatch.setattr(local, "bwrap_usable", lambda: True)
    run_dir = tmp_path / "run"
    cfg = compose_config([f"run_dir={run_dir}", "harness=mini_swe_agent"])
    with pytest.raises(_Stop):
        train_run.run_training(cfg)
    meta = json.loads((run_dir / "metadata.json").read_text())
    assert meta["sandbox_isolation"] == "bwrap" and meta["sandbox_allow_unisolated"] is False


def test_eval_without_bwrap_refuses_before_serving(tmp_path, no_bwrap, monkeypatch):
    from harness_rl.eval import evaluate

    monkeypatch.setattr("harness_rl.launch.serving.start_serving", _raise_stop)
    monkeypatch.setattr("harness_rl.launch.components.check_harnesses_installed", lambda harnesses: None)
    cfg = compose_config([f"run_dir={tmp_path}", "harness=mini_swe_agent"])
    with ExitStack() as stack, pytest.raises(UnisolatedSandboxError, match="eval.py refuses"):
        evaluate._run_pending(cfg, stack, Path(tmp_path), tmp_path / "eval", [], {}, None)
    cfg.sandbox.allow_unisolated = True
    with ExitStack() as stack, pytest.raises(_Stop):  # allowed: it goes on to start serving
        evaluate._run_pending(cfg, stack, Path(tmp_path), tmp_path / "eval", [], {}, None)


@pytest.mark.parametrize("isolation", ["bwrap", "docker"])
def test_isolating_backends_need_no_flag(isolation):
    require_isolation(isolation, allow_unisolated=False, entry_point="train.py")
