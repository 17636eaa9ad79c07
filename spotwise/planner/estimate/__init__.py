"""What a plan is expected to cost and take, how likely it meets its deadline, and the models those numbers
rest on (``papers/000_3c734f3ffedcac15.txt`` Sec. III: Thm 1, eq. (10), eq. (14)-(15); Sec. IV: Lemma 1-2).

The bid planners (:mod:`spotwise.planner.bids`) and ``spotwise plan`` (:mod:`spotwise.planner.plan`)
compare strategies by these estimates:

* :mod:`~spotwise.planner.estimate.models` -- a spec's price model ``F(p)`` (synthetic, or a trace's
  time-weighted CDF) and its per-iteration runtime law (eq. (14)-(15));
* :mod:`~spotwise.planner.estimate.pilot` -- the constants of the Thm 1 error bound (eq. (10)) fitted to a
  pilot run's losses, with its runtime half in :mod:`~spotwise.planner.estimate.runtime_fit` (a shifted
  exponential or empirical law fitted to step durations);
* :mod:`~spotwise.planner.estimate.churn` -- expected time and cost on a market with churn, priced like the
  run (Lemma 2 and Thm 3-7's closed forms assume a bid group up or down together; issue 18);
* :mod:`~spotwise.planner.estimate.deadline` -- P(deadline) of a plan: the distribution around Lemma 1's
  ``E[tau]``, which Thm 3 sets equal to the deadline;
* :mod:`~spotwise.planner.estimate.pool_odds` -- P(deadline) of a pool mix, sampled from each pool's
  revocation model (issue 21).

Nothing here imports the plan (:mod:`spotwise.planner.plan`): the plan is built on these estimates.
"""
