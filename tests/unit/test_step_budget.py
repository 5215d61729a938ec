"""A step's micro-batches each stay within the token budget, over-budget samples are dropped and counted, and the
assembler takes groups until the step's micro-batches would overflow, never splitting a group across steps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness_rl.train.step_plan import StepAssembler, StepPlanner, plan_step


def make_group(group_id: int, lengths: list[int], prompt_len: int = 20, informative: bool = True):
    """A group whose samples share a ``prompt_len`` prompt and have the given total lengths."""
    gen = torch.Generator().manual_seed(group_id)
    prompt = torch.randint(0, 1000, (prompt_len,), generator=gen)
    samples = []
    for i, n in enumerate(lengths):
        ids = torch.cat([prompt, torch.randint(0, 1000, (n - prompt_len,), generator=gen)])
        mask = torch.zeros(n, dtype=torch.long)
        mask[prompt_len:] = 1
        samples.append(
            {
                "input_ids": ids,
                "completion_mask": mask,
                "old_log_probs": -mask.float(),
                "advantage": 1.0 if i % 2 else -1.0,
                "group_id": group_id,
                "policy_version": 0,
            }
        )
    return SimpleNamespace(group_id=group_id, samples=samples, informative=informative)


@pytest.mark.parametrize("packing", ["tree", "padded"])
def test_every_micro_batch_within_budget_and_over_budget_samples_counted(packing: str) -> None:
    groups = [make_group(0, [60, 70, 80, 300]), make_group(1, [50, 90])]
    plan = plan_step([s for g in groups for s in g.samples], token_budget=200, packing=packing)
    for batch in plan.micro_batches:
        assert batch.forwarded_tokens <= 200
        if packing == "padded":
            assert batch.forwarded_tokens == len(batch.samples) * max(len(s["input_ids"]) for s in batch.samples)
    stats = plan.stats()
    assert stats["batch/samples_over_budget"] == 1 and len(plan.over_budget[0]["input_ids"]) == 300
    kept = [s for b in plan.micro_batches for s in b.samples]
    assert len(kept) == 5
    assert plan.trained_tokens == sum(int(s["completion_mask"][1:].sum()) for s in kept)
    assert stats["batch/raw_tokens"] == 60 + 70 + 80 + 50 + 90
    if packing == "tree":
        # Shared prompts are forwarded once per row.
        assert stats["batch/unique_tokens"] < stats["batch/raw_tokens"] and stats["batch/packing_ratio"] > 1
    else:
        assert stats["batch/packing_ratio"] <= 1


def test_planner_rejects_unresolved_packing() -> None:
    with pytest.raises(ValueError, match="auto"):
        StepPlanner(100, "auto")


def assembler(**over) -> StepAssembler:
    args = {"token_budget": 210, "packing": "tree", "max_micro_batches": 2, "max_groups": 10}
    return StepAssembler(**(args | over))


def test_groups_per_step_follow_rollout_length() -> None:
    # Short rollouts: a group of 4 x 40 tokens is 19 + 4 x 21 = 103 unique tokens (a trie forks one token before
    # the samples diverge); four groups fit in 2 micro-batches of 210.
    short = assembler()
    decisions = [short.offer(make_group(i, [40, 40, 40, 40])) for i in range(5)]
    assert decisions == ["trained"] * 4 + ["held"] and short.full
    assert len(short.finish().trained) == 4
    # Long rollouts: 4 x 110 tokens = 19 + 4 x 91 = 383 unique tokens need 2 micro-batches alone: one group a step.
    long = assembler()
    assert [long.offer(make_group(i, [110, 110, 110, 110])) for i in range(2)] == ["trained", "held"]
    step = long.finish()
    assert [g.group_id for g in step.trained] == [0]


def test_held_group_opens_the_next_step_and_is_never_split() -> None:
    a = assembler()
    groups = [make_group(i, [110, 110, 110, 110]) for i in range(3)]
    a.offer(groups[0])
    assert a.offer(groups[1]) == "held"
    first = a.finish()
    # The held group is already in the next step; nothing of it was in the first.
    assert [g.group_id for g in a.trained] == [1]
    assert a.offer(groups[2]) == "held"
    second = a.finish()
    assert [g.group_id for g in first.trained] == [0] and [g.group_id for g in second.trained] == [1]


def test_group_larger_than_the_step_is_taken_alone_and_split_by_sample() -> None:
    a = assembler(max_micro_batches=1)
    big = make_group(0, [150, 150, 150])  # two samples of 150 exceed 210 unique tokens: three rows
    assert a.offer(big) == "trained" and a.full  # nothing else can join a step already over its micro-batches
    step = a.finish()
    assert [g.group_id for g in step.trained] == [0] and not a.trained
    plan = plan_step(step.trained[0].samples, token_budget=210, packing="tree")
    assert len(plan.micro_batches) == 3 and all(b.forwarded_tokens <= 210 for b in plan.micro_batches)


def test_tasks_per_step_caps_groups() -> None:
    a = assembler(max_groups=2)
    assert [a.offer(make_group(i, [30, 30])) for i in range(2)] == ["trained", "trained"] and a.full
    with pytest.raises(RuntimeError, match="finish"):
        a.offer(make_group(9, [30, 30]))


def test_uninformative_groups_are_skipped_until_the_fallback() -> None:
    a = assembler(max_groups=1, skip_limit=2)
    flat = [make_group(i, [30, 30], informative=False) for i in range(3)]
    assert [a.offer(g) for g in flat] == ["skipped", "skipped", "trained"]
    step = a.finish()
    assert [g.group_id for g in step.consumed] == [2, 0, 1] and [g.group_id for g in step.trained] == [2]


def test_uninformative_streak_spans_steps_and_ends_at_an_informative_group() -> None:
    a = assembler(max_groups=1, skip_limit=1)
    assert [a.offer(make_group(i, [30, 30], informative=False)) for i in range(2)] == ["skipped", "trained"]
    assert a.uninformative_streak == 2
    a.finish()
    a.offer(make_group(2, [30, 30], informative=False))
    assert a.uninformative_streak == 3
    a.offer(make_group(3, [30, 30]))
    assert a.uninformative_streak == 0


def test_a_held_group_is_counted_once() -> None:
    a = assembler(skip_limit=0)  # uninformative groups are taken (and so can be held) at once
    assert a.offer(make_group(0, [110] * 4)) == "trained"
    assert a.offer(make_group(1, [110] * 4, informative=False)) == "held"
    assert a.uninformative_streak == 1
    a.finish()  # the held group opens the next step without being offered again
    assert a.uninformative_streak == 1 and [g.group_id for g in a.trained] == [1]


def test_samples_of_filters_what_counts_toward_the_budget() -> None:
    # A staleness filter that drops everything: no budget is used, so the cap on groups ends the step.
    a = assembler(max_micro_batches=1, max_groups=3, samples_of=lambda g: [])
    assert [a.offer(make_group(i, [150, 150])) for i in range(3)] == ["trained"] * 3


def scored_group(group_id: int, scores: list[float]):
    from pathlib import Path

    from harness_rl.rollout.group import score_group
    from harness_rl.rollout.session import RolloutResult

    rollouts = [RolloutResult(f"t{group_id}", None, None, None, s, None, 1, Path("."), 1.0) for s in scores]
    return score_group(group_id, SimpleNamespace(id=f"t{group_id}"), "h", 0, rollouts, efficiency_bonus=0.0)


def test_collect_groups_and_reward_metrics_count_every_scored_group() -> None:
    import queue

    from harness_rl.launch.train_run import collect_groups, trained_rewards
    from harness_rl.rollout.group import group_metrics

    worker = SimpleNamespace(groups=queue.Queue(), errors=[])
    for group in (scored_group(0, [1.0, 1.0]), scored_group(1, [1.0, 0.0]), scored_group(2, [0.0, 1.0])):
        worker.groups.put(group)
    progress = SimpleNamespace(waiting=lambda *args: None)
    step = collect_groups(worker, assembler(max_groups=2), progress, "h")
    assert [g.group_id for g in step.trained] == [1, 2] and [g.group_id for g in step.skipped] == [0]
    # The all-solved group was skipped for training but is part of the policy's score.
    everything, trained = group_metrics(step.consumed), trained_rewards(group_metrics(step.trained))
    assert everything["reward/mean"] == pytest.approx(4 / 6) and everything["reward/pass_rate"] == pytest.approx(4 / 6)
    assert trained["reward/mean_trained"] == pytest.approx(0.5) and trained["reward/pass_rate_trained"] == 0.5
    assert trained["reward/correctness_trained"] == pytest.approx(0.5) and "rollout/count_trained" not in trained
    worker.errors.append(ValueError("boom"))
    with pytest.raises(RuntimeError, match="rollout worker for h failed"):
        collect_groups(worker, assembler(), progress, "h")


def test_collect_groups_stops_at_the_stall_limit_and_not_before() -> None:
    import queue

    from harness_rl.launch.train_run import collect_groups

    worker = SimpleNamespace(groups=queue.Queue(), errors=[])
    for i in range(3):
        worker.groups.put(scored_group(i, [0.0, 0.0]))
    progress = SimpleNamespace(waiting=lambda *args: None)
    a = assembler(max_groups=1, skip_limit=1)
    step = collect_groups(worker, a, progress, "h", stall_limit=3)
    assert step is not None and [g.group_id for g in step.consumed] == [1, 0]  # fallback took the second
    assert collect_groups(worker, a, progress, "h", stall_limit=3) is None  # the third flat group in a row
    for i in (3, 4):
        worker.groups.put(scored_group(i, [0.0, 0.0]))
    assert collect_groups(worker, assembler(max_groups=1, skip_limit=1), progress, "h", stall_limit=0) is not None


@pytest.mark.parametrize(
    ("step", "checkpoint_every", "writes_checkpoint"), [(3, 2, True), (4, 2, False), (0, 1, False)]
)
def test_a_stalled_trainer_stops_with_its_last_step_checkpointed(
    step: int, checkpoint_every: int, writes_checkpoint: bool
) -> None:
    from harness_rl.launch.train_run import stop_stalled_trainer

    logged: list[tuple[dict, int]] = []
    checkpoints: list[int] = []
    trainer = SimpleNamespace(step=step, checkpoint=lambda: checkpoints.append(step) or f"ckpt/step_{step}")
    worker = SimpleNamespace(stopped=False)
    worker.request_stop = lambda: setattr(worker, "stopped", True)
    metrics = SimpleNamespace(log=lambda record, step: logged.append((record, step)))
    stop_stalled_trainer("h", trainer, worker, metrics, 16, checkpoint_every)
    assert worker.stopped and checkpoints == ([step] if writes_checkpoint else [])
    ((record, at),) = logged
    assert at == step and record["h/stopped/uninformative_groups"] == 16
    assert ("h/checkpoint" in record) == writes_checkpoint
