"""GCP preemptible-VM lifetimes of the transient-servers study (``papers/002_a246f6afe29b4bfb.txt``
Sec. III, Fig. 3: GCE preemptible VMs live at most 24 h), loaded into a :class:`LifetimeTable` for the
lifetime revocation model.  Common rules: :mod:`spotwise.market.traces`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np

from spotwise.errors import InputError
from spotwise.market.traces.common import (GCP_MAX_LIFETIME_S, PathLike, _GCP_ZONE_RE, _csv_rows, _epoch, _read_text,
                                           check_trace_time)


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
            t = datetime.strptime(s, fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
        return check_trace_time(t, s, where, what)
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
            start = check_trace_time(_epoch(day) + (s_sec % 86400), f"{day.isoformat()} {second}", where, what)
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
