"""The Azure daily price CSV (``Date,NC12,...`` with ``$0.24552`` cells) of ``training_on_a_dime``.
Common rules: :mod:`spotwise.market.traces`.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

from spotwise.errors import InputError
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.traces.common import PathLike, PointLog, _csv_rows, _epoch, _parse_price, _read_text, check_trace_time


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
    column with no price at all yields no series.  A date repeated with the same prices is fine; with a
    different price, or a price of 0, it is an :class:`InputError` naming the line.  When ``mapping`` is true and an
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
    logs = [PointLog(f"{size!r}") for size in sizes]  # a date repeated with another price is refused
    for n, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"line {n} has {len(row)} cells, the header has {len(header)}", "give every row one date and one price per column", where)
        t = check_trace_time(_epoch(_parse_date(row[0], where, f"line {n}")), row[0].strip(), where, f"line {n}")
        for j, cell in enumerate(row[1:]):
            if cell.strip():
                cols[j].append((t, _parse_price(cell, where, f"line {n}, column {sizes[j]!r}")))
                logs[j].add(t, cols[j][-1][1], f"line {n}", where)
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
