"""Loaders for real price and availability traces.

Every loader returns :class:`~spotwise.market.series.StepSeries` objects (prices in $/hour per
instance, availability as instance counts) with a :class:`~spotwise.market.series.SeriesMeta`
whose ``id`` is unique and human-readable.  Four real formats are understood:

* **AWS** ``DescribeSpotPriceHistory`` JSON, exactly as the API / ``aws ec2
  describe-spot-price-history`` return it (``{"SpotPriceHistory": [...], "NextToken": ...}``);
  the traces of ``training_on_a_dime`` (Narayanan et al., ``papers/003_c06237e546a4f08e.txt``)
  and the c5.xlarge history used in ``papers/000_3c734f3ffedcac15.txt`` Sec. VI are of this kind.
  See :func:`load_aws_spot_json`.
* **Azure** daily price CSV (``Date,NC12,...`` with ``$0.24552`` cells), also from
  ``training_on_a_dime``.  See :func:`load_azure_price_csv`.
* **SkyPilot** spot availability / preemption JSON (``{"metadata": {"gap_seconds": N},
  "data": [...], "prices": [...]}``, Wu et al., NSDI'24).  See :func:`load_skypilot_json`.
* **GCP** preemptible-VM lifetimes of the transient-servers study (Li et al.,
  ``papers/002_a246f6afe29b4bfb.txt`` Sec. III, Fig. 3: GCE preemptible VMs live at most 24 h).
  These are *lifetimes*, not a price or availability curve, and load into a
  :class:`LifetimeTable` (:func:`load_gcp_lifetime_csv`, :func:`load_gcp_vm_data_csv`) for the
  lifetime revocation model.

:func:`load_traces` detects the format of each file (or every file under a directory) and returns
all the series.  Every problem a user can cause -- a missing file, bad JSON, a malformed CSV, a
wrong column, a negative, non-numeric, non-finite or absurd price (above
:data:`MAX_PRICE_PER_HOUR`), an absurd availability count (above :data:`MAX_AVAILABLE`), a bad
timestamp, an unknown format -- raises :class:`~spotwise.errors.InputError` naming the file, the
row and the value and saying how to fix it; no other exception type escapes these loaders.
Bounding the values here keeps every statistic and cost computed from a trace finite (a price of
``1e308`` $/h would overflow the first time-weighted sum into ``inf``/``NaN``).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Iterable, Literal, Sequence, Union

import numpy as np

from spotwise.errors import InputError
from spotwise.inputfiles import read_input_text
from spotwise.market.series import SeriesMeta, StepSeries

__all__ = [
    "GCP_MAX_LIFETIME_S",
    "MAX_AVAILABLE",
    "MAX_PRICE_PER_HOUR",
    "TraceFormat",
    "LifetimeRecord",
    "LifetimeTable",
    "detect_format",
    "load_aws_spot_json",
    "load_azure_price_csv",
    "load_skypilot_json",
    "load_gcp_lifetime_csv",
    "load_gcp_vm_data_csv",
    "load_traces",
]

log = logging.getLogger(__name__)

PathLike = Union[str, Path]
TraceFormat = Literal["aws", "azure", "skypilot", "gcp-lifetime", "gcp-vm-data"]

#: Maximum lifetime of a GCE preemptible VM (``papers/002_a246f6afe29b4bfb.txt`` Sec. III-A).
GCP_MAX_LIFETIME_S: float = 24 * 3600.0

#: The highest price a trace may hold, in $/hour per instance.  The dearest cloud instances cost
#: a few hundred dollars an hour on demand (AWS u-24tb1.metal ~ $218/h, p5.48xlarge ~ $98/h in
#: 2024); a price above this cap is a unit or data error, and left in it would overflow costs and
#: statistics to ``inf``/``NaN``.
MAX_PRICE_PER_HOUR: float = 1e4

#: The largest instance count an availability trace may hold (SkyPilot ``data`` cells).
MAX_AVAILABLE: float = 1e6

#: The last instant a trace may reach: 9999-12-31T23:59:59Z (what a timestamp can name).
_MAX_EPOCH_S: float = 253402300799.0

_SUPPORTED = (
    "AWS DescribeSpotPriceHistory JSON ({\"SpotPriceHistory\": [...]}), "
    "SkyPilot trace JSON ({\"metadata\": {\"gap_seconds\": N}, \"data\": [...]}), "
    "Azure price CSV (header starting with 'Date')"
)
_SKIP_NAMES = {"source.txt", "license", "license.txt", "notice", "notice.txt"}


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------
def _as_paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(paths, (str, Path)):
        return [Path(paths)]
    return [Path(p) for p in paths]


def _read_text(path: Path) -> str:
    """Read a whole trace file as UTF-8 text (BOM stripped); any failure is an :class:`InputError`.

    Only regular files are read (``/dev/zero``, FIFOs and sockets are refused before opening), and
    at most ``$SPOTWISE_MAX_FILE_MB`` MiB (default 256) -- see :mod:`spotwise.inputfiles`.
    """
    return read_input_text(path, "trace file", "pass a JSON or CSV trace file, not a binary file")


def _parse_json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"not valid JSON ({exc})", "pass the JSON exactly as the provider's API or the trace repository gives it", where) from None


def _finite_number(x: object) -> float | None:
    """``x`` as a finite float, or ``None`` when it is not a (finite) number (bools excluded)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        f = float(x)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _parse_price(raw: object, where: str, what: str) -> float:
    """A price given as a JSON number or a string (``"1.140900"``, ``"$0.24552"``)."""
    if isinstance(raw, str):
        s = raw.strip().lstrip("$").replace(",", "").strip()
        try:
            val = float(s) if s and "_" not in s else None
        except ValueError:
            val = None
    else:
        val = _finite_number(raw)
    if val is None or not math.isfinite(val):
        kind = "a number" if val is None or math.isnan(val) else "a finite number"
        raise InputError(f"{what}: price {raw!r} is not {kind}",
                         "prices must be finite decimal numbers of dollars per hour, e.g. 1.1409 or $0.24552", where)
    if val < 0:
        raise InputError(f"{what}: negative price {raw!r}", "prices must be >= 0 dollars per hour", where)
    if val > MAX_PRICE_PER_HOUR:
        raise InputError(f"{what}: price {raw!r} is above {MAX_PRICE_PER_HOUR:g} $/h per instance",
                         "prices are dollars per hour per instance (no cloud instance costs that much): "
                         "fix the value or its unit", where)
    return val


