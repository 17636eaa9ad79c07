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
timestamp or one outside :data:`TRACE_YEARS` (2006-2100: a year 1, 1970 or 9999), an unknown format -- raises :class:`~spotwise.errors.InputError` naming the file, the
row and the value and saying how to fix it; no other exception type escapes these loaders.
Bounding the values here keeps every statistic and cost computed from a trace finite (a price of
``1e308`` $/h would overflow the first time-weighted sum into ``inf``/``NaN``).

Where they live: one module per format (:mod:`spotwise.market.traces.aws`,
:mod:`~spotwise.market.traces.azure`, :mod:`~spotwise.market.traces.skypilot`,
:mod:`~spotwise.market.traces.gcp`), the caps and parsing helpers in
:mod:`spotwise.market.traces.common`, and the detection and :func:`load_traces` here (which re-exports
every public name).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from spotwise.errors import InputError
from spotwise.market.series import StepSeries
from spotwise.market.traces.aws import load_aws_spot_json
from spotwise.market.traces.azure import load_azure_price_csv
from spotwise.market.traces.common import (GCP_MAX_LIFETIME_S, MAX_AVAILABLE, MAX_PRICE_PER_HOUR, TRACE_YEARS,  # noqa: F401
                                           PathLike, TraceFormat, _SKIP_NAMES, _SUPPORTED, _as_paths, _parse_price, _read_text)
from spotwise.market.traces.gcp import LifetimeRecord, LifetimeTable, load_gcp_lifetime_csv, load_gcp_vm_data_csv  # noqa: F401
from spotwise.market.traces.skypilot import load_skypilot_json
from spotwise.safeparse import loads_json

__all__ = [
    "GCP_MAX_LIFETIME_S",
    "MAX_AVAILABLE",
    "MAX_PRICE_PER_HOUR",
    "TRACE_YEARS",
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


# ---------------------------------------------------------------------------------------------
# format detection and the one entry point
# ---------------------------------------------------------------------------------------------
def _sniff(text: str, path: Path) -> TraceFormat | None:
    stripped = text.lstrip()
    if stripped.startswith("{") or path.suffix.lower() == ".json":
        try:
            doc = loads_json(text, str(path), "trace file", bounded=False)
        except ValueError:  # not JSON; nested too deeply is an InputError (spotwise.safeparse) naming the file
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
    for f in entries:  # not only regular files: a FIFO, device or dead link is refused by _read_text (never opened) and noted
        if not f.is_dir() and f.name.lower() not in _SKIP_NAMES and not f.name.lower().startswith("readme"):
            yield f


def load_traces(paths: PathLike | Sequence[PathLike]) -> list[StepSeries]:
    """Load every series from files and directories, detecting each file's format.

    * A directory contributes every recognised file under it (recursively; linked folders are not
      walked into); ``SOURCE.txt``, ``README*``, licences and unrecognised files are skipped there, and
      a file that cannot be read (a FIFO, device, dead link, oversized or non-text file) is skipped
      with a warning naming it.  An
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
                    fmt = _sniff(_read_text(f), f)
                except InputError as exc:  # a FIFO, device, dead link, oversized, binary or nested too deeply: skipped, noted
                    log.warning("skipped %s: %s", f, exc.what)
                    continue
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
