"""Partial capacity (issue 31): how fast ``k`` of a job's ``N`` nodes progress, and which reading of
a multi-node trace a sweep applies.

A multi-node availability trace (SkyPilot's ``16-node`` folders) gives, every 5 minutes, how many
of 16 instances a zone could provide.  A job of ``workers: N`` gets ``min(k, N)`` of them
(:meth:`spotwise.sim.sweep.places.Place.nodes_at`) and trains on them when there are at least
``min_workers``: 1 for an elastic data-parallel job (spotwise trains on whatever it has), ``N``
for a gang (every node or none: Can't Be Late's multi-node jobs).

The rate of ``k`` nodes is the job's sample throughput on ``k`` workers relative to ``N``
(``papers/000_3c734f3ffedcac15.txt`` Sec. III, eq. 14-15): a step of ``k`` workers commits
``samples_per_step(k)`` mini-batches and takes ``E[R(k)]`` -- the ``k``-th order statistic of
the mini-batch time law (eq. 14: the slowest of ``k`` for full sync; eq. 15: the ``N``-th fastest
for N-sync) plus the commit overhead ``Delta`` -- so ``rate(k) = [s(k) / E[R(k)]] / [s(N) / E[R(N)]]``.
With straggler noise the largest clusters gain least from one more node (``E[max]`` grows like
``H_k``), which is what makes 9 of 16 nodes worth more than 9/16 of the job.
"""

from __future__ import annotations

from typing import Any, Sequence

from spotwise.errors import InputError
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.records import SweepJob


def worker_rates(sync: Any, law: Any, workers: int, overhead_s: float = 0.0) -> tuple[float, ...]:
    """``rate(k)`` for ``k = 1..workers`` (the module docstring): ``sync`` a
    :class:`~spotwise.control.sync.SyncStrategy`, ``law`` a :class:`~spotwise.theory.runtime.MiniBatchTimeLaw`."""
    def throughput(k: int) -> float:
        return sync.samples_per_step(k, 1) / sync.expected_round_s(law, k, overhead_s)

    full = throughput(workers)
    out = [min(1.0, throughput(k) / full) for k in range(1, workers + 1)]
    for i in range(1, len(out)):  # one more node never slows the job (a sync mode that waits for a fixed N may say so)
        out[i] = max(out[i], out[i - 1])
    out[-1] = 1.0
    return tuple(out)


def check_reading(job: SweepJob, places: Sequence[Place]) -> None:
    """Refuse (exit 2) a sweep whose reading of the traces is not the job's (issue 31).

    * a 1-worker job on a multi-node trace without ``min_workers``: the trace counts nodes of a
      multi-node job, and reading it as "the job can run" when any one node is free prices a
      job nobody asked about -- the user says which reading applies;
    * a ``min_workers`` the traces never give (a gang of 32 on 16-node traces): no spot at all.
    """
    multi = [p for p in places if p.counts_nodes]
    if not multi:
        return
    most = max(p.trace_nodes or int(max(p.capacity.values)) for p in multi if p.capacity is not None)
    if job.workers == 1 and job.min_workers is None:
        raise InputError(
            f"the traces count nodes (up to {most} per zone: {multi[0].capacity.meta.id if multi[0].capacity else multi[0].id}) "
            "but the job has 1 worker and no min_workers, so it is unclear which reading applies",
            f"set cluster.workers: {most} to sweep the job the traces were collected for (elastic: it trains on the k "
            f"of {most} nodes a zone gives; add cluster.min_workers: {most} for a gang that waits for all of them), or "
            "cluster.min_workers: 1 to keep a 1-node job that runs whenever any node is free", "cluster.min_workers")
    if job.min_nodes > most:
        raise InputError(f"min_workers {job.min_nodes} is more nodes than the traces ever give ({most} per zone)",
                         f"lower cluster.min_workers to at most {most}", "cluster.min_workers")
