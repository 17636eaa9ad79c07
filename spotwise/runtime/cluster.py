"""Running on a real Ray cluster (``spotwise run --ray-address ADDR``).

Workers are Ray actors placed on nodes that carry a ``spot`` resource (start spot nodes with
``ray start --address ADDR --resources '{"spot": N}'``: each worker takes one unit, so a node
with ``spot: 4`` hosts four workers); the coordinator -- the driver -- stays where it is started,
on the on-demand head.  Time is wall-clock time.  Nothing is scheduled: capacity is what the
cluster has.  A node that disappears takes its actors with it; the coordinator sees
``ActorDiedError`` on their results and handles it exactly like a market revocation (the step is
aborted and retried with the survivors; the slot is requested again and fills when a spot node
with free capacity joins).  A worker whose node's metadata service announces a preemption (AWS
two-minute notice, GCP 30 s) reports it with its next gradient and the coordinator checkpoints.

The shared parts -- commit, sampler, policies, ledger, event log, checkpoints -- are those of
:class:`~spotwise.runtime.coordinator.Coordinator`; :class:`ClusterCoordinator` only replaces how
time passes and how results are awaited.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.market.preemption import MarketEvent
from spotwise.runtime.coordinator import Contribution, Coordinator, WorkerLost
from spotwise.runtime.provider import Provider

SPOT_RESOURCE = "spot"


class ClusterProvider(Provider):
    """Capacity of an existing Ray cluster: one pending actor per requested slot."""

    clock = "wall"

    def __init__(self, worker_args: tuple[Any, ...], resource: str = SPOT_RESOURCE) -> None:
        self.worker_args = worker_args
        self.resource = resource
        self._pending: dict[int, tuple[Any, Any]] = {}
        self._ready: dict[int, Any] = {}
        self.killed = 0

    # no market timeline on a real cluster
    def peek_time(self) -> float | None:
        return None

    def pop_event(self) -> MarketEvent:  # pragma: no cover - peek_time is always None
        raise IndexError("a real cluster has no scheduled market events")

    def iteration_events(self, t: float, active: np.ndarray) -> list[MarketEvent]:
        return []

    def request(self, slot: int) -> None:
        """Ask the cluster for a worker in ``slot`` (it starts when a spot node has room)."""
        if slot in self._pending or slot in self._ready:
            return
        from spotwise.runtime.worker import remote_worker_class

        actor = remote_worker_class().options(num_cpus=0, resources={self.resource: 1}).remote(*self.worker_args)
        self._pending[slot] = (actor, actor.ready.remote())

    def cancel(self, slot: int) -> None:
        import ray

        entry = self._pending.pop(slot, None)
        actor = entry[0] if entry else self._ready.pop(slot, None)
        if actor is not None:
            ray.kill(actor, no_restart=True)

    def poll(self, timeout: float = 0.0) -> list[int]:
        """Slots whose actor has started since the last call (they can join now)."""
        import ray
        from ray.exceptions import RayActorError

        if not self._pending:
            return []
        refs = {ready: slot for slot, (_, ready) in self._pending.items()}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        out = []
        for ref in done:
            slot = refs[ref]
            actor, _ = self._pending.pop(slot)
            try:
                ray.get(ref)
            except RayActorError:
                self.request(slot)  # its node died while it started: ask again
                continue
            self._ready[slot] = actor
            out.append(slot)
        return sorted(out)

    def available_at_start(self) -> set[int]:
        return set(self._ready)

    def acquire(self, slot: int) -> Any:
        actor = self._ready.pop(slot, None)
        if actor is None:
            raise KeyError(f"slot {slot} has no started worker")
        return actor

    def kill(self, slot: int, actor: Any) -> None:
        import ray

        try:
            ray.kill(actor, no_restart=True)
        finally:
            self.killed += 1

    def shutdown(self) -> None:
        for slot in list(self._pending) + list(self._ready):
            try:
                self.cancel(slot)
            except Exception:  # pragma: no cover - best effort
                pass


def check_spot_capacity(resource: str = SPOT_RESOURCE, workers: int | None = None) -> float:
    """Total ``spot`` units in the connected cluster.

    Raises :class:`InputError` if there are none, or if ``workers`` (the job's worker actors, one
    unit each) exceed them: the run would wait forever for workers the cluster cannot place.
    """
    import ray

    total = float(ray.cluster_resources().get(resource, 0.0))
    if total < 1:
        raise InputError(
            f"the Ray cluster has no node with a '{resource}' resource",
            f"start spot workers with: ray start --address ADDR --resources '{{\"{resource}\": 4}}'",
            "--ray-address",
        )
    if workers is not None and workers > total:
        raise InputError(
            f"the job asks for {workers} workers but the Ray cluster has {total:g} '{resource}' units (one per worker)",
            f"lower cluster.workers to at most {int(total)}, or add spot nodes: "
            f"ray start --address ADDR --resources '{{\"{resource}\": N}}'",
            "cluster.workers",
        )
    return total


class ClusterCoordinator(Coordinator):
    """The coordinator on wall-clock time, awaiting real results and real node losses."""

    poll_s = 0.02

    def __init__(self, *args: Any, startup_timeout_s: float = 120.0, capacity_timeout_s: float = 1800.0, **kw: Any) -> None:
        """As :class:`Coordinator`; first checks (InputError) that the cluster's ``spot`` units hold
        ``spec.cluster.workers`` -- before any actor is requested."""
        spec = args[0] if args else kw.get("spec")
        if spec is not None:
            check_spot_capacity(workers=int(spec.cluster.workers))
        self._clock0 = time.monotonic()
        self.startup_timeout_s = startup_timeout_s
        self.capacity_timeout_s = capacity_timeout_s
        self._idle_since: float | None = None
        super().__init__(*args, mode="cluster", **kw)
        self.commit_overhead_s = 0.0  # wall-clock time already includes the update

    # ------------------------------------------------------------------ time
    def _now(self) -> float:
        return self._t_offset + (time.monotonic() - self._clock0)

    @property
    def _t_offset(self) -> float:
        return getattr(self, "_offset", 0.0)

    def _tick(self) -> None:
        self.T = max(self.T, self._now())

    def _draw(self) -> float:  # durations are measured, not drawn
        return 0.0

    # ------------------------------------------------------------------ membership
    @property
    def cluster(self) -> ClusterProvider:
        assert isinstance(self.provider, ClusterProvider)
        return self.provider

    def _fresh_start(self) -> None:
        for w in range(self.provisioned):
            self.cluster.request(w)
        deadline = time.monotonic() + self.startup_timeout_s
        while not self.cluster.available_at_start() and time.monotonic() < deadline:
            self.cluster.poll(timeout=0.5)
        if not self.cluster.available_at_start():
            raise InputError("no worker could start on the cluster's spot nodes",
                             "check `ray status`: spot nodes need free 'spot' units and the project installed", "--ray-address")
        self.cluster.poll(timeout=2.0)  # let the others that are about to start join too
        super()._fresh_start()

    def _restore(self) -> None:
        for w in range(self.spec.cluster.workers):
            self.cluster.request(w)
        self.cluster.poll(timeout=5.0)
        super()._restore()
        self._offset = self.T

    def _joins(self, timeout: float = 0.0) -> None:
        self.cluster.poll(timeout)
        for w in sorted(self.cluster.available_at_start()):
            if w < self.provisioned and w not in self.members:
                self._tick()
                self._add_member(w, self.cluster.acquire(w))
            else:
                self.cluster.cancel(w)

    def _drop_member(self, w: int, reason: str) -> None:
        self._tick()
        super()._drop_member(w, reason)
        if reason != "released" and w < self.provisioned:
            self.cluster.request(w)  # fills again when a spot node has room

    def _resize(self, n: int) -> None:
        old = self.provisioned
        super()._resize(n)
        for w in range(old, self.provisioned):
            self.cluster.request(w)
        for w in range(self.provisioned, old):
            self.cluster.cancel(w)

    # ------------------------------------------------------------------ the loop
    def _idle(self) -> bool:
        now = time.monotonic()
        if self._idle_since is None:
            self._idle_since = now
        self._joins(timeout=0.25)
        self._tick()
        if self.members:
            idle = time.monotonic() - self._idle_since
            self.counters.idle_s += idle
            self.log.emit("idle", start=self.T - idle, duration=idle)  # t = when the idle period ends
            self._idle_since = None
            return True
        return now - self._idle_since < self.capacity_timeout_s

    def _barrier_round(self) -> None:
        import ray

        self._joins()
        if not self.members:
            return
        # NB: every block reserved here is committed or released before the round ends
        blocks = self._reserve_round()
        if not blocks:
            return
        params = self._params_arg()
        refs = {w: self.compute.submit(self.members[w], params, blocks[w].indices) for w in blocks}
        by_ref = {ref: w for w, ref in refs.items()}
        results: dict[int, tuple] = {}

        pending = list(by_ref)
        while pending and len(results) < self.sync_strategy.needed(len(blocks)):
            done, pending = ray.wait(pending, num_returns=1, timeout=self.poll_s)
            for ref in done:
                w = by_ref[ref]
                try:
                    results[w] = self._get(w, ref)
                except WorkerLost:
                    self._drop_member(w, "node-lost")
                    self._lose_contribution(w, blocks, refs, {})
            if not blocks:
                self._abort_round()
                return
            self._joins()
        for w in list(blocks):
            if w not in results:
                self.sampler.release(blocks.pop(w))
        self._tick()
        for w, r in results.items():
            self._worker_notice(w, r[4])
        self._commit([Contribution(w, blocks[w], r[0], r[1], r[2], 0) for w, r in results.items()])

    def _continuous_tick(self) -> None:
        import ray

        self._joins()
        if not self._ensure_tasks():
            return
        by_ref = {t.ref: t for t in self.tasks.values()}
        done, _ = ray.wait(list(by_ref), num_returns=1, timeout=self.poll_s)
        if done:
            self._tick()
            self._finish_task(by_ref[done[0]])

    def _done(self) -> bool:
        self._tick()
        return super()._done()
