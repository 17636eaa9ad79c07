"""What every trace loader shares: the value caps (:data:`MAX_PRICE_PER_HOUR`, :data:`MAX_AVAILABLE`,
:data:`GCP_MAX_LIFETIME_S`), the format names, and the parsing helpers that turn a bad cell into an
:class:`~spotwise.errors.InputError` naming the file, the row and the value.  The loaders, one module
per format, and the entry point :func:`~spotwise.market.traces.load_traces` are described in
:mod:`spotwise.market.traces`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Literal, Sequence, Union

import numpy as np

from spotwise.errors import InputError
from spotwise.inputfiles import read_input_text
from spotwise.safeparse import loads_json


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

#: The years a trace's timestamps may name (issue 38): from 2006-01-01T00:00Z -- EC2 opened in
#: August 2006, the spot markets later (AWS 2009, GCE preemptible VMs 2015, Azure 2020) -- to
#: 2100-01-01T00:00Z.  A year 1, 1970 (a zero epoch) or 9999 outside them is a placeholder, a unit
#: error (milliseconds read as seconds) or a typo, and would stretch every sweep over centuries.
TRACE_YEARS: tuple[int, int] = (2006, 2100)
MIN_TRACE_EPOCH_S: float = 1136073600.0  # 2006-01-01T00:00:00Z
MAX_TRACE_EPOCH_S: float = 4102444800.0  # 2100-01-01T00:00:00Z

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


#: how to fix a zero price (AWS, Azure and SkyPilot readers)
ZERO_PRICE_FIX = ("a spot price is never $0/h (a zero marks a missing value): remove the row so the previous price "
                  "carries on, or give the real price")


def _read_text(path: Path) -> str:
    """Read a whole trace file as UTF-8 text (BOM stripped); any failure is an :class:`InputError`.

    Only regular files are read (``/dev/zero``, FIFOs and sockets are refused before opening), and
    at most ``$SPOTWISE_MAX_FILE_MB`` MiB (default 256) -- see :mod:`spotwise.inputfiles`.
    """
    return read_input_text(path, "trace file", "pass a JSON or CSV trace file, not a binary file")


def _parse_json(text: str, where: str) -> object:
    fix = "pass the JSON exactly as the provider's API or the trace repository gives it"
    try:  # a trace is large and flat: only the nesting bomb's RecursionError is guarded (spotwise.safeparse)
        return loads_json(text, where, "trace file", bounded=False, fix=fix)
    except ValueError as exc:
        raise InputError(f"not valid JSON ({exc})", fix, where) from None


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
    if val == 0:  # no real trace holds one (issue 30 item 14): a $0 hour is a placeholder, and free capacity misplans
        raise InputError(f"{what}: price {raw!r} is zero", ZERO_PRICE_FIX, where)
    if val > MAX_PRICE_PER_HOUR:
        raise InputError(f"{what}: price {raw!r} is above {MAX_PRICE_PER_HOUR:g} $/h per instance",
                         "prices are dollars per hour per instance (no cloud instance costs that much): "
                         "fix the value or its unit", where)
    return val


def _utc_text(t: float) -> str:
    """Seconds since the epoch as ``2020-03-21T23:50:20Z`` (for messages)."""
    try:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return f"t={t:g}"


class PointLog:
    """The first value read at each time of one series, to refuse a later *different* value at the same
    time (issue 30 item 14: a repeated row with another price silently replaced the first everywhere).
    Exact repeats (same time, same value: overlapping dumps) are accepted."""

    def __init__(self, series: str) -> None:
        self.series = series
        self.first: dict[float, tuple[float, str]] = {}

    def add(self, t: float, value: float, row: str, where: str) -> None:
        prev = self.first.setdefault(t, (value, row))
        if prev[0] != value:
            raise InputError(f"two different prices for {self.series} at {_utc_text(t)}: {prev[0]:g} ({prev[1]}) and "
                             f"{value:g} ({row})", "keep one row per time (repeating a row with the same price is fine); "
                             "different prices at one instant mean the file is corrupted or two dumps were mixed", where)


def check_trace_time(t: float, raw: object, where: str, what: str) -> float:
    """``t`` (seconds since the epoch, read from ``raw``) when it lies within :data:`TRACE_YEARS`;
    else an :class:`InputError` naming the file (``where``), the row (``what``) and the value."""
    if MIN_TRACE_EPOCH_S <= t <= MAX_TRACE_EPOCH_S:
        return t
    side = f"before {TRACE_YEARS[0]}" if t < MIN_TRACE_EPOCH_S else f"after {TRACE_YEARS[1]}"
    raise InputError(f"{what}: time {raw!r} ({_utc_text(t)}) is {side}",
                     f"trace times must lie in {TRACE_YEARS[0]}-{TRACE_YEARS[1]} (EC2 opened in 2006; no spot market "
                     "has older prices): a year such as 1, 1970 or 9999 is a placeholder or a unit error, so fix the "
                     "timestamp or remove the row", where)


def _parse_iso8601(raw: object, where: str, what: str) -> float:
    """ISO 8601 timestamp (``2020-02-20T22:54:57.000Z``) -> seconds since the epoch (naive = UTC),
    within :data:`TRACE_YEARS` (:func:`check_trace_time`)."""
    if not isinstance(raw, str):
        raise InputError(f"{what}: timestamp {raw!r} is not a string", "use ISO 8601 timestamps such as 2020-02-20T22:54:57.000Z", where)
    s = raw.strip()
    try:
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        dt = datetime.fromisoformat(s)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        t = dt.timestamp()
    except (ValueError, OverflowError, OSError):
        raise InputError(f"{what}: bad timestamp {raw!r}", "use ISO 8601 timestamps such as 2020-02-20T22:54:57.000Z", where) from None
    return check_trace_time(t, raw, where, what)


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