def _parse_iso8601(raw: object, where: str, what: str) -> float:
    """ISO 8601 timestamp (``2020-02-20T22:54:57.000Z``) -> seconds since the epoch (naive = UTC)."""
    if not isinstance(raw, str):
        raise InputError(f"{what}: timestamp {raw!r} is not a string", "use ISO 8601 timestamps such as 2020-02-20T22:54:57.000Z", where)
    s = raw.strip()
    try:
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        dt = datetime.fromisoformat(s)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    except (ValueError, OverflowError, OSError):
        raise InputError(f"{what}: bad timestamp {raw!r}", "use ISO 8601 timestamps such as 2020-02-20T22:54:57.000Z", where) from None


def _epoch(d: date) -> float:
    return datetime(d.year, d.month, d.day, tzinfo=timezone.utc).timestamp()


_AZ_RE = re.compile(r"^(.*\d)[a-z]+$")
_GCP_ZONE_RE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


def _region_of(zone: str) -> str:
    """``us-east-2a`` -> ``us-east-2`` (AWS); ``us-central1-a`` -> ``us-central1`` (GCP)."""
    m = _GCP_ZONE_RE.match(zone)
    if m:
        return m.group(1)
    m = _AZ_RE.match(zone)
    return m.group(1) if m else zone


def _csv_rows(text: str, where: str) -> list[list[str]]:
    try:
        return [row for row in csv.reader(io.StringIO(text, newline=""))]
    except csv.Error as exc:
        raise InputError(f"malformed CSV ({exc})", "save the file as plain comma-separated values", where) from None


