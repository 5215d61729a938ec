"""Read a run folder into pandas: config, metadata, training metrics, rollouts, traces and eval results.

The layout read here is what ``python train.py`` and ``python eval.py`` write:

    config.yaml  metadata.json  metrics.jsonl  rollouts.jsonl
    rollouts/<harness>/g<group>/r<i>/trace.jsonl
    eval/results.jsonl  eval/summary.csv
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

#: The environment variable the notebooks read the run folder from.
RUN_ENV = "HARNESS_RL_RUN"


def run_dir_from_env(var: str = RUN_ENV) -> Path:
    """The run folder named by ``$HARNESS_RL_RUN``.

    Raises:
        RuntimeError: The variable is unset or does not name a run folder (the message says what to set).
    """
    value = os.environ.get(var)
    if not value:
        raise RuntimeError(f"set {var} to a run folder, e.g. {var}=runs/smollm2-135m-mini_swe_agent/<date> "
                           "jupyter lab analysis/")  # fmt: skip
    path = Path(value).expanduser()
    if not (path / "config.yaml").is_file():
        raise RuntimeError(f"{var}={value} is not a run folder (no config.yaml in it)")
    return path


def _jsonl(path: Path) -> pd.DataFrame:
    if not path.is_file() or path.stat().st_size == 0:
        return pd.DataFrame()
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a torn last line of a killed run
    return pd.DataFrame(rows)


def load_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config the run was started with."""
    import yaml

    return yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))


def load_metadata(run_dir: Path) -> dict[str, Any]:
    """``metadata.json``: model, harness versions, host, library versions ({} when missing)."""
    path = Path(run_dir) / "metadata.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def load_metrics(run_dir: Path) -> pd.DataFrame:
    """``metrics.jsonl`` as logged: one row per (step, harness) record, columns ``<harness>/<metric>``."""
    return _jsonl(Path(run_dir) / "metrics.jsonl")


def training_curves(metrics: pd.DataFrame) -> pd.DataFrame:
    """Metrics in long form: one row per (harness, step, metric) with a numeric value."""
    if metrics.empty:
        return pd.DataFrame(columns=["harness", "step", "metric", "value"])
    long = metrics.drop(columns=[c for c in ("harness", "time") if c in metrics]).melt(
        id_vars="step", var_name="key", value_name="value"
    )
    long = long[long["key"].str.contains("/", regex=False)]
    long[["harness", "metric"]] = long["key"].str.split("/", n=1, expand=True)
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    long = long.dropna(subset=["value", "step"])
    return long[["harness", "step", "metric", "value"]].sort_values(["harness", "metric", "step"], ignore_index=True)


def load_rollouts(run_dir: Path) -> pd.DataFrame:
    """``rollouts.jsonl``: one row per training rollout (task, adapter, score, reward, tool calls, blocked)."""
    return _jsonl(Path(run_dir) / "rollouts.jsonl")


def list_traces(run_dir: Path, under: str = "rollouts") -> pd.DataFrame:
    """Every ``trace.jsonl`` below ``run_dir/under`` with its folder parts (training: harness/group/rollout)."""
    root = Path(run_dir) / under
    rows = [{"path": p, "rollout_dir": p.parent, "parts": p.parent.relative_to(root).parts}
            for p in sorted(root.rglob("trace.jsonl"))]  # fmt: skip
    return pd.DataFrame(rows, columns=["path", "rollout_dir", "parts"])


def load_trace(path: Path) -> dict[str, Any]:
    """One session's trace (rollout graph nodes, training sequences, failures)."""
    from harness_rl.proxy.export import read_trace_jsonl

    return read_trace_jsonl(Path(path))


#: The columns of ``trace_turns`` (also those of a session with no engine call).
TURN_COLUMNS = ("turn", "parent", "model", "prompt_tokens", "completion_tokens", "tool_calls", "tools", "blocked",
                "blocked_rules", "explanations", "finish_reason", "budget_exhausted", "seconds")  # fmt: skip


def trace_turns(trace: dict[str, Any]) -> pd.DataFrame:
    """One row per engine call of a session: tokens, tool calls, blocked calls and their explanations."""
    rows = []
    for node in trace.get("nodes", []):
        calls = node.get("tool_calls") or []
        blocked = node.get("blocked") or []
        start, end = node.get("t_start"), node.get("t_end")
        rows.append({
            "turn": node["id"],
            "parent": node.get("parent"),
            "model": node.get("model"),
            "prompt_tokens": len(node.get("prompt_token_ids") or []),
            "completion_tokens": len(node.get("completion_token_ids") or []),
            "tool_calls": len(calls),
            "tools": ", ".join(str((c.get("function") or {}).get("name", c.get("name", "?"))) for c in calls),
            "blocked": len(blocked),
            "blocked_rules": ", ".join(str(b.get("rule")) for b in blocked),
            "explanations": " | ".join(str(b.get("explanation")) for b in blocked),
            "finish_reason": node.get("finish_reason"),
            "budget_exhausted": bool(node.get("budget_exhausted")),
            "seconds": (end - start) if start is not None and end is not None else None,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(TURN_COLUMNS))


def load_eval_results(run_dir: Path) -> pd.DataFrame:
    """``eval/results.jsonl``: one row per evaluated (checkpoint, harness, task, sample)."""
    return _jsonl(Path(run_dir) / "eval" / "results.jsonl")


def load_eval_summary(run_dir: Path) -> pd.DataFrame:
    """``eval/summary.csv``: one row per (checkpoint, harness) with pass@1 and its interval ({} if not run)."""
    path = Path(run_dir) / "eval" / "summary.csv"
    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


@dataclass
class Run:
    """A run folder loaded for analysis (see ``load_run``)."""

    path: Path
    config: dict[str, Any]
    metadata: dict[str, Any]
    metrics: pd.DataFrame
    rollouts: pd.DataFrame
    eval_results: pd.DataFrame
    eval_summary: pd.DataFrame

    @property
    def harnesses(self) -> list[str]:
        """The harnesses the run trained (its harness mix)."""
        return list(self.config.get("harness", {}).get("mix", []))

    @property
    def curves(self) -> pd.DataFrame:
        """``training_curves`` of the run's metrics."""
        return training_curves(self.metrics)


def load_run(run_dir: Path | str) -> Run:
    """Everything the notebooks need from one run folder."""
    path = Path(run_dir)
    return Run(path=path, config=load_config(path), metadata=load_metadata(path), metrics=load_metrics(path),
               rollouts=load_rollouts(path), eval_results=load_eval_results(path),
               eval_summary=load_eval_summary(path))  # fmt: skip
