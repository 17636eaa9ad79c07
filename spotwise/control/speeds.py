"""How long a worker's mini-batch takes and what its exchange with the parameter server costs,
per worker: pools of different speeds and places (issue 21), and the parameter server's network.

:class:`WorkerSpeeds` is a component held by the job controller (``job.speeds``; what it reads of
the job is :class:`SpeedsHost`).  It holds the job's :class:`~spotwise.market.pools.PoolSet` (one pool for a
single-type job) and answers, per worker slot:

* **the mini-batch time law** -- ``m_w * (samples / batch)`` with ``m_w = step_time_s /
  throughput(pool instance, family)``: a K80, a P100 and a V100 of ``papers/002_a246f6afe29b4bfb.txt``
  Sec. III-G compute at their catalog speeds (paper 002 Tables I/III measured them for ResNet-32);
  a worker given a larger share of a round (``cluster.balance: throughput``) takes longer in
  proportion;
* **the batch share** of a barrier round (:meth:`~spotwise.market.pools.PoolSet.batch_for`);
* **the exchange** with the parameter server: a worker in another region than the server adds
  the link's ``rtt_s + bytes / bandwidth`` to its mini-batch and pays egress on the bytes
  (:mod:`spotwise.market.network`, Fig. 8); with ``cluster.ps_gbps`` set, every exchange also
  queues at the server, whose network carries ``bytes / (ps_gbps * ps_shards)`` seconds of it
  (``cluster.ps_shards`` splits the parameters, hence the bytes, over k servers working in
  parallel: Fig. 6's bottleneck and its relief).  The server serves each exchange in the first
  idle stretch after it arrives (:meth:`WorkerSpeeds._serve`).

The exchange moves the parameters one way and the gradient the other: ``2 * model bytes``, the
model's float32 size or ``workload.model_mb`` when the run stands in for a larger model (paper 002
Table II: ResNet-32 is 14.19 MB).  Only a virtual clock adds these times; a real cluster measures
them.  Egress is billed on either clock.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.pools import PoolSet
from spotwise.market.job_market import Market
from spotwise.theory.runtime import MiniBatchTimeLaw

FLOAT32_BYTES = 4


class _Egress(Protocol):
    def egress(self, w: int, usd: float, nbytes: float) -> None: ...


class SpeedsHost(Protocol):
    """What :class:`WorkerSpeeds` reads of the job (the place, the batch, the clock) and where it
    bills the egress of an exchange."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def market(self) -> Market: ...
    @property
    def max_workers(self) -> int: ...
    @property
    def batch(self) -> int: ...
    @property
    def params(self) -> np.ndarray: ...
    @property
    def accounting(self) -> _Egress: ...

    @property
    def T(self) -> float: ...


class WorkerSpeeds:
    """Per-worker mini-batch times, batch shares and exchanges (see the module docstring)."""

    def __init__(self, job: SpeedsHost) -> None:
        self.job = job
        spec = job.spec
        self.pools: PoolSet = job.market.pools or PoolSet.single(job.market, job.max_workers, spec.workload.family)
        self.step_time_s = float(spec.workload.step_time_s)
        self.straggler = float(spec.cluster.straggler)
        self.balance = spec.cluster.balance
        self.shards = int(spec.cluster.ps_shards)
        self.ps_gbps = spec.cluster.ps_gbps
        n_params = int(np.asarray(job.params).size)
        if self.shards > n_params:
            raise InputError(f"ps_shards {self.shards} is more shards than the model has parameters ({n_params})",
                             f"use at most {n_params} shards (each holds a slice of the parameters)", "cluster.ps_shards")
        mb = spec.workload.model_mb
        #: bytes one exchange moves: the parameters down and the gradient up
        self.exchange_bytes = 2.0 * (float(mb) * 1e6 if mb is not None else FLOAT32_BYTES * n_params)
        #: the parameter server's booked network time: sorted, disjoint ``(start, end)`` (virtual seconds)
        self._busy: list[tuple[float, float]] = []
        self._laws: dict[tuple[int, int], MiniBatchTimeLaw] = {}

    # ------------------------------------------------------------------ time
    @property
    def mean_step_s(self) -> float:
        """Mean seconds of one equal mini-batch of the job's first pool (a single type: its only one)."""
        return self.step_time_s / self.pools.pools[0].speed

    def effective_law(self) -> MiniBatchTimeLaw:
        """One law standing for the whole fleet in closed-form estimates: one pool's own law; with
        several, the mean that gives the fleet's aggregate rate (``N / sum 1/m_w`` over the slots)."""
        if not self.pools.multi:
            return MiniBatchTimeLaw(self.mean_step_s, self.straggler)
        speeds = [p.speed for p in self.pools.pools for _ in p.slots]
        return MiniBatchTimeLaw(self.step_time_s * len(speeds) / sum(speeds), self.straggler)

    def law(self, w: int, samples: int | None = None) -> MiniBatchTimeLaw:
        """The time law of slot ``w``'s mini-batch of ``samples`` samples (default: the batch size)."""
        batch = int(self.job.batch)
        # equal shares: every mini-batch takes a full batch's time (a short end-of-epoch block too)
        n = batch if samples is None or self.balance != "throughput" else int(samples)
        key = (self.pools.index_of(w), n)
        law = self._laws.get(key)
        if law is None:
            law = MiniBatchTimeLaw(self.pools.mean_step_s(w, self.step_time_s) * n / batch, self.straggler)
            self._laws[key] = law
        return law

    def batch(self, w: int, members: list[int]) -> int:
        return self.pools.batch_for(w, int(self.job.batch), self.balance, members)

    def draw(self, w: int, samples: int | None, rng: np.random.Generator) -> Callable[[], float]:
        """What the clock draws for slot ``w``'s mini-batch: compute time plus a cross-region exchange."""
        law = self.law(w, samples)
        extra = self.pools.exchange(w, self.exchange_bytes)[0]
        return lambda: float(law.draw(rng)) + extra

    def finish(self, start: float, duration: float | None, w: int) -> float | None:
        """When slot ``w``'s mini-batch started at ``start`` is done (``None``: measured clock), after
        its exchange was served by the parameter server (``ps_gbps`` set); bills its egress."""
        usd = self.pools.exchange(w, self.exchange_bytes)[1]
        if usd:
            self.job.accounting.egress(w, usd, self.exchange_bytes)
        if duration is None:
            return None
        done = start + duration
        if self.ps_gbps is None:
            return done
        return self._serve(done, 8.0 * self.exchange_bytes / (float(self.ps_gbps) * 1e9 * self.shards))

    def _serve(self, arrive: float, service: float) -> float:
        """When an exchange arriving at ``arrive`` has been served: the server's first idle stretch of
        ``service`` seconds at or after ``arrive``.  Mini-batches are drawn when handed out, not in
        the order they arrive, so an exchange may arrive before ones already booked: it takes the
        earliest gap, leaving booked ones where they are (a non-preemptive server in arrival order,
        up to the bookings already made)."""
        busy = self._busy
        now = self.job.T
        stale = 0
        while stale < len(busy) and busy[stale][1] <= now:  # nothing arrives before now
            stale += 1
        del busy[:stale]
        t = arrive
        for k, (start, end) in enumerate(busy):
            if end <= t:
                continue
            if start >= t + service:
                busy.insert(k, (t, t + service))
                return t + service
            t = end
        busy.append((t, t + service))
        return t + service
