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

The job's loop is :class:`~spotwise.control.controller.JobController`'s, unchanged: a cluster run
differs only by what is injected -- a :class:`~spotwise.control.clock.WallClock`, this module's
:class:`ClusterProvider` (capacity requested and polled) and the Ray data plane.
:func:`cluster_controller` puts them together.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.preemption import MarketEvent
from spotwise.control.clock import Clock, WallClock
from spotwise.control.controller import JobController
from spotwise.capacity.provider import Provider

SPOT_RESOURCE = "spot"
#: how long a fresh run on an autoscaling cluster waits for its first spot node (a cloud VM boots in minutes)
AUTOSCALE_STARTUP_S = 900.0


class ClusterProvider(Provider):
    """Capacity of an existing Ray cluster: one pending actor per requested slot.

    ``startup_timeout_s``: how long a fresh run waits for its first worker before it fails
    (InputError); ``capacity_timeout_s``: how long a run without workers waits for capacity.
    ``actor_class`` (a function returning the Ray actor class) and ``worker_args`` make a slot's
    actor: the parameter server's worker by default, the collective plane's member for its specs
    (:func:`cluster_provider`).  ``autoscale``: the cluster's autoscaler provides the spot nodes;
    the provider keeps asking it for one ``spot`` unit per wanted slot
    (``ray.autoscaler.sdk.request_resources``), so a lost node is replaced even before the slot's
    new actor is pending, and withdraws the request at the end.
    """

    clock = "wall"

    def __init__(self, worker_args: tuple[Any, ...], resource: str = SPOT_RESOURCE, startup_timeout_s: float = 120.0,
                 capacity_timeout_s: float = 1800.0, actor_class: Callable[[], Any] | None = None,
                 autoscale: bool = False, num_gpus: float = 0) -> None:
        self.worker_args = worker_args
        #: GPUs each worker actor asks for (issue 20 item 4: 1 on a GPU instance type, see
        #: :func:`spotwise.capacity.placement.placement_for`)
        self.num_gpus = float(num_gpus)
        self.resource = resource
        self.startup_timeout_s = float(startup_timeout_s)
        self.capacity_timeout_s = float(capacity_timeout_s)
        self.actor_class = actor_class
        self.autoscale = bool(autoscale)
        self._pending: dict[int, tuple[Any, Any]] = {}
        self._ready: dict[int, Any] = {}
        #: the slots the job wants (acquired, pending or ready): what the autoscaler is asked for
        self._wanted: set[int] = set()
        self._asked = -1
        self.killed = 0

    @property
    def requests_capacity(self) -> bool:
        return True

    def prepare(self, slots: list[int], resume: bool = False) -> None:
        """Request ``slots``; a fresh run waits (``startup_timeout_s``) until one worker has started
        and raises InputError if none could; a resumed run gives them a few seconds."""
        for w in slots:
            self.request(w)
        if resume:
            self.poll(timeout=5.0)
            return
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._ready and time.monotonic() < deadline:
            self.poll(timeout=0.5)
        if not self._ready:
            raise InputError("no worker could start on the cluster's spot nodes",
                             "check `ray status`: spot nodes need free 'spot' units and the project installed", "--ray-address")
        self.poll(timeout=2.0)  # let the others that are about to start join too

    # no market timeline on a real cluster
    def peek_time(self) -> float | None:
        return None

    def pop_event(self) -> MarketEvent:  # pragma: no cover - peek_time is always None
        raise IndexError("a real cluster has no scheduled market events")

    def iteration_events(self, t: float, active: np.ndarray) -> list[MarketEvent]:
        return []

    def request(self, slot: int) -> None:
        """Ask the cluster for a worker in ``slot`` (it starts when a spot node has room)."""
        self._wanted.add(slot)
        self._ask_autoscaler()
        if slot in self._pending or slot in self._ready:
            return
        if self.actor_class is None:
            from spotwise.planes.ps.worker import remote_worker_class

            self.actor_class = remote_worker_class
        actor = self.actor_class().options(num_cpus=0, num_gpus=self.num_gpus,
                                           resources={self.resource: 1}).remote(*self.worker_args)
        self._pending[slot] = (actor, actor.ready.remote())

    def _ask_autoscaler(self) -> None:
        """Ask the autoscaler for one ``spot`` unit per wanted slot (when it changed)."""
        if not self.autoscale or len(self._wanted) == self._asked:
            return
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[{self.resource: 1}] * len(self._wanted))
        self._asked = len(self._wanted)

    def cancel(self, slot: int) -> None:
        import ray

        self._wanted.discard(slot)
        self._ask_autoscaler()
        entry = self._pending.pop(slot, None)
        actor = entry[0] if entry else self._ready.pop(slot, None)
        if actor is not None:
            ray.kill(actor, no_restart=True)

    def poll(self, timeout: float = 0.0) -> list[int]:
        """Slots whose actor has started and waits to be acquired (they can join now)."""
        import ray

        from spotwise.planes.ps.compute import actor_input_error, lost_errors

        if not self._pending:
            return sorted(self._ready)
        refs = {ready: slot for slot, (_, ready) in self._pending.items()}
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        for ref in done:
            slot = refs[ref]
            actor, _ = self._pending.pop(slot)
            try:
                ray.get(ref)
            except lost_errors() as e:
                if (err := actor_input_error(e)) is not None:
                    raise err from None  # e.g. device: cuda on a node without CUDA: asking again cannot help
                self.request(slot)  # its node died while it started: ask again
                continue
            self._ready[slot] = actor
        return sorted(self._ready)

    def available_at_start(self) -> set[int]:
        return set(self._ready)

    def acquire(self, slot: int) -> Any:
        actor = self._ready.pop(slot, None)
        if actor is None:
            raise KeyError(f"slot {slot} has no started worker")
        return actor

    def kill(self, slot: int, actor: Any) -> None:
        """The slot's actor goes (revoked, lost or released); a slot still wanted is requested again
        by the controller."""
        import ray

        self._wanted.discard(slot)
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
        self._wanted.clear()
        if self.autoscale and self._asked > 0:
            try:  # the job is over: withdraw its demand so the autoscaler may let the nodes go
                from ray.autoscaler.sdk import request_resources

                request_resources(bundles=[])
            except Exception:  # pragma: no cover - best effort (the cluster may be gone)
                pass
            self._asked = 0


