"""The shared loop on a wall clock with requested capacity (the real-cluster path), without Ray.

A cluster run differs from an emulated one only by its injected parts: a
:class:`~spotwise.control.clock.WallClock`, a provider whose capacity is requested and polled
(``requests_capacity``), and the data plane.  Here the provider is a fake with the real
interface and the data plane is :class:`~spotwise.planes.ps.compute.LocalCompute`, so the path
``spotwise run --ray-address`` takes runs in a unit test: node losses (a worker killed under the
coordinator's feet) are requested again and rejoin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _specs import spec_with

from spotwise.events import read_events
from spotwise.market.preemption import MarketEvent
from spotwise.market.world import build_market
from spotwise.control.clock import WallClock
from spotwise.planes.ps.compute import LocalCompute
from spotwise.assemble import build_controller
from spotwise.planes.ps.worker import worker_args_for
from spotwise.capacity.provider import Provider

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "name": "wall",
    "seed": 2,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 30},
    "cluster": {"instance_type": "c5.xlarge", "workers": 3, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """The cluster path of the loop must not need Ray either."""


class RequestedCapacity(Provider):
    """A fake cluster: a requested slot's worker starts at the next poll; ``lose(w)`` is a node loss."""

    def __init__(self, compute: LocalCompute) -> None:
        self.compute = compute
        self.requested: list[int] = []
        self.cancelled: list[int] = []
        self._pending: set[int] = set()
        self._ready: dict[int, Any] = {}
        self.prepared: list[tuple[list[int], bool]] = []
        self.actors: dict[int, Any] = {}

    @property
    def requests_capacity(self) -> bool:
        return True

    def prepare(self, slots: list[int], resume: bool = False) -> None:
        self.prepared.append((list(slots), resume))
        for w in slots:
            self.request(w)
        self.poll()

    def request(self, slot: int) -> None:
        if slot not in self._pending and slot not in self._ready:
            self.requested.append(slot)
            self._pending.add(slot)

    def cancel(self, slot: int) -> None:
        self.cancelled.append(slot)
        self._pending.discard(slot)
        self._ready.pop(slot, None)

    def poll(self, timeout: float = 0.0) -> list[int]:
        for w in sorted(self._pending):
            self._ready[w] = self.compute.acquire()
        self._pending.clear()
        return sorted(self._ready)

    def lose(self, slot: int) -> None:
        self.compute.kill(self.actors[slot])

    # the Provider interface
    def peek_time(self) -> float | None:
        return None

    def pop_event(self) -> MarketEvent:  # pragma: no cover - peek_time is always None
        raise IndexError

    def iteration_events(self, t: float, active: np.ndarray) -> list[MarketEvent]:
        return []

    def available_at_start(self) -> set[int]:
        return set(self._ready)

    def acquire(self, slot: int) -> Any:
        self.actors[slot] = self._ready.pop(slot)
        return self.actors[slot]

    def kill(self, slot: int, actor: Any) -> None:
        self.compute.kill(actor)


@pytest.mark.parametrize("sync", ["full", "async"])
def test_wall_clock_loop_requests_capacity_again_after_node_loss(tmp_path: Path, sync: str) -> None:
    spec = spec_with(BASE, cluster__sync=sync)
    compute = LocalCompute(worker_args_for(spec))
    provider = RequestedCapacity(compute)
    lost: list[int] = []

    def node_loss_at_step_10(snap: dict[str, Any]) -> None:
        if snap["step"] == 10 and not lost:
            lost.append(1)
            provider.lose(1)

    coord = build_controller(spec, tmp_path / "run", market=build_market(spec), provider=provider, compute=compute,
                          clock=WallClock(), mode="cluster", progress=node_loss_at_step_10)
    summary = coord.run()
    assert summary.status == "completed" and summary.steps == 30 and summary.mode == "cluster"
    events = read_events(tmp_path / "run" / "events.jsonl")
    assert [e["step"] for e in events if e["kind"] == "step"] == list(range(1, 31))
    revokes = [e for e in events if e["kind"] == "revoke"]
    assert [(e["worker"], e["reason"]) for e in revokes] == [(1, "node-lost")]
    assert provider.prepared == [([0, 1, 2], False)]
    assert provider.requested.count(1) == 2, "the lost slot is requested again"
    joins = [e for e in events if e["kind"] == "join"]
    assert [e["worker"] for e in joins].count(1) == 2, "and its new worker joins"
    ts = [e["t"] for e in events if e["kind"] != "price"]  # the first price is stamped t=0
    assert ts == sorted(ts), "measured time never runs backwards"
    assert summary.virtual_s < 60, "wall time: the steps were not given drawn durations"
    assert coord.dur_rng.bit_generator.state == np.random.default_rng([spec.seed, 3]).bit_generator.state, \
        "no mini-batch duration was drawn"


def test_wall_clock_gives_up_without_capacity(tmp_path: Path) -> None:
    """No worker ever starts: the run waits capacity_timeout_s of measured time, then stops (no-capacity)."""
    spec = spec_with(BASE)
    compute = LocalCompute(worker_args_for(spec))

    class NeverStarts(RequestedCapacity):
        capacity_timeout_s = 0.3

        def poll(self, timeout: float = 0.0) -> list[int]:
            return []

    provider = NeverStarts(compute)
    coord = build_controller(spec, tmp_path / "run", market=build_market(spec), provider=provider, compute=compute,
                          clock=WallClock(), mode="cluster")
    summary = coord.run()
    assert summary.status == "no-capacity" and summary.steps == 0
    idle = [e for e in read_events(tmp_path / "run" / "events.jsonl") if e["kind"] == "idle"]
    assert len(idle) == 1 and idle[0]["duration"] >= 0.3
