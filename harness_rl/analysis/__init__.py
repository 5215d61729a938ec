"""Loaders and figures for the analysis notebooks (``analysis/*.ipynb``): a run folder into pandas."""

from harness_rl.analysis.loaders import (
    RUN_ENV,
    Run,
    list_traces,
    load_eval_results,
    load_eval_summary,
    load_metrics,
    load_rollouts,
    load_run,
    load_trace,
    run_dir_from_env,
    trace_turns,
    training_curves,
)

__all__ = [
    "RUN_ENV",
    "Run",
    "list_traces",
    "load_eval_results",
    "load_eval_summary",
    "load_metrics",
    "load_rollouts",
    "load_run",
    "load_trace",
    "run_dir_from_env",
    "trace_turns",
    "training_curves",
]
