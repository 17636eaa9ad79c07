"""Learning rate scaled with the number of *active* workers.

``papers/002_a246f6afe29b4bfb.txt`` Sec. III-F ("adaptive learning rate", Fig. 5) sets the rate
from the number of *active* workers rather than the total provisioned, recovering ~1 % accuracy
lost to sparse mapping; ``papers/000_3c734f3ffedcac15.txt`` Sec. VI-C (Fig. 9a) scales the step
size linearly with the number of workers (alpha = 0.03 n).  Here

    lr = base_lr * y / n_ref,

with ``y`` the active workers and ``n_ref`` the workers ``base_lr`` was tuned for (the spec's
``cluster.workers`` by default), clamped to ``[min_factor, max_factor] * base_lr``.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotwise.policies.base import Decision, Observation, Policy, SetLearningRate
from spotwise.policies.schema import check_lr_scaling


@dataclass(frozen=True)
class LrScaling(Policy):
    name = "lr-scaling"
    min_factor: float = 0.0
    max_factor: float = 4.0
    rel_tolerance: float = 1e-9

    def __post_init__(self) -> None:
        check_lr_scaling(self.min_factor, self.max_factor, self.rel_tolerance)

    def target_lr(self, obs: Observation) -> float:
        factor = obs.active / obs.reference_workers
        factor = min(max(factor, self.min_factor), self.max_factor)
        return obs.base_lr * factor

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.active == 0:
            return []  # nothing trains while idle; keep the rate for when workers return
        lr = self.target_lr(obs)
        if lr > 0 and abs(lr - obs.lr) > self.rel_tolerance * obs.base_lr:
            return [SetLearningRate(reason=f"{obs.active} of {obs.reference_workers} reference workers active: "
                                           f"lr = {obs.base_lr:g} x {obs.active}/{obs.reference_workers}", lr=lr)]
        return []
