"""The inputs and the answer of the allocation LPs (paper 003 Sec. 4, "Representing allocations").

:class:`AllocationProblem` (jobs x instance types: throughputs, prices, quotas), :class:`SLO`,
:func:`throughput_matrix` and :class:`Allocation` with its ``_result`` builder; the policies that
solve them live in :mod:`spotwise.planner.placement.lp`, which re-exports these names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.catalog import Catalog, InstanceType

#: Numerical slack used when checking a solver's answer against the constraints.
TOL = 1e-7

# ------------------------------------------------------------------------------------ inputs
def _as_matrix(a: object, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=float)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numeric, got {a!r}", f"give {name} as numbers", "allocation problem") from None
    if shape is not None and arr.shape != shape:
        raise InputError(f"{name} has shape {arr.shape}, expected {shape}", "give one value per job / instance type", "allocation problem")
    return arr


@dataclass(frozen=True, eq=False)
class AllocationProblem:
    """Literal inputs of every Sec. 4 policy (paper 003 Sec. 4, "Representing allocations").

    ``throughput[m, j]``: work units per hour of job ``jobs[m]`` on one instance of
    ``instance_types[j]`` (0 = cannot run there); ``prices[j]``: $ per hour of one instance;
    ``quotas[j]``: the most instances of type ``j`` usable at once (``inf`` = unlimited).
    ``accelerators`` (optional, one per type) only improves error messages ("quota of 4 V100").
    ``unit`` names the work unit in messages (e.g. ``"iterations"``).

    ``gang=True`` (issue 21, a data-parallel job on several instances at once; not in paper 003,
    whose Sec. 4.1 jobs each use at most ONE instance at a time): ``X[m, j]`` is the *number of
    instances* of type ``j`` job ``m`` uses at once, ``0 <= X[m, j]`` with ``sum_m X[m, j] <=
    quota[j]`` and WITHOUT the row constraint ``sum_j X[m, j] <= 1``.  ``throughput_T`` and
    ``cost`` keep the paper's formulas (throughputs add over the instances a job uses), so every
    Sec. 4.2/4.3 policy applies unchanged.  Every quota must then be finite (else the
    throughput LPs are unbounded).
    """

    jobs: tuple[str, ...]
    instance_types: tuple[str, ...]
    throughput: np.ndarray
    prices: np.ndarray
    quotas: np.ndarray | None = None
    accelerators: tuple[str, ...] | None = None
    unit: str = "units"
    gang: bool = False

    def __post_init__(self) -> None:
        where = "allocation problem"
        jobs = tuple(str(j) for j in self.jobs)
        types = tuple(str(t) for t in self.instance_types)
        if not jobs:
            raise InputError("no jobs given", "give at least one job", where)
        if not types:
            raise InputError("no instance types given", "give at least one instance type", where)
        for label, names in (("job", jobs), ("instance type", types)):
            if len(set(names)) != len(names):
                dup = next(n for n in names if names.count(n) > 1)
                raise InputError(f"{label} {dup!r} appears twice", f"give each {label} a unique name", where)
        m, n = len(jobs), len(types)
        T = _as_matrix(self.throughput, "throughput", (m, n))
        c = _as_matrix(self.prices, "prices", (n,))
        q = np.full(n, np.inf) if self.quotas is None else _as_matrix(self.quotas, "quotas", (n,))
        if not np.all(np.isfinite(T)) or np.any(T < 0):
            raise InputError("throughputs must be finite and >= 0", "use 0 where a job cannot run on a type", where)
        if not np.all(np.isfinite(c)) or np.any(c <= 0):
            bad = types[int(np.argmax(~np.isfinite(c) | (c <= 0)))]
            raise InputError(f"price of {bad!r} must be a finite number > 0, got {c.tolist()}", "give every instance type a positive $/h", where)
        if np.any(np.isnan(q)) or np.any(q < 0):
            raise InputError(f"quotas must be >= 0 (inf = unlimited), got {q.tolist()}", "give each type a non-negative instance count", where)
        if self.gang and not np.all(np.isfinite(q)):
            raise InputError("a gang allocation (X = instances used at once) needs a finite quota per type",
                             "give every instance type a quota (the most instances the job may use)", where)
        for m_i, job in enumerate(jobs):
            if not np.any(T[m_i] > 0):
                raise InputError(f"job {job!r} has zero throughput on every instance type", "give it a positive throughput on at least one type", where)
        acc = self.accelerators
        if acc is not None:
            acc = tuple(str(a) for a in acc)
            if len(acc) != n:
                raise InputError(f"accelerators has {len(acc)} entries, expected {n}", "give one per instance type", where)
        if not isinstance(self.unit, str) or not self.unit:
            raise InputError("unit must be a non-empty string", "e.g. 'iterations'", where)
        for k, v in (("jobs", jobs), ("instance_types", types), ("throughput", T), ("prices", c), ("quotas", q), ("accelerators", acc)):
            object.__setattr__(self, k, v)
        for arr in (T, c, q):
            arr.setflags(write=False)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.jobs), len(self.instance_types))

    def job_index(self, job: str) -> int:
        try:
            return self.jobs.index(job)
        except ValueError:
            raise InputError(f"unknown job {job!r}", f"known jobs: {list(self.jobs)}", "allocation problem") from None

    def type_label(self, j: int) -> str:
        """``'V100'`` style name of type ``j`` for messages (accelerator if known, else the type)."""
        if self.accelerators and self.accelerators[j]:
            return f"{self.instance_types[j]} ({self.accelerators[j]})" if self.accelerators[j] != self.instance_types[j] else self.instance_types[j]
        return self.instance_types[j]

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        jobs: Mapping[str, str],
        instances: Sequence[str | InstanceType],
        *,
        prices: Mapping[str, float] | None = None,
        quotas: Mapping[str, float] | None = None,
        market: Literal["on_demand", "spot"] = "on_demand",
        throughputs: Mapping[tuple[str, str], float] | None = None,
        unit: str = "K80-equivalent units",
    ) -> "AllocationProblem":
        """Build ``T`` from the catalog's throughput profiles (paper 003 Table 1).

        ``jobs`` maps job name -> model family (``transformer``, ``a3c``, ``cyclegan``,
        ``resnet18``, ``resnet50``, ...).  ``T[m, j] = catalog.throughput(instance, family)``:
        relative throughput over one K80 (Table 1), so a unit is "one K80-hour of that model's
        training"; ``throughputs`` overrides entries with measured values keyed by
        ``(job, instance name)`` (then use your own ``unit``).  Prices default to the catalog's
        fixed ``market`` price; ``prices`` overrides per instance name (e.g. a current spot
        price from a trace).  Quotas default to unlimited.
        """
        its = [it if isinstance(it, InstanceType) else catalog.instance(it) for it in instances]
        names = [it.name for it in its]
        T = throughput_matrix(catalog, jobs, its)
        if throughputs:
            for (job, inst), val in throughputs.items():
                if job not in jobs or inst not in names:
                    raise InputError(f"measured throughput for unknown ({job!r}, {inst!r})", f"jobs: {list(jobs)}, instances: {names}", "allocation problem")
                T[list(jobs).index(job), names.index(inst)] = float(val)
        prices = dict(prices or {})
        unknown = set(prices) - set(names)
        if unknown:
            raise InputError(f"prices given for unknown instance type(s) {sorted(unknown)}", f"instances: {names}", "allocation problem")
        c = [float(prices[it.name]) if it.name in prices else it.price_per_hour(market) for it in its]
        quotas = dict(quotas or {})
        unknown = set(quotas) - set(names)
        if unknown:
            raise InputError(f"quotas given for unknown instance type(s) {sorted(unknown)}", f"instances: {names}", "allocation problem")
        q = [float(quotas.get(it.name, math.inf)) for it in its]
        acc = tuple(f"{it.accelerator_count}x{it.accelerator}" if it.accelerator_count > 1 else it.accelerator for it in its)
        return cls(tuple(jobs), tuple(names), T, np.asarray(c), np.asarray(q), acc, unit)


def throughput_matrix(catalog: Catalog, jobs: Mapping[str, str], instances: Sequence[str | InstanceType]) -> np.ndarray:
    """``T[m, j]`` = relative throughput of job ``m``'s family on instance ``j`` (paper 003 Table 1).

    A family the catalog does not know for an instance gives 0 (the job cannot run there) only
    if it is known on *some* instance; a family known nowhere is an :class:`InputError`.
    """
    its = [it if isinstance(it, InstanceType) else catalog.instance(it) for it in instances]
    T = np.zeros((len(jobs), len(its)))
    for m, (job, fam) in enumerate(jobs.items()):
        if fam.lower() not in catalog.families():
            raise InputError(f"job {job!r}: unknown model family {fam!r}", f"known families: {catalog.families()}", "allocation problem")
        for j, it in enumerate(its):
            try:
                T[m, j] = catalog.throughput(it, fam)
            except InputError:
                T[m, j] = 0.0
    return T


@dataclass(frozen=True)
class SLO:
    """A job's service-level objective (paper 003 Sec. 4.3): ``work`` units within ``deadline_h`` hours."""

    work: float
    deadline_h: float

    def __post_init__(self) -> None:
        for name in ("work", "deadline_h"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or math.isnan(v):
                raise InputError(f"SLO {name} must be a number > 0, got {v!r}", f"give {name} as a positive number (deadline_h may be inf)", "SLO")
        if not math.isfinite(self.work):
            raise InputError("SLO work must be finite", "give the remaining work in units", "SLO")
        object.__setattr__(self, "work", float(self.work))
        object.__setattr__(self, "deadline_h", float(self.deadline_h))

    @property
    def rate(self) -> float:
        """The throughput the job needs: ``work / deadline_h`` (0 for an infinite deadline)."""
        return self.work / self.deadline_h


# ------------------------------------------------------------------------------------ result
@dataclass(frozen=True, eq=False)
class Allocation:
    """The answer of a policy: the allocation matrix and what it implies.

    ``throughput_per_job[m] = sum_j T[m, j] X[m, j]``; ``cost_per_hour_per_job[m] = sum_j c[j]
    X[m, j]``; ``cost_per_hour`` their sum; ``instances_in_use[j] = sum_m X[m, j]`` (<= quota).
    ``makespan_h`` and ``total_cost`` are set by policies that know the work to be done.
    """

    policy: str
    jobs: tuple[str, ...]
    instance_types: tuple[str, ...]
    X: np.ndarray
    objective: float
    throughput_per_job: np.ndarray
    cost_per_hour_per_job: np.ndarray
    cost_per_hour: float
    instances_in_use: np.ndarray
    status: str
    makespan_h: float | None = None
    total_cost: float | None = None
    notes: tuple[str, ...] = field(default=())
    #: ``X`` counts instances used at once (:attr:`AllocationProblem.gang`): no row-sum limit
    gang: bool = False

    def __post_init__(self) -> None:
        X = np.asarray(self.X, dtype=float)
        if X.shape != (len(self.jobs), len(self.instance_types)):
            raise ValueError(f"X has shape {X.shape}, expected {(len(self.jobs), len(self.instance_types))}")
        if np.any(X < -TOL) or (not self.gang and np.any(X.sum(axis=1) > 1 + 1e-6)):
            raise ValueError("X must be >= 0 with row sums <= 1")
        object.__setattr__(self, "X", X)

    def fraction(self, job: str, instance_type: str) -> float:
        return float(self.X[self.jobs.index(job), self.instance_types.index(instance_type)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "status": self.status,
            "objective": self.objective,
            "cost_per_hour": self.cost_per_hour,
            "makespan_h": self.makespan_h,
            "total_cost": self.total_cost,
            "allocation": {job: {t: float(self.X[m, j]) for j, t in enumerate(self.instance_types) if self.X[m, j] > 0}
                           for m, job in enumerate(self.jobs)},
            "throughput_per_job": dict(zip(self.jobs, map(float, self.throughput_per_job))),
            "notes": list(self.notes),
        }


def _result(problem: AllocationProblem, policy: str, X: np.ndarray, objective: float, status: str, **kw: Any) -> Allocation:
    if problem.gang:  # instance counts: clip solver round-off to [0, quota]
        X = np.clip(np.asarray(X, dtype=float), 0.0, problem.quotas[None, :])
        X[X < 1e-10] = 0.0
        kw.setdefault("gang", True)
    else:
        X = np.clip(np.asarray(X, dtype=float), 0.0, 1.0)
        X[X < 1e-10] = 0.0
        rows = X.sum(axis=1)
        over = rows > 1.0
        if np.any(over):  # solver round-off only (checked below with a tolerance)
            X[over] /= rows[over, None]
    tput = (problem.throughput * X).sum(axis=1)
    cjob = X @ problem.prices
    return Allocation(policy, problem.jobs, problem.instance_types, X, float(objective), tput, cjob, float(cjob.sum()),
                      X.sum(axis=0), status, **kw)
