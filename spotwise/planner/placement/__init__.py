"""Where to run: allocation LPs over instance types and placement on spot price traces
(``papers/003_c06237e546a4f08e.txt`` Sec. 3.1-3.2 and Sec. 4).

* :mod:`~spotwise.planner.placement.lp` -- the allocation policies of Sec. 4 as linear programs (maximum
  throughput, minimum cost, SLOs, makespan within a budget) over an allocation matrix ``X``, with their
  inputs and answer in :mod:`~spotwise.planner.placement.problem`;
* :mod:`~spotwise.planner.placement.over_time` -- one job placed over time on real price traces: Sec. 3.2.3 /
  Figure 5's cumulative strategies (instance type by cost-normalised throughput, Sec. 3.1; multi-GPU,
  multi-cloud and dynamic moves with their data-movement cost, Sec. 3.2.1);
* :mod:`~spotwise.planner.placement.history` -- ``spotwise plan --trace``: the zone and instance type
  chosen from price history before the job's start, and how often that choice met the deadline in the past.

Nothing here imports the plan (:mod:`spotwise.planner.plan`); the plan calls these.
"""
