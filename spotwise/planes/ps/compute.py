"""Compute data planes: where workers live and how their mini-batches are computed.

The coordinator (the job's control logic) never calls Ray itself: it talks to one
:class:`Compute`, which owns the worker processes (start, hand out, kill) and carries the calls
(submit a mini-batch, collect results).  Two implementations:

* :class:`RayCompute` -- every worker is a Ray actor (:class:`~spotwise.planes.ps.worker.GradientWorker`)
  on this machine (the emulated provider) or on a cluster.  A pool of ``standby`` actors is kept
  starting in the background at low CPU priority, so a joiner does not wait for a process to
  start (Spotnik's in-place membership change, ``papers/001_30a454edd897cf47.txt`` Sec. 3.2: a
  joiner is a new worker handed the current parameters).  A worker whose actor died (node lost)
  shows up as :class:`WorkerLost` on its result -- so does a result that was computed but lost
  with its node before the coordinator fetched it (:func:`lost_errors`).
* :class:`LocalCompute` -- every worker is a :class:`~spotwise.planes.ps.worker.GradientWorker`
  object in this process, computed when its result is asked for.  Bit-for-bit the numerics of
  the Ray workers (the same class), no Ray, no processes: the data plane for unit tests of the
  control logic and for single-process runs.  ``kill`` marks a worker dead, so a result asked of
  it raises :class:`WorkerLost` exactly like a lost Ray actor.

A result is the tuple :meth:`GradientWorker.compute` returns:
``(flat gradient, loss, samples, compute seconds, preemption notice or None, GPU busy share or None)``
(the share: :class:`~spotwise.workloads.device.GpuBusy`, sampled after the call); the gradient is a
dense vector or, for workloads with sparse gradients, a
:class:`~spotwise.planes.serverless.significance.SparseUpdate` (:mod:`spotwise.planes.ps.wire`), which
travels through Ray as it is (a dataclass of two numpy arrays).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.planes.ps.wire import Gradient

Result = tuple[Gradient, float, int, float, "dict[str, Any] | None", "float | None"]

#: parameters up to this size travel inline with each call (fastest below Ray's 100 KiB limit);
#: larger ones go through the object store once per step
INLINE_PARAM_BYTES = 96 * 1024


def actor_input_error(exc: BaseException) -> InputError | None:
    """The :class:`InputError` a worker actor raised while it started (e.g. ``device: cuda`` on a node
    without CUDA), from the ``ActorDiedError`` Ray reports it with (which keeps only its text); None
    for any other failure."""
    if not getattr(exc, "actor_init_failed", False):
        return None
    # InputError and the user-code failures that subclass it (a user optimizer that cannot be built, a workload)
    prefixes = [f"{InputError.__module__}.{InputError.__name__}: ", "spotwise.training.recipe.UserOptimizerError: ",
                "spotwise.workloads.user.UserWorkloadError: "]
    lines = [(ln.strip(), p) for ln in str(exc).splitlines() for p in prefixes if ln.strip().startswith(p)]
    return InputError(lines[-1][0][len(lines[-1][1]):]) if lines else None


def lost_errors() -> tuple[type[BaseException], ...]:
    """What ``ray.get`` of a worker's call raises when the worker or its node is gone.

    The actor died (``RayActorError``, its ``ActorDiedError``/``ActorUnavailableError``), its node
    died (``NodeDiedError``), its process crashed (``WorkerCrashedError``), or the result was
    computed but lost with the node before it was fetched (``ObjectLostError`` and its subclasses:
    a result over Ray's inline limit, 100 KiB -- any real model's gradient -- lives in the object
    store of the worker's node until the coordinator pulls it; a node that vanishes in between
    leaves ``ObjectReconstructionFailedError``, since an actor call is not re-executed).  Each is a
    lost worker to the data plane, not a crash of the job.
    """
    from ray.exceptions import NodeDiedError, ObjectLostError, RayActorError, WorkerCrashedError

    return (RayActorError, NodeDiedError, WorkerCrashedError, ObjectLostError)


def _get_ready(refs: Any) -> Any:
    """``ray.get`` of actors' ``ready`` calls; a worker that could not start because of its input
    (its device) raises that :class:`InputError` here (exit 2), not a crash."""
    import ray
    from ray.exceptions import RayActorError

    try:
        return ray.get(refs)
    except RayActorError as e:
        err = actor_input_error(e)
        if err is None:
            raise
        raise err from None


class WorkerLost(Exception):
    """A worker died without the market saying so (node loss on a real cluster, a killed actor)."""

    def __init__(self, worker: int) -> None:
        super().__init__(f"worker {worker} died")
        self.worker = worker


class Compute(ABC):
    """Worker processes and their calls; see the module docstring."""

    # ------------------------------------------------------------------ lifecycle
    @abstractmethod
    def warm_up(self, n: int) -> list[Any]:
        """Start ``n`` workers at once and wait until all are ready (the initial fleet)."""

    @abstractmethod
    def acquire(self) -> Any:
        """One new, ready worker (a joiner)."""

    def expect(self, n: int) -> None:
        """``n`` joiners are about to be acquired one after another (several slots came back at one
        instant): start what is missing for them now, all at once (nothing to do where starting a
        worker costs nothing)."""

    @abstractmethod
    def kill(self, worker: Any) -> None:
        """Terminate ``worker`` (revocation or release); a result still pending on it is lost."""

    def shutdown(self) -> None:
        """Release every worker this data plane still holds."""

    # ------------------------------------------------------------------ calls
    @abstractmethod
    def share(self, params: np.ndarray) -> Any:
        """``params`` in the form calls take: shipped once, used by every call of a step."""

    @abstractmethod
    def submit(self, worker: Any, params: Any, indices: np.ndarray) -> Any:
        """Start computing the gradient of ``indices`` at ``params`` on ``worker``; a pending result."""

    @abstractmethod
    def gather(self, pending: dict[int, Any]) -> dict[int, Result]:
        """Every result of ``pending`` (slot -> pending) in one round trip; ``{}`` if any worker died."""

    @abstractmethod
    def result(self, slot: int, pending: Any) -> Result:
        """The result of one pending call; :class:`WorkerLost` if its worker died."""

    def wait(self, pending: dict[int, Any], num_returns: int = 1, timeout: float | None = None) -> list[int]:
        """Slots of ``pending`` (slot -> pending call) whose results are ready, at most ``num_returns``.

        Waits up to ``timeout`` seconds (``None``: until ``num_returns`` are ready) and returns
        possibly fewer.  A call whose worker died counts as ready (its result raises
        :class:`WorkerLost`).  The default suits data planes that compute a call when its result
        is asked for (every call is ready at once); :class:`RayCompute` waits on the actors.
        """
        return list(pending)[: max(0, num_returns)]


class RayCompute(Compute):
    """Workers as Ray actors; ``standby`` of them kept starting in the background (module docstring)."""

    def __init__(self, worker_args: tuple[Any, ...], standby: int = 2, actor_options: dict[str, Any] | None = None,
                 low_priority_standby: bool = True) -> None:
        if standby < 0:
            raise ValueError("standby must be >= 0")
        self.worker_args = worker_args
        self.actor_options = {"num_cpus": 0, **(actor_options or {})}
        self.low_priority_standby = low_priority_standby
        self._standby_target = int(standby)
        #: spares: (actor, its ready call, started at low priority)
        self._standby: deque[tuple[Any, Any, bool]] = deque()
        self.spawned = 0
        self.killed = 0
        self._fill_standby()

    @classmethod
    def for_spec(cls, spec: Any, standby: int) -> RayCompute:
        """``spec``'s workers, on the device and with the GPUs the driver's placement gives them
        (:func:`spotwise.capacity.placement.placement_for`, issue 20 item 4: ``num_gpus`` in the actor
        options, the device in the worker arguments, standby actors only on spare GPUs)."""
        from spotwise.capacity.placement import placement_for
        from spotwise.planes.ps.worker import worker_args_for

        placement = placement_for(spec)
        return cls(worker_args_for(spec, device=placement.device), standby=placement.standby(spec, standby),
                   actor_options=placement.actor_options())

    def _start_actor(self, low: bool = False) -> tuple[Any, Any]:
        from spotwise.planes.ps.worker import remote_worker_class

        opts = dict(self.actor_options)
        if low:
            opts["runtime_env"] = {"worker_process_setup_hook": "spotwise.planes.ps.worker.low_priority"}
        actor = remote_worker_class().options(**opts).remote(*self.worker_args)
        self.spawned += 1
        return actor, actor.ready.remote()

    def _fill_standby(self) -> None:
        """Spares start at low CPU priority (:func:`~spotwise.planes.ps.worker.low_priority`): they use idle CPU."""
        while len(self._standby) < self._standby_target:
            low = self.low_priority_standby
            self._standby.append((*self._start_actor(low), low))

    def warm_up(self, n: int) -> list[Any]:
        # needed now: normal priority (a nice start-up on a busy machine would get almost no CPU)
        started = [self._start_actor() for _ in range(n)]
        _get_ready([ready for _, ready in started])
        return [a for a, _ in started]

    def expect(self, n: int) -> None:
        """Start the actors ``n`` joiners of one instant need that the standby pool does not hold, all
        at once: their start-ups overlap instead of each one's waiting for the one before (three slots
        back at once cost one cold start, not three in a row).  What a later event of the instant no
        longer needs stays in the pool for the next joiner and is stopped with it at the end."""
        while len(self._standby) < int(n):
            self._standby.append((*self._start_actor(), False))  # needed now: normal priority

    def acquire(self) -> Any:
        import ray

        actor, ready, low = self._standby.popleft() if self._standby else (*self._start_actor(), False)
        if low and not ray.wait([ready], timeout=0)[0]:
            actor, ready, low = self._race(actor, ready)
        _get_ready(ready)
        if low:
            ray.get(actor.promote.remote())
        self._fill_standby()
        return actor

    def _race(self, spare: Any, ready: Any) -> tuple[Any, Any, bool]:
        """A spare still starting at low priority is needed now.  On a busy machine a nice-15 start
        gets a few percent of a core: beside two busy processes on 2 cores each joiner waited 60-100 s
        for its spare's ``import torch``, one after the other.  So an actor is started at normal
        priority too and the joiner takes whichever is up first; the other goes back to the pool (an
        actor that has started costs no CPU while it waits), so the pool holds no more than before."""
        import ray

        fresh, fresh_ready = self._start_actor()
        done, _ = ray.wait([ready, fresh_ready], num_returns=1)
        if ready in done:
            self._standby.appendleft((fresh, fresh_ready, False))
            return spare, ready, True
        self._standby.appendleft((spare, ready, True))
        return fresh, fresh_ready, False

    def kill(self, worker: Any) -> None:
        import ray

        try:
            ray.kill(worker, no_restart=True)
        finally:
            self.killed += 1

    def shutdown(self) -> None:
        import ray

        while self._standby:
            actor = self._standby.popleft()[0]
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # pragma: no cover - best effort at shutdown
                pass

    def share(self, params: np.ndarray) -> Any:
        import ray

        return params if params.nbytes <= INLINE_PARAM_BYTES else ray.put(params)

    def submit(self, worker: Any, params: Any, indices: np.ndarray) -> Any:
        return worker.compute.remote(params, indices)

    def gather(self, pending: dict[int, Any]) -> dict[int, Result]:
        """All results in one round trip; ``{}`` if one of them is lost (:func:`lost_errors`): the
        caller then asks one by one (:meth:`result`)."""
        import ray

        try:
            return dict(zip(pending, ray.get(list(pending.values()))))
        except lost_errors():
            return {}

    def result(self, slot: int, pending: Any) -> Result:
        import ray

        try:
            return ray.get(pending)
        except lost_errors():
            raise WorkerLost(slot) from None

    def wait(self, pending: dict[int, Any], num_returns: int = 1, timeout: float | None = None) -> list[int]:
        import ray

        if not pending or num_returns < 1:
            return []
        by_ref = {ref: w for w, ref in pending.items()}
        done, _ = ray.wait(list(by_ref), num_returns=min(num_returns, len(by_ref)), timeout=timeout)
        return [by_ref[ref] for ref in done]


class _LocalCall:
    """A call on an in-process worker, computed when its result is first asked for."""

    __slots__ = ("worker", "params", "indices", "value")

    def __init__(self, worker: "_LocalWorker", params: np.ndarray, indices: np.ndarray) -> None:
        self.worker, self.params, self.indices = worker, params, indices
        self.value: Result | None = None


class _LocalWorker:
    __slots__ = ("impl", "alive")

    def __init__(self, impl: Any) -> None:
        self.impl = impl
        self.alive = True


class LocalCompute(Compute):
    """Workers as :class:`~spotwise.planes.ps.worker.GradientWorker` objects in this process (no Ray).

    Calls are computed lazily, one at a time, when their result is asked for; a call whose
    worker was killed before that raises :class:`WorkerLost`, as a dead actor would.
    """

    def __init__(self, worker_args: tuple[Any, ...]) -> None:
        self.worker_args = worker_args
        self.spawned = 0
        self.killed = 0

    def _new(self) -> _LocalWorker:
        from spotwise.planes.ps.worker import GradientWorker

        self.spawned += 1
        return _LocalWorker(GradientWorker(*self.worker_args))

    def warm_up(self, n: int) -> list[Any]:
        return [self._new() for _ in range(n)]

    def acquire(self) -> Any:
        return self._new()

    def kill(self, worker: Any) -> None:
        worker.alive = False
        self.killed += 1

    def share(self, params: np.ndarray) -> Any:
        return params.copy()  # a call must not see later in-place updates of the coordinator's copy

    def submit(self, worker: Any, params: Any, indices: np.ndarray) -> Any:
        return _LocalCall(worker, params, np.asarray(indices))

    def _run(self, slot: int, call: _LocalCall) -> Result:
        if call.value is None:
            if not call.worker.alive:
                raise WorkerLost(slot)
            call.value = call.worker.impl.compute(call.params, call.indices)
        return call.value

    def gather(self, pending: dict[int, Any]) -> dict[int, Result]:
        try:
            return {w: self._run(w, c) for w, c in pending.items()}
        except WorkerLost:
            return {}

    def result(self, slot: int, pending: Any) -> Result:
        return self._run(slot, pending)
