"""Trace sweeps: what each strategy would have cost, how long it would have taken and whether it
would have met the deadline, had the job started at each of many times on real price and
availability traces (``spotwise simulate SPEC --trace ...``).

A sweep decides, per strategy, the distribution over start times of a job's cost, its time and its
chance of meeting the deadline, and how far each is from the bounds of
:mod:`spotwise.sim.bounds` and from on-demand.  Its parts:

* :mod:`~spotwise.sim.sweep.engine` -- the event-driven engine: :func:`~spotwise.sim.sweep.engine.sweep`
  runs every strategy from every start and summarises them (:func:`~spotwise.sim.sweep.engine.run_window`,
  :func:`~spotwise.sim.sweep.engine.window_starts`, the size checks);
* :mod:`~spotwise.sim.sweep.window` -- one window's node-based run (one job, strategy and start);
* :mod:`~spotwise.sim.sweep.places` -- the places a job can run at (zone, instance type: prices,
  capacity, speed), built from the traces;
* :mod:`~spotwise.sim.sweep.partial` -- partial capacity: the rate of ``k`` of ``N`` nodes;
* :mod:`~spotwise.sim.sweep.records` -- the records the engine and the bounds share (the job, the
  strategies, the results);
* :mod:`~spotwise.sim.sweep.from_spec` -- a job spec and trace files to the sweep's jobs;
* :mod:`~spotwise.sim.sweep.pools` -- sweeps of a job of several pools, each at its own place.

Re-exported here: the records and the places, which importers outside the sweep use most.  The
engine's entry :func:`~spotwise.sim.sweep.engine.sweep` is not: the engine imports the bounds,
which import the records and places of this package, so importing it here would close an import
circle -- import it from :mod:`spotwise.sim.sweep.engine`.
"""

from __future__ import annotations

from spotwise.sim.sweep.places import Place, build_places
from spotwise.sim.sweep.records import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    Strategy,
    SweepJob,
    SweepResult,
    WindowResult,
    parse_strategies,
    strategy_names,
)

__all__ = ["DEFAULT_STRATEGIES", "STRATEGIES", "Place", "Strategy", "SweepJob", "SweepResult", "WindowResult",
           "build_places", "parse_strategies", "strategy_names"]
