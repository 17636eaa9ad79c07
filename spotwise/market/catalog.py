"""The instance catalog: what capacity exists, what it costs, and how fast it trains.

A :class:`Catalog` holds

* :class:`InstanceType` -- a VM size of one cloud (optionally one region) with its accelerator,
  vCPUs, memory, on-demand $/h, fixed preemptible $/h where the cloud publishes one (GCE), and a
  *throughput profile*: relative training throughput per model family;
* :class:`FunctionPricing` -- serverless (FaaS) prices: $ per GB-second, $ per request, memory
  sizes (used by the MLLess mode, ``papers/004_9dc2adb66dc8d26e.txt``);
* :class:`StoragePricing` -- object-store prices for checkpoints: $ per GB-month and $ per GB
  of egress (paper 003, Sec. 3.2, counts the cost of moving checkpoints between clouds);
* per-accelerator throughput profiles (``accelerators``), used for instances that carry no
  profile of their own.

Throughput units
----------------
Throughputs are *relative*: a dimensionless speed-up over a reference device for that model
family.  The paper families (``transformer``, ``a3c``, ``cyclegan``, ``resnet18``,
``resnet50``) are relative to one NVIDIA K80 GPU, exactly as published in
``papers/003_c06237e546a4f08e.txt`` Table 1.  The synthetic demo family ``mlp`` is relative to
one ``aws c5.xlarge`` (4 vCPUs) and its values are *synthetic* (made up for the local demo, not
measured); every entry says so in its ``source``.

:meth:`Catalog.throughput` returns an instance's own profile value when it has one; otherwise
it takes the accelerator's per-device value times ``accelerator_count`` -- a *linear scaling
assumption* (an upper bound: data-parallel speed-up is sub-linear), stated here so that nobody
mistakes it for a measurement.

User extensions
---------------
:meth:`Catalog.extend` reads a YAML or CSV file.  YAML has the same shape as the packaged
``spotwise/market/data/catalog.yaml`` (top-level keys ``instances``, ``functions``,
``storage``, ``accelerators``).  CSV holds instances only, one per row, with the
:class:`InstanceType` field names as columns; throughput values go in columns named
``throughput.<family>``; an empty cell means "not given".  Entries of the extension replace
entries of the base catalog with the same ``(cloud, name, region)``.
"""

from __future__ import annotations

import csv
import difflib
import io
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from spotwise.market.network import NetworkLink

from spotwise.errors import InputError
from spotwise.inputfiles import read_input_text
from spotwise.safeparse import load_yaml
from spotwise.spec.checks import _plain_text
from spotwise.market.catalog_records import (INSTANCE_COLUMNS, REQUIRED_INSTANCE_COLUMNS, FunctionPricing,  # noqa: F401
                                            InstanceType, StoragePricing, _ADD_ENTRY_HINT, _check_name,
                                            _check_profile, _parse_scalar)

DEFAULT_CATALOG_PATH = Path(__file__).with_name("data") / "catalog.yaml"


# ---------------------------------------------------------------------------- the catalog

def _lookup(table: dict[str, Any], name: str, what: str, section: str) -> Any:
    """``table[name]``, or an InputError with close matches and where to add an entry."""
    if name in table:
        return table[name]
    close = difflib.get_close_matches(name, list(table), n=5, cutoff=0.4)
    raise InputError(
        f"unknown {what} {name!r}",
        (f"did you mean {', '.join(close)}? " if close else "") + f"known: {sorted(table)}; add one under '{section}:' in a user catalog",
        "catalog",
    )

