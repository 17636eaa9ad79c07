"""Exponentially growing provisioning (``papers/000_3c734f3ffedcac15.txt`` Thm 2, Remark 3).

In iteration j provision ``n_j = ceil(n_1 * eta^(j-1))`` workers, capped at ``n_max``.  Theorem 2
shows that with ``eta^chi >= 1/(1 - alpha c mu)`` the error bound converges to 0 (instead of a
positive constant with a static number of workers); Remark 3 caps the growth, after which the
asymptotic error equals always using ``n_max`` workers but at a much lower cost early on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotwise.policies.base import Decision, Observation, Policy, Resize
from spotwise.policies.schema import check_exp_growth


def workers_at(j: int, n1: int, eta: float, n_max: int) -> int:
    """``min(n_max, ceil(n_1 eta^(j-1)))`` for iteration ``j >= 1`` (overflow-safe)."""
    if j < 1:
        raise ValueError("iterations are numbered from 1")
    log_n = math.log(n1) + (j - 1) * math.log(eta)
    if log_n >= math.log(n_max):
        return n_max
    # guard ceil against float noise just above an integer
    return min(n_max, math.ceil(math.exp(log_n) - 1e-9))


@dataclass(frozen=True)
class ExpGrowth(Policy):
    name = "exp-growth"
    eta: float = 1.01
    n1: int | None = None

    def __post_init__(self) -> None:
        check_exp_growth(self.eta, self.n1)

    def decide(self, obs: Observation) -> list[Decision]:
        n1 = self.n1 if self.n1 is not None else obs.reference_workers
        want = workers_at(obs.step + 1, n1, self.eta, obs.max_workers)
        if want != obs.provisioned:
            return [Resize(reason=f"iteration {obs.step + 1}: n_j = min({obs.max_workers}, ceil({n1} x {self.eta:g}^{obs.step}))"
                                  f" = {want} (paper 000 Thm 2, Remark 3)", workers=want)]
        return []
