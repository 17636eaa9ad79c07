"""The PNGs of a run report (``loss_vs_time.png``, ``loss_vs_cost.png`` -- with the on-demand baseline when one
was run --, ``workers_price.png``, ``training.png``: loss, samples/s and learning rate over wall-clock time),
drawn from a :class:`~spotwise.reports.run.data.RunData` by :func:`plot_run`.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.rundir_files import write_run_bytes
from spotwise.reports.run.data import MAX_PLOT_POINTS, PLOT_FILES, RunData, _fmt_s


# -------------------------------------------------------------------------------------------- plots


def _time_unit(t_max: float) -> tuple[float, str]:
    if t_max >= 3 * 3600:
        return 3600.0, "h"
    if t_max >= 10 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _thin(n: int, max_points: int = MAX_PLOT_POINTS) -> np.ndarray:
    """Indices of at most ~max_points evenly spaced samples, first and last included."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Centred moving mean ignoring NaN (NaN where the window holds no finite value)."""
    ok = np.isfinite(y)
    v = np.where(ok, y, 0.0)
    k = np.ones(window)
    num = np.convolve(v, k, mode="same")
    den = np.convolve(ok.astype(float), k, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _new_fig(figsize: tuple[float, float] = (11, 5)) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11, color="0.4")


def _plot_loss_line(ax: Any, x: np.ndarray, loss: np.ndarray, label: str = "training loss") -> bool:
    """Raw loss (thin, thinned) plus a moving mean when noisy; False when nothing finite."""
    ok = np.isfinite(x) & np.isfinite(loss)
    if not ok.any():
        return False
    xs, ys = x[ok], loss[ok]
    idx = _thin(xs.size)
    if xs.size == 1:
        ax.plot(xs, ys, "o", color="C0", label=label)
        return True
    if xs.size >= 50:
        ax.plot(xs[idx], ys[idx], color="C0", linewidth=0.6, alpha=0.35, label=f"{label} (per step)")
        sm = _smooth(ys, max(5, xs.size // 50))
        ax.plot(xs[idx], sm[idx], color="C0", linewidth=1.8, label=f"{label} (moving mean)")
    else:
        ax.plot(xs, ys, color="C0", linewidth=1.2, marker="." if xs.size < 30 else None, label=label)
    if ys.size > 1 and ys.min() > 0:
        lo, hi = np.percentile(ys, [1, 99])
        if hi / lo > 100:  # spans orders of magnitude (outliers alone do not count)
            ax.set_yscale("log")
    return True


def _vlines(ax: Any, x: np.ndarray, **kw: Any) -> None:
    x = x[np.isfinite(x)]
    if x.size:
        ax.vlines(x, 0, 1, transform=ax.get_xaxis_transform(), **kw)


def _merge_legends(ax: Any, *others: Any, loc: str = "upper right") -> None:
    handles, labels = ax.get_legend_handles_labels()
    for o in others:
        h, lab = o.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        ax.legend(handles, labels, loc=loc, fontsize=8, framealpha=0.85)


def _title(run: RunData, what: str) -> str:
    name = run.header.get("job") or run.out_dir.name
    return f"{what} - {name} ({run.summary.mode}, {run.summary.status})"


def _plot_loss_vs_time(run: RunData, path: Path, root: Path) -> Path:
    fig = _new_fig()
    ax = fig.add_subplot()
    div, unit = _time_unit(run.t_end)
    drew = _plot_loss_line(ax, run.step_t / div, run.step_loss)
    ok = np.isfinite(run.eval_t) & np.isfinite(run.eval_loss)
    if ok.any():
        ax.plot(run.eval_t[ok] / div, run.eval_loss[ok], "s--", color="C2", markersize=4, linewidth=1,
                label="held-out loss")
        drew = True
    if not drew:
        _empty(ax, "no finite loss recorded" if run.step_t.size else "no steps recorded")
    _vlines(ax, run.revoke_t / div, colors="C3", linewidth=0.7, alpha=0.5, label=f"revocation ({run.revoke_t.size})")
    ax2 = None
    okm = np.isfinite(run.eval_t) & np.isfinite(run.eval_metric)
    if okm.any():
        ax2 = ax.twinx()
        ax2.plot(run.eval_t[okm] / div, run.eval_metric[okm], "o-", color="C1", markersize=4, linewidth=1.2,
                 label=f"held-out {run.metric_name or 'metric'}")
        ax2.set_ylabel(f"held-out {run.metric_name or 'metric'}", color="C1")
        ax2.tick_params(axis="y", colors="C1")
    ax.set_xlim(0, run.t_end / div if run.t_end > 0 else 1.0)
    ax.set_xlabel(f"virtual time ({unit})")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.set_title(_title(run, "Loss over virtual time"))
    _merge_legends(ax, *([ax2] if ax2 else []))
    _save(fig, path, root)
    return path


def _plot_loss_vs_cost(run: RunData, path: Path, root: Path) -> Path:
    fig = _new_fig()
    ax = fig.add_subplot()
    drew = _plot_loss_line(ax, run.step_cost, run.step_loss)
    ok = np.isfinite(run.eval_t) & np.isfinite(run.eval_loss)
    okc = np.isfinite(run.step_t) & np.isfinite(run.step_cost)
    if ok.any() and okc.any():
        # evals carry no cost: read it off the cumulative step cost at the eval's time
        cost_at = np.interp(run.eval_t[ok], run.step_t[okc], run.step_cost[okc])
        ax.plot(cost_at, run.eval_loss[ok], "s--", color="C2", markersize=4, linewidth=1, label="held-out loss")
        drew = True
    base = _on_demand_curve(run)
    if base is not None:  # the measured on-demand run of the same samples (--compare-on-demand)
        ax.plot(base[0], base[1], color="C7", linewidth=1.2, alpha=0.9, label="on-demand baseline (same samples)")
        drew = True
    if not drew:
        _empty(ax, "no (cost, loss) pairs recorded" if run.step_t.size else "no steps recorded")
    ax.set_xlim(left=0)
    ax.set_xlabel("cumulative cost (USD)")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.set_title(_title(run, "Loss vs money spent") + f" - total ${run.summary.cost_usd:,.2f}")
    _merge_legends(ax)
    _save(fig, path, root)
    return path


def _on_demand_curve(run: RunData) -> tuple[np.ndarray, np.ndarray] | None:
    """(cumulative cost, loss) of the run's on-demand baseline (``OUT/on-demand``), if one was run."""
    from spotwise.events import read_events

    path = run.out_dir / "on-demand" / "events.jsonl"
    if not path.is_file() or path.is_symlink() or (run.out_dir / "on-demand").is_symlink():
        return None
    try:
        steps = list(read_events(path, kinds=["step"]))
    except InputError:
        return None
    pts = [(float(e["cost"]), float(e["loss"])) for e in steps
           if isinstance(e.get("cost"), (int, float)) and isinstance(e.get("loss"), (int, float))]
    if len(pts) < 2:
        return None
    arr = np.asarray(pts, dtype=float)
    return arr[:, 0], _smooth(arr[:, 1], max(1, min(len(pts), len(pts) // 50)))


def _active_timeline(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    """x, y (for steps-post) of the active-worker count.

    Exact when join/revoke events carry the ``active`` count after them (the runtimes write it):
    a step function through those changes.  Otherwise reconstructed from the steps (each covers
    ``[t - duration, t]``) and idle periods (0 active).
    """
    if run.member_t.size:
        order = np.argsort(run.member_t, kind="stable")
        xs = np.concatenate([[0.0], run.member_t[order], [max(run.t_end, float(run.member_t.max()))]])
        ys = np.concatenate([[0.0], run.member_active[order], [run.member_active[order][-1]]])
        return xs, ys
    segs: list[tuple[float, float, float]] = []
    ok = np.isfinite(run.step_t) & np.isfinite(run.step_active)
    start = run.step_t - np.nan_to_num(run.step_duration, nan=0.0)
    segs += [(float(a), float(b), float(v)) for a, b, v in zip(start[ok], run.step_t[ok], run.step_active[ok])]
    segs += [(float(a), float(b), 0.0) for a, b in zip(run.idle_start, run.idle_end) if np.isfinite(a) and np.isfinite(b)]
    if not segs:
        return np.empty(0), np.empty(0)
    segs.sort()
    # a value holds until the next segment starts (drawn with steps-post); equal runs merge
    xs, ys = [segs[0][0]], [segs[0][2]]
    for a, _, v in segs[1:]:
        if v != ys[-1]:
            xs.append(a)
            ys.append(v)
    xs.append(max(b for _, b, _ in segs))
    ys.append(ys[-1])
    return np.array(xs), np.array(ys)


def _provisioned_timeline(run: RunData, initial: float) -> tuple[np.ndarray, np.ndarray]:
    """Provisioned workers over time: the header's count, changed by acted-on ``Resize`` decisions."""
    xs, ys = [0.0], [initial]
    for d in run.decisions:
        m = re.match(r"Resize\(workers=(\d+)\)", str(d.get("decision", "")))
        t = d.get("t")
        if m and isinstance(t, (int, float)):
            xs.append(float(t))
            ys.append(float(m.group(1)))
    xs.append(max(run.t_end, xs[-1]))
    ys.append(ys[-1])
    return np.array(xs), np.array(ys)


def _plot_workers_price(run: RunData, path: Path, root: Path) -> Path:
    fig = _new_fig()
    ax = fig.add_subplot()
    div, unit = _time_unit(run.t_end)
    xs, ys = _active_timeline(run)
    if xs.size:
        ax.plot(xs / div, ys, color="C0", linewidth=1.4, label="active workers", drawstyle="steps-post")
    else:
        _empty(ax, "no steps recorded")
    prov = run.header.get("workers")
    if isinstance(prov, (int, float)) and not isinstance(prov, bool):
        px, py = _provisioned_timeline(run, float(prov))
        label = f"provisioned ({prov:g})" if len(set(py)) == 1 else f"provisioned ({prov:g} -> {py[-1]:g})"
        ax.plot(px / div, py, color="C0", linestyle=":", linewidth=1, alpha=0.7, label=label, drawstyle="steps-post")
    if run.idle_start.size:
        bars = [(a / div, (b - a) / div) for a, b in zip(run.idle_start, run.idle_end)]
        ax.broken_barh(bars, (0, 1), transform=ax.get_xaxis_transform(), facecolors="0.6", alpha=0.3,
                       label=f"idle ({_fmt_s(run.idle_s)})")
    _vlines(ax, run.notice_t / div, colors="C1", linewidth=0.8, linestyles="--", alpha=0.6,
            label=f"revocation notice ({run.notice_t.size})")
    _vlines(ax, run.revoke_t / div, colors="C3", linewidth=0.8, alpha=0.6, label=f"revocation ({run.revoke_t.size})")
    if run.join_t.size:
        ax.plot(run.join_t / div, np.zeros(run.join_t.size), "^", color="C2", markersize=5, clip_on=False,
                label=f"join ({run.join_t.size})")
    top = max([1.0, *(ys.tolist() if ys.size else []), *([float(prov)] if isinstance(prov, (int, float)) else [])])
    ax.set_ylim(0, top * 1.08)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlim(0, run.t_end / div if run.t_end > 0 else 1.0)
    ax.set_xlabel(f"virtual time ({unit})")
    ax.set_ylabel("active workers")
    ax.grid(alpha=0.3)
    ax2 = None
    price_word = "function price" if run.summary.mode == "serverless" else "spot price"
    if run.price_t.size:
        ax2 = ax.twinx()
        instances = list(dict.fromkeys(run.price_instance))
        inst_arr = np.array(run.price_instance)
        for i, inst in enumerate(instances[:8]):
            m = (inst_arr == inst) & np.isfinite(run.price)
            if not m.any():
                continue
            t = np.append(run.price_t[m], max(run.t_end, run.price_t[m][-1]))
            p = np.append(run.price[m], run.price[m][-1])
            ax2.step(t / div, p, where="post", color="C4" if i == 0 else f"C{(5 + i) % 10}", linewidth=1.1,
                     alpha=0.9, label=f"{price_word} {inst}")
        ax2.set_ylabel(f"{price_word} (USD/h)", color="C4")
        ax2.tick_params(axis="y", colors="C4")
        ax2.set_ylim(bottom=0)
    ax.set_title(_title(run, f"Workers and {price_word}"))
    _merge_legends(ax, *([ax2] if ax2 else []), loc="lower left")
    _save(fig, path, root)
    return path


def plot_run(run: RunData, out_dir: str | Path, root: str | Path | None = None) -> list[Path]:
    """Write ``loss_vs_time.png``, ``loss_vs_cost.png`` and ``workers_price.png`` into ``out_dir``.

    ``root`` (a run directory holding ``out_dir``): no folder between it and the PNGs may be a link
    (:mod:`spotwise.rundir_files`); without it, ``out_dir`` is the user's folder and only the PNG
    names themselves are never written through.
    """
    d = Path(out_dir) if root is not None else _dest(out_dir)
    base = Path(root) if root is not None else d
    out = [
        _plot_loss_vs_time(run, d / PLOT_FILES[0], base),
        _plot_loss_vs_cost(run, d / PLOT_FILES[1], base),
        _plot_workers_price(run, d / PLOT_FILES[2], base),
    ]
    out.append(_plot_training(run, d / PLOT_FILES[3], base))
    if run.script_metrics:
        out.append(_plot_script_metrics(run, d / METRICS_FILE, base))
    return out


def _plot_training(run: RunData, path: Path, root: Path) -> Path:
    """Three panels against the run's wall clock (minutes from its first committed step): the training
    loss, samples per second (a step's samples over the wall time since the previous commit, smoothed
    over 10 steps) with the active workers, and the learning rate of each step."""
    fig = _new_fig((11, 8))
    ok = np.isfinite(run.step_wall)
    if not ok.any():
        _empty(fig.add_subplot(), "no steps recorded")
        _save(fig, path, root)
        return path
    wall0 = float(run.step_wall[ok][0])
    div, unit = _time_unit(float(np.nanmax(run.step_wall) - wall0))
    minutes = (run.step_wall - wall0) / div
    ax1 = fig.add_subplot(3, 1, 1)
    if not _plot_loss_line(ax1, minutes, run.step_loss):
        _empty(ax1, "no finite loss recorded")
    ax1.set_ylabel("loss")
    ax1.grid(alpha=0.3)
    ax1.legend(loc="upper right", fontsize=8)
    ax2 = fig.add_subplot(3, 1, 2, sharex=ax1)
    samples = run.step_samples if run.step_samples.size == run.step_wall.size else np.full(run.step_wall.size, np.nan)
    dt = np.diff(run.step_wall)
    rate = np.full(run.step_wall.size, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate[1:] = np.where(dt > 0, samples[1:] / dt, np.nan)
    good = np.isfinite(rate)
    if good.sum() >= 2:
        ax2.plot(minutes[good], _smooth(rate[good], min(10, int(good.sum()))), color="C0", linewidth=1.2,
                 label="samples/s (10-step mean)")
        ax2.set_ylim(bottom=0)
    else:
        _empty(ax2, "no per-step samples recorded")
    ax2.set_ylabel("samples / s")
    ax2.grid(alpha=0.3)
    okw = np.isfinite(run.step_active)
    if okw.any():
        tw = ax2.twinx()
        tw.step(minutes[okw], run.step_active[okw], where="post", color="C2", linewidth=0.8, alpha=0.7,
                label="active workers")
        tw.set_ylabel("active workers", color="C2")
        tw.set_ylim(bottom=0)
        _merge_legends(ax2, tw)
    ax3 = fig.add_subplot(3, 1, 3, sharex=ax1)
    okl = np.isfinite(run.step_lr)
    if okl.any():
        ax3.plot(minutes[okl], run.step_lr[okl], color="C1", linewidth=1.2)
    else:
        _empty(ax3, "no learning rate recorded")
    ax3.set_ylabel("learning rate")
    ax3.set_xlabel(f"wall-clock time ({unit} from the first committed step)")
    ax3.grid(alpha=0.3)
    fig.suptitle(_title(run, "Training over wall-clock time"))
    _save(fig, path, root)
    return path


#: the chart of what a training script logged (issue 41 item 6), drawn when it logged anything
METRICS_FILE = "script_metrics.png"
#: at most this many logged metrics are drawn (the first ones logged)
MAX_METRIC_PLOTS = 6


def _plot_script_metrics(run: RunData, path: Path, root: Path) -> Path:
    """Each logged metric over the run's wall time (left) and its cumulative cost (right)."""
    names = list(run.script_metrics)[:MAX_METRIC_PLOTS]
    fig = _new_fig((11, 2.6 * len(names) + 0.6))
    okc = np.isfinite(run.step_n) & np.isfinite(run.step_cost)
    for i, name in enumerate(names):
        rows = run.script_metrics[name]
        step, wall, val = rows[:, 0], rows[:, 2], rows[:, 3]
        ax = fig.add_subplot(len(names), 2, 2 * i + 1)
        ax.plot(wall / 60.0, val, ".-", color="C0", markersize=3, linewidth=1)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax2 = fig.add_subplot(len(names), 2, 2 * i + 2)
        if okc.any():
            ax2.plot(np.interp(step, run.step_n[okc], run.step_cost[okc]), val, ".-", color="C1", markersize=3,
                     linewidth=1)
        else:
            _empty(ax2, "no step cost recorded")
        ax2.grid(alpha=0.3)
        if i == len(names) - 1:
            ax.set_xlabel("wall time (min)")
            ax2.set_xlabel("cumulative cost (USD)")
    fig.suptitle(_title(run, "What the training script logged"))
    _save(fig, path, root)
    return path


def _save(fig: Any, path: Path, root: Path) -> None:
    """``fig`` as a PNG at ``path`` inside ``root``, never through a link (:func:`~spotwise.rundir_files.write_run_bytes`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    write_run_bytes(root, path.relative_to(root), buf.getvalue(), fsync=False)


def _dest(out_dir: str | Path) -> Path:
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the report folder ({e.strerror})", "choose a writable folder", str(d)) from None
    return d
