"""The coordinator's side of the collective data plane: member processes and the store protocol.

* :class:`CollectiveCompute` -- member processes as Ray actors
  (:class:`~spotwise.planes.collective.member.CollectiveMember`), with the same standby pool, start,
  hand-out and kill as :class:`~spotwise.planes.ps.compute.RayCompute` (so the emulated provider
  and its market drive them unchanged).  It carries no per-step calls: members exchange their
  updates among themselves.
* :class:`PlaneControl` -- the coordinator's half of the protocol over one
  :class:`torch.distributed.TCPStore` that it owns (:class:`~spotwise.planes.collective.group.GroupCoordinator`):
  announce a generation's :class:`~spotwise.planes.collective.member.Plan`, raise the lease, flag a
  generation failed, collect the survivors' reports, and read the step records and parameter
  replicas the leader sends (queues ``rec`` and ``replicas``).

Keys: ``plan/<g>``, ``fail/<g>``, ``alive/<g>/<member>``, ``lease``, ``want`` (a counter: replica
requests), and the queues ``rec`` and ``replicas`` (headers only).  No model or optimizer state
passes through the store (its messages are capped at 8 MiB; issue 28 item 3): a generation with no
source gets its state by an actor call (:meth:`PlaneControl.hand_over`), a replica the leader
offers is fetched the same way (:meth:`PlaneControl.pop_replicas`), and members take each other's
state over the group by broadcast.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import numpy as np

from spotwise.errors import InputError
from spotwise.planes.collective.group import GroupCoordinator, StoreAddress
from spotwise.planes.collective.heartbeat import BEAT_CHECK_S, BeatReader, heartbeat_timeout
from spotwise.planes.collective.calls import call_member, wait_calls
from spotwise.planes.collective.member import REPLICA_CHUNK_BYTES, Plan, remote_member_class
from spotwise.planes.collective.plan import encode_lease
from spotwise.planes.ps.compute import RayCompute


class CollectiveCompute(RayCompute):
    """Member actors with a standby pool (module docstring); the per-call methods do not apply."""

    def _start_actor(self, low: bool = False) -> tuple[Any, Any]:
        opts = dict(self.actor_options)
        if low:
            opts["runtime_env"] = {"worker_process_setup_hook": "spotwise.planes.ps.worker.low_priority"}
        workload, seed = self.worker_args[0], self.worker_args[1]
        device = self.worker_args[4] if len(self.worker_args) > 4 else "cpu"  # worker_args_for's device (issue 20 item 4)
        actor = remote_member_class().options(**opts).remote(workload, seed, 1, device)
        self.spawned += 1
        return actor, actor.ready.remote()

    def _no_calls(self, *_: Any, **__: Any) -> Any:
        raise TypeError("the collective data plane has no per-step calls: members all-reduce among themselves")

    share = submit = gather = result = _no_calls  # type: ignore[assignment]


class PlaneControl:
    """The coordinator's half of the store protocol (module docstring).

    ``host``: the address the store listens on, and only there: ``127.0.0.1`` on one machine, the
    head's cluster address on a Ray cluster.  Every key lives under the run's secret
    (:class:`~spotwise.planes.collective.group.StoreAddress`), which members get in their start call.
    """

    def __init__(self, host: str = "127.0.0.1", timeout_s: float = 5.0, heartbeat_s: float | None = None) -> None:
        self.timeout_s = float(timeout_s)
        #: seconds of heartbeat silence after which a member is lost (:func:`heartbeat_timeout`)
        self.heartbeat_s = heartbeat_timeout(self.timeout_s) if heartbeat_s is None else float(heartbeat_s)
        self.coord = GroupCoordinator(host, 0, timeout_s=max(30.0, self.timeout_s))
        self.store = self.coord.store
        self.host, self.port = self.coord.host, self.coord.port
        self.address: StoreAddress = self.coord.address
        self.store.set("lease", "0")
        self.store.set("want", "0")  # a counter (store.add)
        self._lease = 0
        #: the members' beats (:mod:`~spotwise.planes.collective.heartbeat`): their liveness, and a long
        #: step's work (no hang)
        self.beats = BeatReader(self.heartbeat_s)
        self._next_beats = 0.0

    # ------------------------------------------------------------------ members
    def start(self, actor: Any, member: int, gen: int, fault: dict[str, Any] | None = None) -> Any:
        """Start ``actor``'s member loop from generation ``gen``; the call's ObjectRef (done when it leaves)."""
        return actor.run.remote(self.address, int(member), int(gen), self.timeout_s, fault)

    def announce(self, plan: Plan) -> None:
        """Publish ``plan`` (a generation without a source gets its state by :meth:`hand_over` first)."""
        self.store.set(f"plan/{plan.gen}", plan.to_json())

    def hand_over(self, members: list[Any], gen: int, head: dict[str, Any], vec: np.ndarray | None,
                  extra: bytes = b"") -> None:
        """Give each member (actor handle or in-process object) the state generation ``gen`` starts
        from -- by actor calls, so the state goes through Ray's object store (put once, any size),
        never through the rendezvous store (issue 28 item 3).  ``vec`` None: the parameters are the
        members' own initial ones, whose digest ``head["digest"]`` names (a member whose own differ
        fails the generation).  Returns once every call was delivered or its member is gone (a lost
        member fails the generation's forming as usual)."""
        calls = []
        ref_vec: Any = vec
        try:
            import ray

            if vec is not None and ray.is_initialized() and any(hasattr(m, "put_init") and hasattr(m.put_init, "remote") for m in members):
                ref_vec = ray.put(np.ascontiguousarray(vec, dtype=np.float32))
        except ImportError:  # pragma: no cover - Ray is a dependency
            pass
        for m in members:
            calls.append(call_member(m, "put_init", gen, head, ref_vec, extra))
        wait_calls(calls, timeout_s=max(30.0, 4 * self.timeout_s))

    def set_lease(self, step: int, revoked: tuple[int, ...] = ()) -> None:
        """Members may commit steps up to ``step``; the members in ``revoked`` are revoked inside those
        steps and contribute to none of them (:func:`~spotwise.planes.collective.plan.decode_lease`).

        Raise it only while every member waits at the current lease (its record is logged): they
        then all read the same new value.  A new generation starts from its plan's lease
        (:meth:`reset_lease` before announcing it).
        """
        if step > self._lease:
            self._lease = int(step)
            self.store.set("lease", encode_lease(self._lease, tuple(revoked)))

    def reset_lease(self, step: int) -> None:
        """The lease of a generation about to be announced (its members are not running yet)."""
        self._lease = int(step)
        self.store.set("lease", str(self._lease))

    @property
    def lease(self) -> int:
        return self._lease

    def fail(self, gen: int, why: str) -> None:
        if not self.store.check([f"fail/{gen}"]):
            self.coord.fail(gen, why)

    def failed(self, gen: int) -> str | None:
        key = f"fail/{gen}"
        return self.store.get(key).decode(errors="replace") if self.store.check([key]) else None

    def alive(self, gen: int, members: list[int], timeout_s: float,
              gone: Callable[[], set[int]] | None = None) -> dict[int, int]:
        """The members of ``gen`` that answered; one whose heartbeat goes on is waited for (up to
        ``timeout_s``), one that is gone or silent is not (:meth:`GroupCoordinator.alive`)."""
        return self.coord.alive(gen, members, timeout_s, gone=gone, lost=self.lost)

    def lost(self, members: list[int]) -> list[int]:
        """The members in ``members`` whose heartbeat has been silent longer than :attr:`heartbeat_s`."""
        return self.beats.lost(self.store, members)

    def lost_due(self, members: list[int]) -> list[int]:
        """:meth:`lost`, read at most every :data:`BEAT_CHECK_S` (``[]`` between two reads)."""
        now = time.monotonic()
        if now < self._next_beats:
            return []
        self._next_beats = now + BEAT_CHECK_S
        return self.lost(members)

    def forget(self, member: int) -> None:
        """``member``'s slot left the job: its next process is watched afresh."""
        self.beats.forget(member)

    def working(self, members: list[int]) -> bool:
        """Whether some member in ``members`` did work since it was last looked at (its beat)."""
        return self.beats.working(self.store, members)

    def formed(self, gen: int, members: list[int], timeout_s: float,
               gone: Callable[[], set[int]] | None = None) -> bool:
        """Whether every member of ``gen`` formed the group and took its state.  ``False`` as soon as
        the generation failed, a member is gone (``gone``) or its heartbeat is silent; members that
        beat are waited for however long their forming takes (a big state's broadcast, a loaded
        machine), up to ``timeout_s`` in all."""
        deadline = time.monotonic() + timeout_s
        next_look, pause = 0.0, 0.0005
        while int(self.store.add(f"formed/{gen}", 0)) < len(members):
            now = time.monotonic()
            if now >= deadline or self.failed(gen) is not None:
                return False
            if now >= next_look:
                next_look = now + 0.1
                if self.lost(members) or (gone is not None and set(gone()) & set(members)):
                    return False
            time.sleep(pause)
            pause = min(0.01, pause * 1.2)
        return True

    def request_replica(self) -> int:
        return int(self.store.add("want", 1))

    # ------------------------------------------------------------------ what members send
    def pop_records(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for _ in range(int(self.store.queue_len("rec"))):
            out.extend(json.loads(self.store.queue_pop("rec", False)))
        return out

    def pop_replicas(self, member_of: Callable[[int], Any]) -> list[tuple[dict[str, Any], np.ndarray, bytes]]:
        """The replicas members offered since the last call (headers through the store, the state
        fetched from each member by an actor call); one whose member is gone is skipped."""
        heads = [json.loads(self.store.queue_pop("replicas", False)) for _ in range(int(self.store.queue_len("replicas")))]
        out = []
        for head in heads:
            m = member_of(int(head["member"]))
            if m is None:
                continue
            got = self._fetch(m, head)
            if got is not None:
                out.append(got)
        return out

    def _fetch(self, member: Any, head: dict[str, Any]) -> tuple[dict[str, Any], np.ndarray, bytes] | None:
        """One offered replica, in chunks (:meth:`CollectiveMember.take_replica`); None if its member
        died or replaced the offer meanwhile."""
        nv, ne = int(head["vec_bytes"]), int(head["extra_bytes"])
        buf = bytearray(nv + ne)
        dst = np.frombuffer(buf, dtype=np.uint8)  # chunks arrive as uint8 arrays (read-only from Ray)
        off = 0
        while off < len(buf) or off == 0:
            got = wait_calls([call_member(member, "take_replica", int(head["token"]), off, REPLICA_CHUNK_BYTES)],
                             timeout_s=max(30.0, 4 * self.timeout_s))[0]
            if got is None or (len(got) == 0 and len(buf)):
                return None
            dst[off:off + len(got)] = np.frombuffer(got, dtype=np.uint8) if isinstance(got, (bytes, bytearray)) else got
            off += len(got)
            if not len(buf):
                break
        return head, np.frombuffer(buf, dtype=np.float32, count=nv // 4), bytes(memoryview(buf)[nv:])

    def close(self) -> None:
        """Stop serving the store (the members are gone): its port and thread are released."""
        self.store = None  # type: ignore[assignment]
        self.coord.store = None  # type: ignore[assignment]
        self.coord.server = None  # type: ignore[assignment]


def ended_runs(runs: dict[int, Any]) -> list[int]:
    """The member slots whose member loop (an ObjectRef in ``runs``) has ended: a crashed process
    or a lost node (a member that leaves normally is removed from ``runs`` first).

    A loop that ended with an :class:`~spotwise.errors.InputError` -- the user's workload or
    optimizer failed in it (:class:`~spotwise.training.recipe.UserOptimizerError` at its first
    step, a :class:`~spotwise.workloads.user.UserWorkloadError`) -- is no lost node: that error is
    raised here (exit 2 naming it, its traceback kept), as the parameter-server plane's workers do."""
    import ray

    if not runs:
        return []
    by_ref = {ref: w for w, ref in runs.items()}
    done, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
    ended = [by_ref[ref] for ref in done if runs.get(by_ref[ref]) is ref]
    for w in ended:
        err = _input_error_of(runs[w])
        if err is not None:
            raise err
    return ended


def _input_error_of(ref: Any) -> InputError | None:
    """The InputError an ended member loop raised (the user's cause, out of Ray's wrapper), else None."""
    import ray

    try:
        ray.get(ref, timeout=0)
    except InputError as e:
        cause = getattr(e, "cause", None)  # Ray's RayTaskError subclassing the user's error class
        return cause if isinstance(cause, InputError) else e
    except Exception:  # a crashed process, a lost node: the caller drops the member
        return None
    return None
