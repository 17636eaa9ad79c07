"""The catalog's records: :class:`InstanceType`, :class:`FunctionPricing`, :class:`StoragePricing`.

Each record validates itself on construction (a bad entry raises :class:`~spotwise.errors.InputError`
naming the field and how to fix it).  :mod:`spotwise.market.catalog` holds the :class:`Catalog` that
reads, extends and looks them up; the units (relative throughput, $/h, $/GB-second) are described
there.  Function prices serve the MLLess mode (``papers/004_9dc2adb66dc8d26e.txt``); storage
egress the cost of moving checkpoints between clouds (``papers/003_c06237e546a4f08e.txt`` Sec. 3.2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from spotwise.errors import InputError

#: Columns a CSV (or YAML instance entry) may carry, besides ``throughput.<family>``.
INSTANCE_COLUMNS: tuple[str, ...] = (
    "name",
    "cloud",
    "region",
    "accelerator",
    "accelerator_count",
    "vcpus",
    "memory_gb",
    "on_demand_per_hour",
    "spot_per_hour",
    "source",
    "notes",
)
REQUIRED_INSTANCE_COLUMNS: tuple[str, ...] = ("name", "cloud")

_ADD_ENTRY_HINT = (
    "add your own in a YAML file listed under market.catalog in the spec (Catalog.extend in Python), e.g. "
    "'instances: [{name: my.type, cloud: aws, vcpus: 4, on_demand_per_hour: 0.2}]'"
)


# ---------------------------------------------------------------------------- validation helpers
def _check_name(value: object, fieldname: str, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{fieldname} must be a non-empty string, got {value!r}", f"give {fieldname} a value", where)
    return value.strip()


def _check_number(
    value: object,
    fieldname: str,
    where: str,
    *,
    optional: bool = False,
    positive: bool = False,
    integer: bool = False,
) -> float | int | None:
    """Validate a finite number ``>= 0`` (``> 0`` if ``positive``); ``None`` allowed if optional."""
    if value is None:
        if optional:
            return None
        raise InputError(f"{fieldname} is missing", f"give {fieldname} a number", where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{fieldname} must be a number, got {value!r}", f"write {fieldname} as a plain number", where)
    x = float(value)
    if not math.isfinite(x):
        raise InputError(f"{fieldname} must be finite, got {value!r}", f"write {fieldname} as a finite number", where)
    if x < 0 or (positive and x == 0):
        bound = "> 0" if positive else ">= 0"
        raise InputError(f"{fieldname} must be {bound}, got {value!r}", f"prices, counts and sizes are {bound}", where)
    if integer:
        if x != int(x):
            raise InputError(f"{fieldname} must be a whole number, got {value!r}", f"write {fieldname} as an integer", where)
        return int(x)
    return x


def _parse_scalar(text: str, fieldname: str, where: str) -> float | None:
    """A CSV cell -> number (empty -> None); a non-numeric cell is an :class:`InputError`."""
    t = text.strip()
    if t == "":
        return None
    t = t.lstrip("$").replace(",", "") if t.startswith("$") else t
    try:
        return float(t)
    except ValueError:
        raise InputError(f"{fieldname} must be a number, got {text!r}", f"write {fieldname} as a plain number (e.g. 0.9)", where) from None


# ---------------------------------------------------------------------------- records
@dataclass(frozen=True)
class InstanceType:
    """One VM size of one cloud.

    ``region`` ``""`` means the entry applies to any region.  Prices are USD per hour for one
    instance; ``spot_per_hour`` is set only where the provider publishes a *fixed* preemptible
    price (GCE, ``papers/002_a246f6afe29b4bfb.txt`` Table II); AWS and Azure spot prices vary
    and come from a price :class:`~spotwise.market.series.StepSeries` instead.  ``throughput``
    maps a model family to a relative throughput (see the module docstring for units).
    """

    name: str
    cloud: str
    region: str = ""
    accelerator: str = ""
    accelerator_count: int = 0
    vcpus: int = 0
    memory_gb: float | None = None
    on_demand_per_hour: float | None = None
    spot_per_hour: float | None = None
    throughput: Mapping[str, float] = field(default_factory=dict, hash=False)
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        name = _check_name(self.name, "name", "instance type")
        where = f"instance type {name!r}"
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "cloud", _check_name(self.cloud, "cloud", where).lower())
        for f in ("region", "accelerator", "source", "notes"):
            v = getattr(self, f)
            if v is None:
                v = ""
            if not isinstance(v, str):
                raise InputError(f"{f} must be a string, got {v!r}", f"quote {f} or leave it empty", where)
            object.__setattr__(self, f, v.strip())
        object.__setattr__(self, "accelerator_count", _check_number(self.accelerator_count, "accelerator_count", where, integer=True))
        object.__setattr__(self, "vcpus", _check_number(self.vcpus, "vcpus", where, integer=True))
        for f in ("memory_gb", "on_demand_per_hour", "spot_per_hour"):
            object.__setattr__(self, f, _check_number(getattr(self, f), f, where, optional=True))
        if self.accelerator and self.accelerator_count == 0:
            raise InputError(
                f"accelerator {self.accelerator!r} given with accelerator_count 0",
                "set accelerator_count to the number of accelerators, or leave accelerator empty",
                where,
            )
        if self.accelerator_count and not self.accelerator:
            raise InputError("accelerator_count > 0 but no accelerator named", "set accelerator (e.g. V100)", where)
        object.__setattr__(self, "throughput", _check_profile(self.throughput, f"{where} throughput"))

    @property
    def key(self) -> tuple[str, str, str]:
        """``(cloud, name, region)``: the identity used by :meth:`Catalog.merge`."""
        return (self.cloud, self.name, self.region)

    @property
    def label(self) -> str:
        """``cloud:name`` or ``cloud:region:name``."""
        return f"{self.cloud}:{self.region + ':' if self.region else ''}{self.name}"

    def price_per_hour(self, market: str) -> float:
        """The fixed $/h for ``market`` (``"on_demand"`` or ``"spot"``); an InputError if unknown."""
        if market == "on_demand":
            if self.on_demand_per_hour is None:
                raise InputError(
                    f"no on-demand price for {self.label}",
                    "add on_demand_per_hour to this entry in a user catalog, or pass a price explicitly",
                    "catalog",
                )
            return self.on_demand_per_hour
        if market == "spot":
            if self.spot_per_hour is None:
                raise InputError(
                    f"no fixed spot price for {self.label} (its spot price varies)",
                    "pass a spot price series (StepSeries of kind 'price') or a constant $/h instead",
                    "catalog",
                )
            return self.spot_per_hour
        raise InputError(f"unknown market {market!r}", "use 'spot' or 'on_demand'", "market")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["throughput"] = dict(self.throughput)
        return d


def _check_profile(profile: object, where: str) -> dict[str, float]:
    if profile is None:
        return {}
    if not isinstance(profile, Mapping):
        raise InputError(f"a throughput profile must map model family -> number, got {profile!r}", "write it as {family: number}", where)
    out: dict[str, float] = {}
    for fam, val in profile.items():
        fam_s = _check_name(fam, "model family", where).lower()
        out[fam_s] = float(_check_number(val, f"throughput[{fam_s}]", where, positive=True))  # type: ignore[arg-type]
    return out


@dataclass(frozen=True)
class FunctionPricing:
    """Serverless function prices (``papers/004_9dc2adb66dc8d26e.txt`` Table 2 for IBM).

    A call of ``gb`` GB lasting ``s`` seconds costs ``gb * billed(s) * per_gb_second +
    per_request``, where ``billed(s)`` rounds ``s`` up to a multiple of ``granularity_s``
    (0 = exact).  ``memory_gb_options`` lists the allowed sizes (the largest bounds a call).
    """

    name: str
    cloud: str
    per_gb_second: float
    per_request: float = 0.0
    memory_gb_options: tuple[float, ...] = ()
    granularity_s: float = 0.0
    region: str = ""
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        name = _check_name(self.name, "name", "function pricing")
        where = f"function pricing {name!r}"
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "cloud", _check_name(self.cloud, "cloud", where).lower())
        object.__setattr__(self, "per_gb_second", _check_number(self.per_gb_second, "per_gb_second", where))
        object.__setattr__(self, "per_request", _check_number(self.per_request, "per_request", where))
        object.__setattr__(self, "granularity_s", _check_number(self.granularity_s, "granularity_s", where))
        opts = self.memory_gb_options or ()
        if not isinstance(opts, (list, tuple)):
            raise InputError("memory_gb_options must be a list of sizes in GB", "write e.g. [0.5, 1, 2]", where)
        object.__setattr__(
            self, "memory_gb_options", tuple(sorted(float(_check_number(o, "memory_gb_options", where, positive=True)) for o in opts))  # type: ignore[arg-type]
        )
        for f in ("region", "source", "notes"):
            object.__setattr__(self, f, str(getattr(self, f) or "").strip())

    def call_cost(self, gb: float, seconds: float, n_requests: int = 1) -> float:
        """USD for ``n_requests`` calls of ``gb`` GB lasting ``seconds`` each."""
        where = f"function call ({self.name})"
        gb = float(_check_number(gb, "gb", where, positive=True))  # type: ignore[arg-type]
        seconds = float(_check_number(seconds, "seconds", where))  # type: ignore[arg-type]
        n = int(_check_number(n_requests, "n_requests", where, integer=True))  # type: ignore[arg-type]
        if self.memory_gb_options and gb > self.memory_gb_options[-1] + 1e-12:
            raise InputError(
                f"{gb} GB exceeds the largest function size of {self.name} ({self.memory_gb_options[-1]} GB)",
                f"use at most {self.memory_gb_options[-1]} GB per function",
                where,
            )
        billed = seconds
        if self.granularity_s > 0:
            billed = math.ceil(seconds / self.granularity_s - 1e-9) * self.granularity_s
        return n * (gb * billed * self.per_gb_second + self.per_request)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["memory_gb_options"] = list(self.memory_gb_options)
        return d


@dataclass(frozen=True)
class StoragePricing:
    """Object-store prices for checkpoints: $ per GB-month stored and $ per GB of egress."""

    name: str
    cloud: str
    per_gb_month: float
    egress_per_gb: float = 0.0
    region: str = ""
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        name = _check_name(self.name, "name", "storage pricing")
        where = f"storage pricing {name!r}"
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "cloud", _check_name(self.cloud, "cloud", where).lower())
        object.__setattr__(self, "per_gb_month", _check_number(self.per_gb_month, "per_gb_month", where))
        object.__setattr__(self, "egress_per_gb", _check_number(self.egress_per_gb, "egress_per_gb", where))
        for f in ("region", "source", "notes"):
            object.__setattr__(self, f, str(getattr(self, f) or "").strip())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