def _compress_runs(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep only the points where the value changes (the first point is always kept)."""
    if values.size == 0:
        return times, values
    keep = np.ones(values.size, dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    return times[keep], values[keep]


# ---------------------------------------------------------------------------------------------
# AWS
# ---------------------------------------------------------------------------------------------
_AWS_REQUIRED = ("AvailabilityZone", "InstanceType", "SpotPrice", "Timestamp")


def _aws_records(doc: object, where: str) -> list[tuple[str, str, str, float, float]]:
    if not isinstance(doc, dict) or "SpotPriceHistory" not in doc:
        raise InputError("not an AWS spot price history (no 'SpotPriceHistory' key)",
                         "save the output of `aws ec2 describe-spot-price-history --output json` unchanged", where)
    hist = doc["SpotPriceHistory"]
    if not isinstance(hist, list):
        raise InputError("'SpotPriceHistory' is not a list", "save the output of `aws ec2 describe-spot-price-history --output json` unchanged", where)
    out = []
    for i, rec in enumerate(hist):
        what = f"SpotPriceHistory[{i}]"
        if not isinstance(rec, dict):
            raise InputError(f"{what} is not an object", "each entry needs AvailabilityZone, InstanceType, SpotPrice and Timestamp", where)
        missing = [k for k in _AWS_REQUIRED if k not in rec]
        if missing:
            raise InputError(f"{what} lacks {', '.join(missing)}", "each entry needs AvailabilityZone, InstanceType, SpotPrice and Timestamp", where)
        zone, itype, prod = rec["AvailabilityZone"], rec["InstanceType"], rec.get("ProductDescription", "")
        for key, val in (("AvailabilityZone", zone), ("InstanceType", itype)):
            if not isinstance(val, str) or not val.strip():
                raise InputError(f"{what}: {key} {val!r} is not a non-empty string", f"give {key} as text, e.g. us-east-2a / p3.2xlarge", where)
        if not isinstance(prod, str):
            raise InputError(f"{what}: ProductDescription {prod!r} is not a string", "give it as text, e.g. Linux/UNIX", where)
        price = _parse_price(rec["SpotPrice"], where, what)
        t = _parse_iso8601(rec["Timestamp"], where, what)
        out.append((zone.strip(), itype.strip(), prod.strip(), t, price))
    return out


def load_aws_spot_json(paths: PathLike | Sequence[PathLike]) -> list[StepSeries]:
    """Load one or more AWS ``DescribeSpotPriceHistory`` JSON dumps.

    Records of all files are pooled and split into one price series per
    ``(AvailabilityZone, InstanceType)`` -- and per ``ProductDescription`` when one zone x type
    has several (then the product joins the id).  Ids read ``aws:<zone>:<type>`` (e.g.
    ``aws:us-east-2a:p3.2xlarge``); the region is the zone without its trailing letter.

    * Input order does not matter (AWS returns newest first); points are sorted.
    * Exact duplicates (same time and price, e.g. overlapping dumps) are dropped; for two
      different prices at the same instant the one read last wins.
    * Files with ``"SpotPriceHistory": []`` are allowed and contribute nothing; loading only
      empty files returns ``[]``.
    * **End of each series**: AWS reports only price *changes*, so the last price holds until the
      history was queried.  The query time is not in the file, so a series ends at the latest
      ``Timestamp`` seen for *any* zone and instance type of the same region in the loaded file
      set (the best available proxy of the dump time); a series's last price therefore holds up
      to that moment (possibly with zero length if it is the region's latest record).
    * ``meta.extra``: ``product``, ``records`` (raw records, duplicates included),
      ``duplicates`` (records dropped as exact duplicates), ``files`` (number of files).
    """
    plist = _as_paths(paths)
    groups: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    sources: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    region_end: dict[str, float] = {}
    for path in plist:
        where = str(path)
        for zone, itype, prod, t, price in _aws_records(_parse_json(_read_text(path), where), where):
            key = (zone, itype, prod)
            groups[key].append((t, price))
            sources[key].add(where)
            reg = _region_of(zone)
            region_end[reg] = max(region_end.get(reg, -math.inf), t)
    products: dict[tuple[str, str], int] = defaultdict(int)
    for zone, itype, _ in groups:
        products[(zone, itype)] += 1
    out: list[StepSeries] = []
    for key in sorted(groups):
        zone, itype, prod = key
        pts = groups[key]
        uniq = sorted(set(pts), key=lambda p: p[0])
        # for conflicting prices at one instant, keep the last one read
        last: dict[float, float] = {}
        for t, v in pts:
            last[t] = v
        times = np.array(sorted(last))
        values = np.array([last[t] for t in times])
        region = _region_of(zone)
        ident = f"aws:{zone}:{itype}" + (f":{prod}" if products[(zone, itype)] > 1 else "")
        meta = SeriesMeta(
            id=ident, kind="price", cloud="aws", region=region, zone=zone, instance=itype,
            source=";".join(sorted(sources[key])),
            extra={"product": prod, "records": len(pts), "duplicates": len(pts) - len(uniq), "files": len(sources[key])},
        )
        out.append(StepSeries(times, values, max(region_end[region], float(times[-1])), meta))
    return out


# ---------------------------------------------------------------------------------------------
# Azure
# ---------------------------------------------------------------------------------------------
_DATE_FORMATS = ("%m/%d/%Y", "%m/%d/%y", "%Y-%m-%d")


def _parse_date(raw: str, where: str, what: str) -> date:
    s = raw.strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(s, fmt).date()
        except ValueError:
            continue
    raise InputError(f"{what}: bad date {raw!r}", "write dates as M/D/YYYY (e.g. 2/24/2020) or YYYY-MM-DD", where)


def _azure_mapping(path: Path) -> dict[str, dict[str, object]]:
    """``instance_mapping.csv`` (``Instance,GPU type,# GPUs``) beside or above a price CSV."""
    for cand in (path.parent / "instance_mapping.csv", path.parent.parent / "instance_mapping.csv"):
        if cand.is_file():
            where = str(cand)
            rows = [r for r in _csv_rows(_read_text(cand), where) if any(c.strip() for c in r)]
            if not rows or len(rows[0]) < 3 or rows[0][0].strip().lower() != "instance":
                raise InputError("instance mapping needs the header 'Instance,GPU type,# GPUs'",
                                 "fix the header or remove the file", where)
            out: dict[str, dict[str, object]] = {}
            for n, row in enumerate(rows[1:], start=2):
                if len(row) < 3:
                    raise InputError(f"line {n} has {len(row)} cells, expected 3", "write Instance,GPU type,# GPUs on every line", where)
                try:
                    count = int(row[2].strip())
                except ValueError:
                    raise InputError(f"line {n}: GPU count {row[2]!r} is not an integer", "give the number of GPUs, e.g. 2", where) from None
                out[row[0].strip()] = {"gpu": row[1].strip(), "gpu_count": count}
            return out
    return {}


def load_azure_price_csv(path: PathLike, *, mapping: bool = True) -> list[StepSeries]:
    """Load an Azure daily price CSV (``Date,NC12,NC12s v2,...`` with ``$0.24552`` cells).

    One price series per size column, id ``azure:<region>:<size>`` (spaces in the size become
    ``_``, e.g. ``azure:us-east:NC12s_v3``; ``meta.instance`` keeps the size as written).  The
    region comes from the file name (``us_north_central.csv`` -> ``us-north-central``).  Each row
    gives the price for one UTC day, so a series ends one day after its last date.  An empty cell
    means the size was not offered that day and is skipped (the previous price carries on); a
    column with no price at all yields no series.  When ``mapping`` is true and an
    ``instance_mapping.csv`` lies beside the file or in its parent folder, ``meta.extra`` gets the
    ``gpu`` type and ``gpu_count`` of each size.
    """
    p = Path(path)
    where = str(p)
    rows = [r for r in _csv_rows(_read_text(p), where) if any(c.strip() for c in r)]
    if not rows:
        raise InputError("empty CSV file", "the first line must be the header Date,<size>,<size>,...", where)
    header = [c.strip() for c in rows[0]]
    if header[0].lstrip("\ufeff") != "Date":
        raise InputError(f"first column is {header[0]!r}, expected 'Date'", "the header must read Date,<size>,<size>,... (e.g. Date,NC6,NC12)", where)
    sizes = header[1:]
    if not sizes:
        raise InputError("no price columns after 'Date'", "add one column per instance size, e.g. Date,NC6,NC12", where)
    if any(not s for s in sizes):
        raise InputError("a column has an empty name", "name every price column after its instance size", where)
    if len(set(sizes)) != len(sizes):
        dup = next(s for s in sizes if sizes.count(s) > 1)
        raise InputError(f"column {dup!r} appears twice", "give each instance size one column", where)
    cols: list[list[tuple[float, float]]] = [[] for _ in sizes]
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"line {n} has {len(row)} cells, the header has {len(header)}", "give every row one date and one price per column", where)
        t = _epoch(_parse_date(row[0], where, f"line {n}"))
        for j, cell in enumerate(row[1:]):
            if cell.strip():
                cols[j].append((t, _parse_price(cell, where, f"line {n}, column {sizes[j]!r}")))
    region = p.stem.replace("_", "-")
    gpus = _azure_mapping(p) if mapping else {}
    out = []
    for size, pts in zip(sizes, cols):
        if not pts:
            continue
        meta = SeriesMeta(
            id=f"azure:{region}:{size.replace(' ', '_')}", kind="price", cloud="azure", region=region,
            instance=size, source=where, extra=dict(gpus.get(size, {})),
        )
        s = StepSeries.from_points([t for t, _ in pts], [v for _, v in pts], meta)
        out.append(StepSeries(s.times, s.values, s.times[-1] + 86400.0, meta))
    return out


# ---------------------------------------------------------------------------------------------
# SkyPilot
# ---------------------------------------------------------------------------------------------
_FOLDER_DATE_RE = re.compile(r"(?:^|[^0-9])(\d{1,2})-(\d{1,2})-(\d{4})(?:$|[^0-9])")


def _folder_start(folder: str) -> float | None:
    """``aws-10-26-2022`` -> epoch of 2022-10-26T00:00Z (``None`` when no valid M-D-YYYY)."""
    m = _FOLDER_DATE_RE.search(folder)
    if not m:
        return None
    try:
        return _epoch(date(int(m.group(3)), int(m.group(1)), int(m.group(2))))
    except ValueError:
        return None


def _number_list(raw: object, key: str, where: str, cap: float, unit: str) -> np.ndarray:
    """A JSON list of finite numbers in ``[0, cap]`` (``unit`` names what they count, for messages)."""
    fix = f"'{key}' must be a list of numbers from 0 to {cap:g} {unit}, one per tick"
    if not isinstance(raw, list):
        raise InputError(f"'{key}' is not a list", fix, where)
    vals = [_finite_number(x) for x in raw]
    bad = next((i for i, v in enumerate(vals) if v is None), None)
    if bad is not None:
        raise InputError(f"{key}[{bad}] = {raw[bad]!r} is not a finite number", fix, where)
    arr = np.array(vals, dtype=float)
    if np.any(arr < 0):
        i = int(np.nonzero(arr < 0)[0][0])
        raise InputError(f"{key}[{i}] = {raw[i]!r} is negative", fix, where)
    if np.any(arr > cap):
        i = int(np.nonzero(arr > cap)[0][0])
        raise InputError(f"{key}[{i}] = {raw[i]!r} is above {cap:g} {unit}", fix, where)
    return arr


def load_skypilot_json(path: PathLike) -> list[StepSeries]:
    """Load a SkyPilot spot trace (``{"metadata": {"gap_seconds": N}, "data": [...]}``).

    ``data[i]`` is the number of instances available on tick ``i`` (1 = available, 0 = not; counts
    for multi-node traces), tick ``i`` covering ``[start + i*gap, start + (i+1)*gap)``; the series
    ends at ``start + len(data)*gap``.  ``start`` is midnight UTC of the date in the folder name
    (``aws-10-26-2022`` -> 2022-10-26T00:00Z) or 0 when the folder has none.  The file name gives
    zone and instance (``us-west-2b_v100_1.json`` -> zone ``us-west-2b``, instance ``v100_1``,
    i.e. one V100); the folder prefix gives the cloud (``aws-``/``gcp-``).

    **Points**: runs of equal consecutive values are compressed to their first tick, so
    ``len(series)`` is the number of value changes + 1; the raw tick count is kept in
    ``meta.extra["ticks"]`` and the tick length in ``meta.extra["gap_seconds"]``.  Time-weighted
    statistics and preemption times are unaffected by the compression.

    Returns the availability series (id ``skypilot/<folder>:<zone>:<instance>``) and, when the
    file has a ``"prices"`` list of the same length, a price series (same id + ``:price``).
    """
    p = Path(path)
    where = str(p)
    doc = _parse_json(_read_text(p), where)
    fix = 'a SkyPilot trace looks like {"metadata": {"gap_seconds": 600}, "data": [1, 0, ...]}'
    if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict) or "gap_seconds" not in doc["metadata"]:
        raise InputError("not a SkyPilot trace (no metadata.gap_seconds)", fix, where)
    gap = _finite_number(doc["metadata"]["gap_seconds"])
    if gap is None or gap <= 0:
        raise InputError(f"metadata.gap_seconds = {doc['metadata']['gap_seconds']!r} is not a positive number", fix, where)
    if "data" not in doc:
        raise InputError("no 'data' list", fix, where)
    data = _number_list(doc["data"], "data", where, MAX_AVAILABLE, "instances")
    if data.size == 0:
        raise InputError("'data' is empty", "the trace needs at least one tick", where)
    prices = None
    if doc.get("prices") is not None:
        prices = _number_list(doc["prices"], "prices", where, MAX_PRICE_PER_HOUR, "$/h per instance")
        if prices.size != data.size:
            raise InputError(f"'prices' has {prices.size} entries but 'data' has {data.size}", "give one price per tick", where)
    folder = p.parent.name
    start = _folder_start(folder)
    t0 = 0.0 if start is None else start
    stem = p.stem
    zone, _, instance = stem.partition("_")
    cloud = folder.split("-", 1)[0].lower() if folder.split("-", 1)[0].lower() in ("aws", "gcp", "azure") else ""
    end = t0 + gap * data.size
    if end > _MAX_EPOCH_S:
        raise InputError(f"{data.size} ticks of metadata.gap_seconds = {gap:g} s end after the year 9999",
                         "give the tick length in seconds (SkyPilot traces use e.g. 600)", where)
    times = t0 + gap * np.arange(data.size, dtype=float)
    base = f"skypilot/{folder}:{zone}:{instance}" if instance else f"skypilot/{folder}:{stem}"
    extra = {"ticks": int(data.size), "gap_seconds": gap, "start_from_folder": start is not None}
    common = dict(cloud=cloud, region=_region_of(zone), zone=zone, instance=instance, source=where)
    t, v = _compress_runs(times, data)
    out = [StepSeries(t, v, end, SeriesMeta(id=base, kind="availability", extra=dict(extra), **common))]
    if prices is not None:
        t, v = _compress_runs(times, prices)
        out.append(StepSeries(t, v, end, SeriesMeta(id=base + ":price", kind="price", extra=dict(extra), **common)))
    return out


# ---------------------------------------------------------------------------------------------
# GCP lifetimes
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LifetimeRecord:
    """One VM's observed life.

    ``start``/``end`` are epoch seconds when known (``None`` for the training logs, which give
    only the uptime).  ``lifetime_s`` is capped at :data:`GCP_MAX_LIFETIME_S` and ``capped`` says
    the raw value exceeded it (the measured interval includes boot and shutdown).  ``censored``
    marks an observation that ended for another reason than a revocation (job completed,
    stopped by hand): the VM lived *at least* ``lifetime_s``.
    """

    name: str
    gpu: str
    zone: str
    start: float | None
    end: float | None
    lifetime_s: float
    capped: bool = False
    censored: bool = False
    reason: str = ""
    note: str = ""


@dataclass
class LifetimeTable:
    """Observed preemptible-VM lifetimes (``papers/002_a246f6afe29b4bfb.txt`` Sec. III, Fig. 3)."""

    records: list[LifetimeRecord]
    source: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.records)

    @property
    def lifetimes_s(self) -> np.ndarray:
        """Lifetimes in seconds (capped at 24 h), one per record."""
        return np.array([r.lifetime_s for r in self.records], dtype=float)

    @property
    def censored(self) -> np.ndarray:
        """``True`` where the record is not a revocation (the lifetime is a lower bound)."""
        return np.array([r.censored for r in self.records], dtype=bool)

    @property
    def capped(self) -> np.ndarray:
        return np.array([r.capped for r in self.records], dtype=bool)

    def gpus(self) -> list[str]:
        return sorted({r.gpu for r in self.records})

    def by_gpu(self, gpu: str) -> "LifetimeTable":
        """The records of one GPU type (case-insensitive, e.g. ``"V100"``)."""
        g = gpu.strip().upper()
        return LifetimeTable([r for r in self.records if r.gpu.upper() == g], self.source, dict(self.extra))

    def by_zone(self, zone: str) -> "LifetimeTable":
        return LifetimeTable([r for r in self.records if r.zone == zone], self.source, dict(self.extra))


