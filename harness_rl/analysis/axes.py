"""The axis rules every plot of the project follows: rates on a fixed 0-100% axis, steps on integer ticks.

An autoscaled axis makes noise look like a trend: a pass@1 that moves from 0.0 to 0.01 filled a whole
-0.04..0.04 panel, and three optimizer steps were ticked at 0.25 intervals. So a rate (pass@k, a pass rate, any
``*fraction``) is always drawn on the same 0-100% scale, a change of a rate (``delta_pass@1``) on -100..+100%,
and an axis that counts optimizer steps, turns or checkpoints only ever shows whole numbers. Every figure in
``harness_rl.analysis`` and ``harness_rl.eval.report`` calls ``style_axes`` (or the two rules it combines)
instead of setting limits itself, so the rules live in one place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

from matplotlib.axes import Axes
from matplotlib.ticker import MaxNLocator, MultipleLocator, PercentFormatter

#: A margin around 0..1 so that markers and error bars at exactly 0% or 100% are not cut in half by the frame;
#: the ticks (0, 20, ..., 100%) stay on the fixed 0-100% scale.
RATE_MARGIN = 0.02
#: The y-limits of a rate axis (fractions, shown as percent).
RATE_LIMITS = (0.0 - RATE_MARGIN, 1.0 + RATE_MARGIN)
#: The y-limits of the change of a rate (a difference of two fractions, -100..+100 points).
SIGNED_RATE_LIMITS = (-1.0 - RATE_MARGIN, 1.0 + RATE_MARGIN)

# pass@1, pass@4; the `delta_` prefix is told apart in `rate_kind`.
_PASS_AT = re.compile(r"(^|[/_])pass@\d+($|_)")
# reward/pass_rate(_trained), train/clip_fraction, batch/groups_with_variance_fraction. Named words, not any
# `*_rate`: a learning rate is no fraction and would be drawn flat at 0%.
_RATE_WORDS = re.compile(r"(pass_rate|solve_rate|success_rate|fraction)")
_DELTA = re.compile(r"(^|/)delta_")
# The rewards a pass makes 1 (efficiency bonus and block penalty are small parts, left autoscaled).
_REWARD = re.compile(r"(^|/)reward/(mean|correctness)(_trained)?$")

Axis = Literal["x", "y"]


def rate_kind(metric: str) -> Literal["rate", "signed_rate"] | None:
    """Whether ``metric`` is a rate in [0, 1] (``"rate"``), the change of one (``"signed_rate"``), or neither.

    Interval columns (``pass@1_lo``, ``delta_pass@1_hi``) are rates like their point estimate.
    """
    name = metric.strip()
    if not (_PASS_AT.search(name) or _RATE_WORDS.search(name)):
        return None
    return "signed_rate" if _DELTA.search(name) else "rate"


def rate_axis(ax: Axes, *, axis: Axis = "y", signed: bool = False) -> None:
    """Fix ``axis`` of ``ax`` to 0-100% (or -100..+100% when ``signed``), ticks every 20 points.

    Values are fractions (0.25 is drawn at 25%), as every rate column and metric of the project stores them.
    """
    limits = SIGNED_RATE_LIMITS if signed else RATE_LIMITS
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_ylim if axis == "y" else ax.set_xlim)(*limits)
    target.set_major_locator(MultipleLocator(0.2 if not signed else 0.5))
    target.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))


def reward_axis(ax: Axes, values: Sequence[float]) -> None:
    """A reward on y, held on at least 0..1 (a pass is 1, bonuses and penalties are small), widened only as far
    as ``values`` reach, so a reward that moves from 0.02 to 0.05 does not fill the panel like a leap."""
    finite = [float(v) for v in values if not math.isnan(float(v))]
    low, high = min([0.0, *finite]), max([1.0, *finite])
    pad = RATE_MARGIN * (high - low)
    ax.set_ylim(low - pad, high + pad)


def step_axis(ax: Axes, *, axis: Axis = "x") -> None:
    """Whole-number ticks only on ``axis`` (optimizer steps, checkpoint steps, turns), never 0.25 or 1.5."""
    (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))


def style_axes(ax: Axes, metric: str | None = None, *, steps_on_x: bool = True, values: Sequence[float] = ()) -> None:
    """Apply the project's axis rules to one panel: integer step ticks on x, a fixed scale for a rate ``metric``
    and at least 0..1 for a reward.

    Args:
        ax: The panel.
        metric: The name of what the y-axis shows (a metric or summary column); its kind decides the scale.
            Anything that is neither a rate nor a reward keeps matplotlib's autoscaling.
        steps_on_x: The x-axis counts steps (optimizer or checkpoint steps, turns).
        values: The y-values drawn, for a reward axis that must reach beyond 0..1.
    """
    if steps_on_x:
        step_axis(ax, axis="x")
    kind = rate_kind(metric) if metric else None
    if kind is not None:
        rate_axis(ax, axis="y", signed=kind == "signed_rate")
    elif metric and _REWARD.search(metric):
        reward_axis(ax, values)
