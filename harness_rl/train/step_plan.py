"""Planning one optimizer step: which groups it takes, and the token-budgeted micro-batches they become.

A micro-batch is one forward+backward: a prefix-tree row of at most ``token_budget`` unique (and trained) tokens,
or, for models that cannot be tree-packed, a right-padded batch of at most ``token_budget`` cells. Peak activation
memory therefore follows the budget, never the step's total tokens. A sample longer than the budget on its own
cannot be trained on at all: it is dropped and counted, not raised, so one runaway rollout cannot stop a run.

:class:`StepAssembler` decides which finished groups a step takes: groups are taken until the step's
``max_micro_batches`` (``trainer.grad_accum``) would overflow, so the number of groups per step follows rollout
length. A group is never split across steps; the one that does not fit is held over and opens the next step. A
group too large for one micro-batch is split across micro-batches by sample, and a group needing more micro-batches
than a whole step has is still taken, alone, so a step is never empty for lack of room.

Everything here is pure (no model, no queue), so it is tested on its own and shared by the launcher's assembler
and the trainer, which therefore agree on the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_rl.train.packing import RowPlanner, TreeRow, plan_padded_batches, validate_sample

PACKINGS = ("tree", "padded")


def trained_tokens(sample: dict[str, Any]) -> int:
    """Loss terms of a sample: trained positions ``p >= 1`` (position 0 has no predecessor to predict it)."""
    return int(sample["completion_mask"][1:].sum())


@dataclass
class MicroBatch:
    """One forward+backward.

    Attributes:
        samples: The samples it trains on.
        row: Their prefix-tree row (tree packing); None for a padded batch.
        forwarded_tokens: Positions the model runs: trie nodes of the row, or batch size x width (pads included).
    """

    samples: list[dict[str, Any]]
    row: TreeRow | None
    forwarded_tokens: int

    @property
    def raw_tokens(self) -> int:
        return sum(len(s["input_ids"]) for s in self.samples)

    @property
    def unique_tokens(self) -> int:
        """Distinct tokens: shared prefixes count once in a tree row; nothing is shared in a padded batch."""
        return len(self.row.tokens) if self.row is not None else self.raw_tokens

    @property
    def trained_tokens(self) -> int:
        return sum(trained_tokens(s) for s in self.samples)


@dataclass
class StepPlan:
    """The micro-batches of one step and the samples that could not be placed."""

    micro_batches: list[MicroBatch] = field(default_factory=list)
    over_budget: list[dict[str, Any]] = field(default_factory=list)

    @property
    def trained_tokens(self) -> int:
        """The step's loss normaliser: every loss term of every micro-batch."""
        return sum(mb.trained_tokens for mb in self.micro_batches)

    def stats(self) -> dict[str, float]:
        """``batch/*`` metrics of the plan."""
        raw = sum(mb.raw_tokens for mb in self.micro_batches)
        forwarded = sum(mb.forwarded_tokens for mb in self.micro_batches)
        return {
            "batch/micro_batches": len(self.micro_batches),
            "batch/samples_over_budget": len(self.over_budget),
            "batch/raw_tokens": raw,
            "batch/unique_tokens": sum(mb.unique_tokens for mb in self.micro_batches),
            "batch/forwarded_tokens": forwarded,
            "batch/max_micro_batch_tokens": max((mb.forwarded_tokens for mb in self.micro_batches), default=0),
            # raw / forwarded: > 1 when tree packing shares prefixes, < 1 when padding wastes cells.
            "batch/packing_ratio": raw / forwarded if forwarded else 1.0,
        }


class StepPlanner:
    """Incremental micro-batch planning of one step's samples (add group after group, read the count).

    Tree rows are planned incrementally (:class:`~harness_rl.train.packing.RowPlanner`), the same greedy whether
    samples come all at once or group by group, so the launcher's count equals the trainer's plan. Padded batches
    are re-planned from the sample lengths, which is cheap.
    """

    def __init__(self, token_budget: int, packing: str):
        if packing not in PACKINGS:
            raise ValueError(f"packing must be one of {PACKINGS} (resolve 'auto' first), got {packing!r}")
        self.token_budget = token_budget
        self.packing = packing
        self.rows = RowPlanner(token_budget)
        self.samples: list[dict[str, Any]] = []
        self.over_budget: list[dict[str, Any]] = []

    def add(self, samples: Sequence[dict[str, Any]]) -> None:
        """Plan ``samples`` (one group's, say) after those added before; over-budget ones are set aside."""
        for sample in samples:
            validate_sample(sample)
            if len(sample["input_ids"]) > self.token_budget:
                self.over_budget.append(sample)
                continue
            self.samples.append(sample)
            if self.packing == "tree":
                self.rows.place(sample)

    @property
    def micro_batch_count(self) -> int:
        if self.packing == "tree":
            return len(self.rows.rows)
        return len(plan_padded_batches(self.samples, self.token_budget))

    def plan(self) -> StepPlan:
        if self.packing == "tree":
            batches = [MicroBatch(row.samples, row, len(row.tokens)) for row in self.rows.rows]
        else:
            batches = [
                MicroBatch(batch, None, len(batch) * max(len(s["input_ids"]) for s in batch))
                for batch in plan_padded_batches(self.samples, self.token_budget)
            ]
        return StepPlan(batches, list(self.over_budget))


