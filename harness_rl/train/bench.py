"""Benchmark: tree-packed vs right-padded forward+backward on a realistic GRPO batch.

``python -m harness_rl.train.bench [--layers 4] [--repeats 3]`` builds ``--groups`` tasks of ``--rollouts``
multi-turn rollouts each (a system prompt shared by every task, a task prompt shared by its group, then
alternating sampled turns and tool outputs), on a random-weight Llama of SmolLM2-135M's width with LoRA on
every projection, and times one training forward+backward of the same loss terms both ways. It checks that
both paths give the same log-probs, and ends with ``packed_vs_padded_speedup=X``.
"""

from __future__ import annotations

import argparse
import time

import torch
from peft import LoraConfig, get_peft_model
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from transformers import LlamaConfig, LlamaForCausalLM

from harness_rl.train.logprobs import packed_token_logprobs, padded_token_logprobs
from harness_rl.train.loss import grpo_loss
from harness_rl.train.packing import pack_stats, pad_samples, plan_rows
from harness_rl.train.tree_attention import enable_tree_attention


def make_batch(
    groups: int, rollouts: int, prompt: int, min_cont: int, max_cont: int, vocab: int, seed: int = 0
) -> list[dict]:
    """GRPO samples: per group a shared prompt, per rollout a multi-turn continuation of random length."""
    g = torch.Generator().manual_seed(seed)

    def rand(n: int) -> torch.Tensor:
        return torch.randint(0, vocab, (n,), generator=g)

    system = rand(prompt // 4)
    samples = []
    for group in range(groups):
        task_prompt = torch.cat([system, rand(prompt - len(system))])
        for _ in range(rollouts):
            length = int(torch.randint(min_cont, max_cont + 1, (1,), generator=g))
            pieces, mask, sampled = [task_prompt], [torch.zeros(prompt, dtype=torch.long)], True
            while sum(len(p) for p in pieces) < prompt + length:
                n = (
                    int(torch.randint(20, 60, (1,), generator=g))
                    if sampled
                    else int(torch.randint(10, 40, (1,), generator=g))
                )
                pieces.append(rand(n))
                mask.append(torch.full((n,), int(sampled)))
                sampled = not sampled
            ids, loss_mask = torch.cat(pieces)[: prompt + length], torch.cat(mask)[: prompt + length]
            samples.append(
                {
                    "input_ids": ids,
                    "completion_mask": loss_mask,
                    "old_log_probs": -torch.rand(len(ids), generator=g) * loss_mask,
                    "advantage": float(torch.randn(1, generator=g)),
                    "group_id": group,
                }
            )
    return samples


def make_model(layers: int, vocab: int, lora_rank: int) -> torch.nn.Module:
    """Random Llama with SmolLM2-135M's width (576 hidden, 9 heads, 3 KV heads), LoRA on every projection."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    lora = LoraConfig(
        r=lora_rank,
        lora_alpha=2 * lora_rank,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    )
    return get_peft_model(LlamaForCausalLM(config).float(), lora).train()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=300)
    parser.add_argument("--min-cont", type=int, default=100)
    parser.add_argument("--max-cont", type=int, default=400)
    parser.add_argument("--layers", type=int, default=4, help="SmolLM2-135M has 30; fewer keeps it under a minute")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="auto", help="tree attention modes to time, e.g. auto,dense,segments")
    args = parser.parse_args(argv)
    console = Console()

    samples = make_batch(args.groups, args.rollouts, args.prompt, args.min_cont, args.max_cont, args.vocab)
    rows = plan_rows(samples, token_budget=1 << 30)
    stats = pack_stats(rows)
    packed = rows[0].pack()
    padded = pad_samples(samples)
    padded_tokens = padded["input_ids"].numel()
    model = make_model(args.layers, args.vocab, args.lora_rank)

    def step(fn) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        new = fn()
        loss, _ = grpo_loss(new, new.detach() - 0.01, torch.ones_like(new))
        loss.backward()
        return new.detach()

    runs = {"padded": lambda: padded_token_logprobs(model, padded)}
    for mode in args.modes.split(","):
        runs[f"packed/{mode}"] = lambda mode=mode: packed_token_logprobs(model, packed, tree_attention_mode=mode)
    times: dict[str, list[float]] = {name: [] for name in runs}
    logprobs = {}
    # Tree mode scores the right-padded batch correctly too (see padded_token_logprobs), so one model serves
    # both paths, and the paths take turns so that a busy machine slows them alike.
    enable_tree_attention(model)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("forward+backward", total=len(runs) * (args.warmup + args.repeats))
        for i in range(args.warmup + args.repeats):
            for name, fn in runs.items():
                progress.update(task, description=f"{name} run {i + 1}")
                start = time.perf_counter()
                logprobs[name] = step(fn)
                if i >= args.warmup:
                    times[name].append(time.perf_counter() - start)
                progress.advance(task)

    max_diff = max((lp - logprobs["padded"]).abs().max().item() for lp in logprobs.values())
    table = Table(title=f"GRPO batch: {args.groups} tasks x {args.rollouts} rollouts, {args.layers}-layer model")
    for column in ("path", "forwarded tokens", "median s", "min s", "tokens/s (raw)"):
        table.add_column(column)
    for name, ts in times.items():
        forwarded = padded_tokens if name == "padded" else stats["unique_tokens"]
        median = sorted(ts)[len(ts) // 2]
        table.add_row(name, str(forwarded), f"{median:.3f}", f"{min(ts):.3f}", f"{stats['raw_tokens'] / median:.0f}")
    console.print(table)
    print(
        f"samples={stats['samples']} raw_tokens={stats['raw_tokens']} unique_tokens={stats['unique_tokens']} "
        f"padded_tokens={padded_tokens} trained_tokens={stats['trained_tokens']} "
        f"packing_ratio={stats['packing_ratio']:.2f} threads={torch.get_num_threads()} "
        f"max_logprob_diff={max_diff:.2e}"
    )
    # Best-of-n: other processes only ever add time.
    packed_name = "packed/auto" if "packed/auto" in times else next(n for n in times if n != "padded")
    print(f"packed_vs_padded_speedup={min(times['padded']) / min(times[packed_name]):.2f}")


if __name__ == "__main__":
    main()