_GCP_ZONE_IN_NAME = re.compile(r"([a-z]+-[a-z]+\d+-[a-z])(?![a-z])")
_GPU_RE = re.compile(r"^[A-Za-z]{1,2}\d{1,3}$")
_DAY_RE = re.compile(r"^(\d{1,2})-([A-Za-z]{3})$")
_FULL_DT_RE = re.compile(r"^\d{1,2}/\d{1,2}/\d{2,4} \d{1,2}:\d{2}(:\d{2})?$")
_CLOCK_RE = re.compile(r"^(\d+):(\d{2}):(\d{2})$")
_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}


def _parse_full_dt(raw: str, where: str, what: str) -> float:
    s = raw.strip()
    for fmt in ("%m/%d/%y %H:%M", "%m/%d/%Y %H:%M", "%m/%d/%y %H:%M:%S", "%m/%d/%Y %H:%M:%S"):
        try:
            return datetime.strptime(s, fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    raise InputError(f"{what}: bad date-time {raw!r}", "write M/D/YY HH:MM (e.g. 2/18/19 23:40) or HH:MM:SS after a day row", where)


def _zone_from_name(name: str) -> str:
    m = _GCP_ZONE_IN_NAME.search(name)
    return m.group(1) if m else ""


def _cap(lifetime: float, cap_s: float) -> tuple[float, bool]:
    return (cap_s, True) if lifetime > cap_s else (lifetime, False)


def load_gcp_lifetime_csv(path: PathLike, *, year: int = 2018, cap_s: float = GCP_MAX_LIFETIME_S) -> LifetimeTable:
    """Load the transient-servers lifetime spreadsheet (``data/lifetime/lifetime.csv``).

    The file is a sectioned spreadsheet export: a row with only a first cell opens a section --
    a GPU type (``K80``, ``P100``, ``V100``), a day (``8-May``, year ``year``, 2018 per the
    source), a zone (``us-central1-a``) or a label (``Previous experiments``, which resets the
    GPU type to unknown ``""``); ``VM name,Start,Terminate`` / ``<day>,created,terminated`` rows
    are headers.  Data rows give either full ``M/D/YY HH:MM`` times or clock times ``HH:MM:SS``
    on the current day, where a terminate time earlier than the start crossed midnight.  A few
    clock cells were mangled by the spreadsheet into hours counted from 1899-12-30
    (``1046389:24:27``); their time of day is ``hours mod 24`` and, when both cells are mangled,
    their difference is the lifetime (``note="excel-hours"``).

    Zones come from the VM names (``a-p100-us-west1-b-0`` -> ``us-west1-b``), else from the zone
    section row.  Lifetimes above ``cap_s`` (GCE's 24 h limit, ``papers/002_a246f6afe29b4bfb.txt``
    Sec. III-A) are capped and flagged ``capped``.  Every record counts as a revocation
    (``censored=False``): the study ran the VMs until GCE took them.
    """
    p = Path(path)
    where = str(p)
    rows = _csv_rows(_read_text(p), where)
    gpu = ""
    day: date | None = None
    zone_section = ""
    records: list[LifetimeRecord] = []
    for n, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells):
            continue
        cells += [""] * (3 - len(cells))
        first, second, third = cells[0], cells[1], cells[2]
        if any(cells[3:]):
            raise InputError(f"line {n} has {len(row)} cells, expected 3", "rows read VM name,Start,Terminate", where)
        if first.lower() == "vm name":
            continue
        if (not second and not third) or (second.lower(), third.lower()) == ("created", "terminated"):
            m = _DAY_RE.match(first)
            if m and m.group(2).lower() in _MONTHS:
                try:
                    day = date(year, _MONTHS[m.group(2).lower()], int(m.group(1)))
                except ValueError:
                    raise InputError(f"line {n}: bad day {first!r}", "write days as D-Mon, e.g. 8-May", where) from None
                zone_section = ""
            elif _GCP_ZONE_RE.match(first):
                zone_section = first
            elif _GPU_RE.match(first):
                gpu, day, zone_section = first.upper(), None, ""
            else:
                gpu, day, zone_section = "", None, ""
            continue
        if not first or not second or not third:
            raise InputError(f"line {n}: a VM row needs a name, a start and a terminate time", "fill in VM name,Start,Terminate", where)
        what = f"line {n} ({first})"
        note = ""
        if _FULL_DT_RE.match(second) or _FULL_DT_RE.match(third):
            start = _parse_full_dt(second, where, what)
            end = _parse_full_dt(third, where, what)
            if end < start:
                raise InputError(f"{what}: terminate {third!r} is before start {second!r}", "check the two times", where)
            raw_life = end - start
        else:
            ms, me = _CLOCK_RE.match(second), _CLOCK_RE.match(third)
            if not ms or not me:
                bad = second if not ms else third
                raise InputError(f"{what}: bad time {bad!r}", "write M/D/YY HH:MM, or HH:MM:SS after a day row such as 8-May,,", where)
            if day is None:
                raise InputError(f"{what}: a clock time HH:MM:SS with no day", "put a day row such as 8-May,, above it", where)
            s_sec = int(ms.group(1)) * 3600 + int(ms.group(2)) * 60 + int(ms.group(3))
            e_sec = int(me.group(1)) * 3600 + int(me.group(2)) * 60 + int(me.group(3))
            if int(ms.group(2)) > 59 or int(ms.group(3)) > 59 or int(me.group(2)) > 59 or int(me.group(3)) > 59:
                raise InputError(f"{what}: minutes/seconds above 59", "write HH:MM:SS", where)
            if s_sec >= 86400 and e_sec >= 86400:
                note = "excel-hours"
                raw_life = float(e_sec - s_sec)
                if raw_life < 0:
                    raise InputError(f"{what}: terminate {third!r} is before start {second!r}", "check the two times", where)
            else:
                if s_sec >= 86400 or e_sec >= 86400:
                    note = "excel-hours"
                s_sec, e_sec = s_sec % 86400, e_sec % 86400
                raw_life = float(e_sec - s_sec) + (86400.0 if e_sec < s_sec else 0.0)
            start = _epoch(day) + (s_sec % 86400)
            end = start + raw_life
        life, capped = _cap(raw_life, cap_s)
        records.append(LifetimeRecord(
            name=first, gpu=gpu, zone=_zone_from_name(first) or zone_section, start=start, end=end,
            lifetime_s=life, capped=capped, censored=False, reason="revoked", note=note,
        ))
    if not records:
        raise InputError("no VM rows found", "the file needs rows VM name,Start,Terminate under a GPU or day section", where)
    return LifetimeTable(records, where, {"format": "gcp-lifetime", "cap_s": cap_s})


