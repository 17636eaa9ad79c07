"""Switch the synchronisation strategy when throughput per worker drops (Spotnik, ``papers/001_30a454edd897cf47.txt``).

Spotnik (Sec. 3.3, Sec. 4 "Adaptive synchronisation", Fig. 6) starts with the accuracy-friendly
S-SGD and switches to the network-friendly AD-PSGD "when the throughput falls below 40%": the
per-worker throughput of S-SGD decays as workers are added (an all-reduce costs more with more
workers) or slowed (stragglers), while a pairwise, asynchronous strategy keeps it roughly
constant.  Per worker is per dollar here: every worker costs the same, so samples per second per
worker are samples per dollar up to the price.

:class:`StrategySwitch` is that rule as a pure :class:`~spotwise.policies.base.Policy`.  It
measures, from the committed steps only, the per-worker throughput in sliding windows of
``window_s`` seconds; the reference is the best window measured under the current strategy; when
the latest window falls below ``threshold`` x the reference it emits :class:`~spotwise.policies.base.SwitchSync`
to the next strategy of ``strategies`` (ordered from accuracy- to network-friendly; after the last
it goes back to the first).  It waits ``min_interval_s`` after a switch before judging again
(the new strategy gets its own windows), so it cannot oscillate faster than that.

What it reads from :attr:`Observation.extra` (nothing else):

``"loss_history"``
    Rows ``(step, t, loss, workers[, mini-batches per worker])``: every committed step, its time,
    the workers it combined and (collective S-MA) the local steps each took -- what the job
    controllers record.
``"last_switch_t"`` (optional)
    Time of the latest strategy switch (``None``: none yet); only rows after it are the current
    strategy's.

Paper's: the 40% threshold, the direction (accuracy- to network-friendly as throughput drops).
Ours: the sliding window, the reference (the best window measured under the current strategy:
since the run's start for the first one -- the paper's baseline is the single-worker throughput
it started from -- and since its switch for the others, so a strategy is left only when it
degrades against itself and two strategies cannot take turns), the hold-off between switches and
the way back (after the last strategy, the first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from spotwise.policies.base import Decision, Observation, Policy, SwitchSync
from spotwise.policies.schema import check_strategy_switch


def window_throughputs(rows: list[tuple[float, ...]], window_s: float) -> list[tuple[float, float]]:
    """``(t_end, mini-batches per second per worker)`` of consecutive windows of ``window_s`` seconds.

    Rows are ``(step, t, loss, workers[, mini-batches per worker])`` in time order: a step of
    S-SGD or of the parameter-server modes holds one mini-batch per worker, a step of S-MA one
    per local step (``local_steps``).  A window's throughput is the mini-batches its steps
    committed divided by its duration and by the mean number of workers per step; the first row
    only opens the first window.
    """
    out: list[tuple[float, float]] = []
    if len(rows) < 2:
        return out
    start_t = float(rows[0][1])
    batches = workers = 0.0
    steps = 0
    for row in rows[1:]:
        t = float(row[1])
        k = float(row[3]) if len(row) > 3 else 1.0
        per = float(row[4]) if len(row) > 4 else 1.0
        batches += k * per
        workers += k
        steps += 1
        if t - start_t >= window_s:
            out.append((t, batches / (t - start_t) / (workers / steps)))
            start_t, batches, workers, steps = t, 0.0, 0.0, 0
    return out


@dataclass(frozen=True)
class StrategySwitch(Policy):
    """Spotnik's throughput-triggered strategy switch; see the module docstring."""

    name: ClassVar[str] = "strategy-switch"
    strategies: tuple[str, ...] = ("full", "async")
    threshold: float = 0.4
    window_s: float = 30.0
    min_interval_s: float = 60.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategies", tuple(self.strategies))
        check_strategy_switch(self.strategies, self.threshold, self.window_s, self.min_interval_s)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.sync not in self.strategies:
            return []
        rows = list(obs.extra.get("loss_history") or ())
        last = obs.extra.get("last_switch_t")
        if last is not None and obs.t - float(last) < self.min_interval_s:
            return []
        windows = window_throughputs(rows, self.window_s)
        if len(windows) < 2:
            return []
        current_rows = [r for r in rows if last is None or float(r[1]) >= float(last)]
        now = window_throughputs(current_rows, self.window_s)
        if not now or (last is not None and len(now) < 2):
            return []
        # the reference: the best window of the current strategy (since its switch), so a strategy
        # is left only when it degrades against itself -- never an oscillation between strategies
        # that cannot match the first one's few-worker throughput
        best = max(v for _, v in (now if last is not None else windows))
        if best <= 0:
            return []
        current = now[-1][1]
        if current >= self.threshold * best:
            return []
        nxt = self.strategies[(self.strategies.index(obs.sync) + 1) % len(self.strategies)]
        return [SwitchSync(reason=f"per-worker throughput {current:.3g}/s is {100 * current / best:.0f}% of the best "
                                  f"{best:.3g}/s (< {100 * self.threshold:.0f}%, Spotnik Sec. 4): {obs.sync} -> {nxt}",
                           sync=nxt)]
