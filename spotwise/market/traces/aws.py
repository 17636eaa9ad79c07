"""The AWS spot price trace: ``DescribeSpotPriceHistory`` JSON as the API returns it (the traces of
``training_on_a_dime``, ``papers/003_c06237e546a4f08e.txt``, and the c5.xlarge history of
``papers/000_3c734f3ffedcac15.txt`` Sec. VI).  Common rules: :mod:`spotwise.market.traces`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.traces.common import (PathLike, PointLog, _as_paths, _parse_iso8601, _parse_json, _parse_price,
                                           _read_text, _region_of)


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
    * Exact duplicates (same time and price, e.g. overlapping dumps) are dropped; two different
      prices at the same instant are an :class:`InputError` naming both records.
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
    logs: dict[tuple[str, str, str], PointLog] = {}
    for path in plist:
        where = str(path)
        for i, (zone, itype, prod, t, price) in enumerate(_aws_records(_parse_json(_read_text(path), where), where)):
            key = (zone, itype, prod)
            # a repeat with another price is refused, naming both records; an exact repeat is fine
            logs.setdefault(key, PointLog(f"{zone} {itype}")).add(t, price, f"{path.name} SpotPriceHistory[{i}]", where)
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
