"""``spotwise plan``: the plan of one job and its report -- which strategy, where, with how many workers, and
why (``papers/000_3c734f3ffedcac15.txt`` Sec. VI-A's strategies priced by Thm 3-7; the serverless option of
``papers/004_9dc2adb66dc8d26e.txt``; pool mixes by ``papers/003_c06237e546a4f08e.txt`` Sec. 4.3's LP).

* :mod:`~spotwise.planner.plan.compose` -- :func:`make_plan` (compare the strategies, pick one), and the plan
  written into a spec (:func:`apply_plan`, :func:`write_planned_spec`) or plotted (:func:`plot_cost_vs_deadline`);
* :mod:`~spotwise.planner.plan.inputs` -- :func:`gather_inputs`: the price, runtime and error models
  (:mod:`spotwise.planner.estimate`) and the job's numbers;
* :mod:`~spotwise.planner.plan.records` -- :class:`Alternative`, :class:`Plan`, :class:`Inputs` and the
  planner's constants;
* :mod:`~spotwise.planner.plan.rounds` -- the spec's job step by step: sync mode, mean step time
  (eq. (14)-(15)), Corollary 2's iterations and its churn estimate;
* :mod:`~spotwise.planner.plan.strategies` -- every strategy's row, priced like a run, and :func:`compare`;
* :mod:`~spotwise.planner.plan.serverless` -- the serverless option (paper 004, MLLess);
* :mod:`~spotwise.planner.plan.pools` -- a spec with ``cluster.pools``: how many workers (and bids) from
  each pool (paper 003 Sec. 4.3's LP, rounded by exact evaluation);
* :mod:`~spotwise.planner.plan.place` -- the plan at the trace placement's place and its recommendation;
  :mod:`~spotwise.planner.plan.recommend` -- the best *backtested* strategy; and
  :mod:`~spotwise.planner.plan.constraints` -- which constraint binds when no strategy fits.

This package re-exports the entry points below.
"""

from spotwise.planner.estimate.models import price_model, runtime_model
from spotwise.planner.plan.compose import (
    apply_plan,
    cost_vs_deadline,
    dynamic_policy_params,
    make_plan,
    plot_cost_vs_deadline,
)
from spotwise.planner.plan.planned_spec import write_planned_spec
from spotwise.planner.plan.inputs import error_model_for, gather_inputs
from spotwise.planner.plan.records import Alternative, Inputs, Plan
from spotwise.planner.plan.strategies import compare

__all__ = [
    "Alternative",
    "Inputs",
    "Plan",
    "apply_plan",
    "compare",
    "cost_vs_deadline",
    "dynamic_policy_params",
    "error_model_for",
    "gather_inputs",
    "make_plan",
    "plot_cost_vs_deadline",
    "price_model",
    "runtime_model",
    "write_planned_spec",
]
