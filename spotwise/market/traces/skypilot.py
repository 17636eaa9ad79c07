"""The SkyPilot spot availability / preemption JSON (``{"metadata": {"gap_seconds": N}, "data":
[...], "prices": [...]}``, Wu et al., NSDI'24).  Common rules: :mod:`spotwise.market.traces`.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import numpy as np

from spotwise.errors import InputError
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.traces.common import (MAX_AVAILABLE, MAX_PRICE_PER_HOUR, MAX_TRACE_EPOCH_S, TRACE_YEARS,
                                           ZERO_PRICE_FIX, PathLike, _MAX_EPOCH_S, _compress_runs, _epoch, _finite_number,
                                           _parse_json, _read_text, _region_of, check_trace_time)


# ---------------------------------------------------------------------------------------------
# SkyPilot
# ---------------------------------------------------------------------------------------------
_FOLDER_DATE_RE = re.compile(r"(?:^|[^0-9])(\d{1,2})-(\d{1,2})-(\d{4})(?:$|[^0-9])")
_FOLDER_NODES_RE = re.compile(r"^(\d+)-nodes?$")
#: how to fix a count above the node count the trace's folder names
NODES_FIX = ("a k-node trace counts at most k instances per tick: move the file to the folder of its "
             "node count, or fix the value")


def _folder_start(folder: str) -> float | None:
    """``aws-10-26-2022`` -> epoch of 2022-10-26T00:00Z (``None`` when no valid M-D-YYYY)."""
    m = _FOLDER_DATE_RE.search(folder)
    if not m:
        return None
    try:
        return _epoch(date(int(m.group(3)), int(m.group(1)), int(m.group(2))))
    except ValueError:
        return None


def _folder_nodes(folder: str) -> int | None:
    """``16-node`` (or ``16-nodes``) -> 16; ``None`` for any other name.  ``0-node`` gives 0 and a huge
    count stays huge: :func:`load_skypilot_json` refuses a count outside 1 .. :data:`MAX_AVAILABLE`."""
    m = _FOLDER_NODES_RE.match(folder)
    if not m or len(m.group(1)) > 12:  # 13+ digits: far above MAX_AVAILABLE; no int() of a 5000-digit name
        return None if not m else 10 ** 12
    return int(m.group(1))


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
    (``aws-10-26-2022`` -> 2022-10-26T00:00Z; a date outside 2006-2100, or ticks that run past 2100
    from it, are refused) or 0 when the folder has none.  The file name gives
    zone and instance (``us-west-2b_v100_1.json`` -> zone ``us-west-2b``, instance ``v100_1``,
    i.e. one V100); the folder prefix gives the cloud (``aws-``/``gcp-``).

    **Points**: runs of equal consecutive values are compressed to their first tick, so
    ``len(series)`` is the number of value changes + 1; the raw tick count is kept in
    ``meta.extra["ticks"]`` and the tick length in ``meta.extra["gap_seconds"]``.  Time-weighted
    statistics and preemption times are unaffected by the compression.

    **Node count**: when the folder above the dated one is named ``<k>-node`` (or ``<k>-nodes``),
    as in SkyPilot's ``availability/16-node/aws-08-27-2023/us-east-2b_v100_1.json``, the trace
    was collected for a ``k``-node job: every series of the file gets ``meta.extra["nodes"] = k``
    (an int) and ``data`` counts nodes from 0 to ``k`` (``1-node`` traces are 0/1).  A value above
    ``k`` is refused (:class:`~spotwise.errors.InputError`).  Without such a folder no ``"nodes"``
    key is set.  :func:`spotwise.market.counts.count_shares` gives the time share at each count.

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
    whole = np.nonzero(data != np.floor(data))[0]
    if whole.size:  # a count of instances: 2.5 would be floored to 2 by every reader without a word
        raise InputError(f"data[{int(whole[0])}] = {doc['data'][int(whole[0])]!r} is not a whole number of instances",
                         "'data' counts the instances available on each tick (0/1, or 0..k for a k-node trace)", where)
    nodes_folder = p.parent.parent.name
    nodes = _folder_nodes(nodes_folder)
    if nodes is not None and not 1 <= nodes <= MAX_AVAILABLE:
        raise InputError(f"its folder '{nodes_folder}' names {'more than 1e12' if nodes >= 10 ** 12 else nodes} nodes, "
                         f"not a node count from 1 to {MAX_AVAILABLE:g}", "a k-node trace lives under a folder named "
                         "<k>-node with k >= 1 (SkyPilot's 1-node, 4-node, 16-node): move the file, or rename the folder", where)
    if nodes is not None and np.any(data > nodes):
        i = int(np.nonzero(data > nodes)[0][0])
        raise InputError(f"data[{i}] = {doc['data'][i]!r} is above the {nodes} nodes its folder '{nodes_folder}' names",
                         NODES_FIX, where)
    prices = None
    if doc.get("prices") is not None:
        prices = _number_list(doc["prices"], "prices", where, MAX_PRICE_PER_HOUR, "$/h per instance")
        if prices.size != data.size:
            raise InputError(f"'prices' has {prices.size} entries but 'data' has {data.size}", "give one price per tick", where)
        if np.any(prices == 0):  # no real trace holds one (issue 30 item 14)
            raise InputError(f"prices[{int(np.nonzero(prices == 0)[0][0])}] is zero", ZERO_PRICE_FIX, where)
    folder = p.parent.name
    start = _folder_start(folder)
    if start is not None:  # a dated folder (aws-10-26-2022) must name a year a trace can have
        check_trace_time(start, folder, where, f"the date of the folder {folder!r}")
    t0 = 0.0 if start is None else start
    stem = p.stem
    zone, _, instance = stem.partition("_")
    cloud = folder.split("-", 1)[0].lower() if folder.split("-", 1)[0].lower() in ("aws", "gcp", "azure") else ""
    end = t0 + gap * data.size
    if end > _MAX_EPOCH_S:
        raise InputError(f"{data.size} ticks of metadata.gap_seconds = {gap:g} s end after the year 9999",
                         "give the tick length in seconds (SkyPilot traces use e.g. 600)", where)
    if start is not None and end > MAX_TRACE_EPOCH_S:
        raise InputError(f"{data.size} ticks of metadata.gap_seconds = {gap:g} s from {folder!r} end after {TRACE_YEARS[1]}",
                         "give the tick length in seconds (SkyPilot traces use e.g. 600), or fix the folder's date", where)
    times = t0 + gap * np.arange(data.size, dtype=float)
    base = f"skypilot/{folder}:{zone}:{instance}" if instance else f"skypilot/{folder}:{stem}"
    extra: dict[str, object] = {"ticks": int(data.size), "gap_seconds": gap, "start_from_folder": start is not None}
    if nodes is not None:
        extra["nodes"] = nodes
    common = dict(cloud=cloud, region=_region_of(zone), zone=zone, instance=instance, source=where)
    t, v = _compress_runs(times, data)
    out = [StepSeries(t, v, end, SeriesMeta(id=base, kind="availability", extra=dict(extra), **common))]
    if prices is not None:
        t, v = _compress_runs(times, prices)
        out.append(StepSeries(t, v, end, SeriesMeta(id=base + ":price", kind="price", extra=dict(extra), **common)))
    return out