_GPU_IN_PATH = re.compile(r"(?<![a-z0-9])(k80|p100|v100|t4|p4|a100|l4)(?![0-9])", re.I)


def load_gcp_vm_data_csv(path: PathLike, *, cap_s: float = GCP_MAX_LIFETIME_S) -> LifetimeTable:
    """Load a transient-training ``vm_data.csv`` (``VM_name,Uptime[,Revoked]``).

    ``Uptime`` is seconds.  Only rows whose reason (third column) is ``Revoked`` are
    preemptions; every other row (``Job completed``, ``Manually stopped due to revoked master``,
    or no reason column at all, as in the on-demand control runs) is a *censored* observation
    (``censored=True``).  The GPU type comes from the nearest folder naming one
    (``k80_spot/2-spot`` -> ``K80``, ``p100_v100_spot/p100`` -> ``P100``), the zone from the VM
    name.  Uptimes above ``cap_s`` are capped and flagged.
    """
    p = Path(path)
    where = str(p)
    rows = [r for r in _csv_rows(_read_text(p), where) if any(c.strip() for c in r)]
    if not rows:
        raise InputError("empty CSV file", "the first line must be VM_name,Uptime,Revoked", where)
    header = [c.strip().lower() for c in rows[0]]
    if len(header) < 2 or header[0] != "vm_name" or header[1] != "uptime":
        raise InputError(f"header {rows[0]!r} is not VM_name,Uptime[,Revoked]", "the first line must be VM_name,Uptime,Revoked", where)
    gpu = ""
    for part in reversed(p.parent.parts):
        m = _GPU_IN_PATH.search(part)
        if m:
            gpu = m.group(1).upper()
            break
    records = []
    for n, row in enumerate(rows[1:], start=2):
        if len(row) > len(header) or len(row) < 2:
            raise InputError(f"line {n} has {len(row)} cells, the header has {len(header)}", "write VM_name,Uptime,Revoked on every line", where)
        name = row[0].strip()
        try:
            up = float(row[1].strip())
        except ValueError:
            up = math.nan
        if not math.isfinite(up) or up < 0:
            raise InputError(f"line {n}: uptime {row[1]!r} is not a non-negative number of seconds", "give the uptime in seconds, e.g. 941.82", where)
        reason = row[2].strip() if len(row) > 2 else ""
        life, capped = _cap(up, cap_s)
        records.append(LifetimeRecord(
            name=name, gpu=gpu, zone=_zone_from_name(name), start=None, end=None, lifetime_s=life,
            capped=capped, censored=reason.lower() != "revoked", reason=reason,
        ))
    return LifetimeTable(records, where, {"format": "gcp-vm-data", "cap_s": cap_s})


