"""The step gate: every member of a generation is at step ``s`` before any of them starts ``s + 1``.

**Why** (issue 55 item 3).  A collective's timeout (gloo's, ``cluster.group_timeout_s``: 5 s by
default) measures how long a member waits inside a collective for its peers.  Work that one member
does *between* two steps -- a leader-only evaluation, a ``torch.save``, a slow logger in a user's
loop; the leader's evaluation or checkpoint in a built-in workload -- used to be inside that wait:
its peers went on into the next step, waited in its first gradient all-reduce, timed out after 5 s
and failed the generation.  Nothing of it was a failure, yet it cost a regroup, and the dropped step
ran the script's between-step code a second time (a 60 s evaluation took 115 s).  So a member
waits for the others *here*, on the store, before the step's first collective; the collective's
timeout then only measures a peer that fails inside a step.

**Liveness is not this wait's business.**  A member waits at the gate for as long as the others
take, up to :data:`GATE_S`; whether a missing member is *lost* is the controller's call, from its
heartbeat (:mod:`~spotwise.planes.collective.heartbeat`): a member whose process is gone or whose
heartbeat is silent is dropped, the generation is flagged failed, and the members at the gate see
the flag at once (it is carried by the gate's own counter, below).  So a member that evaluates for
an hour is waited for an hour (within the bound), and a frozen one is found after the heartbeat
timeout, as anywhere else.

**The bound** :data:`GATE_S`: the script step bound :data:`STEP_TIMEOUT_S` (15 minutes,
``SPOTWISE_SCRIPT_STEP_TIMEOUT_S``) plus a minute.  15 minutes fits the between-step work of real
loops -- nanoGPT's ``estimate_loss`` (200 batches per split: seconds on a GPU, minutes on a CPU), a
``torch.save`` of a multi-GB checkpoint to a network disk -- and is the time a script's own member
waits for its script to come back to its next batch before it reports the script as stuck (exit 2,
``did not come back for its next batch``); the gate waits a minute longer, so that message, which
names the cause, comes first.  Longer between-step work: raise the variable.

**Protocol.**  One counter per generation, ``at/<g>``: each member adds 1 at each gate and waits
until it reaches ``k * n`` (``k`` members, its ``n``-th gate of the generation: members pass the same
gates in the same order).  Whoever fails the generation (:func:`flag_failed`: the coordinator, a
member whose collective failed) adds :data:`FAILED` to it as well as setting ``fail/<g>``, so a
member's reads of the counter are also its reads of the fail flag, and a gate passed replaces the
fail-flag read of the step's first collective.  An early member re-reads the counter at gaps that
double from :data:`FIRST_GAP_S` to :data:`GAP_MAX_S`: a few reads while the others finish their
step, 20 a second in a long wait.

**Where it is waited.**  A user's loop passes a gate at every step, *beside* its compute: the member
thread opens it, hands the script the step and waits at the gate while the script runs its forward
pass; the step's first collective -- the first gradient bucket's comm hook, or the commit -- waits
for the gate (:meth:`~spotwise.planes.collective.group.ElasticGroup.open_gate`, ``pass_gate``,
``await_gate``).  So the gate's round trips to the store hide behind the compute:
``benchmarks/step_gate.py`` measured the script's wait for it at 28-47 us per 20 ms step on this
2-core machine at load 6 (the step medians, gated or not, differ by less than their noise there).
A built-in workload passes one (:meth:`~spotwise.planes.collective.group.ElasticGroup.reach`, before
the step) only after the steps where its leader works between two steps -- its evaluation and
checkpoint (:func:`~spotwise.planes.collective.plan.leader_works_after`); and at the lease the
members of an S-SGD or S-MA generation meet at a gate where they met in a one-element all-reduce.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable


def _seconds_from_env(name: str, default: float) -> float:
    """A positive number of seconds from the environment variable ``name`` (else ``default``)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={raw!r} is no positive number of seconds: set it to e.g. 900, or unset it")
    return value