def plan_step(samples: Sequence[dict[str, Any]], *, token_budget: int, packing: str) -> StepPlan:
    """The micro-batches of a step's samples (group by group, in order of first appearance)."""
    by_group: dict[Any, list[dict[str, Any]]] = {}
    for sample in samples:
        by_group.setdefault(sample["group_id"], []).append(sample)
    planner = StepPlanner(token_budget, packing)
    for group in by_group.values():
        planner.add(group)
    return planner.plan()


@dataclass
class AssembledStep:
    """The groups one step consumed: ``trained`` go to the trainer; ``skipped`` (uninformative) are only scored."""

    trained: list[Any]
    skipped: list[Any]

    @property
    def consumed(self) -> list[Any]:
        return [*self.trained, *self.skipped]


class StepAssembler:
    """Decides which finished groups each optimizer step takes; the caller feeds groups from its queue.

    Call :meth:`offer` with each finished group until :attr:`full`, then :meth:`finish`. A group whose rewards
    are all equal carries no gradient and is skipped (dynamic sampling), unless ``skip_limit`` groups of this step
    were already skipped: then it is taken, so a model that never (or always) solves its tasks still makes steps.

    Args:
        token_budget: ``trainer.token_budget``.
        packing: The trainer's resolved packing (``tree`` or ``padded``).
        max_micro_batches: ``trainer.grad_accum``: micro-batches one step may fill.
        max_groups: ``trainer.tasks_per_step``: an upper cap on groups per step (keeps small CPU steps small).
        skip_limit: Uninformative groups skipped per step before they are taken; default ``4 x max_groups``.
        samples_of: A group's trainable samples (the trainer passes its staleness filter); default ``.samples``.
    """

    def __init__(
        self,
        *,
        token_budget: int,
        packing: str,
        max_micro_batches: int,
        max_groups: int,
        skip_limit: int | None = None,
        samples_of: Callable[[Any], Sequence[dict[str, Any]]] = lambda group: group.samples,
    ):
        if max_micro_batches < 1 or max_groups < 1:
            raise ValueError(
                f"trainer.grad_accum ({max_micro_batches}) and trainer.tasks_per_step ({max_groups}) must be >= 1"
            )
        self.token_budget = token_budget
        self.packing = packing
        self.max_micro_batches = max_micro_batches
        self.max_groups = max_groups
        self.skip_limit = 4 * max_groups if skip_limit is None else skip_limit
        self.samples_of = samples_of
        self.held: list[Any] = []
        # Uninformative groups offered in a row, across steps: a policy that solves every task or none yields only
        # these, and the launcher stops its trainer after ``trainer.stop_after_uninformative_groups`` of them.
        self.uninformative_streak = 0
        self._start()

    def _start(self) -> None:
        self.trained: list[Any] = []
        self.skipped: list[Any] = []
        self.planner = StepPlanner(self.token_budget, self.packing)
        self.full = False
        held, self.held = self.held, []
        for group in held:  # already counted in the streak when first offered
            self._place(group, getattr(group, "informative", True))

    def offer(self, group: Any) -> str:
        """Consider one finished group; returns ``"trained"``, ``"skipped"`` or ``"held"`` (for the next step)."""
        if self.full:
            raise RuntimeError("the step is full; call finish() before offering more groups")
        informative = getattr(group, "informative", True)
        self.uninformative_streak = 0 if informative else self.uninformative_streak + 1
        return self._place(group, informative)

    def _place(self, group: Any, informative: bool) -> str:
        if not informative and len(self.skipped) < self.skip_limit:
            self.skipped.append(group)
            return "skipped"
        # Trial placement: planning is greedy and incremental, so adding the group to the planner is the test. A
        # rejected group leaves the planner over-full, which no longer matters: the step is closed.
        self.planner.add(self.samples_of(group))
        if self.trained and self.planner.micro_batch_count > self.max_micro_batches:
            self.held.append(group)
            self.full = True
            return "held"
        self.trained.append(group)
        # Over its micro-batches already (one huge group): any further group would be held, so stop waiting.
        over = self.planner.micro_batch_count > self.max_micro_batches
        self.full = over or len(self.trained) >= self.max_groups
        return "trained"

    def finish(self) -> AssembledStep:
        """Close the step, and open the next one with the held-over group."""
        step = AssembledStep(self.trained, self.skipped)
        self._start()
        return step