# ---------------------------------------------------------------------------------------------
# format detection and the one entry point
# ---------------------------------------------------------------------------------------------
def _sniff(text: str, path: Path) -> TraceFormat | None:
    stripped = text.lstrip()
    if stripped.startswith("{") or path.suffix.lower() == ".json":
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if isinstance(doc, dict):
            if "SpotPriceHistory" in doc:
                return "aws"
            md = doc.get("metadata")
            if isinstance(md, dict) and "gap_seconds" in md and "data" in doc:
                return "skypilot"
        return None
    lines = [ln.strip() for ln in stripped.splitlines()[:5]]
    if not lines:
        return None
    first = lines[0].lower()
    if first.startswith("date,") or first == "date":
        return "azure"
    if first.startswith("vm_name,uptime"):
        return "gcp-vm-data"
    if any(ln.lower().startswith("vm name,start,terminate") for ln in lines):
        return "gcp-lifetime"
    return None


def detect_format(path: PathLike) -> TraceFormat | None:
    """The trace format of a file by its content (``None`` when not recognised).

    JSON with ``SpotPriceHistory`` -> ``"aws"``; JSON with ``metadata.gap_seconds`` and ``data``
    -> ``"skypilot"``; CSV whose header starts with ``Date`` -> ``"azure"``; CSV with header
    ``VM_name,Uptime...`` -> ``"gcp-vm-data"``; CSV with a ``VM name,Start,Terminate`` header in
    its first lines -> ``"gcp-lifetime"``.  A missing or unreadable file is an InputError.
    """
    p = Path(path)
    return _sniff(_read_text(p), p)