class Catalog:
    """An immutable set of instance types, function and storage prices, accelerator profiles.

    Build one with :meth:`default` (the packaged table), :meth:`from_file` /
    :meth:`from_mapping`, and combine with :meth:`merge` / :meth:`extend` (both return a new
    catalog; the argument's entries win on equal ``(cloud, name, region)``).
    """

    def __init__(
        self,
        instances: Iterable[InstanceType] = (),
        functions: Iterable[FunctionPricing] = (),
        storage: Iterable[StoragePricing] = (),
        accelerators: Mapping[str, Mapping[str, float]] | None = None,
        networks: Iterable[NetworkLink] = (),
    ) -> None:
        #: inter-region links per cloud (issue 21 item 2; :mod:`spotwise.market.network`)
        self._networks: dict[str, NetworkLink] = {n.cloud: n for n in networks}
        self._instances: dict[tuple[str, str, str], InstanceType] = {}
        for it in instances:
            if not isinstance(it, InstanceType):
                raise TypeError(f"expected InstanceType, got {type(it).__name__}")
            for f in ("name", "cloud", "region", "accelerator"):  # they reach generated YAML and shell (plan --emit)
                _plain_text(getattr(it, f), f"instance type {it.name!r:.80}: {f}",
                            "write instance, cloud, region and accelerator names on one line of printable text")
            self._instances[it.key] = it
        self._functions: dict[str, FunctionPricing] = {f.name: f for f in functions}
        self._storage: dict[str, StoragePricing] = {s.name: s for s in storage}
        self._accelerators: dict[str, dict[str, float]] = {
            _check_name(k, "accelerator", "accelerators"): _check_profile(v, f"accelerator {k!r}")
            for k, v in (accelerators or {}).items()
        }
        for k in self._accelerators:
            _plain_text(k, f"accelerators: {k!r:.80}", "write accelerator names on one line of printable text")

    # ------------------------------------------------------------------ construction
    @classmethod
    def default(cls) -> "Catalog":
        """The packaged catalog (``spotwise/market/data/catalog.yaml``), figures from the papers."""
        return cls.from_file(DEFAULT_CATALOG_PATH)

    @classmethod
    def from_file(cls, path: str | Path) -> "Catalog":
        """Read a YAML (``.yaml``/``.yml``) or CSV (``.csv``, instances only) catalog file.

        Raises :class:`InputError` for a missing, non-regular, oversized or non-UTF-8 file, bad
        YAML/CSV or bad entries.
        """
        p = Path(path)
        where = str(p)
        suffix = p.suffix.lower()
        # regular files only, size-capped, UTF-8: a binary file or /dev/zero is an InputError (exit 2)
        text = read_input_text(p, "catalog file", "a catalog is a YAML or CSV text file; see spotwise/market/data/catalog.yaml")
        if suffix in (".yaml", ".yml"):
            data = load_yaml(text, where, "catalog file", "fix the YAML syntax")  # refuses duplicate keys and nesting bombs
            return cls.from_mapping(data if data is not None else {}, where)
        if suffix == ".csv":
            return cls.from_csv_text(text, where)
        raise InputError(f"unsupported catalog file type {suffix!r}", "use a .yaml, .yml or .csv file", where)

    @classmethod
    def from_mapping(cls, data: object, where: str = "catalog") -> "Catalog":
        """Build from the YAML structure ``{instances: [...], functions: [...], storage: [...], accelerators: {...}}``."""
        if not isinstance(data, Mapping):
            raise InputError("a catalog must be a mapping with keys instances/functions/storage/accelerators", "see spotwise/market/data/catalog.yaml for the format", where)
        known = {"instances", "functions", "storage", "accelerators", "networks"}
        unknown = set(data) - known
        if unknown:
            raise InputError(f"unknown top-level key(s) {sorted(unknown)}", f"valid keys are {sorted(known)}", where)
        instances = [
            _instance_from_mapping(e, f"{where} instances[{i}]") for i, e in enumerate(_as_list(data.get("instances"), "instances", where))
        ]
        functions = [
            _record_from_mapping(FunctionPricing, e, f"{where} functions[{i}]")
            for i, e in enumerate(_as_list(data.get("functions"), "functions", where))
        ]
        storage = [
            _record_from_mapping(StoragePricing, e, f"{where} storage[{i}]")
            for i, e in enumerate(_as_list(data.get("storage"), "storage", where))
        ]
        acc = data.get("accelerators") or {}
        if not isinstance(acc, Mapping):
            raise InputError("accelerators must map accelerator -> {family: throughput}", "see the packaged catalog.yaml", where)
        nets = data.get("networks") or {}
        if not isinstance(nets, Mapping) or not all(isinstance(v, Mapping) for v in nets.values()):
            raise InputError("networks must map cloud -> {rtt_s, gbps, egress_per_gb, source}", "see the packaged catalog.yaml", where)
        networks = []
        for cloud, e in nets.items():
            extra = set(e) - {"rtt_s", "gbps", "egress_per_gb", "source"}
            if extra or not {"rtt_s", "gbps", "egress_per_gb"} <= set(e):
                raise InputError(f"networks[{cloud!r}] needs rtt_s, gbps and egress_per_gb (and optionally source)",
                                 "see the packaged catalog.yaml", where)
            networks.append(NetworkLink(str(cloud).lower(), e["rtt_s"], e["gbps"], e["egress_per_gb"], str(e.get("source", ""))))
        try:
            return cls(instances, functions, storage, acc, networks)  # type: ignore[arg-type]
        except InputError as e:  # a name with a control character: say which file
            raise InputError(e.what, e.fix, f"{where} {e.where}") from None

    def network(self, cloud: str) -> NetworkLink:
        """The inter-region link of ``cloud`` (InputError naming the fix when the catalog has none)."""
        link = self._networks.get(str(cloud).lower())
        if link is None:
            raise InputError(f"the catalog has no inter-region network figures for cloud {cloud!r}",
                             "add a networks: entry for it in a catalog file (market.catalog)", "catalog networks")
        return link

    @classmethod
    def from_csv_text(cls, text: str, where: str = "catalog.csv") -> "Catalog":
        """Instances from CSV text: :data:`INSTANCE_COLUMNS` plus ``throughput.<family>`` columns."""
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        if not header:
            raise InputError("the CSV file is empty", f"write a header row with at least {list(REQUIRED_INSTANCE_COLUMNS)}", where)
        missing = [c for c in REQUIRED_INSTANCE_COLUMNS if c not in header]
        if missing:
            raise InputError(f"missing column(s) {missing}", f"the header must include {list(REQUIRED_INSTANCE_COLUMNS)}; optional: {list(INSTANCE_COLUMNS[2:])}", where)
        bad = [h for h in header if h not in INSTANCE_COLUMNS and not h.startswith("throughput.")]
        if bad:
            raise InputError(f"unknown column(s) {bad}", f"valid columns are {list(INSTANCE_COLUMNS)} and throughput.<family>", where)
        out: list[InstanceType] = []
        for lineno, raw in enumerate(reader, start=2):
            row = {(k or "").strip(): (v if v is not None else "") for k, v in raw.items()}
            if None in raw:
                raise InputError("row has more cells than the header", "check the commas in this row", f"{where} line {lineno}")
            rwhere = f"{where} line {lineno}"
            entry: dict[str, Any] = {}
            profile: dict[str, float] = {}
            for col, cell in row.items():
                if col.startswith("throughput."):
                    val = _parse_scalar(cell, col, rwhere)
                    if val is not None:
                        profile[col[len("throughput."):]] = val
                elif col in ("accelerator_count", "vcpus", "memory_gb", "on_demand_per_hour", "spot_per_hour"):
                    val = _parse_scalar(cell, col, rwhere)
                    if val is not None:
                        entry[col] = val
                else:
                    entry[col] = cell.strip()
            entry["throughput"] = profile
            out.append(_instance_from_mapping(entry, rwhere))
        try:
            return cls(out)
        except InputError as e:  # a name with a control character: say which file
            raise InputError(e.what, e.fix, f"{where} {e.where}") from None

    def merge(self, other: "Catalog") -> "Catalog":
        """A new catalog with ``other``'s entries added; ``other`` wins on equal keys."""
        acc = {k: dict(v) for k, v in self._accelerators.items()}
        for k, v in other._accelerators.items():
            acc.setdefault(k, {}).update(v)
        return Catalog(
            {**self._instances, **other._instances}.values(),
            {**self._functions, **other._functions}.values(),
            {**self._storage, **other._storage}.values(),
            acc,
            {**self._networks, **other._networks}.values(),
        )

    def extend(self, path: str | Path) -> "Catalog":
        """``self.merge(Catalog.from_file(path))``: add or override entries from a user file."""
        return self.merge(Catalog.from_file(path))

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self._instances)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and any(it.name == name for it in self._instances.values())

    def instances(self, cloud: str | None = None, accelerator: str | None = None, family: str | None = None) -> list[InstanceType]:
        """All instance types (sorted by cloud, name, region), optionally filtered.

        ``family`` keeps only types for which :meth:`throughput` knows that family.
        """
        out = []
        for it in sorted(self._instances.values(), key=lambda x: x.key):
            if cloud is not None and it.cloud != cloud.lower():
                continue
            if accelerator is not None and it.accelerator.lower() != accelerator.lower():
                continue
            if family is not None and self._throughput_or_none(it, family) is None:
                continue
            out.append(it)
        return out

    def names(self) -> list[str]:
        return sorted({it.name for it in self._instances.values()})

    def instance(self, name: str, cloud: str | None = None, region: str | None = None) -> InstanceType:
        """Look up an instance type by name (exact, then case-insensitive).

        With ``cloud`` only that cloud's entries are considered.  With ``region`` an entry for
        that region is preferred over a region-agnostic one (``region == ""``); an entry for
        another region never matches.  An unknown name raises :class:`InputError` listing close
        matches; a name present in several clouds without ``cloud`` raises one listing them.
        """
        cands = [it for it in self._instances.values() if it.name == name]
        if not cands:
            cands = [it for it in self._instances.values() if it.name.lower() == str(name).lower()]
        if cloud is not None:
            cands = [it for it in cands if it.cloud == cloud.lower()]
        if region is not None and region != "":
            exact = [it for it in cands if it.region == region]
            cands = exact or [it for it in cands if it.region == ""]
        elif len({it.region for it in cands}) > 1:
            anyregion = [it for it in cands if it.region == ""]
            cands = anyregion or cands
        scope = " ".join(s for s in (f"in cloud {cloud!r}" if cloud else "", f"region {region!r}" if region else "") if s)
        if not cands:
            pool = sorted({it.name for it in self._instances.values() if cloud is None or it.cloud == cloud.lower()})
            close = difflib.get_close_matches(str(name), pool, n=5, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise InputError(
                f"unknown instance type {name!r}" + (f" {scope}" if scope else ""),
                f"{hint}or {_ADD_ENTRY_HINT}",
                "catalog",
            )
        if len(cands) > 1:
            labels = sorted(it.label for it in cands)
            raise InputError(
                f"instance type {name!r} is ambiguous: {', '.join(labels)}",
                "pass cloud= (and region=) to pick one",
                "catalog",
            )
        return cands[0]

    def function(self, name: str) -> FunctionPricing:
        """Serverless pricing by name (e.g. ``ibm-functions``)."""
        return _lookup(self._functions, name, "function pricing", "functions")

    def functions(self) -> list[FunctionPricing]:
        return [self._functions[k] for k in sorted(self._functions)]

    def storage(self, name: str) -> StoragePricing:
        """Object-store pricing by name (e.g. ``aws-s3-standard``)."""
        return _lookup(self._storage, name, "storage pricing", "storage")

    def storages(self) -> list[StoragePricing]:
        return [self._storage[k] for k in sorted(self._storage)]

    def accelerator_profile(self, accelerator: str) -> dict[str, float]:
        """Per-device relative throughputs of an accelerator (``{}`` if unknown)."""
        for k, v in self._accelerators.items():
            if k.lower() == accelerator.lower():
                return dict(v)
        return {}

    def families(self) -> list[str]:
        """Every model family some entry has a throughput for."""
        fams: set[str] = set()
        for it in self._instances.values():
            fams.update(it.throughput)
        for prof in self._accelerators.values():
            fams.update(prof)
        return sorted(fams)

    def _throughput_or_none(self, it: InstanceType, family: str) -> float | None:
        fam = family.lower()
        if fam in it.throughput:
            return it.throughput[fam]
        if it.accelerator:
            prof = self.accelerator_profile(it.accelerator)
            if fam in prof:
                return prof[fam] * it.accelerator_count
        return None

    def throughput(self, instance: str | InstanceType, family: str, cloud: str | None = None, region: str | None = None) -> float:
        """Relative throughput of ``instance`` on model ``family``.

        The instance's own profile first; else the accelerator's per-device value from
        ``papers/003_c06237e546a4f08e.txt`` Table 1 times ``accelerator_count`` (linear
        scaling, an upper bound).  Unknown family -> :class:`InputError` naming the families
        known for that instance.
        """
        it = instance if isinstance(instance, InstanceType) else self.instance(instance, cloud, region)
        val = self._throughput_or_none(it, family)
        if val is None:
            known = sorted(set(it.throughput) | set(self.accelerator_profile(it.accelerator) if it.accelerator else {}))
            raise InputError(
                f"no throughput for model family {family!r} on {it.label}"
                + (f" (known families: {', '.join(known)})" if known else " (it has no throughput profile)"),
                "pick a listed family, or add 'throughput: {" + family + ": <relative speed>}' to this instance in a user catalog",
                "catalog",
            )
        return val

    def cost_normalised_throughput(self, instance: str | InstanceType, family: str, market: str = "on_demand") -> float:
        """Throughput per $/h at the instance's fixed price (paper 003, Table 1 right half)."""
        it = instance if isinstance(instance, InstanceType) else self.instance(instance)
        price = it.price_per_hour(market)
        if price == 0:
            raise InputError(f"{it.label} has a zero {market} price", "give it a positive price", "catalog")
        return self.throughput(it, family) / price

    # ------------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        return {
            "instances": [it.to_dict() for it in self.instances()],
            "functions": [f.to_dict() for f in self.functions()],
            "storage": [s.to_dict() for s in self.storages()],
            "accelerators": {k: dict(v) for k, v in sorted(self._accelerators.items())},
        }

    def __repr__(self) -> str:
        return f"Catalog({len(self._instances)} instances, {len(self._functions)} functions, {len(self._storage)} storage)"


