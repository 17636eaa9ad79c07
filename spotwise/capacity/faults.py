"""Fault injection: scripted revocations for tests, benchmarks and chaos experiments.

:class:`ScriptedRevocation` is a revocation model whose outages are given explicitly --
"workers 0-5 are revoked at t = 40 s and come back at t = 90 s", "everything goes at t = 200 s"
-- so a test can place many revocations at once, the whole cluster, or random points, and know
exactly what should happen.  It plugs in wherever the market's revocation model does (the
emulated provider, the simulator), like any other :class:`RevocationModel`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from spotwise.market.preemption import RevocationModel


@dataclass(frozen=True)
class Outage:
    """Workers ``workers`` are revoked at ``start`` and have capacity again at ``end``."""

    start: float
    end: float
    workers: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (0 <= self.start < self.end):
            raise ValueError("an outage needs 0 <= start < end")
        if any(w < 0 for w in self.workers):
            raise ValueError("worker indices must be >= 0")


@dataclass(frozen=True)
class ScriptedRevocation(RevocationModel):
    """Every worker is available except during the outages that name it."""

    outages: tuple[Outage, ...] = ()
    notice_s: float = 0.0

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[tuple[float, float]]:
        down = sorted((o.start, o.end) for o in self.outages if worker in o.workers)
        merged: list[list[float]] = []
        for a, b in down:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out: list[tuple[float, float]] = []
        cur = t0
        for a, b in merged:
            if a > cur:
                out.append((cur, min(a, t1)))
            cur = max(cur, b)
            if cur >= t1:
                break
        if cur < t1:
            out.append((cur, t1))
        return [(a, b) for a, b in out if b > a]


def random_outages(
    n_workers: int,
    horizon: float,
    count: int,
    seed: int,
    fraction: float = 0.5,
    duration: tuple[float, float] = (5.0, 60.0),
) -> tuple[Outage, ...]:
    """``count`` outages at uniformly random times, each taking a random ``fraction`` of workers."""
    rng = np.random.default_rng(seed)
    outs = []
    for _ in range(count):
        start = float(rng.uniform(0.0, horizon))
        k = max(1, int(round(fraction * n_workers)))
        ws = tuple(sorted(int(w) for w in rng.choice(n_workers, size=k, replace=False)))
        outs.append(Outage(start, start + float(rng.uniform(*duration)), ws))
    return tuple(outs)


def outage(start: float, end: float, workers: Sequence[int]) -> Outage:
    return Outage(float(start), float(end), tuple(int(w) for w in workers))
