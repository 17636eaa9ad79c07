"""What ``spotwise traces show`` prints: per-series statistics as rows, JSON and a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotwise.market.counts import bucket_shares, count_shares, series_nodes
from spotwise.market.series import StepSeries, iso8601
from spotwise.reports import fmt_duration


def series_row(s: StepSeries) -> dict[str, Any]:
    """The statistics of one series, in the ``--json`` schema of ``spotwise traces show``.

    ``points`` is the number of change points held (raw ticks, for tick-based traces, are in
    ``ticks`` when the loader recorded them).  ``min``/``max``/``mean`` are of the series' values:
    $/h for prices (``mean`` time-weighted), instance counts for availability.  An availability row
    also holds ``nodes`` (the node count: a ``16-node`` trace folder's 16, else the largest value)
    and ``count_shares``, the time share at each count (``{"0": 0.41, "3": 0.02, ..., "16": 0.44}``,
    :func:`spotwise.market.counts.count_shares`; string keys, as JSON has no others).
    """
    row: dict[str, Any] = {
        "id": s.meta.id,
        "kind": s.kind,
        "cloud": s.meta.cloud,
        "region": s.meta.region,
        "instance": s.meta.instance,
        "zone": s.meta.zone,
        "points": len(s),
        "start": iso8601(s.start),
        "end": iso8601(s.end),
        "duration_s": s.duration,
        "min": s.min(),
        "max": s.max(),
        "mean": s.mean(),
        "source": s.meta.source,
    }
    if "ticks" in s.meta.extra:
        row["ticks"] = s.meta.extra["ticks"]
    if s.kind == "price":
        row["std"] = s.std()
        row["median"] = float(s.quantile(0.5))
    else:
        row["fraction_available"] = s.fraction_available()
        row["preemptions"] = int(s.preemption_times().size)
        row["mean_time_between_preemptions_s"] = s.mean_time_between_preemptions()
        row["nodes"] = series_nodes(s)
        row["count_shares"] = {str(c): share for c, share in count_shares(s).items()}
    return row


def _pct(share: float) -> str:
    if 0 < share < 0.005:
        return "<1%"
    if 0.995 <= share < 1:
        return ">99%"
    return f"{100 * share:.0f}%"


def format_count_shares(row: dict[str, Any]) -> str:
    """``"0: 41%, 1-7: 6%, 8-15: 9%, 16: 44%"`` from a row's ``nodes`` and ``count_shares``
    (partial counts folded into ranges for big node counts); ``"-"`` for a price row."""
    if "count_shares" not in row:
        return "-"
    shares = {int(c): float(v) for c, v in row["count_shares"].items()}
    return ", ".join(f"{b.label}: {_pct(b.share)}" for b in bucket_shares(shares, int(row["nodes"])))


def render_table(rows: list[dict[str, Any]]) -> Any:
    """A rich Table of the rows (prices in $/h; availability as time fraction, MTBP and the share of
    time at each count: :func:`format_count_shares`)."""
    from rich.table import Table

    from spotwise.reports.terminal_text import safe_cells

    table = Table(title=f"{len(rows)} series", show_lines=False)
    for col, just in [("id", "left"), ("kind", "left"), ("instance", "left"), ("zone/region", "left"),
                      ("points", "right"), ("start", "left"), ("end", "left"), ("min", "right"),
                      ("max", "right"), ("mean", "right"), ("avail.", "right"), ("MTBP", "right"),
                      ("time at each count", "left")]:
        table.add_column(col, justify=just, overflow="fold")  # type: ignore[arg-type]
    for r in rows:
        price = r["kind"] == "price"
        unit = (lambda v: f"${v:.4f}") if price else (lambda v: f"{v:.3g}")
        table.add_row(*safe_cells(  # ids, types and zones read from the trace files: text, never markup
            r["id"], r["kind"], r["instance"], r["zone"] or r["region"], str(r["points"]), r["start"], r["end"],
            unit(r["min"]), unit(r["max"]), unit(r["mean"]),
            "-" if price else f"{100 * r['fraction_available']:.1f}%",
            "-" if price else fmt_duration(r["mean_time_between_preemptions_s"]),
            format_count_shares(r),
        ))
    return table


def plot_series(series: list[StepSeries], path: str | Path, max_series: int = 40) -> Path:
    """Draw price series (top) and availability series (bottom) over time as step plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    import numpy as np

    prices = [s for s in series if s.kind == "price"][:max_series]
    avail = [s for s in series if s.kind == "availability"][:max_series]
    panels = [(p, "price ($/h)") for p in [prices] if p] + [(a, "available instances") for a in [avail] if a]
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 3.8 * len(panels)), squeeze=False)
    real_time = all(s.start > 1e8 for s in series)  # epoch seconds vs synthetic offsets
    for ax, (group, label) in zip(axes[:, 0], panels):
        for s in group:
            t = np.append(s.times, s.end)
            v = np.append(s.values, s.values[-1])
            x = np.array(t, dtype="datetime64[s]") if real_time else (t - t[0]) / 3600.0
            ax.step(x, v, where="post", linewidth=0.9, label=s.meta.id)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if real_time:
            ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
            ax.tick_params(axis="x", labelrotation=30)
        else:
            ax.set_xlabel("hours since start")
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1 if len(group) <= 20 else 2,
                  frameon=False)
        ax.set_title(f"{len(group)} {label.split(' (')[0]} series", fontsize=9)
    from spotwise.outputfiles import write_figure

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    try:
        write_figure(fig, out, "--plot", dpi=110)
    finally:
        plt.close(fig)
    return out
