"""A verifier's verdict and the check of a score, shared by the verifier kinds (``verify``) and the task-folder
test runner (``testrun``), which ``verify`` calls: kept below both so neither imports the other for them."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class VerifierResult:
    """A verifier's verdict.

    Attributes:
        score: In [0, 1] (1 = solved); None when the verifier itself failed.
        error: Why the verifier failed (None when it produced a score).
        seconds: How long it ran.
    """

    score: float | None
    error: str | None = None
    seconds: float = 0.0

    @property
    def scorable(self) -> bool:
        """Whether the rollout has a score at all."""
        return self.score is not None


def check_score(value: object, shown: str) -> float:
    """``value`` as a float if it is a finite number in [0, 1] (``shown`` is quoted in the error).

    Raises:
        ValueError: It is not.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"verifier's score is not a finite number: {shown[:200]!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"verifier's score {value} is outside [0, 1]")
    return float(value)
