"""The packing benchmark at tiny size: its fixture of captured groups is well-formed, the three layouts it times
give the same log-probs, the unshared row shares nothing, and the run ends with the acceptance line."""

from __future__ import annotations

import re

import pytest
import torch

from benchmarks.fixture import DEFAULT_FIXTURE, ROLLOUT_CWD_FIXTURE, load_samples, read_fixture
from benchmarks.models import TINY, VOCAB, make_base_model, make_model
from benchmarks.packing import chain_row, main, time_paths
from benchmarks.step_memory import largest_single_row_prefix, measure
from harness_rl.train.packing import plan_rows

FINAL_LINE = re.compile(
    r"tree_vs_padfree=(\S+) tree_vs_padded=(\S+) hybrid_tree_logprob_diff=(\S+) step_mem_4x_ratio=(\S+)"
)


@pytest.mark.parametrize("fixture", [DEFAULT_FIXTURE, ROLLOUT_CWD_FIXTURE], ids=["fixed_cwd", "rollout_cwd"])
def test_fixture_holds_real_groups_of_eight_rollouts(fixture):
    payload = read_fixture(fixture)
    meta = payload["meta"]
    assert meta["model"] == "smollm2-135m" and meta["harness"] and meta["date"] and meta["harness_version"]
    by_group: dict[int, set[int]] = {}
    for sample in payload["samples"]:
        n = len(sample["input_ids"])
        assert n == len(sample["loss_mask"]) == len(sample["logprobs"]) > 1
        assert set(sample["loss_mask"]) <= {0, 1} and sum(sample["loss_mask"][1:]) > 0
        assert all(0 <= t < VOCAB for t in sample["input_ids"])
        sampled = [lp for lp, m in zip(sample["logprobs"], sample["loss_mask"], strict=True) if m]
        assert all(lp <= 0.0 for lp in sampled)
        by_group.setdefault(sample["group_id"], set()).add(sample["rollout_index"])
    assert len(by_group) >= 2
    assert all(indices == set(range(8)) for indices in by_group.values()), by_group
    # How much of the ~1,530-token system prompt a group shares is what the two captures differ in.
    first = [s["input_ids"] for s in payload["samples"] if s["group_id"] == 0]
    shared = next(i for i in range(min(map(len, first))) if len({ids[i] for ids in first}) > 1)
    assert shared >= 1500 if fixture == DEFAULT_FIXTURE else 500 <= shared < 1000


def test_chain_row_shares_nothing():
    samples = load_samples(groups=1)[:3]
    packed = chain_row(samples).pack()
    assert torch.equal(packed["input_ids"], torch.cat([s["input_ids"] for s in samples]))
    assert len(packed["tree_cu_seqlens_q"]) == len(samples) + 1  # one segment per sample
    tree = plan_rows(samples, token_budget=1 << 20)[0].pack()
    assert len(tree["input_ids"]) < len(packed["input_ids"])  # the tree does share the prompt
    assert torch.equal(tree["old_log_probs"], packed["old_log_probs"])  # same loss terms, same order


def test_tree_padfree_and_padded_give_the_same_logprobs():
    samples = load_samples(groups=1)[:3]
    model = make_model(1, TINY, lora_rank=4)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05)  # a non-zero adapter, so LoRA's path is compared too
    times, logprobs, tokens = time_paths(model, samples, warmup=0, repeats=1)
    assert set(times) == {"tree", "padfree", "padded"}
    assert tokens["padfree"] == tokens["raw"] > tokens["tree"]
    for name in ("padfree", "padded"):
        torch.testing.assert_close(logprobs[name], logprobs["tree"], atol=1e-5, rtol=0)


def test_tiny_run_ends_with_the_acceptance_line(capsys):
    line = main(["--tiny", "--skip-memory"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == line
    match = FINAL_LINE.fullmatch(line)
    assert match, line
    tree_vs_padfree, tree_vs_padded, hybrid, memory = (float(x) for x in match.groups())
    assert tree_vs_padfree > 0 and tree_vs_padded > 0
    assert hybrid < 1e-4  # tiny LFM2 and LFM2-MoE, tree-packed vs unpacked
    assert memory != memory  # skipped: nan


def test_step_memory_measures_one_trainer_step(tmp_path):
    samples = load_samples()
    assert largest_single_row_prefix(samples, len(samples[0]["input_ids"])) == 1
    with pytest.raises(ValueError, match="mem-budget"):
        largest_single_row_prefix(samples, len(samples[0]["input_ids"]) - 1)
    make_base_model(1, TINY).save_pretrained(tmp_path)
    result = measure(str(tmp_path), DEFAULT_FIXTURE, n_samples=1, token_budget=4096)
    assert result["samples"] == 1 and result["peak_bytes"] > 0
