"""Benchmark: tree packing vs padding-free packing vs padded batches on real captured GRPO groups.

    python -m benchmarks.packing [--groups 1] [--layers 4] [--repeats 2] [--tree-modes auto,dense,segments]

On the fixture's samples (8-rollout groups captured from pi through the vLLM CPU engine and the capture proxy,
see :mod:`benchmarks.fixture`), it measures:

(a) tree packing, as the trainer runs it: ``plan_rows`` + ``TreeRow.pack`` + ``packed_token_logprobs``, every
    shared prefix (the system prompt, a group's task prompt) forwarded once;
(b) padding-free packing without sharing: the same rows and attention, built by :class:`ChainRow`, a
    ``TreeRow`` that never shares a node, so every sample is its own block-diagonal segment and sharing is the
    only difference from (a);
(c) right-padded batches (``pad_samples`` + ``padded_token_logprobs``);

timing one training forward+backward of each on a random-weight Llama of SmolLM2-135M's width with LoRA on
every projection (best of ``--repeats``, the paths taking turns so that a busy machine slows them alike), after
checking that all three give the same log-probs; (d) tiny random-weight hybrids of the study's architectures
(LFM2 and LFM2-MoE: short-conv and attention layers, LoRA) tree-packed vs one sample at a time, as the largest
log-prob difference of the two; (e) the peak memory of one
``PolicyTrainer.train_step`` on 4x the samples at the same token budget, over that of 1x (each in a fresh
process, see :mod:`benchmarks.step_memory`). The last line is
``tree_vs_padfree=X tree_vs_padded=Y hybrid_tree_logprob_diff=D step_mem_4x_ratio=M`` (targets: X >= 2,
D < 1e-4, M <= 1.25).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from benchmarks.fixture import DEFAULT_FIXTURE, ROLLOUT_CWD_FIXTURE, load_samples
from benchmarks.models import SMOLLM2_WIDTH, TINY, make_hybrid_model, make_model
from benchmarks.step_memory import step_memory_ratio
from harness_rl.train.logprobs import packed_token_logprobs, padded_token_logprobs, sequence_token_logprobs
from harness_rl.train.loss import grpo_loss
from harness_rl.train.packing import TreeRow, pack_stats, pad_samples, plan_rows
from harness_rl.train.tree_attention import enable_tree_attention


class ChainRow(TreeRow):
    """A ``TreeRow`` that shares nothing: each sample is its own chain, so ``pack()`` gives plain padding-free
    packing (one segment per sample, each attending only to itself) through the same layout and attention."""

    def fits(self, sample: dict[str, Any], budget: int) -> bool:
        return len(self.tokens) + len(sample["input_ids"]) <= budget

    def add(self, sample: dict[str, Any]) -> None:
        nodes: list[int] = []
        for depth, token in enumerate(sample["input_ids"].tolist()):
            node = len(self.tokens)
            self.tokens.append(token)
            self.children.append({})
            self.load += depth + 1
            # Keys only route lookups, which never happen here; pack() walks the values.
            parent = self.children[nodes[-1]] if nodes else self.roots
            parent[(len(self.samples), token) if not nodes else (token, None)] = node
            nodes.append(node)
        self.samples.append(sample)
        self.sample_nodes.append(nodes)
        self.groups.add(sample["group_id"])
        self.trained += int(sample["completion_mask"].sum())


def chain_row(samples: Sequence[dict[str, Any]]) -> ChainRow:
    """All ``samples`` in one unshared row, in the given order."""
    row = ChainRow()
    for sample in samples:
        row.add(sample)
    return row


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_paths(
    model: torch.nn.Module,
    samples: Sequence[dict[str, Any]],
    *,
    warmup: int,
    repeats: int,
    tree_modes: Sequence[str] = ("auto",),
    progress: Progress | None = None,
) -> tuple[dict[str, list[float]], dict[str, torch.Tensor], dict[str, int]]:
    """Time one training forward+backward of the same loss terms on the three layouts.

    ``tree_modes`` other than ``auto`` add a ``tree/<mode>`` path per tree-attention kernel (``dense``,
    ``segments``, ``flex``: what ``DENSE_MAX_TOKENS`` in :mod:`harness_rl.train.tree_attention` is tuned with).

    Returns:
        Per path the timed seconds, per path the log-probs (in ``TreeRow.pack()``'s order), and token counts
        (``raw``, per path the forwarded tokens, ``padded`` = batch x width, ``trained`` loss terms).
    """
    rows = plan_rows(samples, token_budget=sum(len(s["input_ids"]) for s in samples))
    assert len(rows) == 1, "a budget of all raw tokens fits every sample in one row"
    tree = rows[0].pack()
    # The chain row takes the samples in the tree row's order, so their loss terms line up one to one.
    padfree = chain_row(rows[0].samples).pack()
    padded = pad_samples(rows[0].samples)
    runs: dict[str, Callable[[], torch.Tensor]] = {}
    for mode in tree_modes:
        kwargs = {} if mode == "auto" else {"tree_attention_mode": mode}
        runs["tree" if mode == "auto" else f"tree/{mode}"] = lambda kwargs=kwargs: packed_token_logprobs(
            model, tree, **kwargs
        )
    runs["padfree"] = lambda: packed_token_logprobs(model, padfree)
    runs["padded"] = lambda: padded_token_logprobs(model, padded)
    enable_tree_attention(model)  # right-padded batches score correctly in tree mode too (see padded_token_logprobs)
    device = next(model.parameters()).device
    times: dict[str, list[float]] = {name: [] for name in runs}
    logprobs: dict[str, torch.Tensor] = {}
    task = progress.add_task("forward+backward", total=len(runs) * (warmup + repeats)) if progress else None
    # The paths take turns, so that a busy machine slows them alike; best-of-n, as load only ever adds time.
    for i in range(warmup + repeats):
        for name, fn in runs.items():
            if progress is not None:
                progress.update(task, description=f"{name} run {i + 1}")
            model.zero_grad(set_to_none=True)
            _sync(device)
            start = time.perf_counter()
            new = fn()
            loss, _ = grpo_loss(new, new.detach() - 0.01, torch.ones_like(new))
            loss.backward()
            _sync(device)
            elapsed = time.perf_counter() - start
            logprobs[name] = new.detach().float().cpu()
            if i >= warmup:
                times[name].append(elapsed)
            if progress is not None:
                progress.advance(task)
    stats = pack_stats(rows)
    tokens = {name: len(tree["input_ids"]) for name in runs if name.startswith("tree")}
    tokens |= {
        "raw": stats["raw_tokens"],
        "padfree": len(padfree["input_ids"]),
        "padded": padded["input_ids"].numel(),
        "trained": len(tree["token_index"]),
    }
    return times, logprobs, tokens


def hybrid_logprob_diff(kind: str, samples: Sequence[dict[str, Any]], console: Console) -> float:
    """Largest |log-prob| difference of a tiny hybrid model (:func:`make_hybrid_model`), tree-packed vs one
    sample at a time, in float32.

    NaN (with the error printed) when the packed path refuses or fails, so that the benchmark still reports
    the rest.
    """
    model = make_hybrid_model(kind)
    row = plan_rows(samples, token_budget=sum(len(s["input_ids"]) for s in samples))[0]
    with torch.no_grad():
        # The reference runs before the model is switched to tree attention: transformers' own forward.
        reference = torch.cat(
            [sequence_token_logprobs(model, s["input_ids"], s["completion_mask"]) for s in row.samples]
        )
        try:
            enable_tree_attention(model)
            packed = packed_token_logprobs(model, row.pack())
        except Exception as err:  # the benchmark reports the state of the code, whatever it is
            console.print(f"[yellow]{kind} tree packing failed: {type(err).__name__}: {err}")
            return math.nan
    return float((packed - reference).abs().max())


def final_line(tree_vs_padfree: float, tree_vs_padded: float, hybrid_diff: float, mem_ratio: float) -> str:
    """The benchmark's last line (the issue's acceptance line)."""
    return (
        f"tree_vs_padfree={tree_vs_padfree:.2f} tree_vs_padded={tree_vs_padded:.2f} "
        f"hybrid_tree_logprob_diff={hybrid_diff:.2e} step_mem_4x_ratio={mem_ratio:.2f}"
    )


def _print_timings(console: Console, samples: Sequence[dict[str, Any]], layers: int, times, tokens) -> None:
    best = {name: min(ts) for name, ts in times.items()}
    n_groups = len({s["group_id"] for s in samples})
    table = Table(
        title=f"{n_groups} group(s), {len(samples)} samples, {tokens['raw']} raw tokens, "
        f"{tokens['trained']} trained tokens; {layers}-layer model, forward+backward"
    )
    for column in ("path", "forwarded tokens", "best s", "all s", "raw tokens/s", "vs tree"):
        table.add_column(column)
    for name, ts in times.items():
        table.add_row(
            name,
            str(tokens[name]),
            f"{best[name]:.3f}",
            " ".join(f"{t:.2f}" for t in ts),
            f"{tokens['raw'] / best[name]:.0f}",
            f"{best[name] / best['tree']:.2f}x",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE)
    parser.add_argument("--groups", type=int, default=1, help="fixture groups to time (0: all; 3 take ~3x longer)")
    parser.add_argument("--layers", type=int, default=4, help="SmolLM2-135M has 30; fewer keeps the run short")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tree-modes", default="auto", help="tree attention kernels to time, e.g. auto,dense,segments")
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    parser.add_argument(
        "--mem-fixture",
        type=Path,
        default=ROLLOUT_CWD_FIXTURE,
        help="samples of the memory steps; by default the per-rollout-workspace capture, where 4x the samples is "
        "~3.5x the unique tokens (with a shared system prompt it is ~1.6x, too little to load the memory)",
    )
    parser.add_argument("--mem-budget", type=int, default=4096, help="trainer.token_budget of the memory steps")
    parser.add_argument("--mem-layers", type=int, default=2)
    parser.add_argument("--skip-memory", action="store_true", help="report step_mem_4x_ratio=nan (tests)")
    parser.add_argument("--tiny", action="store_true", help="tiny width, one layer, 3 samples, one repeat (tests)")
    args = parser.parse_args(argv)
    console = Console()
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    width = TINY if args.tiny else SMOLLM2_WIDTH
    layers = 1 if args.tiny else args.layers
    samples = load_samples(args.fixture, groups=1 if args.tiny else (args.groups or None))[: 3 if args.tiny else None]
    model = make_model(layers, width, args.lora_rank).to(device)
    with Progress(console=console, transient=True) as progress:
        times, logprobs, tokens = time_paths(
            model,
            samples,
            warmup=0 if args.tiny else args.warmup,
            repeats=1 if args.tiny else args.repeats,
            tree_modes=["auto", *(m for m in args.tree_modes.split(",") if m != "auto")],
            progress=progress,
        )
    _print_timings(console, samples, layers, times, tokens)
    agreement = max(float((lp - logprobs["tree"]).abs().max()) for lp in logprobs.values())
    console.print(
        f"packing ratio (raw/unique) {tokens['raw'] / tokens['tree']:.2f}; largest log-prob difference between "
        f"paths {agreement:.2e}; {device}, {torch.get_num_threads()} threads"
    )
    if agreement > 1e-3:
        console.print("[red]the layouts disagree on the log-probs: the timings compare different computations")

    hybrid_samples = load_samples(args.fixture, groups=1)[: 2 if args.tiny else 4]
    hybrid = {kind: hybrid_logprob_diff(kind, hybrid_samples, console) for kind in ("lfm2", "lfm2_moe")}
    for kind, diff in hybrid.items():
        console.print(f"hybrid {kind} tree-packed vs unpacked ({len(hybrid_samples)} samples): max |diff| {diff:.2e}")
    worst_hybrid = math.nan if any(math.isnan(d) for d in hybrid.values()) else max(hybrid.values())

    mem_ratio = math.nan
    if not args.skip_memory:
        with console.status("peak memory of one trainer step on 1x and 4x the samples (fresh processes)"):
            memory = step_memory_ratio(
                args.mem_fixture, token_budget=args.mem_budget, layers=1 if args.tiny else args.mem_layers, width=width
            )
        console.print(memory.describe())
        mem_ratio = memory.ratio
    best = {name: min(ts) for name, ts in times.items()}
    line = final_line(best["padfree"] / best["tree"], best["padded"] / best["tree"], worst_hybrid, mem_ratio)
    print(line)
    return line


if __name__ == "__main__":
    main()
