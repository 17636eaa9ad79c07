"""A regroupable gloo group: Spotnik's in-place membership change (``papers/001_30a454edd897cf47.txt`` Sec. 3.2).

Members are long-lived processes; a *generation* ``g`` is one gloo process group over the members
the coordinator announced for it (``members/<g>`` in a shared :class:`torch.distributed.TCPStore`).
Nothing is restarted on a revocation: the survivors abandon generation ``g`` and form ``g + 1``
over the same store, in the same processes, keeping their parameters in memory.

* **No hang.**  A collective is waited for in short slices (``poll_s``); between slices the member
  checks the store's ``fail/<g>`` flag (at gaps that grow to 50 ms in a long wait,
  :class:`FlagCadence`).  The first member whose collective fails (a peer's connection closed: a
  killed process) raises the flag and every other member aborts its pending collective at once,
  instead of waiting for gloo's own timeout.  A *frozen* peer (SIGSTOP) closes
  no connection: the collective then fails after ``timeout_s`` (the process group's timeout), and
  the flag spreads that too.  The coordinator can raise the flag itself (a revocation notice).
  ``timeout_s`` only measures waits *inside* a step: a member's work between two steps (a leader's
  evaluation or save) is waited for at the *step gate* (:meth:`ElasticGroup.reach`,
  :mod:`~spotwise.planes.collective.step_gate`) before the step's first collective.
* **Regroup.**  After a failure each survivor reports itself alive for ``g`` with its last
  committed step (``alive/<g>/<member>``); the coordinator waits for every member whose process
  lives and whose heartbeat goes on, however slow (:mod:`~spotwise.planes.collective.heartbeat`:
  a collective that timed out on a slow peer is no loss), then announces ``g + 1``'s members and every
  one of them forms the new group (a gloo rendezvous over the store, tens of ms on one machine).
  A joiner forms the new generation like everyone else and receives the parameters by a broadcast
  from a member that has them.

* **Loopback only on one machine** (issue 18 item 6).  The store listens on its host only
  (:func:`listen_on`, not every interface as torch's TCPStore would), and with a loopback store
  the members' gloo groups listen on that address too (:func:`gloo_device`).  On a Ray cluster it
  listens on the head's cluster address only, and each member's groups on its own node's address.
* **A private store** (issue 20 item 5).  torch's TCPStore has no authentication, so every key of
  a run lives under a per-run secret (128 random bits, :class:`StoreAddress`): members reach the
  store through a :class:`torch.distributed.PrefixStore` of that secret, handed to them by the
  controller over Ray's own channel (an actor call's arguments).  The store has no command that
  lists keys, so a client without the secret can neither read the plans, records and replicas
  nor write a plan, a lease or the fail flag; it can only add keys of its own, which nobody reads.
  Gloo's own data connections between members carry no secret (gloo has none); they exist only
  between the members of a generation.

Measured on this 2-core machine (spike, ``spawn`` processes, 400 KB all-reduce): a killed member
of 4 is detected by every survivor in 31-36 ms and the next all-reduce of the 3 survivors is done
12-18 ms later; of 8: 31-37 ms + 26-30 ms.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from spotwise.planes.collective.step_gate import StepGate, flag_failed


class GroupFailed(Exception):
    """The current generation failed (a member died, froze, or the coordinator flagged it)."""


#: the longest gap between two reads of the fail flag while a collective is waited for
FLAG_GAP_MAX_S = 0.05


class FlagCadence:
    """When a member waiting for a collective reads the store's fail flag: after the first slice,
    then at gaps that double up to ``FLAG_GAP_MAX_S``.  A healthy step's collective ends within its
    first slices and costs a read or two; a member waiting seconds for a straggler (or a frozen
    peer) asks the store 20 times a second instead of once per 5 ms slice -- 200 remote calls a
    second per waiting member, served by the coordinator's store thread, take CPU from the very
    straggler they wait for on a shared machine.  A flag raised by another member is seen at most
    ``FLAG_GAP_MAX_S`` late (a killed peer's closed connection is seen at once, by gloo itself)."""

    __slots__ = ("gap", "next")

    def __init__(self, first_s: float) -> None:
        if not first_s > 0:
            raise ValueError("first_s must be > 0")
        self.gap = min(float(first_s), FLAG_GAP_MAX_S)
        self.next = time.monotonic() + self.gap

    def due(self) -> bool:
        """Whether the flag is to be read now (then the next read is a doubled gap later)."""
        now = time.monotonic()
        if now < self.next:
            return False
        self.gap = min(2.0 * self.gap, FLAG_GAP_MAX_S)
        self.next = now + self.gap
        return True


from spotwise.planes.collective.group_store import (GroupCoordinator, StoreAddress, gloo_device,  # noqa: F401,E402
                                                   is_loopback, listen_on, node_address)  # (re-exported)


#: groups whose pending work never ended: never destroyed (destroying them would end the process)
_GRAVEYARD: list[tuple[Any, ...]] = []


def _settled(works: list[Any], patience_s: float, pause_s: float = 0.05) -> bool:
    """Whether every work object in ``works`` has completed (successfully or not) within ``patience_s``."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            if all(w.is_completed() for w in works):
                return True
        except Exception:  # pragma: no cover - a work that cannot say is treated as live
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause_s)


def as_process_group(backend: Any, store: Any, rank: int, size: int, kind: str = "gloo") -> Any:
    """A formed gloo or NCCL ``backend`` as a ``torch.distributed.ProcessGroup`` over ``store`` -- what
    ``DistributedDataParallel`` takes -- the way ``torch.distributed.new_group`` wraps one: the
    backend registered as the group's default for its device type (CPU for gloo, CUDA for NCCL)."""
    if kind not in ("gloo", "nccl"):
        raise ValueError(f"unknown collective backend {kind!r}: gloo or nccl")
    bt = dist.ProcessGroup.BackendType.NCCL if kind == "nccl" else dist.ProcessGroup.BackendType.GLOO
    pg = dist.ProcessGroup(store, int(rank), int(size))
    pg._set_default_backend(bt)
    pg._register_backend(torch.device("cuda" if kind == "nccl" else "cpu"), bt, backend)
    return pg


class ElasticGroup:
    """One member's handle on the regroupable group; see the module docstring."""

    def __init__(self, address: StoreAddress, member: int, timeout_s: float = 5.0, poll_s: float = 0.005,
                 check_every_s: float = 0.0, rendezvous_timeout_s: float | None = None,
                 local_host: str | None = None, backend: str = "gloo") -> None:
        self.member = int(member)
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"unknown collective backend {backend!r}: gloo (CPU tensors) or nccl (CUDA tensors)")
        #: issue 20 item 4: ``nccl`` for members whose buffers are on a GPU, ``gloo`` for CPU buffers
        #: (:func:`spotwise.workloads.device.collective_backend`); see :meth:`_form_nccl`, :meth:`_wait_nccl`
        self.backend = backend
        self.timeout_s = float(timeout_s)
        #: the store's fail flag is read before a collective at most this often (0: before every
        #: one); a dead peer is seen by the collective itself, so the flag only carries the
        #: coordinator's aborts, which may wait this long
        self.check_every_s = float(check_every_s)
        self._next_check = 0.0
        self.poll = timedelta(seconds=float(poll_s))
        # the store's timeout bounds gloo's rendezvous too: members that start together (processes
        # being spawned) need a generous one; members that are running already (the data plane's)
        # pass timeout_s, so a member that dies while a generation forms fails it quickly
        rdv = max(30.0, timeout_s) if rendezvous_timeout_s is None else float(rendezvous_timeout_s)
        self.store = address.connect(rdv)
        #: the gloo device this member's groups listen on (loopback with a loopback store, the
        #: member's node address ``local_host`` on a cluster)
        self._device = gloo_device(address.host, local_host)
        self.gen: int | None = None
        self.members: list[int] = []
        self.pg: Any = None
        #: the generation's backend as a ``torch.distributed.ProcessGroup`` (:meth:`process_group`)
        self._wrapped: Any = None
        self._prefix: Any = None
        #: the generation's step gate (:meth:`reach`), and whether it read the fail flag since the last
        #: collective (then the next collective's :meth:`_check` need not)
        self.gate = StepGate(1)
        self._gate_read = False
        #: a gate opened for a step another thread computes (:meth:`open_gate`), its outcome and event
        self._gate_open = False
        self._gate_why: str | None = None
        self._gate_done = threading.Event()

    @property
    def rank(self) -> int:
        return self.members.index(self.member)

    @property
    def gen_store(self) -> Any:
        """The current generation's view of the store (its keys under ``g<gen>/``)."""
        return self._prefix

    def wait_members(self, gen: int, timeout_s: float = 30.0) -> list[int]:
        """The members the coordinator announced for ``gen`` (blocks until announced)."""
        key = f"members/{gen}"
        self.store.wait([key], timedelta(seconds=timeout_s))
        return [int(m) for m in json.loads(self.store.get(key))]

    def form(self, gen: int, members: list[int] | None = None) -> None:
        """Join generation ``gen`` (its announced members unless given, in rank order: a plan's members
        are, :func:`~spotwise.planes.collective.plan.rank_order`); blocks until all have joined."""
        members = [int(m) for m in members] if members is not None else self.wait_members(gen)
        if self.member not in members:
            raise ValueError(f"member {self.member} is not in generation {gen}: {members}")
        self.abandon()
        self.gen, self.members = gen, members
        self.gate, self._gate_read, self._gate_open = StepGate(len(members)), False, False
        prefix = self._prefix = dist.PrefixStore(f"g{gen}/", self.store)
        if self.backend == "nccl":
            self.pg = self._form_nccl(prefix)
        elif self._device is None:
            self.pg = dist.ProcessGroupGloo(prefix, self.rank, len(members), timedelta(seconds=self.timeout_s))
        else:  # pinned to the store's loopback address (see gloo_device)
            opts = dist.ProcessGroupGloo._Options()
            opts._timeout = timedelta(seconds=self.timeout_s)
            opts._devices = [self._device]
            self.pg = dist.ProcessGroupGloo(prefix, self.rank, len(members), opts)

    def abandon(self, *pending: Any) -> None:
        """Leave the current generation's process group without waiting for it.

        A collective still pending on it may block ``abort()`` (and the group's destructor) until
        gloo's own timeout; so the group is aborted on a background thread and kept referenced
        until then, and this member goes on to the next generation at once.  ``pending``: the work
        objects of collectives still running on it, released on that thread too (a work object
        destroyed on the member's thread while its group is aborted on another one crashed the
        process, once in ~10 runs of the joiner test).
        """
        pg, self.pg = self.pg, None
        wrapped, self._wrapped = self._wrapped, None
        if pg is None:
            return
        holder: list[Any] = [pg, *pending]  # the abort thread holds the only references
        if wrapped is not None:
            holder.append(wrapped)
        del pg, pending, wrapped
        linger = self.timeout_s + 1.0

        def _abort() -> None:
            try:
                holder[0].abort()
            except Exception:  # pragma: no cover - abort of a broken group is best effort
                pass
            # destroyed here, off the member's path, once every collective still pending on it has
            # ended (gloo's timeout): destroying a group under a live work object terminates the
            # process ("terminate called without an active exception", seen once in CI under load
            # when a fixed linger was used), and destroying it on the member's thread costs the
            # regroup tens of ms.  A work that never ends keeps its group alive for good.
            time.sleep(linger)
            if not _settled(holder[1:], patience_s=10.0 * linger):
                _GRAVEYARD.append(tuple(holder))
            holder.clear()

        threading.Thread(target=_abort, daemon=True, name=f"abort-g{self.gen}").start()

    def _failed_flag(self) -> bool:
        return bool(self.store.check([f"fail/{self.gen}"]))

    # ------------------------------------------------------------------ NCCL (issue 20 item 4)
    def _form_nccl(self, prefix: Any) -> Any:
        """The generation's NCCL process group (members on GPUs, one GPU each; never on this CPU-only
        test machine).  Same store, same generations, same fail flag as gloo."""
        opts = dist.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = False
        opts._timeout = timedelta(seconds=self.timeout_s)
        return dist.ProcessGroupNCCL(prefix, self.rank, len(self.members), opts)

    def _wait_nccl(self, work: Any) -> None:
        """Wait for an NCCL collective in poll slices.  An NCCL work's ``wait(timeout)`` aborts the
        communicator when the timeout passes, so a slice cannot be a wait as with gloo: poll
        ``is_completed()`` and the fail flag, then ``wait()`` (which raises the collective's error)."""
        deadline = time.monotonic() + self.timeout_s + 1.0
        pause = self.poll.total_seconds()
        cadence = FlagCadence(pause)
        try:
            while not work.is_completed():
                if cadence.due() and self._failed_flag():
                    self.abandon(work)
                    raise GroupFailed(self.store.get(f"fail/{self.gen}").decode(errors="replace"))
                if time.monotonic() > deadline:
                    raise RuntimeError(f"NCCL collective not done after {self.timeout_s:g} s")
                time.sleep(pause)
            work.wait()
        except RuntimeError as e:
            self._flag(str(e))
            self.abandon(work)
            raise GroupFailed(str(e)) from None

    def _exchange_nccl(self, send: torch.Tensor, recv: torch.Tensor, peer: int, tag: int) -> None:
        """A pairwise exchange over NCCL: the lower rank sends first, the higher receives first (two
        sends first on both sides can deadlock in NCCL, where gloo's would not)."""
        ops = [lambda: self.pg.send([send], peer, tag), lambda: self.pg.recv([recv], peer, tag)]
        for op in (ops if self.rank < peer else ops[::-1]):
            self._wait_nccl(op())

    def _wait(self, work: Any) -> None:
        if self.backend == "nccl":
            return self._wait_nccl(work)
        deadline = time.monotonic() + self.timeout_s + 1.0  # gloo's own timeout, and a margin over it
        cadence = FlagCadence(self.poll.total_seconds())
        while True:
            try:
                work.wait(self.poll)
                return
            except RuntimeError as e:
                # "Operation timed out!" is only the end of this poll slice; anything else (a closed
                # connection, gloo's own timeout on a frozen peer) fails the generation
                if "Operation timed out" not in str(e) or time.monotonic() > deadline:
                    self._flag(str(e))
                    self.abandon(work)
                    raise GroupFailed(str(e)) from None
            if cadence.due() and self._failed_flag():
                self.abandon(work)
                raise GroupFailed(self.store.get(f"fail/{self.gen}").decode(errors="replace"))

    def _flag(self, why: str) -> None:
        """Fail this generation, saying which member and why (its flag and its gate)."""
        flag_failed(self.store, int(self.gen if self.gen is not None else -1), f"member {self.member}: {why}")

    def _check(self) -> None:
        if self.pg is None:
            raise GroupFailed("no group formed")
        self.await_gate()
        if self._gate_read:  # the step's gate read the flag: the step's first collective need not
            self._gate_read = False
            return
        if self.check_every_s > 0:
            now = time.monotonic()
            if now < self._next_check:
                return
            self._next_check = now + self.check_every_s
        if self._failed_flag():
            self.abandon()
            raise GroupFailed(self.store.get(f"fail/{self.gen}").decode(errors="replace"))

    # ------------------------------------------------------------------ the step gate (step_gate)
    def _gate_failure(self, why: str | None) -> str | None:
        """The message of a gate that did not pass (its generation failed, or its bound passed: then
        this member fails the generation), else None."""
        if why == "failed":
            return self.store.get(f"fail/{self.gen}").decode(errors="replace")
        if why == "timeout":
            msg = (f"not every member reached step gate {self.gate.passed + 1} within {self.gate.bound_s:.0f} s "
                   "(SPOTWISE_SCRIPT_STEP_TIMEOUT_S bounds a member's work between two steps)")
            self._flag(msg)
            return msg
        return None

    def reach(self) -> float:
        """Wait at the step gate until every member of the generation is here
        (:mod:`~spotwise.planes.collective.step_gate`): before a step whose first collective would
        otherwise wait for a peer's between-step work.  Returns the seconds waited; raises
        :class:`GroupFailed` if the generation failed, or after the gate's bound (then it fails it)."""
        if self.pg is None or self.gen is None:
            raise GroupFailed("no group formed")
        msg = self._gate_failure(self.gate.reach(self.store, self.gen))
        if msg is not None:
            self.abandon()
            raise GroupFailed(msg)
        self._gate_read = True
        return self.gate.waited_s

    def open_gate(self) -> None:
        """The step about to be handed to another thread (a user's loop) waits at the gate beside its
        compute: its first collective (:meth:`await_gate`) waits until :meth:`pass_gate`, called on this
        thread once the step is handed over, found every member there.  So the gate's round trips to
        the store overlap the step's forward pass instead of delaying it."""
        if self.pg is None or self.gen is None:
            raise GroupFailed("no group formed")
        self._gate_done.clear()
        self._gate_why = None
        self._gate_open = True

    def pass_gate(self) -> None:
        """The open gate's arrival and wait (this thread; see :meth:`open_gate`), never raising: the
        step's collectives raise what it found."""
        why: str | None = "the step gate was not passed"
        try:
            why = self._gate_failure(self.gate.reach(self.store, int(self.gen if self.gen is not None else -1)))
        except Exception as e:  # the store is gone: the step's collectives fail with the reason
            why = f"the step gate could not be read: {e}"
        finally:
            self._gate_why = why
            self._gate_done.set()

    def await_gate(self) -> None:
        """Before a collective of a step whose gate is open: wait until it passed; :class:`GroupFailed`
        if it did not (at every collective of the step).  Nothing when no gate is open (a built-in
        workload's steps)."""
        if not self._gate_open:
            return
        self._gate_done.wait()
        if self._gate_why is not None:  # (it stays open: no collective of this step runs)
            raise GroupFailed(self._gate_why)
        self._gate_open = False
        self._gate_read = True

    def close_gate(self) -> None:
        """The handed step is over (its thread is back between steps): no gate stays open."""
        self._gate_open = False

    def allreduce(self, tensor: torch.Tensor) -> None:
        """Sum ``tensor`` over the generation's members, in place; :class:`GroupFailed` on a failure."""
        self._check()
        self._wait(self.pg.allreduce([tensor]))

    def exchange(self, send: torch.Tensor, recv: torch.Tensor, peer_member: int, tag: int) -> None:
        """Send ``send`` to ``peer_member`` and receive its tensor into ``recv`` (a pairwise exchange:
        only the two members wait for each other); :class:`GroupFailed` on a failure."""
        self._check()
        peer = self.members.index(int(peer_member))
        if self.backend == "nccl":
            self._exchange_nccl(send, recv, peer, int(tag))
            return
        out = self.pg.send([send], peer, int(tag))
        into = self.pg.recv([recv], peer, int(tag))
        # gloo closes a pair whose send/recv wait times out, so these are not waited for in poll
        # slices: one wait of the group's timeout.  A coordinator's abort still reaches a member
        # waiting here: its partner aborts its group, which closes the connection.
        for work in (out, into):
            try:
                work.wait(timedelta(seconds=self.timeout_s))
            except RuntimeError as e:
                self._flag(str(e))
                self.abandon(out, into)
                raise GroupFailed(str(e)) from None

    def broadcast(self, tensor: torch.Tensor, root_member: int) -> None:
        """Overwrite ``tensor`` everywhere with ``root_member``'s (a joiner's parameters)."""
        self._check()
        opts = dist.BroadcastOptions()
        opts.rootRank = self.members.index(int(root_member))
        self._wait(self.pg.broadcast([tensor], opts))

    def process_group(self) -> Any:
        """The current generation's backend as a ``torch.distributed.ProcessGroup`` -- what
        ``DistributedDataParallel`` and its Reducer take (``process_group=``) -- built once per
        generation, as ``torch.distributed``'s own ``new_group`` wraps a backend: the group object
        over the generation's store, the backend registered as its default for the members' device
        type.  No rendezvous happens here: the backend was formed by :meth:`form`.  Its collectives
        are not waited for in poll slices: a dead peer fails them through its closed connection,
        a frozen one through the backend's timeout (``timeout_s``), and the coordinator's abort
        through a partner aborting its group (see :meth:`exchange`)."""
        if self.pg is None:
            raise GroupFailed("no group formed")
        if self._wrapped is None:
            self._wrapped = as_process_group(self.pg, self._prefix, self.rank, len(self.members), self.backend)
        return self._wrapped

    def fail(self, why: str, *pending: Any) -> None:
        """Raise this generation's fail flag (a collective failed on this member) and leave the group
        (:meth:`abandon`; ``pending``: what still holds its work objects); the caller raises
        :class:`GroupFailed`."""
        self._flag(why)
        self.abandon(*[p for p in pending if p is not None])

    def failed(self) -> bool:
        """Whether the current generation was flagged failed (read from the store now)."""
        return self.gen is not None and self._failed_flag()

    def report_alive(self, step: int, gen: int | None = None) -> None:
        """After a failure: tell the coordinator this member survived generation ``gen`` (the current
        one unless given: one that failed before this member formed it) at ``step``."""
        self.store.set(f"alive/{self.gen if gen is None else int(gen)}/{self.member}", str(int(step)))

    def close(self) -> None:
        self.abandon()
