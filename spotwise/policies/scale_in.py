"""Scale-in auto-tuner (MLLess, ``papers/004_9dc2adb66dc8d26e.txt`` Sec. 4.2 "Scale-in Scheduler",
eq. (1)-(3); evaluation settings in Sec. 5, "Scale-in auto-tuner").

From an initial pool of ``P`` workers the scheduler removes workers one at a time once the
learning curve has passed its "knee", as long as the projected loss with fewer workers does not
deviate too much from the reference curve of the full pool:

* **Knee** -- a threshold on the first derivative of the (EWMA-filtered) learning curve
  (:func:`detect_knee`).  No worker is ever removed before the knee.
* **Reference curve** eq. (2): ``L_P(t) = 1 / (theta0 t^theta1 + theta2) + theta3``, fitted on the
  loss history up to the knee (:func:`fit_reference_curve`); reference step duration ``d_P`` =
  mean duration of the training steps up to the knee.
* **Slow-convergence curve** eq. (3): ``l_p(t) = 1 / (theta0 t^2 + theta1 t + theta2) + theta3``,
  fitted only on the losses since the last worker removal (:func:`fit_slow_model`); current step
  duration ``d_p`` = mean duration of the steps since the last removal.
* **Decision** eq. (1): ``s_Delta(t)`` = relative deviation of ``l_p(t + floor(Delta/d_p))``
  from ``L_P(t + floor(Delta/d_P))`` (:func:`s_delta`); remove one worker when
  ``s_Delta(t) < S``.  At most one removal per scheduling interval (20 s in the paper's
  evaluation, ``Delta = 10 s`` = half of it).

What the policy reads from :attr:`Observation.extra` (pure: nothing else, no hidden state):

``"loss_history"`` (required)
    Sequence of rows ``(step, t, loss)`` or ``(step, t, loss, workers)``: committed step count,
    seconds on the same clock as :attr:`Observation.t`, training loss (> 0), and optionally the
    active workers that ran that step.  Rows in increasing ``step`` order, from the start of the
    run (the knee is found on the whole history; a truncated history moves it).  Without it, or
    with fewer than ``min_fit_points`` rows, the policy decides nothing.
``"step_durations"`` (optional)
    Sequence of ``(step, seconds)``: the measured duration of each training step.  When absent,
    durations are derived from ``loss_history`` as ``(t_i - t_{i-1}) / (step_i - step_{i-1})``.
``"last_resize_t"`` (optional)
    Time (seconds, same clock) of the last worker removal, or ``None`` for none.  When absent and
    the rows carry a ``workers`` column, the last removal is the first row at which ``workers``
    dropped below the previous row's.  When neither is given, no removal is assumed to have
    happened -- an executor that does not report removals makes this policy remove a worker at
    every call past the knee, so it must pass one or the other.

Exactly the paper's: eq. (1)-(3) and their non-negative coefficients; the fit of ``L_P`` on the
history up to the knee and of ``l_p`` only on the losses since the last removal; ``d_P`` and
``d_p`` as mean step durations over the same spans; ``floor(Delta/d)`` steps of look-ahead;
EWMA filtering before every fit; removal of one worker at a time; never before the knee; the
first removal right after the knee (the paper removes a worker once ``L_P`` and ``d_P`` are
estimated, then applies eq. (1) each interval: ``remove_at_knee=True``); the defaults
``interval_s=20`` and ``delta_s=10``; ``S`` in ``[0, 1]``.

Choices made where the paper is not specific (or is inconsistent):

* **Sign of eq. (1).**  As printed the numerator is ``L_P - l_p``, but the text says ``s_Delta``
  measures how much convergence *worsens* with ``p`` workers and that a negative value means
  removing workers *helped*; with "remove when ``s_Delta < S``" only
  ``(l_p - L_P) / L_P`` is consistent with that, so :func:`s_delta` uses it.
* **Fitting.**  The paper cites SciPy's ``curve_fit`` [6] as its "non-negative least squares
  solver".  Here both models are linearised and solved with :func:`scipy.optimize.nnls`: for a
  fixed asymptote ``theta3`` (and, in eq. (2), a fixed exponent ``theta1``), ``1/(L - theta3)`` is
  a non-negative combination of the basis ``(t^theta1, 1)`` (eq. 2) or ``(t^2, t, 1)`` (eq. 3);
  ``theta3`` over ``[0, min loss)`` and ``theta1`` over ``theta1_grid`` are searched on a coarse
  grid refined once around the best point, which is chosen by the squared error *in loss
  space*.  ``t`` is the step count (``t := current training step`` in eq. 1), absolute also for
  ``l_p``.
* **Knee.**  The "threshold on the first derivative" is applied to the secant slope
  ``-(L_i - L_{i-w}) / (s_i - s_{i-w})`` of the filtered curve; by default (``relative=True``)
  the threshold is a fraction of the steepest slope seen so far (scale-free in loss and step
  units), and the knee is the first step at which the slope falls below it.  Defaults
  ``knee_slope=0.1``, ``knee_window=5``.
* **Threshold** ``S``: the paper gives no value; default ``threshold=0.05``.  EWMA factor: default
  ``ewma_alpha=0.9`` (``s_i = alpha x_i + (1 - alpha) s_{i-1}``): the EWMA lags the steep part of
  the curve before the knee, and ``L_P`` is extrapolated far beyond it -- on a noiseless curve of
  eq. (2) the projection 5x past the knee is off by 30 % with alpha 0.3, 18 % with 0.5, 2.5 %
  with 0.9 (lower it for noisy losses).  ``min_fit_points=8``.
* **Which worker** leaves (the paper evicts the lowest-quality replica) is the executor's
  business: the decision is ``Resize(workers=active - 1)``, never below ``min_workers``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import nnls

from spotwise.policies.base import Decision, Observation, Policy, Resize
from spotwise.policies.schema import check_scale_in

#: default exponents searched for ``theta1`` of eq. (2) (coarse grid, refined around the best)
DEFAULT_THETA1_GRID: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(1, 61))  # 0.05 .. 3.0
_THETA3_POINTS = 40


def ewma(values: Sequence[float], alpha: float) -> np.ndarray:
    """Exponentially weighted moving average, ``s_0 = x_0``, ``s_i = alpha x_i + (1-alpha) s_{i-1}``
    (the paper's outlier filter before curve fitting, 004 Sec. 4.2 "Loss deviation")."""
    if not 0 < alpha <= 1:
        raise ValueError(f"ewma: alpha must be in (0, 1], got {alpha!r}")
    x = np.asarray(values, dtype=float)
    out = np.empty_like(x)
    acc = 0.0
    for i, v in enumerate(x):
        acc = v if i == 0 else alpha * v + (1 - alpha) * acc
        out[i] = acc
    return out


def detect_knee(steps: Sequence[float], losses: Sequence[float], slope_threshold: float,
                window: int = 1, relative: bool = True) -> int | None:
    """The knee of a learning curve: the first step at which the descent slope
    ``-(L_i - L_{i-w}) / (s_i - s_{i-w})`` falls below ``slope_threshold`` (004 Sec. 4.2,
    "Automatic knee detection": a threshold on the first derivative of the learning curve).

    With ``relative=True`` the threshold is ``slope_threshold`` times the steepest descent slope
    seen up to that point (only after the curve has descended at all); otherwise it is absolute
    (loss per step).  Depends only on the prefix up to the knee, so it stays put as the history
    grows.  Returns the step (an element of ``steps``), or ``None`` if not reached yet.
    """
    if not slope_threshold > 0 or (relative and not slope_threshold < 1):
        raise ValueError("detect_knee: slope_threshold must be > 0 (and < 1 when relative)")
    if window < 1:
        raise ValueError("detect_knee: window must be >= 1")
    s = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError("detect_knee: steps and losses must be 1-D sequences of the same length")
    if np.any(np.diff(s) <= 0):
        raise ValueError("detect_knee: steps must be strictly increasing")
    steepest = 0.0
    for i in range(window, len(s)):
        slope = -(y[i] - y[i - window]) / (s[i] - s[i - window])
        if relative:
            steepest = max(steepest, slope)
            if steepest > 0 and slope < slope_threshold * steepest:
                return int(s[i]) if float(s[i]).is_integer() else s[i]  # type: ignore[return-value]
        elif slope < slope_threshold:
            return int(s[i]) if float(s[i]).is_integer() else s[i]  # type: ignore[return-value]
    return None


@dataclass(frozen=True)
class FittedCurve:
    """A fitted learning curve; call it with steps.  ``kind`` is ``"reference"`` (eq. 2,
    ``theta = (theta0, theta1, theta2, theta3)``) or ``"slow"`` (eq. 3, same order);
    ``sse`` the squared error on the fitted losses."""

    kind: str
    theta: tuple[float, float, float, float]
    sse: float

    def __call__(self, t: float | Sequence[float] | np.ndarray) -> Any:
        tt = np.asarray(t, dtype=float)
        a, b, c, d = self.theta
        with np.errstate(divide="ignore", over="ignore"):
            den = a * tt ** b + c if self.kind == "reference" else a * tt ** 2 + b * tt + c
            val = np.where(den > 0, 1.0 / np.where(den > 0, den, 1.0), np.inf) + d
        return float(val) if val.ndim == 0 else val


def _check_curve(steps: Sequence[float], losses: Sequence[float], who: str, need: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(steps, dtype=float)
    y = np.asarray(losses, dtype=float)
    if t.shape != y.shape or t.ndim != 1:
        raise ValueError(f"{who}: steps and losses must be 1-D sequences of the same length")
    if len(t) < need:
        raise ValueError(f"{who}: needs at least {need} points, got {len(t)}")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"{who}: steps must be finite and >= 0")
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ValueError(f"{who}: losses must be finite and > 0 (eq. 2/3 model positive losses)")
    return t, y


def _nnls_basis(basis: np.ndarray, y: np.ndarray, theta3: float) -> tuple[np.ndarray, float]:
    """NNLS of ``1/(y - theta3)`` on the columns of ``basis`` (scaled for conditioning); returns the
    coefficients and the squared error of the implied curve in loss space."""
    target = 1.0 / (y - theta3)
    scale = np.max(np.abs(basis), axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(basis / scale, target)
    coef = coef / scale
    den = basis @ coef
    if np.any(den <= 0):
        return coef, math.inf
    pred = 1.0 / den + theta3
    return coef, float(np.sum((pred - y) ** 2))


def _theta3_grid(lo: float, hi: float, n: int) -> np.ndarray:
    return np.linspace(lo, hi, n)


def fit_reference_curve(steps: Sequence[float], losses: Sequence[float],
                        theta1_grid: Sequence[float] = DEFAULT_THETA1_GRID) -> FittedCurve:
    """Fit eq. (2) of 004 Sec. 4.2, ``L_P(t) = 1/(theta0 t^theta1 + theta2) + theta3`` with all
    ``theta >= 0``, by NNLS (:func:`scipy.optimize.nnls`) on the basis ``(t^theta1, 1)`` of
    ``1/(L - theta3)``, searching ``theta1`` over ``theta1_grid`` and ``theta3`` over
    ``[0, min L)``, then once more on a finer grid around the best pair (see the module docstring).
    """
    t, y = _check_curve(steps, losses, "fit_reference_curve", 5)
    grid1 = np.asarray(sorted(set(float(g) for g in theta1_grid)), dtype=float)
    if grid1.size == 0 or np.any(grid1 <= 0) or not np.all(np.isfinite(grid1)):
        raise ValueError("fit_reference_curve: theta1_grid must be non-empty finite values > 0")
    ymin = float(np.min(y))
    ones = np.ones_like(t)

    def search(g1: np.ndarray, g3: np.ndarray) -> tuple[float, float, np.ndarray, float]:
        best: tuple[float, float, np.ndarray, float] = (0.0, 0.0, np.zeros(2), math.inf)
        for th1 in g1:
            basis = np.column_stack([t ** th1, ones])
            for th3 in g3:
                coef, sse = _nnls_basis(basis, y, th3)
                if sse < best[3]:
                    best = (float(th1), float(th3), coef, sse)
        return best

    g3 = _theta3_grid(0.0, ymin * (1 - 1e-3), _THETA3_POINTS)
    th1, th3, coef, sse = search(grid1, g3)
    # one refinement around the best point
    d1 = float(np.min(np.diff(grid1))) if grid1.size > 1 else th1 / 2
    d3 = float(g3[1] - g3[0])
    fine1 = np.linspace(max(th1 - d1, 1e-3), th1 + d1, 21)
    fine3 = _theta3_grid(max(th3 - d3, 0.0), min(th3 + d3, ymin * (1 - 1e-6)), 21)
    r = search(fine1, fine3)
    if r[3] < sse:
        th1, th3, coef, sse = r
    return FittedCurve("reference", (float(coef[0]), th1, float(coef[1]), th3), sse)


def fit_slow_model(steps: Sequence[float], losses: Sequence[float]) -> FittedCurve:
    """Fit eq. (3) of 004 Sec. 4.2, ``l_p(t) = 1/(theta0 t^2 + theta1 t + theta2) + theta3`` with
    all ``theta >= 0``, by NNLS on the basis ``(t^2, t, 1)`` of ``1/(l - theta3)``, searching
    ``theta3`` over ``[0, min l)`` (coarse grid, refined once).  The paper fits it on the losses
    since the last worker removal only; pass just those."""
    t, y = _check_curve(steps, losses, "fit_slow_model", 4)
    basis = np.column_stack([t ** 2, t, np.ones_like(t)])
    ymin = float(np.min(y))

    def search(g3: np.ndarray) -> tuple[float, np.ndarray, float]:
        best: tuple[float, np.ndarray, float] = (0.0, np.zeros(3), math.inf)
        for th3 in g3:
            coef, sse = _nnls_basis(basis, y, th3)
            if sse < best[2]:
                best = (float(th3), coef, sse)
        return best

    g3 = _theta3_grid(0.0, ymin * (1 - 1e-3), _THETA3_POINTS)
    th3, coef, sse = search(g3)
    d3 = float(g3[1] - g3[0])
    r = search(_theta3_grid(max(th3 - d3, 0.0), min(th3 + d3, ymin * (1 - 1e-6)), 41))
    if r[2] < sse:
        th3, coef, sse = r
    return FittedCurve("slow", (float(coef[0]), float(coef[1]), float(coef[2]), th3), sse)


def s_delta(reference: Any, slow: Any, t: float, delta_s: float, d_ref: float, d_cur: float) -> float:
    """Eq. (1) of 004 Sec. 4.2: the relative deviation of the loss projected ``Delta`` seconds
    ahead with the current ``p`` workers from the reference curve of all ``P`` workers,

        s_Delta(t) = (l_p(t + floor(Delta/d_p)) - L_P(t + floor(Delta/d_P))) / L_P(t + floor(Delta/d_P)),

    ``reference`` = ``L_P`` and ``slow`` = ``l_p`` (callables of the step), ``t`` the current step,
    ``d_ref`` = ``d_P`` and ``d_cur`` = ``d_p`` (seconds per step).  The numerator's sign follows the
    paper's text (positive = worse with fewer workers), not its printed formula (module docstring).
    """
    if not delta_s > 0 or not d_ref > 0 or not d_cur > 0:
        raise ValueError("s_delta: delta_s, d_ref and d_cur must be > 0")
    if not t >= 0:
        raise ValueError("s_delta: t must be >= 0")
    ref = float(reference(t + math.floor(delta_s / d_ref)))
    cur = float(slow(t + math.floor(delta_s / d_cur)))
    if not ref > 0 or not math.isfinite(ref):
        raise ValueError(f"s_delta: the reference curve must be finite and > 0 there, got {ref!r}")
    return (cur - ref) / ref


@functools.lru_cache(maxsize=32)
def _cached_reference(steps: tuple[float, ...], losses: tuple[float, ...]) -> FittedCurve:
    # memoisation of a pure function (the reference data is fixed once the knee is past)
    return fit_reference_curve(steps, losses)


def _mean_duration(rows: list[tuple[float, float]], durations: list[tuple[float, float]] | None,
                   lo_step: float, hi_step: float) -> float | None:
    """Mean seconds per step over steps in ``(lo_step, hi_step]``."""
    if durations is not None:
        sel = [d for s, d in durations if lo_step < s <= hi_step]
        return float(np.mean(sel)) if sel else None
    sel_rows = [(s, t) for s, t in rows if lo_step <= s <= hi_step]
    if len(sel_rows) < 2 or sel_rows[-1][0] <= sel_rows[0][0]:
        return None
    d = (sel_rows[-1][1] - sel_rows[0][1]) / (sel_rows[-1][0] - sel_rows[0][0])
    return d if d > 0 else None


@dataclass(frozen=True)
class ScaleIn(Policy):
    """MLLess's scale-in auto-tuner (004 Sec. 4.2) as a pure :class:`Policy`; see the module
    docstring for the ``obs.extra`` keys it reads and for what is the paper's and what is not."""

    name: ClassVar[str] = "scale-in"
    threshold: float = 0.05
    delta_s: float = 10.0
    interval_s: float = 20.0
    min_workers: int = 1
    knee_slope: float = 0.1
    knee_window: int = 5
    knee_relative: bool = True
    ewma_alpha: float = 0.9
    min_fit_points: int = 8
    remove_at_knee: bool = True

    def __post_init__(self) -> None:
        check_scale_in(self.threshold, self.delta_s, self.interval_s, self.min_workers, self.knee_slope, self.knee_window,
                       self.knee_relative, self.ewma_alpha, self.min_fit_points, self.remove_at_knee)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.provisioned - 1 < self.min_workers:  # the pool, not who is up now: a revoked worker comes back
            return []
        raw = obs.extra.get("loss_history")
        if not raw or len(raw) < self.min_fit_points:
            return []
        rows = [tuple(r) for r in raw]
        if any(len(r) not in (3, 4, 5) for r in rows):
            raise ValueError("scale-in: obs.extra['loss_history'] rows must be (step, t, loss) or "
                             "(step, t, loss, workers[, mini-batches per worker])")
        steps = [float(r[0]) for r in rows]
        times = [float(r[1]) for r in rows]
        smooth = ewma([float(r[2]) for r in rows], self.ewma_alpha)
        knee = detect_knee(steps, smooth, self.knee_slope, self.knee_window, self.knee_relative)
        if knee is None or obs.step < knee:
            return []  # never before the knee
        k = steps.index(float(knee))
        t_knee = times[k]
        # the last removal: reported, or read off the workers column
        if "last_resize_t" in obs.extra:
            last = obs.extra["last_resize_t"]
            t_last = None if last is None else float(last)
        else:
            t_last = None
            if all(len(r) >= 4 for r in rows):
                for prev, cur in zip(rows, rows[1:]):
                    if cur[3] < prev[3]:
                        t_last = float(cur[1])
        if t_last is not None and obs.t - t_last < self.interval_s:
            return []  # at most one removal per scheduling interval
        pos = [(s, t) for s, t in zip(steps, times)]
        dur_raw = obs.extra.get("step_durations")
        durations = None if dur_raw is None else [(float(s), float(d)) for s, d in dur_raw]
        if k + 1 < self.min_fit_points:
            return []
        reference = _cached_reference(tuple(steps[:k + 1]), tuple(float(v) for v in smooth[:k + 1]))
        d_ref = _mean_duration(pos, durations, -math.inf if durations is not None else steps[0], knee)
        if d_ref is None:
            return []
        removed_since_knee = t_last is not None and t_last >= t_knee
        if not removed_since_knee and self.remove_at_knee:
            return [Resize(reason=f"past the knee at step {knee}: L_P fitted (eq. 2), d_P = {d_ref:.3g} s; first removal "
                                  f"{obs.provisioned} -> {obs.provisioned - 1} workers (paper 004 Sec. 4.2)", workers=obs.provisioned - 1)]
        since = t_last if removed_since_knee else t_knee
        seg = [i for i, t in enumerate(times) if t >= since]  # type: ignore[operator]
        if len(seg) < self.min_fit_points:
            return []
        slow = fit_slow_model([steps[i] for i in seg], [float(smooth[i]) for i in seg])
        d_cur = _mean_duration(pos, durations, steps[seg[0]], steps[seg[-1]])
        if d_cur is None:
            return []
        s = s_delta(reference, slow, float(obs.step), self.delta_s, d_ref, d_cur)
        if s < self.threshold:
            return [Resize(reason=f"s_Delta = {s:.4f} < S = {self.threshold:g} (eq. 1, Delta = {self.delta_s:g} s, "
                                  f"d_P = {d_ref:.3g} s, d_p = {d_cur:.3g} s): {obs.provisioned} -> {obs.provisioned - 1} workers "
                                  f"(paper 004 Sec. 4.2)", workers=obs.provisioned - 1)]
        return []
