"""The records ``spotwise plan`` passes around (:mod:`spotwise.planner.plan`) and the planner's constants.

* :class:`Alternative` -- one strategy with its expected cost, time and error (or why it is infeasible)
  and its probability of meeting the deadline;
* :class:`Plan` -- the chosen strategy, the alternatives and the assumptions behind them;
* :class:`Inputs` -- the three models the theorems of ``papers/000_3c734f3ffedcac15.txt`` need
  (prices, runtime, error) and the job's numbers, with their provenance.

Costs are in USD, prices in $/h and runtimes in seconds (:data:`SECONDS_PER_HOUR`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from spotwise.market.billing import BillingPolicy
from spotwise.market.series import StepSeries
from spotwise.market.job_market import Market
from spotwise.planner.bids.prices import PriceModel
from spotwise.planner.plan import serverless as sv
from spotwise.theory.bounds import ErrorModel
from spotwise.theory.runtime import RuntimeModel

Objective = Literal["cost", "time"]
SECONDS_PER_HOUR = 3600.0
#: ``--pilot-steps`` default; the pilot may run at most ``max(DEFAULT_PILOT_STEPS, target.iterations)``
#: steps (a pilot longer than the job it calibrates is pointless), or ``MAX_PILOT_STEPS_NO_TARGET``
#: when the target is a loss.
DEFAULT_PILOT_STEPS = 200
MAX_PILOT_STEPS_NO_TARGET = 10_000
_ERR_TOL = 1e-9


@dataclass(frozen=True)
class Alternative:
    strategy: str
    bids: tuple[float, ...]
    workers: int
    iterations: int
    expected_cost: float | None
    expected_time_s: float | None
    expected_error: float | None
    feasible: bool
    method: str
    reason: str = ""
    notes: tuple[str, ...] = ()
    #: P(completion time <= deadline) under the price model (:mod:`spotwise.planner.estimate.deadline`); None if infeasible
    deadline_probability: float | None = None

    def __post_init__(self) -> None:
        if self.workers < 1 or self.iterations < 1:
            raise ValueError("an alternative needs workers >= 1 and iterations >= 1")
        if self.deadline_probability is not None and not 0.0 <= self.deadline_probability <= 1.0:
            raise ValueError(f"deadline_probability must lie in [0, 1], got {self.deadline_probability!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Plan:
    strategy: str
    bids: tuple[float, ...]
    workers: int
    iterations: int
    expected_cost: float
    expected_time_s: float
    expected_error: float
    objective: str
    deadline_s: float
    why: str
    alternatives: tuple[Alternative, ...]
    measured: tuple[str, ...]
    assumed: tuple[str, ...]
    price_source: str
    policies: tuple[dict[str, Any], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    deadline_probability: float | None = None

    def __post_init__(self) -> None:
        if self.deadline_probability is not None and not 0.0 <= self.deadline_probability <= 1.0:
            raise ValueError(f"deadline_probability must lie in [0, 1], got {self.deadline_probability!r}")

    def __repr__(self) -> str:
        p = "?" if self.deadline_probability is None else f"{self.deadline_probability:.2f}"
        bids = "" if not self.bids else f", bids {', '.join(f'{b:.4g}' for b in sorted(set(self.bids)))} $/h"
        return (f"Plan({self.strategy}: {self.workers} workers{bids}, {self.iterations} iterations, "
                f"${self.expected_cost:.4g} in {self.expected_time_s / 3600:.3g} h expected, P(deadline) {p}; "
                f"{len(self.alternatives)} alternatives)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bids"] = list(self.bids)
        d["alternatives"] = [a.to_dict() for a in self.alternatives]
        d["policies"] = list(self.policies)
        return d


@dataclass(frozen=True)
class Inputs:
    """The three models and the job's numbers, with their provenance."""

    prices: PriceModel | None
    fixed_price: float | None
    runtime: RuntimeModel
    error: ErrorModel
    n: int
    J: int
    eps: float
    deadline: float
    market: Market
    measured: tuple[str, ...]
    assumed: tuple[str, ...]
    price_source: str
    pilot_g_star: float = 0.0
    #: seconds for which the price stays put (epoch of :mod:`spotwise.planner.estimate.deadline`)
    epoch_s: float = 1.0
    #: the price history the model was built on (a trace before the job's start), for run lengths
    history: StepSeries | None = None
    #: the job's start as a UNIX time when planning on a trace
    plan_start: float | None = None
    error_source: str = "caller"
    pilot_problems: tuple[str, ...] = ()
    #: the serverless option's setup (None: not offered for this spec)
    serverless: sv.ServerlessSetup | None = None
    #: the spec's cluster kind; for "serverless" the VM fields above describe the comparison VM
    kind: str = "vm"
    #: which VM the VM rows of a serverless spec use, and why
    vm_note: str = ""
    #: the comparison VM's throughput for the family was derived (not in the catalog)
    vm_throughput_derived: bool = False
    #: the spec's own strategy priced on its market's churn (:mod:`spotwise.planner.estimate.churn`); None on a
    #: market without revocations
    churn: Any = None
    #: churn estimates by (workers, iterations), shared by copies of these inputs (``--plot``)
    churn_cache: dict[tuple[int, int], Any] = field(default_factory=dict)
    #: why the spec's own run cannot finish on its market (no capacity), if so
    churn_problem: str = ""

    @property
    def coordinator_price(self) -> float:
        return float(self.market.coordinator.on_demand_per_hour or 0.0)

    @property
    def on_demand_billing(self) -> BillingPolicy:
        """The Ledger's policy for on-demand instances: the market's, without the revocation rule."""
        p = self.market.billing
        return BillingPolicy(p.name, p.granularity_s, p.minimum_s, False, p.price_rule)
