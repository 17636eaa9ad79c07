"""The job as a person states it: ``cluster.accelerators: V100:1`` and ``target.hours: 24`` (issue 29 item 5).

A person says "24 hours of V100 training", not "86,400 iterations of a 9.6-throughput step".  Two
spec fields say it; :func:`resolve_hardware` turns them into the concrete fields every engine reads,
once, when the spec is loaded (``plan``, ``simulate``, the sweep, ``run`` and the emitted files then see
one job):

* ``cluster.accelerators: NAME[:COUNT]`` -- SkyPilot's notation (``COUNT`` defaults to 1).  The
  instance type is the cheapest on-demand type of the catalog with exactly ``COUNT`` of ``NAME``
  (in ``cluster.cloud`` when set).  With ``cluster.instance_type`` also set, that type must carry
  those accelerators.  Unknown names, or names absent from the chosen cloud, exit 2 with the valid ones.
* ``target.hours: H`` -- H hours of training on the cluster as specified (``workers`` of the instance
  type, at full strength): ``iterations x E[step time] = H h``, where ``E[step time]`` is the expected
  round time the sweep and the simulator use (``step_time_s / throughput`` through the straggler law
  and the synchronisation mode, plus the sync overhead).  With ``target.iterations`` also given, the
  step time is derived instead (``workload.step_time_s``); with both and a ``step_time_s`` that
  disagrees by more than 1 %, exit 2.

The spec (:mod:`spotwise.config`) calls :func:`resolve_hardware` while it loads, so this module
reads and fills a spec through :class:`HardwareSpec` -- the fields it needs -- and never imports it.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from typing import Any, Protocol

from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.market.catalog_records import InstanceType
from spotwise.spec.load import Duration


class _Cluster(Protocol):
    """What this module reads of ``cluster`` (:class:`spotwise.config.ClusterSpec`); it fills in the
    two attributes."""

    instance_type: str
    cloud: Any  # config's ``Cloud`` literal, or None

    @property
    def accelerators(self) -> str | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def pools(self) -> object: ...
    @property
    def region(self) -> str | None: ...
    @property
    def workers(self) -> int: ...
    @property
    def straggler(self) -> float: ...
    @property
    def sync(self) -> str: ...
    @property
    def sync_n(self) -> int | None: ...
    @property
    def sync_overhead_s(self) -> float: ...


class _Target(Protocol):
    iterations: int | None

    @property
    def hours(self) -> float | None: ...
    @property
    def samples(self) -> int | None: ...


class _Workload(Protocol):
    step_time_s: Duration

    @property
    def family(self) -> str: ...


class _Market(Protocol):
    @property
    def catalog(self) -> Sequence[str]: ...


class HardwareSpec(Protocol):
    """The parts of a job spec (a :class:`spotwise.config.JobSpec`) this module reads and fills in."""

    @property
    def cluster(self) -> _Cluster: ...
    @property
    def target(self) -> _Target: ...
    @property
    def workload(self) -> _Workload: ...
    @property
    def market(self) -> _Market: ...
    def expected_iterations(self) -> int | None: ...


def parse_accelerators(text: str) -> tuple[str, int]:
    """``"V100:1"`` -> ``("V100", 1)``; ``"V100"`` -> ``("V100", 1)``; InputError otherwise."""
    raw = str(text).strip()
    name, _, count = raw.partition(":")
    name = name.strip()
    try:
        n = int(count) if count.strip() else 1
    except ValueError:
        n = 0
    if not name or n < 1:
        raise InputError(f"{text!r} is not NAME:COUNT", "write e.g. V100:1 or A100:8 (SkyPilot's notation)",
                         "cluster.accelerators")
    return name, n


#: the clouds' region / zone spellings (AWS ``us-east-1``/``us-east-1b``, GCP ``us-central1``/``us-central1-a``,
#: Azure ``eastus``/``us_east``): a spec that names a region but no cloud means that region's cloud
_REGION_PATTERNS = (("aws", re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d+[a-z]?$")),
                    ("gcp", re.compile(r"^[a-z]+-[a-z]+\d+(-[a-z])?$")),
                    ("azure", re.compile(r"^([a-z]+|[a-z]+_[a-z]+\d?)$")))


def cloud_of_region(region: str | None) -> str | None:
    """The cloud whose naming ``region`` follows (``None``: no region, or a spelling none uses)."""
    if not region:
        return None
    return next((cloud for cloud, pat in _REGION_PATTERNS if pat.match(region.strip().lower())), None)


def pick_instance(catalog: Catalog, accelerators: str, cloud: str | None = None, region: str | None = None) -> InstanceType:
    """The cheapest on-demand instance type with exactly these accelerators (module docstring)."""
    name, count = parse_accelerators(accelerators)
    every = {it.accelerator for it in catalog.instances() if it.accelerator}
    match = next((a for a in every if a.lower() == name.lower()), None)
    if match is None:
        close = difflib.get_close_matches(name, sorted(every), n=3, cutoff=0.4)
        raise InputError(f"unknown accelerator {name!r}", (f"did you mean {', '.join(close)}? " if close else "")
                         + f"the catalog knows {', '.join(sorted(every))}", "cluster.accelerators")
    pool = [it for it in catalog.instances(cloud=cloud, accelerator=match)
            if not (region and it.region and it.region != region and not region.startswith(it.region))]
    if not pool:
        here = sorted({it.accelerator for it in catalog.instances(cloud=cloud) if it.accelerator})
        raise InputError(f"cloud {cloud!r} has no {match} instance in the catalog",
                         f"{cloud}'s accelerators: {', '.join(here) or 'none'}; or remove cluster.cloud", "cluster.accelerators")
    exact = [it for it in pool if it.accelerator_count == count and it.on_demand_per_hour is not None]
    if not exact:
        counts = sorted({it.accelerator_count for it in pool})
        raise InputError(f"no instance type carries {count} x {match}" + (f" in cloud {cloud!r}" if cloud else ""),
                         f"use one of the counts the catalog has: {', '.join(f'{match}:{c}' for c in counts)}",
                         "cluster.accelerators")
    return min(exact, key=lambda it: (float(it.on_demand_per_hour or 0.0), it.cloud, it.name))


def expected_step_s(spec: HardwareSpec, catalog: Catalog, step_time_s: float | None = None) -> float:
    """The expected round time of ``spec``'s cluster (the sweep's :func:`spotwise.sim.sweep.from_spec.job_work_s` per step)."""
    from spotwise.control.sync import make_sync
    from spotwise.theory.runtime import MiniBatchTimeLaw

    c = spec.cluster
    inst = catalog.instance(c.instance_type, cloud=c.cloud, region=c.region)
    m = float(spec.workload.step_time_s if step_time_s is None else step_time_s) / catalog.throughput(inst, spec.workload.family)
    law = MiniBatchTimeLaw(m, float(c.straggler))
    return float(make_sync(c.sync, c.sync_n).expected_round_s(law, int(c.workers), float(c.sync_overhead_s)))


def resolve_hardware(spec: HardwareSpec, catalog: Catalog | None = None) -> None:
    """Fill ``cluster.instance_type`` from ``cluster.accelerators`` and ``target.iterations`` (or
    ``workload.step_time_s``) from ``target.hours``, in place (module docstring).  A no-op for specs
    that use neither field, so it never loads a catalog they do not need."""
    c, t = spec.cluster, spec.target
    if c.accelerators is None and t.hours is None:
        return
    if c.kind == "serverless" or c.pools:
        raise InputError("cluster.accelerators and target.hours describe one VM type", "give instance types per pool "
                         "and target.iterations for pools or serverless jobs", "cluster.accelerators")
    if catalog is None:
        catalog = Catalog.default()
        for path in spec.market.catalog:
            catalog = catalog.extend(path)
    if c.accelerators is not None:
        picked = pick_instance(catalog, c.accelerators, c.cloud or cloud_of_region(c.region), c.region)
        if c.instance_type:
            have = catalog.instance(c.instance_type, cloud=c.cloud, region=c.region)
            name, count = parse_accelerators(c.accelerators)
            if have.accelerator.lower() != name.lower() or have.accelerator_count != count:
                raise InputError(f"cluster.instance_type {c.instance_type} carries "
                                 f"{have.accelerator_count} x {have.accelerator or 'no accelerator'}, not {c.accelerators}",
                                 f"remove one of them (e.g. instance_type {picked.name} has {c.accelerators})",
                                 "cluster.accelerators")
        else:
            c.instance_type = picked.name
            if c.cloud is None:
                c.cloud = picked.cloud
    if t.hours is not None:
        if not c.instance_type:
            raise InputError("target.hours needs the hardware it is measured on",
                             "set cluster.accelerators (e.g. V100:1) or cluster.instance_type", "target.hours")
        work = float(t.hours) * 3600.0
        if t.iterations is None and t.samples is None:
            t.iterations = max(1, int(round(work / expected_step_s(spec, catalog))))
        else:
            its = int(t.iterations) if t.iterations is not None else int(spec.expected_iterations() or 1)
            size = f"target.iterations {its}" if t.iterations is not None else f"target.samples ({its} steps)"
            # the round time is k * step_time_s + o (the straggler law scales with the mean; o: sync overhead)
            r1, r2 = expected_step_s(spec, catalog, 1.0), expected_step_s(spec, catalog, 2.0)
            k, o = r2 - r1, 2.0 * r1 - r2
            want = (work / its - o) / k
            if not want > 0:
                raise InputError(f"{its} steps cannot take only {t.hours:g} h: the synchronisation overhead alone "
                                 f"is {o:.3g} s a step", "raise target.hours or shorten the job", "target.hours")
            given = float(spec.workload.step_time_s)
            if math.isclose(given, want, rel_tol=1.0 / its):
                want = given  # iterations these hours became (a spec written back): within one step's rounding
            if not math.isclose(given, 1.0) and not math.isclose(given, want, rel_tol=0.01):
                raise InputError(f"target.hours {t.hours:g} h, {size} and workload.step_time_s "
                                 f"{given:g} s disagree ({its} steps take {its * (k * given + o) / 3600:.3g} h)",
                                 "give two of the three", "target.hours")
            spec.workload.step_time_s = want  # type: ignore[assignment]
