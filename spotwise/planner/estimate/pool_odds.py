"""P(deadline) of a pool mix: "meets the deadline" as a probability, not an expectation (issue 21).

The mix's expected time (:func:`spotwise.planner.plan.pools.evaluate`) counts each pool at its
expected availability.  Whether the job finishes by the deadline depends on *when* the workers are
revoked, so this module samples it: for each of ``samples`` draws, every chosen worker gets its
up-intervals from its pool's own revocation model (each pool's random stream, as
:class:`~spotwise.market.pools.PooledRevocation` draws them; a bid-model pool's from its price
series at its bid, the same in every draw); the job's progress rate at time ``t`` is the full
fleet's rate scaled by the share of the fleet's throughput that is up
(``sum_{w up} speed_w / (m_w + x_w + Delta)`` over the same sum for every worker), so it finishes
when the integral of that share reaches the time the mix takes with every worker up.  A fluid
model like the expected time (no restarts, no per-round barrier), exact when no worker is revoked.

Per-iteration (Bernoulli) pools have no timeline to sample: the probability is then ``None`` and
the plan says so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

#: sampled timelines per mix
DEADLINE_SAMPLES = 200


def _worker_intervals(model: Any, workers: int, horizon: float, rng: np.random.Generator) -> list[list[tuple[float, float]]]:
    return model.all_intervals(int(workers), 0.0, float(horizon), rng if model.needs_rng else None)


def _finish(full_s: float, weights: list[float], intervals: list[list[tuple[float, float]]], horizon: float) -> float:
    """When the integral of the up share of ``weights`` reaches ``full_s`` (``inf``: not within ``horizon``)."""
    total = float(sum(weights))
    if total <= 0:
        return math.inf
    deltas: dict[float, float] = {}
    for w, ivs in zip(weights, intervals):
        for a, b in ivs:
            deltas[a] = deltas.get(a, 0.0) + w
            deltas[b] = deltas.get(b, 0.0) - w
    times = sorted(deltas)
    level, done, prev = 0.0, 0.0, 0.0
    for t in times + [horizon]:
        share = level / total
        if share > 0 and done + share * (t - prev) >= full_s:
            return prev + (full_s - done) / share
        done += share * (t - prev)
        prev = t
        if t < horizon:
            level += deltas.get(t, 0.0)
    return math.inf


def mix_deadline_probability(job: Any, best: Any, deadline: float, evaluate: Callable[..., Any],
                             samples: int = DEADLINE_SAMPLES, seed: int = 0) -> tuple[float | None, str]:
    """``(P(finish by deadline), how)`` of the mix ``best`` (a :class:`~spotwise.planner.plan.pools.MixEval`);
    ``evaluate`` is :func:`spotwise.planner.plan.pools.evaluate` (passed in: that module calls this one)."""
    from spotwise.market.preemption import BidRevocation

    pools = job.inp.market.pools.pools
    full_opts = tuple(dataclasses.replace(o, availability=1.0) for o in best.options)
    full = evaluate(job, best.counts, full_opts)
    if full.time_s is None or not math.isfinite(full.time_s):
        return None, "the mix cannot run with every worker up"
    models = []
    for n, o in zip(best.counts, best.options):
        if n <= 0:
            continue
        model = pools[o.index].market.revocation
        if getattr(model, "is_iteration_driven", False):
            return None, f"pool {o.name} revokes per iteration (bernoulli): no timeline to sample"
        if o.bid is not None and isinstance(model, BidRevocation):
            model = BidRevocation(model.prices, float(o.bid), persistent=model.persistent, notice_s=model.notice_s)
        weight = o.speed / (o.compute_s + job.delta) if (o.compute_s + job.delta) > 0 else o.speed
        models.append((o.index, int(n), model, weight))
    horizon = max(4.0 * float(deadline), 2.0 * float(full.time_s))
    met = 0
    for s in range(int(samples)):
        weights: list[float] = []
        intervals: list[list[tuple[float, float]]] = []
        for index, n, model, weight in models:
            rng = np.random.default_rng([int(seed), 31, s, index])
            intervals += _worker_intervals(model, n, horizon, rng)
            weights += [weight] * n
        if _finish(float(full.time_s), weights, intervals, horizon) <= deadline:
            met += 1
    how = (f"{samples} sampled timelines of the chosen workers' revocations (fluid progress: the fleet's rate times "
           f"the up share of its throughput; {full.time_s:.0f} s with every worker up)")
    return met / samples, how
