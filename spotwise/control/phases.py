"""Where a step's time goes (issue 40 item 5): per-phase step timing, from the member to the summary.

A collective member times its steps by phase with :class:`PhaseClock` and sends the step's phases
(milliseconds) with the step's record; the data plane adds them up in :class:`PhaseTotals`, whose
:meth:`~PhaseTotals.summary` is ``summary.json``'s ``extra["step_phases"]``: the mean milliseconds
per committed step of each phase, its share of the timed total, and samples per second over the
timed steps.  A generation's first step is left out (it builds the DDP wrapper, probes the model
and allocates: its cost is in ``recovery_ms`` / ``join_ms``); ``spotwise status`` and the run's
summary table show the same figures as one line.

Phases (:data:`PHASES`):

* ``data`` -- building the step's batches (the dataset's ``batch``, or a DataLoader's prefetched one);
* ``compute`` -- forward and backward passes; on the S-SGD path the gradient buckets' all-reduces
  run inside the backward pass (DDP overlaps them), so their wait is in here too;
* ``reduce`` -- waiting for the step's other collectives: the flat all-reduce (S-MA, AD-PSGD, an
  epoch's short last step) or the small one of buffers, loss and count;
* ``sync`` -- the step's one host read (on a GPU: waiting for the device to finish the step);
* ``optimizer`` -- clipping and the optimizer's step;
* ``state`` -- the leader's replica offers to the coordinator and its evaluations;
* ``wait`` -- waiting at the lease (the coordinator's next market event) or for peers at a barrier.

The parameter-server plane times its commits from the coordinator's side
(:meth:`~spotwise.planes.ps.plane.ParameterServerPlane._phases`): ``compute`` (the slowest contributing worker's
call: its batch, forward and backward, the gradient's copy to the host), ``optimizer`` (the
coordinator's step) and ``wait`` (the rest of the wall time between two commits).

Times are the member's host clock (``time.perf_counter``).  On a GPU the host runs ahead of the
device, so a phase's host time is when the host was busy with it, and the device's remaining work
shows in ``sync``.  On a GPU the member's clock also samples how busy the GPU was
(:class:`~spotwise.workloads.device.GpuBusy`: NVML's utilization rate, once per step, where ``pynvml``
is installed): a step's phases then carry ``gpu_busy_share`` (a fraction, not milliseconds) and the
summary its mean over the timed steps, ``gpu_busy_share`` (absent where it was never sampled: the CPU).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from spotwise.control.carried import count, exact, number_map, refuse

#: the phases of a step, in the order a step goes through them (module docstring)
PHASES: tuple[str, ...] = ("data", "compute", "reduce", "sync", "optimizer", "state", "wait")
#: the key of a step's GPU busy share among its phases (a fraction in [0, 1])
BUSY = "gpu_busy_share"


@dataclass
class PhaseClock:
    """A member's accumulator: seconds per phase since the last :meth:`take`."""

    spent: dict[str, float] = field(default_factory=dict)
    #: the member's :class:`~spotwise.workloads.device.GpuBusy` (its ``sample()`` is None on the CPU)
    busy: Any = None

    def add(self, phase: str, seconds: float) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown step phase {phase!r}: one of {', '.join(PHASES)}")
        self.spent[phase] = self.spent.get(phase, 0.0) + max(0.0, float(seconds))

    def timed(self, phase: str) -> "_Span":
        """``with clock.timed("optimizer"): ...`` adds the block's wall time to ``phase``."""
        return _Span(self, phase)

    def take(self) -> dict[str, float]:
        """The milliseconds per phase since the last take (rounded to 0.01 ms), and start anew."""
        out = {k: round(1000.0 * v, 2) for k, v in self.spent.items() if v > 0}
        self.spent = {}
        share = self.busy.sample() if self.busy is not None else None
        if share is not None:
            out[BUSY] = round(float(share), 3)
        return out


class _Span:
    __slots__ = ("clock", "phase", "t0")

    def __init__(self, clock: PhaseClock, phase: str) -> None:
        self.clock, self.phase, self.t0 = clock, phase, 0.0

    def __enter__(self) -> "_Span":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.clock.add(self.phase, time.perf_counter() - self.t0)


