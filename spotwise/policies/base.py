"""The policy interface (DESIGN.md, "Policies").

A policy is a pure function of an :class:`Observation` (what the executor knows at a step
boundary) to a list of :class:`Decision` values.  Decisions are plain frozen dataclasses, each with
a human-readable ``reason`` that the executor writes into the event log (``decision`` events).
Policies never act and never know whether they run in the simulator, the emulated runtime or on
a real cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar


#: the markets a job's workers can run on
MARKETS = ("spot", "on-demand")


@dataclass(frozen=True)
class PlaceQuote:
    """One place a job could run now: ``zone`` (or region), ``instance`` type, the spot ``price``
    ($/h per worker) in force, the job's ``speed`` there relative to the place it runs on now
    (catalog throughput ratio; 1.0 for the same type), whether spot capacity can be had
    (``available``: price <= bid, or the availability trace), and ``region`` (a move across
    regions also ships the checkpoint).  Where the executor has the place's capacity history
    (issue 23), ``up_s`` says for how long the place has been in its current state up to now
    (``> 0``: seconds with capacity, ``< 0``: seconds without) and ``availability`` the share of
    the last ``history`` seconds it had capacity -- both from the past only, never the future."""

    zone: str
    instance: str
    price: float
    speed: float = 1.0
    available: bool = True
    region: str = ""
    up_s: float | None = None
    availability: float | None = None
    #: how many spot nodes the place can give the job now (issue 31; ``None``: unknown)
    nodes: int | None = None

    def __post_init__(self) -> None:
        if not self.price >= 0 or not self.speed > 0:
            raise ValueError("PlaceQuote.price must be >= 0 and .speed > 0")

    @property
    def unit_price(self) -> float:
        """$/h per hour of progress at the current place's speed."""
        return self.price / self.speed


def node_rate(nodes: int, workers: int, min_workers: int, rates: tuple[float, ...] | None) -> float:
    """Progress of ``nodes`` of a job's ``workers`` nodes relative to all of them (issue 31): 0 below
    ``min_workers`` (the job waits), ``rates[nodes - 1]`` (or ``nodes / workers``) up to ``workers``,
    never more than full width beyond.  The one rule the sweep's job and the policies' observation share."""
    n = min(int(nodes), int(workers))
    if n < min_workers or n <= 0:
        return 0.0
    if rates is not None and len(rates) == workers:
        return float(rates[n - 1])
    return n / workers