def _walk(directory: Path) -> Iterable[Path]:
    try:
        entries = sorted(directory.rglob("*"))
    except OSError as exc:
        raise InputError(f"cannot list the directory ({exc})", "check its permissions", str(directory)) from None
    for f in entries:
        if f.is_file() and f.name.lower() not in _SKIP_NAMES and not f.name.lower().startswith("readme"):
            yield f


def load_traces(paths: PathLike | Sequence[PathLike]) -> list[StepSeries]:
    """Load every series from files and directories, detecting each file's format.

    * A directory contributes every recognised file under it (recursively); ``SOURCE.txt``,
      ``README*``, licences and unrecognised or non-text files are skipped there.  An
      *explicitly named* file that is not recognised is an :class:`InputError`.
    * All AWS files are merged (same zone x type across files make one series; region end
      times are taken over the whole set, see :func:`load_aws_spot_json`).
    * **GCP lifetime files** (``lifetime.csv``, ``vm_data.csv``) hold VM lifetimes, not a
      price or availability curve: naming one explicitly raises an :class:`InputError` that
      points to :func:`load_gcp_lifetime_csv` / :func:`load_gcp_vm_data_csv` and the lifetime
      revocation model; inside a directory they are skipped (logged at INFO).
    * Each path is read once even if named twice; ids are made unique by appending ``#2``,
      ``#3``... to later repeats (possible only for same-named files in same-named folders).

    Series come back in the order AWS (sorted by id), then the other files in path order.
    """
    files: list[tuple[Path, TraceFormat]] = []
    seen: set[Path] = set()

    def add(f: Path, fmt: TraceFormat) -> None:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            files.append((f, fmt))

    for p in _as_paths(paths):
        if p.is_dir():
            for f in _walk(p):
                try:
                    text = _read_text(f)
                except InputError:
                    continue
                fmt = _sniff(text, f)
                if fmt is None:
                    continue
                if fmt in ("gcp-lifetime", "gcp-vm-data"):
                    log.info("skipping %s: GCP lifetimes are not a price/availability series", f)
                    continue
                add(f, fmt)
        else:
            fmt = _sniff(_read_text(p), p)
            if fmt is None:
                raise InputError("unrecognised trace format", f"supported formats: {_SUPPORTED}", str(p))
            if fmt in ("gcp-lifetime", "gcp-vm-data"):
                loader = "load_gcp_lifetime_csv" if fmt == "gcp-lifetime" else "load_gcp_vm_data_csv"
                raise InputError(
                    "this is a GCP preemptible-VM lifetime table, not a price or availability series",
                    f"load it with spotwise.market.traces.{loader} and use the lifetime revocation model", str(p))
            add(p, fmt)
    out: list[StepSeries] = []
    aws = [f for f, fmt in files if fmt == "aws"]
    if aws:
        out.extend(load_aws_spot_json(aws))
    for f, fmt in files:
        if fmt == "azure":
            out.extend(load_azure_price_csv(f))
        elif fmt == "skypilot":
            out.extend(load_skypilot_json(f))
    counts: dict[str, int] = defaultdict(int)
    unique = []
    for s in out:
        counts[s.meta.id] += 1
        unique.append(s if counts[s.meta.id] == 1 else s.with_meta(id=f"{s.meta.id}#{counts[s.meta.id]}"))
    return unique