#: seconds a script may take between being handed a step and committing it (its first step compiles,
#: loads, warms up), and between that commit and its next step's first batch (its own evaluation,
#: ``torch.save``, logging); then its member reports it as stuck (exit 2)
STEP_TIMEOUT_S = _seconds_from_env("SPOTWISE_SCRIPT_STEP_TIMEOUT_S", 900.0)

#: what the gate waits beyond :data:`STEP_TIMEOUT_S`: the stuck script's own member speaks first
GATE_MARGIN_S = 60.0

#: the longest wait at a gate (module docstring: why this bound)
GATE_S = STEP_TIMEOUT_S + GATE_MARGIN_S

#: added to a generation's gate counter when the generation fails: every later read says so
FAILED = 1 << 40

#: the first and the longest gap between two reads of the counter by a member waiting at a gate
FIRST_GAP_S = 5e-5
GAP_MAX_S = 0.05


def gate_key(gen: int) -> str:
    return f"at/{int(gen)}"


def flag_failed(store: Any, gen: int, why: str) -> None:
    """Fail generation ``gen``: its fail flag (``fail/<g>``, what collectives and the coordinator
    read) and its gate counter (what members at a gate read)."""
    store.set(f"fail/{int(gen)}", str(why)[:200])
    store.add(gate_key(gen), FAILED)


class StepGate:
    """One member's gates in one generation of ``k`` members (module docstring).

    :meth:`reach` returns ``None`` once every member is at the gate, ``"failed"`` if the generation
    was flagged failed, ``"timeout"`` after ``bound_s``.  ``clock`` and ``sleep`` are injectable for
    tests."""

    def __init__(self, k: int, bound_s: float = GATE_S, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not (isinstance(k, int) and k >= 1):
            raise ValueError(f"a gate needs k >= 1 members, got {k!r}")
        if not (isinstance(bound_s, (int, float)) and math.isfinite(bound_s) and bound_s > 0):
            raise ValueError(f"bound_s must be a positive number of seconds, got {bound_s!r}")
        self.k, self.bound_s = k, float(bound_s)
        self.clock, self.sleep = clock, sleep
        #: gates passed in this generation
        self.passed = 0
        #: seconds the last :meth:`settle` waited for the others (0: they were all there)
        self.waited_s = 0.0
        #: the counter as this member's :meth:`arrive` left it (None: no gate pending)
        self._count: int | None = None

    def arrive(self, store: Any, gen: int) -> None:
        """Say this member is at the gate (one ``add``); :meth:`settle` waits for the others."""
        if self._count is not None:
            raise RuntimeError("arrive() twice before settle()")
        self._count = int(store.add(gate_key(gen), 1))

    @property
    def pending(self) -> bool:
        """Whether this member arrived at a gate it has not settled yet."""
        return self._count is not None

    def settle(self, store: Any, gen: int) -> str | None:
        """Wait until every member arrived at this member's last gate (:meth:`arrive`)."""
        if self._count is None:
            raise RuntimeError("settle() without arrive()")
        key, target = gate_key(gen), self.k * (self.passed + 1)
        n, self._count = self._count, None
        self.waited_s = 0.0
        if n < target:
            t0 = self.clock()
            gap = FIRST_GAP_S
            while True:
                n = int(store.add(key, 0))
                if n >= target:
                    break
                if self.clock() - t0 > self.bound_s:
                    self.waited_s = self.clock() - t0
                    return "timeout"
                self.sleep(gap)
                gap = min(2.0 * gap, GAP_MAX_S)
            self.waited_s = self.clock() - t0
        if n >= FAILED:
            return "failed"
        self.passed += 1
        return None

    def reach(self, store: Any, gen: int) -> str | None:
        """:meth:`arrive` and :meth:`settle` at once."""
        self.arrive(store, gen)
        return self.settle(store, gen)
