"""Every plot draws rates on a fixed 0-100% axis and steps on whole-number ticks: the axis helper, the training
curves, the eval rows, and the diagnostics panels that show "not logged" for a metric the run did not log."""

from __future__ import annotations

import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from harness_rl.analysis.axes import RATE_LIMITS, SIGNED_RATE_LIMITS, rate_kind, style_axes
from harness_rl.analysis.plots import LEARNING_DIAGNOSTICS, expand_metrics, plot_eval_rows, plot_training_curves


def assert_rate_axis(ax, limits=RATE_LIMITS) -> None:
    assert ax.get_ylim() == pytest.approx(limits)
    assert isinstance(ax.yaxis.get_major_formatter(), PercentFormatter)
    assert ax.yaxis.get_major_formatter().xmax == 1.0  # fractions: 0.25 is labelled 25%
    ticks = [t for t in ax.get_yticks() if limits[0] <= t <= limits[1]]
    assert ticks[0] == pytest.approx(limits[0] + 0.02) and ticks[-1] == pytest.approx(limits[1] - 0.02)


def assert_integer_steps(ax) -> None:
    assert isinstance(ax.xaxis.get_major_locator(), MaxNLocator)
    ticks = ax.get_xticks()
    assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks


@pytest.mark.parametrize(
    ("metric", "kind"),
    [
        ("pass@1", "rate"),
        ("pass@4", "rate"),
        ("pass@1_lo", "rate"),
        ("reward/pass_rate", "rate"),
        ("reward/pass_rate_trained", "rate"),
        ("train/clip_fraction", "rate"),
        ("train/dual_clip_fraction", "rate"),
        ("batch/groups_with_variance_fraction", "rate"),
        ("adv/positive_fraction", "rate"),
        ("delta_pass@1", "signed_rate"),
        ("delta_pass@1_hi", "signed_rate"),
        ("reward/mean", None),
        ("optim/learning_rate", None),
        ("batch/packing_ratio", None),
        ("train/grad_norm", None),
        ("tool_calls_solved", None),
    ],
)
def test_rate_kind(metric, kind):
    assert rate_kind(metric) == kind


def test_a_tiny_pass_rate_is_drawn_on_the_whole_0_to_100_axis_over_integer_steps():
    # The bug this guards: pass@1 of 0..1% filled a -0.04..0.04 panel and 3 steps were ticked every 0.25.
    ax = Figure().subplots()
    ax.plot([0, 1, 2], [0.0, 0.01, 0.0])
    style_axes(ax, "pass@1")
    assert_rate_axis(ax)
    assert_integer_steps(ax)


def test_a_change_of_a_rate_spans_minus_to_plus_100():
    ax = Figure().subplots()
    ax.plot([1, 2], [0.1, 0.2])
    style_axes(ax, "delta_pass@1")
    assert_rate_axis(ax, SIGNED_RATE_LIMITS)


def test_other_metrics_keep_autoscaling_but_steps_are_still_integers():
    ax = Figure().subplots()
    ax.plot([1, 2, 3], [100.0, 350.0, 200.0])
    style_axes(ax, "rollout/sampled_tokens")
    assert not isinstance(ax.yaxis.get_major_formatter(), PercentFormatter)
    assert ax.get_ylim()[1] >= 350.0
    assert_integer_steps(ax)


def test_reward_axis_holds_at_least_0_to_1():
    ax = Figure().subplots()
    ax.plot([1, 2, 3], [0.02, 0.05, 0.03])
    style_axes(ax, "reward/mean", values=[0.02, 0.05, 0.03])
    low, high = ax.get_ylim()
    assert low <= 0.0 and 1.0 <= high < 1.1


def curves(metrics: dict[str, list[float]]) -> pd.DataFrame:
    rows = [
        {"harness": "pi", "step": step, "metric": metric, "value": value}
        for metric, values in metrics.items()
        for step, value in enumerate(values, start=1)
    ]
    return pd.DataFrame(rows)


def test_training_curves_put_rates_on_percent_and_steps_on_integers():
    fig = plot_training_curves(
        curves({"reward/pass_rate": [0.0, 0.01, 0.02], "train/grad_norm": [3.0, 2.0, 1.0]}),
        ["reward/pass_rate", "train/grad_norm"],
    )
    rate, norm = fig.axes[0], fig.axes[1]
    assert_rate_axis(rate)
    assert not isinstance(norm.yaxis.get_major_formatter(), PercentFormatter)
    for ax in (rate, norm):
        assert_integer_steps(ax)


def test_diagnostics_expand_patterns_and_say_not_logged_for_the_rest():
    logged = curves(
        {
            "adv/mean": [0.0, 0.1],
            "adv/std": [1.0, 0.9],
            "train/clip_low_fraction": [0.1, 0.2],
            "train/clip_fraction": [0.1, 0.3],
            "time/rollout_generation_s": [5.0, 4.0],
        }
    )
    metrics = expand_metrics(logged, LEARNING_DIAGNOSTICS)
    assert metrics.index("train/clip_fraction") < metrics.index("train/grad_norm")
    assert {"adv/mean", "adv/std", "train/clip_low_fraction", "time/rollout_generation_s"} <= set(metrics)
    assert "adv/*" not in metrics and "train/kl_behaviour_k1" in metrics
    fig = plot_training_curves(logged, LEARNING_DIAGNOSTICS)
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
    assert set(panels) == set(metrics)
    said = {title for title, ax in panels.items() if any(t.get_text() == "not logged" for t in ax.texts)}
    assert said == {
        "train/entropy*",
        "train/kl_behaviour_k1",
        "train/kl_behaviour_k3",
        "train/grad_norm",
        "batch/groups_with_variance_fraction",
    }
    assert_rate_axis(panels["train/clip_fraction"])
    assert_integer_steps(panels["adv/mean"])


def test_eval_rows_draw_pass_at_1_on_percent():
    summary = pd.DataFrame(
        {
            "harness": ["pi", "pi"],
            "checkpoint": ["base", "pi/step_1"],
            "pass@1": [0.0, 0.01],
            "pass@1_lo": [0.0, 0.0],
            "pass@1_hi": [0.0, 0.03],
        }
    )
    assert_rate_axis(plot_eval_rows(summary, "pass@1").axes[0])
