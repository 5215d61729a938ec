"""Checkpoint evaluation on held-out tasks: plan, resumable runner, metrics with bootstrap CIs, tables, plots."""
