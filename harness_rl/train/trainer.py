"""One harness's policy: a PEFT LoRA adapter on the base model, trained by asynchronous GRPO steps.

The trainer never talks to a harness. It drains scored groups (from the rollout worker's queue), drops samples
sampled more than ``max_staleness`` versions ago, packs the rest into token-budgeted micro-batches, takes one
optimizer step on the clipped importance-weighted loss against the log-probs the engine recorded, and publishes
the new adapter version to the engine under a fresh name (``<harness>-v<k>``) without pausing it.
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
from harness_rl.train.loss import grpo_loss
from harness_rl.train.packing import pack_stats, pad_samples, plan_rows, split_micro_batches
from harness_rl.train.tree_attention import enable_tree_attention

log = logging.getLogger(__name__)


class PolicyTrainer:
    """Owns adapter ``<harness>`` and its optimizer.

    Args:
        harness: The harness whose rollouts train this adapter (also the adapter's name prefix).
        model_path: Directory (or hub id) of the base model; the same weights the engine serves.
        trainer_cfg: The ``trainer`` config group.
        family: ``model.family``; hybrid short-conv models (``lfm2``) train on padded batches.
        registry: Loads published versions into the engine and retires old ones.
        run_dir: The run folder; adapters go to ``adapters/``, checkpoints to ``checkpoints/``.
        seed: Seeds LoRA initialisation.
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
    ):
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        self.harness = harness
        self.cfg = trainer_cfg
        self.registry = registry
        self.run_dir = Path(run_dir)
        self.version = 0
        self.step = 0
        torch.manual_seed(seed)
        if trainer_cfg.get("num_threads"):
            torch.set_num_threads(trainer_cfg.num_threads)
        dtype = getattr(torch, trainer_cfg.train_dtype)
        base = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
        lora = LoraConfig(
            r=trainer_cfg.lora.rank,
            lora_alpha=trainer_cfg.lora.alpha,
            lora_dropout=trainer_cfg.lora.dropout,
            target_modules=trainer_cfg.lora.target_modules,
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(base, lora)
        self.pad_token_id = base.config.pad_token_id or base.config.eos_token_id or 0
        if isinstance(self.pad_token_id, list):
            self.pad_token_id = self.pad_token_id[0]
        self.packing = trainer_cfg.packing
        if self.packing == "auto":
            self.packing = "padded" if family == "lfm2" else "tree"
        if self.packing == "tree":
            enable_tree_attention(self.model)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=trainer_cfg.lr, weight_decay=trainer_cfg.weight_decay)
        self.model.train()

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

    def train_step(self, groups: list[ScoredGroup]) -> dict[str, float]:
        """One optimizer step on ``groups``, then publish the next version. Returns the step's metrics."""
        t0 = time.perf_counter()
        samples, dropped = self.fresh_samples(groups)
        metrics: dict[str, float] = {
            "batch/groups_per_step": len(groups),
            "batch/samples_per_step": len(samples),
            "batch/stale_samples_dropped": dropped,
            "staleness/mean": _mean([self.version - s["policy_version"] for s in samples]),
            "staleness/max": max((self.version - s["policy_version"] for s in samples), default=0),
        }
        trained_tokens = sum(int(s["completion_mask"][1:].sum()) for s in samples)
        self.optimizer.zero_grad(set_to_none=True)
        totals = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0}
        diffs_on_policy: list[torch.Tensor] = []
        if samples and trained_tokens:
            micro_batches, packing = self._micro_batches(samples)
            metrics.update({f"pack/{k}": v for k, v in packing.items()})
            for batch in micro_batches:
                new, old, adv, seg, batch_samples = self._forward(batch)
                loss, stats = grpo_loss(
                    new, old, adv,
                    clip_low=self.cfg.clip_low, clip_high=self.cfg.clip_high,
                    loss_type="token_mean", normalizer=float(trained_tokens),
                )  # fmt: skip
                loss.backward()
                totals["loss"] += float(loss.detach())
                weight = stats["tokens"] / trained_tokens
                totals["clip_fraction"] += stats["clip_fraction"] * weight
                totals["approx_kl"] += stats["approx_kl"] * weight
                # Log-probs of samples drawn from the current version must match what the engine recorded:
                # the size of this gap is the train/inference mismatch the importance ratio corrects.
                on_policy = torch.tensor(
                    [batch_samples[int(i)]["policy_version"] == self.version for i in seg], dtype=torch.bool
                )
                if on_policy.any():
                    diffs_on_policy.append((new.detach() - old)[on_policy].abs())
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.max_grad_norm)
            self.optimizer.step()
            metrics["train/grad_norm"] = float(grad_norm)
        metrics.update({f"train/{k}": v for k, v in totals.items()})
        metrics["train/trained_tokens"] = trained_tokens
        if diffs_on_policy:
            diffs = torch.cat(diffs_on_policy)
            metrics["train/onpolicy_logprob_absdiff_max"] = float(diffs.max())
            metrics["train/onpolicy_logprob_absdiff_mean"] = float(diffs.mean())
        self.step += 1
        self.version += 1
        metrics["time/train_step_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        metrics["policy/version"] = self.version
        metrics["policy/adapter"] = self.publish()
        metrics["time/publish_s"] = time.perf_counter() - t1
        return metrics

    def checkpoint(self, extra_state: dict[str, Any] | None = None) -> Path:
        """Write ``checkpoints/step_<k>`` (adapter, optimizer, RNG, counters) atomically."""
        state = {"step": self.step, "version": self.version, "harness": self.harness, **(extra_state or {})}
        return save_checkpoint(self.model, self.optimizer, self.run_dir / "checkpoints" / self.harness,
                               self.step, state)  # fmt: skip

    # -- helpers ----------------------------------------------------------------------------------------

    def _micro_batches(self, samples: list[dict[str, Any]]) -> tuple[list[Any], dict[str, float]]:
        """The step's micro-batches (tree rows, or sample lists for padded batches) and packing stats."""
        if self.packing == "tree":
            rows = plan_rows(samples, self.cfg.token_budget)
            return split_micro_batches(rows, self.cfg.grad_accum), pack_stats(rows)
        # Padded path: split samples evenly; each micro-batch is one padded batch.
        n = max(1, min(self.cfg.grad_accum, len(samples)))
        return [samples[i::n] for i in range(n)], {"raw_tokens": sum(len(s["input_ids"]) for s in samples)}

    def _forward(self, batch: list[Any]):
        """Log-probs of a micro-batch's trained tokens, plus the matching old log-probs and advantages."""
        temperature = self.cfg.temperature
        news, olds, advs, segs, batch_samples = [], [], [], [], []
        if self.packing == "tree":
            for row in batch:
                packed = row.pack()
                news.append(packed_token_logprobs(self.model, packed, temperature=temperature))
                olds.append(packed["old_log_probs"])
                advs.append(packed["advantages"])
                segs.append(packed["segment_id"] + len(batch_samples))
                batch_samples.extend(row.samples)
        else:
            padded = pad_samples(batch, pad_token_id=self.pad_token_id)
            news.append(padded_token_logprobs(self.model, padded, temperature=temperature))
            olds.append(padded["old_log_probs"])
            advs.append(padded["advantages"])
            segs.append(padded["segment_id"])
            batch_samples.extend(batch)
        return torch.cat(news), torch.cat(olds), torch.cat(advs), torch.cat(segs), batch_samples


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
