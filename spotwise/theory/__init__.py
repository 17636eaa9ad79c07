"""Analytic models of ``papers/000_3c734f3ffedcac15.txt`` (Zhang et al., ML on volatile instances).

Pure functions, no I/O:

* :mod:`.runtime` -- per-iteration runtime ``R(y)`` (eq. (14), (15), N-batch), exponential or empirical;
* :mod:`.workers` -- ``E[1/y]`` for binomial and uniform active workers (Lemma 3), the exponent ``chi``;
* :mod:`.bounds` -- error bounds (Thm 1, Thm 2, Remark 3), ``Q(eps)`` (eq. (22)), ``phi^-1`` (eq. (24));
* :mod:`.cost` -- expected completion time (Lemma 1) and cost (Lemma 2), heterogeneous bids, Sec. V.
"""

from spotwise.theory.bounds import (
    ErrorModel,
    error_bound,
    error_bound_capped,
    error_bound_capped_exact,
    error_bound_growth,
    error_bound_sequence,
    error_constraint_q,
    iterations_for_error,
    iterations_for_error_real,
)
from spotwise.theory.cost import (
    Expectation,
    bids_expectation,
    expected_cost_uniform,
    expected_cost_uniform_eq17,
    expected_time_uniform,
    preemptible_expectation,
    runtime_table,
    two_bid_expectation,
)
from spotwise.theory.runtime import (
    SYNC_MODES,
    RuntimeModel,
    SyncMode,
    expected_max_exponential,
    expected_order_stat_exponential,
    harmonic,
)
from spotwise.theory.workers import (
    active_pmf_binomial,
    binomial_d_chi_one,
    inv_active_binomial,
    inv_active_uniform,
    inv_plus_one_binomial,
    smallest_d,
)

__all__ = [
    "ErrorModel", "error_bound", "error_bound_capped", "error_bound_capped_exact", "error_bound_growth",
    "error_bound_sequence", "error_constraint_q", "iterations_for_error", "iterations_for_error_real",
    "Expectation", "bids_expectation", "expected_cost_uniform", "expected_cost_uniform_eq17", "expected_time_uniform",
    "preemptible_expectation", "runtime_table", "two_bid_expectation",
    "SYNC_MODES", "RuntimeModel", "SyncMode", "expected_max_exponential", "expected_order_stat_exponential", "harmonic",
    "active_pmf_binomial", "binomial_d_chi_one", "inv_active_binomial", "inv_active_uniform", "inv_plus_one_binomial",
    "smallest_d",
]
