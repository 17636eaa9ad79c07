"""What a generation of the collective plane does: the :class:`Plan` the coordinator announces and every
member reads, and AD-PSGD's seeded pairing (``papers/001_30a454edd897cf47.txt`` Sec. 3.3)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: strategies a member runs (``cluster.sync`` on the collective plane)
STRATEGIES = ("ssgd", "sma", "adpsgd")
#: a step number no job reaches (no target)
NO_LIMIT = 2**62


@dataclass(frozen=True)
class Plan:
    """What generation ``gen`` does; the coordinator writes it, every member reads it."""

    gen: int
    #: the members in rank order (:func:`rank_order`: the leader keeps rank 0)
    members: tuple[int, ...]
    #: the member whose replica everyone takes; -1: the coordinator's replica (``init/<gen>``)
    source: int
    strategy: str = "ssgd"
    local_steps: int = 4
    lr: float = 0.05
    batch: int = 32
    #: the coordinator's highest logged step: the leader sends the records after it
    logged: int = 0
    eval_every: int = 0
    #: the leader's periodic offers: at most every ``replica_every`` steps, spaced out to keep their
    #: cost within ``replica_budget`` of the training time (0: exactly every ``replica_every`` steps);
    #: and always at the multiples of ``checkpoint_every`` (the checkpoints' steps)
    replica_every: int = 0
    replica_budget: float = 0.0
    checkpoint_every: int = 0
    max_step: int = NO_LIMIT
    #: the lease every member starts the generation with (then read from the store at the lease,
    #: which the coordinator raises only while every member waits there: all see the same value)
    lease: int = 0
    #: whether members take the source's replica (a joiner, or a survivor a step behind); when
    #: every member is a survivor at the committed step, their replicas are already the same
    transfer: bool = True
    #: how the members take their state: "roll-forward" (the source's replica: S-SGD and S-MA, whose
    #: replicas agree at a committed step) or "snapshot" (the previous generation ran AD-PSGD, whose
    #: replicas differ: every survivor goes back to its replica at the last completed barrier
    #: ``rollback_to`` and the members average them)
    reconcile: str = "roll-forward"
    rollback_to: int = 0
    #: issue 28: the learning-rate schedule (:class:`~spotwise.training.recipe.LrSchedule` fields) that
    #: multiplies ``lr`` at the committed samples (the data cursor's ``epoch * n + pos``); None: constant
    schedule: dict[str, Any] | None = None
    #: the last generation: the source sends its records and a final replica, and all leave
    stop: bool = False
    #: this generation starts the job (no committed state exists: a fresh run's step 0); its members
    #: are the ones that start it (a training script's ``job.joining`` is false only there)
    start: bool = False
    #: the job's planned number of members (``cluster.workers``): what WORLD_SIZE says at a script's start
    planned: int = 0

    def __post_init__(self) -> None:
        if not self.members or len(set(self.members)) != len(self.members):
            raise ValueError(f"a generation needs distinct members, got {self.members!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown collective strategy {self.strategy!r}: valid names are {', '.join(STRATEGIES)}")
        if self.source != -1 and self.source not in self.members:
            raise ValueError(f"the source {self.source} is not a member of {self.members}")
        if self.local_steps < 1 or self.batch < 1:
            raise ValueError("local_steps and batch must be >= 1")
        if self.reconcile not in ("roll-forward", "snapshot"):
            raise ValueError(f"unknown reconcile {self.reconcile!r}")

    @property
    def leader(self) -> int:
        return self.source if self.source >= 0 else self.members[0]

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        d = json.loads(text)
        d["members"] = tuple(int(m) for m in d["members"])  # in rank order
        return cls(**d)


def leader_works_after(plan: Plan, step: int) -> bool:
    """Whether the leader works between ``step`` and the next step on the plan's own schedule -- it
    evaluates (``eval_every``) or offers a checkpoint's replica (``checkpoint_every``) -- so every
    member waits for it at the step gate (:mod:`~spotwise.planes.collective.step_gate`), not in the
    next step's first collective.  The same answer on every member."""
    s = int(step)
    return s > 0 and any(every > 0 and s % every == 0 for every in (plan.eval_every, plan.checkpoint_every))


def rank_order(previous: list[int] | tuple[int, ...], survivors: Any, members: Any) -> list[int]:
    """The next generation's ``members`` in rank order (issue 55 item 2): the ``survivors`` of the
    previous generation in their ``previous`` order -- so the leader keeps rank 0 while it lives, and
    when it is lost the survivor that was next becomes rank 0 -- then the others (joiners, a slot's
    new process) by slot.  A member's rank changes only when a member before it leaves."""
    kept = [int(w) for w in previous if w in survivors and w in members]
    return kept + sorted(int(w) for w in members if w not in kept)


def gossip_partner(gen: int, step: int, k: int, rank: int) -> int | None:
    """``rank``'s partner at ``step`` of generation ``gen``: a perfect matching drawn from a generator
    seeded by ``(gen, step)``, the same on every member (with ``k`` odd one rank sits out)."""
    if k < 2:
        return None
    perm = np.random.default_rng([int(gen), int(step)]).permutation(k)
    i = int(np.flatnonzero(perm == rank)[0])
    j = i + 1 if i % 2 == 0 else i - 1
    return int(perm[j]) if j < k else None


def encode_lease(step: int, revoked: tuple[int, ...] = ()) -> str:
    """The store's ``lease`` value: the highest step members may commit, and the members revoked in
    the step after the previous lease (``"12"``, ``"12:0,2"``; see :func:`decode_lease`)."""
    return f"{int(step)}:{','.join(str(int(w)) for w in revoked)}" if revoked else str(int(step))


def decode_lease(raw: bytes | str) -> tuple[int, tuple[int, ...]]:
    """``(step, revoked)`` from :func:`encode_lease`.  A member in ``revoked`` contributes nothing to
    the leased step: the market revokes it inside that step (virtual time), so the step commits
    without it whatever the real-time race between its process's kill and the step's all-reduce --
    the emulated run is then the same on every repetition and across a resume (issue 30 item 8)."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    head, _, tail = text.partition(":")
    return int(head), tuple(int(w) for w in tail.split(",") if w)
