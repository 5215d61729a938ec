"""One harness's policy: a PEFT LoRA adapter on the base model, trained by asynchronous GRPO steps.

The trainer never talks to a harness. It takes the scored groups of one step (chosen by the launcher's
:class:`~harness_rl.train.step_plan.StepAssembler`), drops samples sampled more than ``max_staleness`` versions
ago, plans the rest into micro-batches of at most ``token_budget`` tokens, runs forward+backward per micro-batch on
the clipped importance-weighted loss against the log-probs the engine recorded (normalised by the whole step's
trained tokens, so the gradient does not depend on how the step is split), takes one optimizer step and publishes
the new adapter version to the engine under a fresh name (``<harness>-v<k>``) without pausing it. A step with
nothing to train on takes no optimizer step and publishes nothing: versions count real updates.

Each step's metrics carry the learning diagnostics: policy entropy at the trained positions, KL to the behaviour
(sampling) policy, clip fractions, the gradient norm and advantage statistics (reward variance across groups is
counted by :func:`harness_rl.rollout.group.group_metrics`, over every group the step consumed).

``trainer.advantage_sign`` (-1 only for the negative control) is applied here, to every advantage the loss sees,
and nowhere else: the groups keep their GRPO advantages as the rewards give them.

Where it runs and in which precision is :mod:`harness_rl.train.placement`'s decision.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from harness_rl.engine.adapters import AdapterRegistry
from harness_rl.rollout.group import ScoredGroup
from harness_rl.train.checkpoint import save_adapter_atomically, save_checkpoint
from harness_rl.train.logprobs import packed_token_logprobs, padded_token_logprobs
from harness_rl.train.loss import advantage_stats, check_advantage_sign, grpo_loss
from harness_rl.train.packing import pad_samples
from harness_rl.train.placement import TrainerPlacement, place_model, resolve_placement
from harness_rl.train.step_plan import MicroBatch, StepAssembler, plan_step
from harness_rl.train.tree_attention import enable_tree_attention, tree_packing_supported

log = logging.getLogger(__name__)

_WEIGHTED_STATS = (
    "clip_fraction",
    "clip_low_fraction",
    "clip_high_fraction",
    "dual_clip_fraction",
    "masked_fraction",
    "kl_behaviour_k1",
    "kl_behaviour_k3",
    "approx_kl",
    "entropy",
)
"""Per-token statistics (``train/*``), averaged over the step's micro-batches weighted by their trained tokens, so
each is a mean over the step's trained tokens. ``entropy`` is the full-vocabulary entropy of the trainer's tempered
distribution at each trained position, before the update; the rest are :func:`~harness_rl.train.loss.grpo_loss`'s."""


class PolicyTrainer:
    """Owns adapter ``<harness>`` and its optimizer.

    Args:
        harness: The harness whose rollouts train this adapter (also the adapter's name prefix).
        model_path: Directory (or hub id) of the base model; the same weights the engine serves.
        trainer_cfg: The ``trainer`` config group.
        family: ``model.family``, for the log. Packing (``trainer.packing: auto``) follows the model's layers:
            tree rows where :func:`~harness_rl.train.tree_attention.tree_packing_supported`, else padded batches.
        registry: Loads published versions into the engine and retires old ones.
        run_dir: The run folder; adapters go to ``adapters/``, checkpoints to ``checkpoints/``.
        seed: Seeds LoRA initialisation.
        device: Overrides ``trainer.device`` (the launcher passes the device its placement gives this trainer).
    """

    def __init__(
        self,
        *,
        harness: str,
        model_path: str,
        trainer_cfg: Any,
        family: str,
        registry: AdapterRegistry,
        run_dir: Path,
        seed: int = 0,
        device: str | torch.device | None = None,
    ):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        self.harness = harness
        self.cfg = trainer_cfg
        # Checked before the weights load: a wrong value fails in a second.
        self.advantage_sign = check_advantage_sign(trainer_cfg.get("advantage_sign", 1.0))
        self.registry = registry
        self.run_dir = Path(run_dir)
        self.version = 0
        self.step = 0
        torch.manual_seed(seed)
        if trainer_cfg.get("num_threads"):
            torch.set_num_threads(trainer_cfg.num_threads)
        self.placement: TrainerPlacement = resolve_placement(trainer_cfg, device)
        # device_map loads the weights straight onto the device (no full host copy of a 24B model first).
        base = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=self.placement.base_dtype, device_map={"": self.placement.device}
        )
        lora = LoraConfig(
            r=trainer_cfg.lora.rank,
            lora_alpha=trainer_cfg.lora.alpha,
            lora_dropout=trainer_cfg.lora.dropout,
            target_modules=trainer_cfg.lora.target_modules,
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(base, lora, autocast_adapter_dtype=True)
        place_model(self.model, self.placement)
        self.pad_token_id = base.config.pad_token_id or base.config.eos_token_id or 0
        if isinstance(self.pad_token_id, list):
            self.pad_token_id = self.pad_token_id[0]
        self.packing = trainer_cfg.packing
        if self.packing == "auto":
            self.packing = "tree" if tree_packing_supported(self.model) else "padded"
        if self.packing == "tree":
            enable_tree_attention(self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=trainer_cfg.lr, weight_decay=trainer_cfg.weight_decay)
        self.model.train()
        log.info(
            "trainer %s (%s) on %s, packing=%s, token_budget=%d",
            harness,
            family,
            self.placement.describe(),
            self.packing,
            trainer_cfg.token_budget,
        )

    # -- publishing -------------------------------------------------------------------------------------

    @property
    def adapter_name(self) -> str:
        return f"{self.harness}-v{self.version}"

    def publish(self) -> str:
        """Write the current adapter atomically and load it into the engine as ``<harness>-v<version>``.

        Versions that fell out of the staleness window are unloaded once no rollout uses them.
        """
        path = self.run_dir / "adapters" / self.adapter_name
        save_adapter_atomically(self.model, path)
        name = self.registry.publish(self.harness, self.version, path)
        self.registry.retire_older_than(self.harness, self.version - self.cfg.max_staleness)
        return name

    def lora_state(self) -> dict[str, torch.Tensor]:
        """A detached copy of the trainable (LoRA) parameters, for before/after comparisons."""
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    # -- one optimizer step -----------------------------------------------------------------------------

    def fresh_samples(self, groups: list[ScoredGroup]) -> tuple[list[dict[str, Any]], int]:
        """Training samples of groups within the staleness window, and how many samples were dropped."""
        samples, dropped = [], 0
        for group in groups:
            for sample in group.samples:
                if self.version - sample["policy_version"] > self.cfg.max_staleness:
                    dropped += 1
                else:
                    samples.append(sample)
        return samples, dropped

    def assembler(self) -> StepAssembler:
        """The step assembler for this trainer's groups: its packing, budget, ``grad_accum`` and staleness filter."""
        return StepAssembler(
            token_budget=self.cfg.token_budget,
            packing=self.packing,
            max_micro_batches=self.cfg.grad_accum,
            max_groups=self.cfg.tasks_per_step,
            samples_of=lambda group: self.fresh_samples([group])[0],
        )

    def train_step(self, groups: list[ScoredGroup]) -> dict[str, float]:
        """One optimizer step on ``groups`` (any number), then publish the next version. Returns the step's metrics.

        A step without a trained token (no groups, only stale or over-budget samples) changes nothing: no optimizer
        step, no new version, nothing published; ``train/empty_step`` is 1 in its metrics.
        """
        t0 = time.perf_counter()
        if self.placement.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.placement.device)  # memory/peak_gib is this step's peak
        samples, dropped = self.fresh_samples(groups)
        plan = plan_step(samples, token_budget=self.cfg.token_budget, packing=self.packing)
        trained_tokens = plan.trained_tokens
        ages = [self.version - s["policy_version"] for s in samples]
        trained_samples = [s for mb in plan.micro_batches for s in mb.samples]
        metrics: dict[str, Any] = {
            "batch/groups_per_step": len(groups),
            "batch/samples_per_step": len(samples) - len(plan.over_budget),
            "batch/stale_samples_dropped": dropped,
            **plan.stats(),
            "staleness/mean": _mean(ages),
            "staleness/max": max(ages, default=0),
            "train/trained_tokens": trained_tokens,
            "train/empty_step": int(trained_tokens == 0),
            "train/advantage_sign": self.advantage_sign,
            **advantage_stats([s["advantage"] * self.advantage_sign for s in trained_samples]),
        }
        totals = dict.fromkeys(("loss", *_WEIGHTED_STATS), 0.0)
        if trained_tokens:
            totals, diffs = self.accumulate_gradients(plan.micro_batches, trained_tokens)
            # The total norm BEFORE clipping (what clip_grad_norm_ returns): the update applied is at most
            # max_grad_norm, so a logged norm far above it says how hard the clip is working.
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
            self.optimizer.step()
            metrics["train/grad_norm"] = float(grad_norm)
            if diffs:
                on_policy = torch.cat(diffs)
                metrics["train/onpolicy_logprob_absdiff_max"] = float(on_policy.max())
                metrics["train/onpolicy_logprob_absdiff_mean"] = float(on_policy.mean())
        metrics.update({f"train/{k}": v for k, v in totals.items()})
        metrics["time/train_step_s"] = time.perf_counter() - t0
        if trained_tokens:
            self.step += 1
            self.version += 1
            t1 = time.perf_counter()
            self.publish()
            metrics["time/publish_s"] = time.perf_counter() - t1
        else:
            log.warning(
                "%s: empty step (%d groups, no trained token); version stays %d",
                self.harness,
                len(groups),
                self.version,
            )
        metrics["policy/version"] = self.version
        metrics["policy/adapter"] = self.adapter_name
        if self.placement.device.type == "cuda":
            metrics["memory/peak_gib"] = torch.cuda.max_memory_allocated(self.placement.device) / (1 << 30)
        return metrics

    def accumulate_gradients(
        self, micro_batches: list[MicroBatch], trained_tokens: int
    ) -> tuple[dict[str, float], list[torch.Tensor]]:
        """Forward+backward per micro-batch, each loss divided by the whole step's ``trained_tokens``.

        Returns the token-weighted loss statistics and, per micro-batch, the |new - old| log-prob gaps of samples
        drawn from the current version (the train/inference mismatch the importance ratio corrects).
        """
        self.optimizer.zero_grad(set_to_none=True)
        totals = dict.fromkeys(("loss", *_WEIGHTED_STATS), 0.0)
        diffs: list[torch.Tensor] = []
        for batch in micro_batches:
            if not batch.trained_tokens:
                continue
            new, entropy, old, adv, seg = self._forward(batch)
            loss, stats = grpo_loss(
                new,
                old,
                adv,
                clip_low=self.cfg.clip_low,
                clip_high=self.cfg.clip_high,
                loss_type="token_mean",
                normalizer=float(trained_tokens),
                dual_clip=self.cfg.get("dual_clip"),
                max_log_ratio=self.cfg.get("max_log_ratio"),
            )
            loss.backward()
            stats["entropy"] = float(entropy.mean())
            totals["loss"] += float(loss.detach())
            weight = stats["tokens"] / trained_tokens
            for key in _WEIGHTED_STATS:
                totals[key] += stats[key] * weight
            on_policy = torch.tensor([s["policy_version"] == self.version for s in batch.samples])[seg.cpu()]
            if on_policy.any():
                diffs.append((new.detach().cpu() - old.cpu())[on_policy].abs())
        return totals, diffs

    def checkpoint(self, extra_state: dict[str, Any] | None = None) -> Path:
        """Write ``checkpoints/step_<k>`` (adapter, optimizer, RNG, counters) atomically."""
        state = {"step": self.step, "version": self.version, "harness": self.harness, **(extra_state or {})}
        return save_checkpoint(
            self.model, self.optimizer, self.run_dir / "checkpoints" / self.harness, self.step, state
        )

    # -- helpers ----------------------------------------------------------------------------------------

    def _forward(self, batch: MicroBatch) -> tuple[torch.Tensor, ...]:
        """Log-probs of a micro-batch's trained tokens and their (detached) entropies, from one forward; the matching
        old log-probs, advantages (times ``trainer.advantage_sign``) and sample indices."""
        temperature = self.cfg.temperature
        if batch.row is not None:
            packed = batch.row.pack()
            new, entropy = packed_token_logprobs(self.model, packed, temperature=temperature, with_entropy=True)
        else:
            packed = pad_samples(batch.samples, pad_token_id=self.pad_token_id)
            new, entropy = padded_token_logprobs(self.model, packed, temperature=temperature, with_entropy=True)
        advantages = packed["advantages"] * self.advantage_sign
        return new, entropy, packed["old_log_probs"], advantages, packed["segment_id"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