# ---------------------------------------------------------------------------- parsing helpers
def _as_list(value: object, key: str, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{key} must be a list of entries", f"write {key}: as a YAML list ('- name: ...')", where)
    return value


def _instance_from_mapping(entry: object, where: str) -> InstanceType:
    if not isinstance(entry, Mapping):
        raise InputError(f"an instance entry must be a mapping, got {entry!r}", "write 'name: ..., cloud: ...' pairs", where)
    missing = [c for c in REQUIRED_INSTANCE_COLUMNS if entry.get(c) in (None, "")]
    if missing:
        raise InputError(f"missing field(s) {missing}", f"every instance needs {list(REQUIRED_INSTANCE_COLUMNS)}", where)
    allowed = set(INSTANCE_COLUMNS) | {"throughput"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InputError(f"unknown field(s) {unknown}", f"valid fields are {sorted(allowed)}", where)
    try:
        return InstanceType(**{str(k): v for k, v in entry.items()})
    except InputError as exc:
        raise InputError(exc.what, exc.fix, f"{where} ({exc.where})" if exc.where else where) from None


def _record_from_mapping(cls: type, entry: object, where: str) -> Any:
    if not isinstance(entry, Mapping):
        raise InputError(f"an entry must be a mapping, got {entry!r}", "write 'key: value' pairs", where)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(entry) - names)
    if unknown:
        raise InputError(f"unknown field(s) {unknown}", f"valid fields are {sorted(names)}", where)
    try:
        return cls(**{str(k): v for k, v in entry.items()})
    except TypeError as exc:
        raise InputError(f"incomplete entry ({exc})", f"give every required field of {cls.__name__}", where) from None
    except InputError as exc:
        raise InputError(exc.what, exc.fix, f"{where} ({exc.where})" if exc.where else where) from None