def cluster_provider(spec: JobSpec, notices: dict[str, Any] | None = None, autoscale: bool = False) -> ClusterProvider:
    """The capacity of ``spec`` on the connected Ray cluster: parameter-server workers or collective
    members on ``spot`` nodes.  Without ``autoscale`` the cluster must already hold the job's
    ``spot`` units (InputError otherwise); with it the autoscaler is asked for them.  Preemption
    notices (``notices``) are watched by parameter-server workers only: InputError for the
    collective plane."""
    from spotwise.capacity.placement import placement_for
    from spotwise.planes.ps.worker import worker_args_for

    if not autoscale:
        check_spot_capacity(workers=int(spec.cluster.workers))
    gpu = placement_for(spec, autoscale=autoscale)  # the workers' device and GPUs (issue 20 item 4), before any actor
    if spec.cluster.data_plane == "collective":
        if notices:
            raise InputError("--notice-source is not supported by the collective data plane yet (its members do not "
                             "watch the metadata service)", "drop --notice-source, or set cluster.data_plane: ps",
                             "--notice-source")
        from spotwise.planes.collective.member import remote_member_class

        wl, seed = worker_args_for(spec)[:2]
        return ClusterProvider((wl, seed, 1, gpu.device), actor_class=remote_member_class, autoscale=autoscale,
                               num_gpus=gpu.num_gpus,
                               startup_timeout_s=AUTOSCALE_STARTUP_S if autoscale else 120.0)
    return ClusterProvider(worker_args_for(spec, notices, device=gpu.device), autoscale=autoscale, num_gpus=gpu.num_gpus,
                           startup_timeout_s=AUTOSCALE_STARTUP_S if autoscale else 120.0)


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


def cluster_controller(spec: JobSpec, out_dir: str | Path, *, provider: Provider | None = None,
                       startup_timeout_s: float | None = None, capacity_timeout_s: float | None = None,
                       clock: Clock | None = None, **kw: Any) -> JobController:
    """The job controller on a real cluster: the shared loop with the cluster's parts injected.

    Everything that differs from an emulated run comes from the injected parts: a
    :class:`~spotwise.control.clock.WallClock` (measured time, no drawn durations, completions in
    the order the data plane reports them), the :class:`ClusterProvider` (capacity is requested,
    joins are polled, a lost slot is requested again) and the Ray data plane
    (:class:`~spotwise.planes.ps.compute.RayCompute`, which owns the waiting on results); the
    controller runs with ``mode="cluster"``.  First checks (InputError) that the cluster's ``spot``
    units hold ``spec.cluster.workers`` -- before any actor is requested.
    """
    if not (isinstance(provider, ClusterProvider) and provider.autoscale):
        check_spot_capacity(workers=int(spec.cluster.workers))
    # given waits replace the provider's; unset ones keep its own (an autoscaling provider's is
    # AUTOSCALE_STARTUP_S: a default of 120 s here used to cut it short)
    if isinstance(provider, ClusterProvider) and startup_timeout_s is not None:
        provider.startup_timeout_s = float(startup_timeout_s)
    if isinstance(provider, ClusterProvider) and capacity_timeout_s is not None:
        provider.capacity_timeout_s = float(capacity_timeout_s)
    if spec.cluster.data_plane == "collective" and "plane" not in kw:
        import ray

        from spotwise.planes.collective.data_plane import CollectivePlane

        # the store listens on this node's cluster address only (members on other nodes reach it)
        kw["plane"] = CollectivePlane(spec, store_host=str(ray.util.get_node_ip_address()))
    from spotwise.assemble import build_controller

    return build_controller(spec, out_dir, provider=provider, mode="cluster", clock=clock or WallClock(), **kw)