@dataclass(frozen=True)
class Observation:
    """What an executor knows when a step has been committed (or when membership changed).

    ``step`` is the number of committed steps so far; ``t`` virtual seconds since the start;
    ``active`` the workers currently able to compute; ``provisioned`` those requested (active or
    waiting for capacity); ``base_lr`` the spec's learning rate, meant for ``reference_workers``
    active workers; ``lr`` the rate in force.
    """

    step: int
    t: float
    active: int
    provisioned: int
    max_workers: int
    reference_workers: int
    base_lr: float
    lr: float
    sync: str
    sync_n: int | None = None
    loss: float | None = None
    price: float | None = None
    bids: tuple[float, ...] = ()
    cost_so_far: float = 0.0
    deadline_s: float | None = None
    budget_usd: float | None = None
    target_iterations: int | None = None
    #: what the workers run on now: ``"spot"`` or ``"on-demand"`` (see :class:`SwitchMarket`)
    market: str = "spot"
    #: whether spot capacity can be had now (price <= bid, or the availability trace says so);
    #: ``None`` where the executor cannot tell
    spot_available: bool | None = None
    #: mean seconds per committed step on the capacity in force (the mini-batch time law); ``None``
    #: where unknown.  With ``target_iterations`` it gives the compute time still needed.
    step_s: float | None = None
    #: seconds lost by a change of market or place (cold start + restore), Can't Be Late's ``d``
    restart_s: float = 0.0
    #: where the job runs: ``(zone or region, instance type)``; ``places`` quotes every place it
    #: could run now (the current one included), as known at ``t`` -- no future prices
    place: tuple[str, str] | None = None
    places: tuple["PlaceQuote", ...] = ()
    #: $/h of one on-demand worker of the current instance type
    on_demand_price: float | None = None
    #: the longest the executor may go before it consults the policies again (seconds); a guard
    #: that must act before a point in time adds it to its margin
    next_decision_s: float = 0.0
    #: workers held that are (re)starting: billed, not yet computing (a restart in progress)
    warming: int = 0
    #: partial capacity (issue 31): how many spot nodes the current place can give now (``None``:
    #: the executor cannot tell), the on-demand nodes held beside the spot ones (:class:`TopUp`),
    #: and the fewest nodes the job trains on (``cluster.min_workers``)
    spot_nodes: int | None = None
    on_demand_nodes: int = 0
    #: whether those on-demand nodes are kept when spot returns (:attr:`TopUp.keep`)
    on_demand_kept: bool = False
    min_workers: int = 1
    #: progress of ``1..max_workers`` nodes relative to ``max_workers`` (paper 000 eq. 14-15's
    #: sample throughput); empty: linear, ``n / max_workers``
    node_rates: tuple[float, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.step < 0 or self.t < 0:
            raise ValueError("Observation.step and .t must be >= 0")
        if self.active < 0 or self.provisioned < 0 or self.active > max(self.provisioned, self.active):
            raise ValueError("Observation.active and .provisioned must be >= 0")
        if self.max_workers < 1 or self.reference_workers < 1:
            raise ValueError("Observation.max_workers and .reference_workers must be >= 1")
        if not self.base_lr > 0 or not self.lr >= 0:
            raise ValueError("Observation.base_lr must be > 0 and .lr >= 0")
        if self.market not in MARKETS:
            raise ValueError(f"Observation.market must be one of {MARKETS}, got {self.market!r}")
        if self.step_s is not None and not self.step_s > 0:
            raise ValueError("Observation.step_s must be > 0")
        if not self.restart_s >= 0 or not self.next_decision_s >= 0:
            raise ValueError("Observation.restart_s and .next_decision_s must be >= 0")
        if self.warming < 0 or self.on_demand_nodes < 0 or (self.spot_nodes is not None and self.spot_nodes < 0):
            raise ValueError("Observation.warming, .spot_nodes and .on_demand_nodes must be >= 0")
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError("Observation.min_workers must lie in [1, max_workers]")

    @property
    def work_left_s(self) -> float | None:
        """Compute seconds still needed on the capacity in force (``None`` if unknown)."""
        if self.step_s is None or self.target_iterations is None:
            return None
        return max(0, self.target_iterations - self.step) * self.step_s

    def rate(self, nodes: int) -> float:
        """Progress of ``nodes`` nodes relative to ``max_workers`` (0 below ``min_workers``)."""
        return node_rate(nodes, self.max_workers, self.min_workers, self.node_rates or None)

    @property
    def time_left_s(self) -> float | None:
        return None if self.deadline_s is None else self.deadline_s - self.t


@dataclass(frozen=True)
class Decision:
    """Base of every decision; ``reason`` lands in the event log."""

    reason: str

    def describe(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "reason"}
        inner = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        return f"{type(self).__name__}({inner})"


@dataclass(frozen=True)
class Noop(Decision):
    reason: str = "nothing to change"


@dataclass(frozen=True)
class Resize(Decision):
    """Provision ``workers`` workers in total (the executor requests or releases the difference)."""

    workers: int = 1

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError("Resize.workers must be >= 0")


@dataclass(frozen=True)
class Rebid(Decision):
    """Replace the bids ($/h), one per provisioned worker."""

    bids: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if any(not b > 0 for b in self.bids):
            raise ValueError("Rebid.bids must be positive prices")


@dataclass(frozen=True)
class SwitchSync(Decision):
    """Change the synchronisation mode (``full``, ``n-sync``, ``n-batch``, ``async``) and its N."""

    sync: str = "full"
    sync_n: int | None = None


@dataclass(frozen=True)
class SetLearningRate(Decision):
    lr: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError("SetLearningRate.lr must be > 0")


@dataclass(frozen=True)
class Migrate(Decision):
    """Move the job to another instance type / region / cloud (checkpoint, release, restart)."""

    instance_type: str = ""
    region: str | None = None
    cloud: str | None = None


@dataclass(frozen=True)
class SwitchMarket(Decision):
    """Run the workers on ``market`` (``"spot"`` or ``"on-demand"``) from now on.

    The executor checkpoints, releases the old capacity, acquires the new one and counts the
    restart (Can't Be Late, NSDI'24: on-demand as the deadline's backup).  ``"idle"`` is not a
    market: to wait for cheaper capacity a policy resizes to zero workers.
    """

    market: str = "spot"

    def __post_init__(self) -> None:
        if self.market not in MARKETS:
            raise ValueError(f"SwitchMarket.market must be one of {MARKETS}, got {self.market!r}")


@dataclass(frozen=True)
class TopUp(Decision):
    """Hold ``on_demand`` on-demand nodes beside the spot nodes the place gives (issue 31: paper
    000's mixed fleets, Uniform Progress generalised from "spot or on-demand" to "how many of
    each").  The executor never holds more nodes than the job's workers: the on-demand nodes fill
    what spot does not give, so ``on_demand = workers`` means "as many as needed to run at full width".
    An on-demand node is released when a spot node that replaces it is ready, unless ``keep``:
    then the on-demand nodes stay and spot fills only what they leave (past a deadline's safety
    net, where the restart of a replacing spot node that is revoked again risks the deadline)."""

    on_demand: int = 0
    keep: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.on_demand, bool) or not isinstance(self.on_demand, int) or self.on_demand < 0:
            raise ValueError("TopUp.on_demand must be an integer >= 0")


@dataclass(frozen=True)
class Checkpoint(Decision):
    """Write a checkpoint now."""


class Policy(ABC):
    """``decide(observation) -> list[Decision]``; must be pure (no side effects, no hidden state
    beyond constructor parameters), so that replaying observations replays decisions."""

    name: ClassVar[str]
    #: True for policies that only make sense on a spot market (they change bids); an on-demand
    #: baseline of the same job runs without them (:mod:`spotwise.control.baseline`)
    spot_only: ClassVar[bool] = False
    #: True for policies that read :attr:`Observation.places` (quoting every place costs the
    #: executor a price lookup each, so it fills them only for policies that ask)
    uses_places: ClassVar[bool] = False

    @abstractmethod
    def decide(self, obs: Observation) -> list[Decision]:
        """The decisions to act on now (an empty list means nothing to do)."""


def consult(policies: list[Policy], observe: Callable[[], Observation], act: Callable[[Policy, Decision], None]) -> None:
    """Ask every policy once about one observation (built only if there is a policy to ask) and hand
    each decision to the executor's ``act(policy, decision)``: the loop every executor shares."""
    if not policies:
        return
    obs = observe()
    for policy in policies:
        for d in policy.decide(obs):
            act(policy, d)
