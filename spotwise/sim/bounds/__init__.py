"""The references a trace sweep's strategies are measured against: what the job could have cost in
a window ``[start, start + deadline)`` had the schedule known the future.

All of them run the sweep's job (:class:`~spotwise.sim.sweep.records.SweepJob`: ``N`` nodes, at
least ``min_nodes`` computing, ``k`` of them progressing at ``rate(k)``, the sample throughput of
``papers/000_3c734f3ffedcac15.txt`` Sec. III eq. 14-15, :mod:`spotwise.sim.sweep.partial`) on the
sweep's places (:class:`~spotwise.sim.sweep.places.Place`), and differ in what a (re)start costs:

* :mod:`~spotwise.sim.bounds.oracle` -- :func:`~spotwise.sim.bounds.oracle.hindsight_oracle`, the
  cheapest single-place schedule (no restart, no billing minimum, no move): a lower bound only for
  strategies that stay where they start; and :func:`~spotwise.sim.bounds.oracle.free_move_bound`,
  a lower bound for every strategy -- at every instant the cheapest place and node count per unit
  of progress, moving and resizing for free (a fractional multiple-choice knapsack, greedy over the
  convex-hull segments).
* :mod:`~spotwise.sim.bounds.restart` -- :func:`~spotwise.sim.bounds.restart.restart_bound`, the
  restart-aware lower bound: every node acquired spends the changeover delay ``d`` billed and not
  computing (Can't Be Late, NSDI'24, Sec. 3's model), bounded by Lagrangian relaxation (weak
  duality); no strategy, not even one that knows the future, pays less.
* :mod:`~spotwise.sim.bounds.hindsight` -- :func:`~spotwise.sim.bounds.hindsight.hindsight_schedule`,
  the best schedule hindsight can build on a grid when every (re)start costs what the sweep charges
  (exact dynamic programming, everything rounded against it): an *upper* bound on that clairvoyant
  optimum.

Between ``restart_bound`` and ``hindsight_schedule`` lies the cheapest schedule that pays its
restarts; a strategy's gap to them is the price of not knowing the future.
"""

from __future__ import annotations

from spotwise.sim.bounds.hindsight import hindsight_schedule
from spotwise.sim.bounds.oracle import free_move_bound, hindsight_oracle, place_oracle
from spotwise.sim.bounds.restart import restart_bound

__all__ = ["free_move_bound", "hindsight_oracle", "hindsight_schedule", "place_oracle", "restart_bound"]