@dataclass
class PhaseTotals:
    """The data plane's sum of its committed steps' phases (module docstring)."""

    ms: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    samples: int = 0
    #: the sum and count of the steps' GPU busy shares (steps on a GPU with NVML)
    busy: float = 0.0
    busy_steps: int = 0

    def add(self, phases: dict[str, Any] | None, samples: int = 0) -> None:
        """One committed step's phases (a record without any is not counted)."""
        if not phases:
            return
        for k, v in phases.items():
            if k in PHASES:
                self.ms[k] = self.ms.get(k, 0.0) + float(v)
        share = phases.get(BUSY)
        if isinstance(share, (int, float)) and not isinstance(share, bool) and 0.0 <= float(share) <= 1.0:
            self.busy += float(share)
            self.busy_steps += 1
        self.steps += 1
        self.samples += int(samples)

    def state(self) -> dict[str, Any]:
        """The totals as plain data, for a checkpoint (a resume goes on adding to them: issue 54 item 5)."""
        return {"ms": dict(self.ms), "steps": self.steps, "samples": self.samples, "busy": self.busy,
                "busy_steps": self.busy_steps}

    @classmethod
    def from_state(cls, raw: Any) -> "PhaseTotals":
        """The totals a checkpoint holds (:meth:`state`: exactly its keys), checked (untrusted input: InputError)."""
        raw = exact(raw, "phases", ("ms", "steps", "samples", "busy", "busy_steps"))
        ms = number_map(raw["ms"], "phases.ms")
        for k, v in ms.items():
            if k not in PHASES or v < 0:
                raise refuse(f"phases.ms[{k[:40]!r}]", v, f"the milliseconds >= 0 of a phase ({', '.join(PHASES)})")
        steps = count(raw["steps"], "phases.steps")
        busy_steps = count(raw["busy_steps"], "phases.busy_steps")
        busy = raw["busy"]
        if (isinstance(busy, bool) or not isinstance(busy, (int, float)) or not math.isfinite(float(busy))
                or busy_steps > steps or not 0.0 <= float(busy) <= busy_steps):
            raise refuse("phases.busy", busy, f"a sum of at most {busy_steps} busy shares")
        return cls(ms=ms, steps=steps, samples=count(raw["samples"], "phases.samples"), busy=float(busy),
                   busy_steps=busy_steps)

    def summary(self) -> dict[str, Any] | None:
        """``{"steps", "ms_per_step": {phase: mean}, "share": {phase: fraction}, "samples_per_s"}``
        over the timed steps (None when no step was timed)."""
        if self.steps == 0:
            return None
        total = sum(self.ms.values())
        per = {k: round(self.ms[k] / self.steps, 3) for k in PHASES if k in self.ms}
        out: dict[str, Any] = {
            "steps": self.steps,
            "ms_per_step": per,
            "share": {k: round(self.ms[k] / total, 4) for k in per} if total > 0 else {},
            "samples_per_s": round(self.samples / (total / 1000.0), 3) if total > 0 else None,
        }
        if self.busy_steps:
            out[BUSY] = round(self.busy / self.busy_steps, 4)
        return out


def totals_of(events: list[dict[str, Any]]) -> PhaseTotals:
    """The phases of the step events of a run's log (untrusted input: a phase that is not a known
    name with a finite, non-negative number of milliseconds is ignored)."""
    totals = PhaseTotals()
    for e in events:
        # a generation's first step (it carries its "timing") builds the wrapper and allocates: not a
        # steady step, and the data plane's own totals leave it out too
        ph = e.get("phases") if e.get("kind") == "step" and "timing" not in e else None
        if not isinstance(ph, dict):
            continue
        clean = {k: float(v) for k, v in ph.items() if (k in PHASES or k == BUSY) and isinstance(v, (int, float))
                 and not isinstance(v, bool) and math.isfinite(float(v)) and float(v) >= 0}
        samples = e.get("samples")
        totals.add(clean, int(samples) if isinstance(samples, int) and not isinstance(samples, bool) and samples >= 0 else 0)
    return totals


def phase_line(summary: dict[str, Any] | None) -> str | None:
    """``compute 71% · reduce 9% · ... · 412 samples/s`` (the phases taking 1% or more, largest
    first, and the mean step), or None without timed steps."""
    if not summary or not summary.get("share"):
        return None
    share = summary["share"]
    parts = [f"{k} {100 * v:.0f}%" for k, v in sorted(share.items(), key=lambda kv: -kv[1]) if v >= 0.01]
    step_ms = sum(summary.get("ms_per_step", {}).values())
    tail = f"mean step {step_ms:.1f} ms" + (f", {summary['samples_per_s']:.4g} samples/s" if summary.get("samples_per_s") else "")
    if isinstance(summary.get(BUSY), (int, float)):
        tail += f", GPU busy {100 * float(summary[BUSY]):.0f}%"
    return " · ".join(parts) + f" ({tail})"
