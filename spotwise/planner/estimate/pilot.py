"""Constants from data: fit the planner's error and runtime models to a pilot run.

The planner (``papers/000_3c734f3ffedcac15.txt`` Sec. IV-V) needs

(a) the constants of the Thm 1 error bound (:class:`spotwise.theory.bounds.ErrorModel`), and
(b) the distribution of the per-iteration runtime (:class:`spotwise.theory.runtime.RuntimeModel`).

Neither can be read off a spec, so this module measures them from a short pilot.

Error model (Thm 1, eq. (10))
-----------------------------
With a constant ``E[1/y] = v`` the bound after ``J`` updates is
``beta^J G1 + floor (1 - beta^J)`` with ``beta = 1 - alpha c mu`` and
``floor = alpha L M v / (2 c mu)``, i.e. ``floor + (G1 - floor) beta^J``.  A step event's loss is
computed at the weights *before* that step's update, so the loss of step ``j`` (1-based) is
``G(w_j)``, i.e. ``J = j - 1`` updates.  :func:`fit_error_model` fits::

    loss_j - g_star  ~=  A beta^(j-1) + F          (0 < beta < 1, A >= 0, F >= 0)

to the (running-median smoothed) losses and maps it to an ``ErrorModel``:

=========  ===========================================  =======================================
constant   value                                        why
=========  ===========================================  =======================================
``alpha``  ``lr``                                       the step size the pilot ran with
``c``      ``1``                                        assumed (only ``alpha c mu`` is identifiable)
``mu``     ``(1 - beta) / alpha``                       so that ``1 - alpha c mu = beta``
``L``      ``1``                                        assumed (only ``alpha L M d / (c mu)`` is)
``d``      ``1``                                        assumed (``E[1/y] = d / n``, Thm 2)
``M``      ``2 c mu F workers / (alpha L d)``           so that ``floor(1/workers) = F``
``G1``     ``A + F``                                    the fitted gap above ``g_star`` at ``J=0``
=========  ===========================================  =======================================

so that ``error_bound(J, model, 1/workers) == A beta^J + F`` exactly (tested).  The floor scales
as ``1/workers`` for other worker counts, which is the paper's assumption, not something a single
pilot measures.  ``G1`` is the *gap* ``G(w_1) - G*``; with ``g_star = 0`` (the default) this is the
paper's ``G* >= 0`` convention (``G1 = E[G(w_1)]``), for cross-entropy losses a safe lower bound.

Runtime model
-------------
:func:`fit_runtime` fits a shifted exponential ``r = shift + Exp(mean)`` (the straggler law of the
emulated provider, ``m ((1-s) + s Exp(1))``, is exactly of this form), tests it with a
Kolmogorov-Smirnov statistic whose p-value comes from a parametric bootstrap (Lilliefors: the
parameters are estimated from the same sample, so the textbook KS table would be too lenient),
and also builds the empirical (bootstrap) model.  The exponential model is chosen unless the test
rejects at 5 %.  The shift is carried in ``RuntimeModel.delta``: the order statistics of
``shift + Exp`` are ``shift +`` those of ``Exp``, so this is exact for full and N-sync SGD and an
approximation for N-batch SGD (whose renewal processes pay the shift on every mini-batch).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from spotwise.errors import InputError
from spotwise.theory.bounds import ErrorModel
from spotwise.planner.estimate.user_calls import Heartbeat, run_bounded
from spotwise.planner.estimate.runtime_fit import KS_LEVEL, MIN_POINTS, RuntimeFit, fit_runtime  # noqa: F401  (re-exported)
from spotwise.planner.estimate.pilot_training import (  # noqa: F401  (PilotSkipped, PILOT_BUDGET_S re-exported)
    PILOT_BUDGET_S, PilotClock, PilotSkipped, recipe_steps, sgd_steps, trains_on_gpus)
from spotwise.theory.runtime import MiniBatchTimeLaw

#: the most steps :func:`run_pilot` runs (the planner caps it lower, at the job's own length)
MAX_PILOT_STEPS = 100_000
_BETA_MAX = 1.0 - 1e-9

__all__ = [
    "PilotFit", "assumed_error_model", "reliability_problems", "MAX_PILOT_STEPS", "MIN_R2", "MIN_FLOOR_FRACTION", "RuntimeFit", "fit_error_model", "fit_runtime", "pilot_from_run", "run_pilot", "thm1_curve",
    "smooth_losses",
]


# =============================================================================== error model
@dataclass(frozen=True)
class PilotFit:
    """Thm 1 constants fitted to a pilot's losses.

    ``model`` is the :class:`ErrorModel`; ``beta``, ``A``, ``F`` the fitted curve
    ``loss_j - g_star = A beta^(j-1) + F``; ``r2`` its coefficient of determination against the
    smoothed losses it was fitted to (``r2_raw``: against the raw losses, lower for noisy SGD);
    ``n_points`` the number of losses used; ``notes`` what was measured and what was assumed.
    """

    model: ErrorModel
    beta: float
    A: float
    F: float
    g_star: float
    r2: float
    n_points: int
    notes: list[str] = field(default_factory=list)
    r2_raw: float = float("nan")
    workers: float = 1.0
    smoothing_window: int = 1
    #: why the fit must not be used (:func:`reliability_problems`); empty for a usable fit
    problems: tuple[str, ...] = ()
    #: ``G(w_1) - g_star`` measured directly: the median of the first few raw losses
    initial_gap: float = float("nan")

    def __post_init__(self) -> None:
        if not (0.0 < self.beta < 1.0) or self.A < 0 or self.F < 0 or self.n_points < MIN_POINTS:
            raise ValueError(f"invalid pilot fit: beta={self.beta!r}, A={self.A!r}, F={self.F!r}, n_points={self.n_points!r}")

    @property
    def reliable(self) -> bool:
        """True when no reliability check failed (see :func:`reliability_problems`)."""
        return not self.problems

    def curve(self, J: int | np.ndarray) -> float | np.ndarray:
        """The fitted loss after ``J`` updates (``g_star`` included)."""
        return thm1_curve(J, self.beta, self.A, self.F) + self.g_star


def thm1_curve(J: int | np.ndarray, beta: float, A: float, F: float) -> float | np.ndarray:
    """``A beta^J + F`` -- the Thm 1 bound with ``G1 = A + F`` and floor ``F``."""
    out = A * np.power(beta, np.asarray(J, dtype=float)) + F
    return float(out) if np.ndim(out) == 0 else out


def _window(n: int) -> int:
    w = int(round(n / 20))
    w = max(1, min(w, 51))
    return w if w % 2 == 1 else w + 1


def smooth_losses(y: np.ndarray, window: int | None = None) -> tuple[np.ndarray, int]:
    """Centred running median with a window shrinking symmetrically at the ends.

    A running median leaves a monotone curve unchanged (the median of a monotone window is its
    middle value), so it removes SGD noise and outliers without biasing the Thm 1 shape; the
    symmetric shrinking at the ends keeps the first and last points unbiased (only noisier).
    """
    y = np.asarray(y, dtype=float)
    n = y.size
    w = _window(n) if window is None else max(1, int(window) | 1)
    h = w // 2
    if h == 0 or n < 3:
        return y.copy(), 1
    out = np.empty(n)
    if n > 2 * h:
        from numpy.lib.stride_tricks import sliding_window_view

        out[h:n - h] = np.median(sliding_window_view(y, 2 * h + 1), axis=1)
    for i in list(range(min(h, n))) + list(range(max(h, n - h), n)):
        k = min(h, i, n - 1 - i)
        out[i] = np.median(y[i - k:i + k + 1])
    return out, w


def _r2(y: np.ndarray, yhat: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    ss_res = float(np.sum((y - yhat) ** 2))
    if ss_tot <= 1e-300:
        return 1.0 if ss_res <= 1e-24 * max(1.0, float(np.sum(y**2))) else 0.0
    return 1.0 - ss_res / ss_tot


def _initial_guesses(x: np.ndarray, y: np.ndarray) -> list[tuple[float, float, float]]:
    n = y.size
    tail = y[-max(2, n // 10):]
    F0 = max(float(np.median(tail)), 0.0)
    A0 = max(float(y[0]) - F0, 1e-12 * max(1.0, abs(float(y[0]))))
    guesses = []
    below = np.nonzero(y - F0 <= A0 / 2.0)[0]
    if below.size and x[below[0]] > 0:
        guesses.append(float(np.clip(0.5 ** (1.0 / x[below[0]]), 1e-3, 1 - 1e-7)))
    # spread of time constants from a few steps to far beyond the pilot
    for tau in (n / 10.0, n / 3.0, float(n), 3.0 * n):
        guesses.append(float(np.clip(math.exp(-1.0 / max(tau, 1.0)), 1e-3, 1 - 1e-7)))
    return [(A0, b0, F0) for b0 in guesses] + [(max(float(y[0]), 1e-12), guesses[-1], 0.0)]


def _fit_curve(x: np.ndarray, y: np.ndarray, f_scale: float) -> tuple[float, float, float] | None:
    def f(xx: np.ndarray, A: float, beta: float, F: float) -> np.ndarray:
        return A * np.power(beta, xx) + F

    ymax = max(float(np.max(np.abs(y))), 1e-12)
    lower = [0.0, 1e-6, 0.0]
    upper = [10.0 * ymax + 1.0, _BETA_MAX, 10.0 * ymax + 1.0]
    best, best_sse = None, math.inf
    for p0 in _initial_guesses(x, y):
        p0 = [min(max(v, lo + 1e-12), hi - 1e-12) for v, lo, hi in zip(p0, lower, upper)]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                warnings.simplefilter("ignore", RuntimeWarning)
                popt, _ = curve_fit(f, x, y, p0=p0, bounds=(lower, upper), method="trf", loss="soft_l1",
                                    f_scale=f_scale, max_nfev=2000)
        except (RuntimeError, ValueError):
            continue
        if not np.all(np.isfinite(popt)):
            continue
        sse = float(np.sum((f(x, *popt) - y) ** 2))
        if sse < best_sse:
            best, best_sse = (float(popt[0]), float(popt[1]), float(popt[2])), sse
    return best


def _model_from_fit(alpha: float, beta: float, A: float, F: float, workers: float) -> tuple[ErrorModel, float]:
    """The ErrorModel whose Thm 1 bound at ``E[1/y] = 1/workers`` is ``A beta^J + F``.

    ``M`` must be > 0, so a fitted floor of exactly 0 is represented by a negligible positive
    floor (returned as the second value, for the notes).
    """
    c, L, d = 1.0, 1.0, 1.0
    mu = (1.0 - beta) / alpha
    F_eff = F if F > 0 else 1e-12 * max(A, 1e-12)
    M = 2.0 * c * mu * F_eff * workers / (alpha * L * d)
    return ErrorModel(alpha=alpha, c=c, mu=mu, L=L, M=M, G1=A + F, d=d, chi=1.0), F_eff


#: r2 (on the smoothed losses) below which the Thm 1 shape does not describe the pilot
MIN_R2 = 0.5
#: a floor below this fraction of the initial gap is numerically zero: Thm 1's variance term, Q(eps)
#: (eq. (22)) and Thm 7's n(J) then divide by ~0 and give absurd plans (e.g. "rounding n up costs 1e17 %")
MIN_FLOOR_FRACTION = 1e-6
#: fitted constants within this relative distance of a bound of the fit are "at the bound"
_AT_BOUND = 1e-6
#: assumed model when a fit is unusable: contraction per iteration and floor as a fraction of G1
def prior_error_model(lr: float, workers: float) -> tuple[ErrorModel, str]:
    """The error model with no measurement at all: initial gap ``G1 = 1``, ``beta = ASSUMED_BETA``,
    floor ``ASSUMED_FLOOR_FRACTION G1`` (stated assumptions, as :func:`assumed_error_model`'s)."""
    g1, F = 1.0, ASSUMED_FLOOR_FRACTION
    model, _ = _model_from_fit(float(lr), ASSUMED_BETA, g1 - F, F, float(workers))
    return model, (f"G1 = 1 (assumed: no loss was measured), beta = {ASSUMED_BETA:g}, floor = "
                   f"{ASSUMED_FLOOR_FRACTION:g} G1 at {workers:g} workers, alpha = {lr:g} (all assumed)")


ASSUMED_BETA = 0.99
ASSUMED_FLOOR_FRACTION = 0.01


def reliability_problems(beta: float, A: float, F: float, r2: float, flat: bool, upper: float) -> tuple[str, ...]:
    """Checks a Thm 1 fit ``loss - g_star = A beta^J + F`` must pass before the planner uses it.

    * a loss decrease was measured (not the flat fallback);
    * ``beta`` is not at a bound of the fit (``1e-6`` or ``1 - 1e-9``): no contraction rate identified;
    * ``A`` and ``F`` are not at the fit's upper bound ``10 max|loss| + 1``;
    * the floor ``F`` is at least ``MIN_FLOOR_FRACTION`` of the initial gap ``A + F``: a smaller
      floor is below what the pilot's losses resolve, and every quantity of paper 000 that divides
      by the variance term (eq. (22) ``Q(eps)``, Thm 7 ``n(J)``) becomes absurd;
    * ``r2 >= MIN_R2`` on the smoothed losses.
    """
    out: list[str] = []
    if flat:
        out.append("no loss decrease was measured (flat curve): beta and the floor are not identified")
        return tuple(out)
    if beta >= _BETA_MAX * (1 - _AT_BOUND) or beta <= 1e-6 * (1 + _AT_BOUND):
        out.append(f"beta = {beta:.9g} is at a bound of the fit: the contraction rate is not identified")
    for name, v in (("A", A), ("F", F)):
        if v >= upper * (1 - _AT_BOUND):
            out.append(f"{name} = {v:.4g} is at the fit's upper bound {upper:.4g}")
    gap = A + F
    if gap > 0 and F < MIN_FLOOR_FRACTION * gap:
        out.append(f"the fitted floor F = {F:.3g} is below {MIN_FLOOR_FRACTION:g} of the initial gap {gap:.4g} "
                   "(numerically zero: Q(eps) and Thm 7's n(J) would divide by it)")
    if not r2 >= MIN_R2:
        out.append(f"r2 = {r2:.3f} < {MIN_R2}: the Thm 1 curve does not describe the losses")
    return tuple(out)


def assumed_error_model(fit: PilotFit, lr: float | None = None) -> tuple[ErrorModel, str]:
    """The error model used instead of an unreliable fit, and a sentence saying what it assumes.

    Paper 000 gives no default constants, so these are stated assumptions, not measurements:

    * ``G1`` = the measured initial gap (median of the first raw losses above ``g_star``; 1 if not
      positive) -- a direct measurement that needs no fit;
    * ``beta`` = the fitted contraction if it passed its own checks (measured, not at a bound of the
      fit, the curve not flat), else ``ASSUMED_BETA`` (the gap halves in about 70 iterations);
    * floor ``F = ASSUMED_FLOOR_FRACTION G1`` at the pilot's number of workers: a degenerate fit
      only says the floor is below what the pilot resolves, and 1 % of the initial gap is the
      stated stand-in;

    mapped to :class:`ErrorModel` as in the module docstring (``alpha`` = the pilot's step size).
    """
    alpha = float(lr if lr is not None else fit.model.alpha)
    g1 = fit.initial_gap if math.isfinite(fit.initial_gap) and fit.initial_gap > 0 else 1.0
    beta_ok = fit.A > 0 and not any(p.startswith(("beta", "no loss decrease")) for p in fit.problems)
    beta = fit.beta if beta_ok else ASSUMED_BETA
    F = ASSUMED_FLOOR_FRACTION * g1
    model, _ = _model_from_fit(alpha, beta, g1 - F, F, fit.workers)
    why = (f"G1 = {g1:.4g} (measured initial loss gap), beta = {beta:.5g} ("
           + ("fitted" if beta_ok else "assumed") + f"), floor = {ASSUMED_FLOOR_FRACTION:g} G1 = {F:.4g} at "
           f"{fit.workers:g} workers (assumed, not fitted); alpha = {alpha:g}")
    return model, why


def fit_error_model(losses: np.ndarray, lr: float, workers: float, *, g_star: float = 0.0) -> PilotFit:
    """Fit the Thm 1 shape ``loss_j ~= g_star + A beta^(j-1) + F`` to a pilot's per-step losses.

    ``losses[k]`` is the training loss of step ``k + 1`` (computed before its update, so after
    ``J = k`` updates), ``lr`` the step size the pilot used, ``workers`` the number of gradients
    averaged per step (``1 / E[1/y]``; a non-integer is accepted for runs whose active count
    varied).  ``g_star`` is the assumed optimal loss ``G*`` (default 0).

    Raises :class:`InputError` for fewer than 10 finite losses or invalid ``lr``/``workers``.
    The mapping to :class:`ErrorModel` is in the module docstring.
    """
    where = "pilot losses"
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise InputError(f"the learning rate must be a finite number > 0, got {lr!r}", "pass the step size the pilot ran with", where)
    if not (isinstance(workers, (int, float)) and math.isfinite(workers) and workers > 0):
        raise InputError(f"workers must be a number > 0, got {workers!r}", "pass the number of gradients averaged per step", where)
    if not math.isfinite(g_star):
        raise InputError(f"g_star must be finite, got {g_star!r}", "use the (estimated) optimal loss, e.g. 0", where)
    raw = np.asarray(losses, dtype=float).reshape(-1)
    finite = np.isfinite(raw)
    x = np.arange(raw.size, dtype=float)[finite]
    raw_f = raw[finite]
    n = int(raw_f.size)
    if n < MIN_POINTS:
        raise InputError(
            f"need at least {MIN_POINTS} finite per-step losses to fit the Thm 1 error curve, got {n}"
            + (f" ({raw.size - n} non-finite dropped)" if raw.size != n else ""),
            "run the pilot for more steps (e.g. 200)", where)
    notes: list[str] = []
    if n < raw.size:
        notes.append(f"{raw.size - n} non-finite losses (NaN/inf) were dropped before fitting")
    notes.append(f"measured: {n} per-step training losses; step j's loss is G(w_j), i.e. J = j - 1 updates")

    smooth, w = smooth_losses(raw_f)
    y = smooth - g_star
    if np.any(y < 0):
        notes.append(f"some smoothed losses lie below g_star = {g_star:g} (min {float(smooth.min()):.4g}); "
                     "g_star overestimates G* -- the fitted gap is clipped at 0")
    resid = raw_f - smooth
    noise = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    scale = max(float(np.ptp(y)), abs(float(np.mean(y))), 1e-12)
    f_scale = max(noise, 1e-3 * scale)

    fitted = None if float(np.ptp(y)) <= 1e-12 * scale else _fit_curve(x, y, f_scale)
    flat = False
    if fitted is not None:
        A, beta, F = fitted
        # a fit with no real decrease (under the raw noise) is treated as flat: beta is then not
        # identifiable ...
        # ... or one explaining under 10 % of the smoothed losses' variance (a fit to noise)
        decrease = A * (1.0 - beta ** float(x[-1]))
        if decrease <= max(noise, 1e-9 * scale) or _r2(y, thm1_curve(x, beta, A, F)) < 0.1:
            flat = True
    if fitted is None or flat:
        flat = True
        A = 0.0
        F = max(float(np.median(y)), 0.0)
        beta = float(1.0 - 1.0 / max(n, 2))
        notes.append("the loss curve is flat (no decrease beyond the noise, or the fit failed): A = 0, F = median "
                     f"loss gap; beta is not identifiable and is set to 1 - 1/n = {beta:.6g} (no measurable "
                     "contraction within the pilot) -- run a longer pilot or start from untrained weights")
    beta = float(min(max(beta, 1e-6), _BETA_MAX))
    yhat = thm1_curve(x, beta, A, F)
    r2 = _r2(y, yhat)
    r2_raw = _r2(raw_f - g_star, yhat)
    model, F_eff = _model_from_fit(float(lr), beta, float(A), float(F), float(workers))
    if F <= 0:
        notes.append(f"the fitted floor F is 0; M is set from a negligible floor {F_eff:.3g} (ErrorModel needs M > 0)")
    notes.append(f"fitted to running-median smoothed losses (window {w}) with a robust soft-L1 loss "
                 f"(f_scale = {f_scale:.3g}, the MAD noise of the raw losses around the smoothed ones); "
                 f"r2 = {r2:.3f} on the smoothed, {r2_raw:.3f} on the raw losses")
    if not flat and beta ** float(x[-1]) > 0.25:
        notes.append(f"the curve has not flattened within the pilot (beta^n = {beta ** float(x[-1]):.2f}): "
                     "F and beta are extrapolated and correlated -- treat the floor as uncertain")
    notes.append("c = 1 and L = 1 are assumed (only the products alpha c mu and alpha L M d / (c mu) are "
                 f"identifiable from losses); d = 1; alpha = lr = {lr:g}; mu = (1 - beta)/alpha = {model.mu:.6g}")
    notes.append(f"M = 2 c mu F workers / (alpha L d) = {model.M:.6g} so that floor(1/workers) = F at "
                 f"workers = {workers:g}; the 1/workers scaling of the floor to other worker counts is the "
                 "paper's assumption, not measured by one pilot")
    notes.append(f"g_star = G* = {g_star:g} is assumed (default 0: the paper's G* >= 0 convention), so "
                 f"G1 = A + F = {A + F:.6g} is the initial gap above it")
    problems = reliability_problems(beta, float(A), float(F), r2, flat, 10.0 * max(float(np.max(np.abs(y))), 1e-12) + 1.0)
    if problems:
        notes.append("UNRELIABLE fit, not to be used: " + "; ".join(problems))
    initial_gap = float(np.median(raw_f[: max(1, min(5, n))])) - g_star
    return PilotFit(model=model, beta=beta, A=float(A), F=float(F), g_star=float(g_star), r2=float(r2),
                    n_points=n, notes=notes, r2_raw=float(r2_raw), workers=float(workers), smoothing_window=w,
                    problems=problems, initial_gap=initial_gap)


# =============================================================================== pilots
def pilot_from_run(run_dir: str | Path, *, g_star: float = 0.0) -> tuple[PilotFit, RuntimeFit]:
    """Fit both models to a previous ``spotwise run``/``simulate`` directory's ``events.jsonl``.

    Losses: the ``step`` events' ``loss`` (a step re-run after a restore replaces the earlier
    event of the same number).  ``lr``: the median of the steps' ``lr``; ``workers``:
    ``1 / mean(1/active)`` (the measured ``E[1/y]``).

    Durations: a step's ``duration`` is the time of the *whole iteration* -- for full-sync SGD
    the max over the active workers' mini-batches plus Delta -- not one mini-batch's time.  We do
    not try to invert the max; we fit the step-time distribution directly (``unit="step"``),
    using only steps at the most common active count (so the samples share one distribution),
    subtracting ``idle`` time (no active worker) logged between two commits and skipping steps
    that had retries.  ``RuntimeFit.model.expected(1)`` is then ``E[R(n)]`` for that ``n``, which is
    what the planner needs for the same ``n``; Delta is already included (``delta = 0``).
    """
    from spotwise.events import EVENTS_FILE, read_events

    path = Path(run_dir)
    if path.is_dir():
        path = path / EVENTS_FILE
    events = read_events(path, kinds=["step", "idle"])
    by_step: dict[int, dict[str, Any]] = {}
    step_order: list[dict[str, Any]] = []
    idle: list[tuple[float, float]] = []
    for ev in events:
        if ev["kind"] == "idle":
            idle.append((float(ev["t"]), float(ev.get("duration") or 0.0)))
        else:
            by_step[int(ev["step"])] = ev
            step_order.append(ev)
    if not by_step:
        raise InputError("the event log has no step events", "pass a run directory of a run that committed steps", str(path))
    steps = [by_step[k] for k in sorted(by_step)]
    losses = np.array([np.nan if s["loss"] is None else float(s["loss"]) for s in steps])
    lrs = np.array([float(s["lr"]) for s in steps if s.get("lr") is not None])
    active = np.array([max(int(s["active"] or 0), 0) for s in steps])
    if lrs.size == 0:
        raise InputError("the step events carry no learning rate", "pass a run directory written by spotwise", str(path))
    lr = float(np.median(lrs))
    pos = active[active > 0]
    workers = float(1.0 / np.mean(1.0 / pos)) if pos.size else 1.0
    err = fit_error_model(losses, lr, workers, g_star=g_star)
    err.notes.append(f"from {path}: {len(steps)} committed steps; alpha = median lr = {lr:g}"
                     + (f" (lr varied in [{lrs.min():g}, {lrs.max():g}])" if np.ptp(lrs) > 0 else "")
                     + f"; workers = 1/mean(1/active) = {workers:.4g} (measured E[1/y])")

    # durations: in log order (a restore re-runs steps; each attempt's time was really spent)
    durs: list[float] = []
    act_d: list[int] = []
    prev_t = 0.0
    skipped_retry = 0
    idle_sub = 0.0
    for s in step_order:
        t = float(s["t"])
        dur = s.get("duration")
        dur = (t - prev_t) if dur is None else float(dur)
        gap = sum(d for (ti, d) in idle if prev_t - 1e-9 <= ti < t)
        if gap:
            idle_sub += gap
            dur -= gap
        prev_t = t
        if (s.get("retries") or 0) > 0:
            skipped_retry += 1
            continue
        if dur >= 0 and math.isfinite(dur):
            durs.append(dur)
            act_d.append(int(s["active"] or 0))
    d_arr = np.array(durs)
    a_arr = np.array(act_d)
    if a_arr.size == 0:
        raise InputError("no usable step durations in the event log", "pass a run directory of a run that committed steps", str(path))
    vals, counts = np.unique(a_arr, return_counts=True)
    n_mode = int(vals[np.argmax(counts)])
    sel = d_arr[a_arr == n_mode]
    rt = fit_runtime(sel, 0.0)
    rt.notes.append(
        f"fitted the per-step time R(n) directly at n = {n_mode} active workers ({sel.size} of {d_arr.size} steps; "
        "a full-sync step's duration is the max over active workers plus Delta, not one mini-batch's time, so the "
        "samples are whole iterations with Delta included): use model.expected(1) as E[R(n)] for this n, "
        "not expected(y) for other y")
    if idle_sub > 0:
        rt.notes.append(f"subtracted {idle_sub:.4g} s of idle time (no active worker) from the step durations")
    if skipped_retry:
        rt.notes.append(f"skipped {skipped_retry} steps with retries (time spent on lost attempts)")
    rt = RuntimeFit(**{**rt.__dict__, "unit": "step", "active": n_mode})
    return err, rt


def run_pilot(spec: Any, steps: int = 200, seed: int | None = None,
              budget_s: float | None = None) -> tuple[PilotFit, RuntimeFit]:
    """An in-process pilot (no Ray): single-process SGD with the global batch, then both fits.

    Trains ``spec.workload`` for ``steps`` steps with batches of ``workers x batch_size`` samples
    (from :class:`EpochSampler`) at ``spec.workload.lr`` -- the full-sync update with all
    ``workers`` active -- and records each step's loss (before its update).  Time is *modelled*,
    not measured: ``steps x workers`` mini-batch times are drawn from the spec's runtime model
    (mean ``build_market(spec).step_seconds(family, step_time_s)``, straggler law
    ``(1 - s) + s Exp(1)``, as the emulated provider does) and fitted per mini-batch, with
    ``delta = cluster.sync_overhead_s``.
    """
    import torch

    from spotwise.market.world import build_market
    from spotwise.control.sampler import EpochSampler
    from spotwise.workloads.registry import make_workload

    if isinstance(steps, bool) or not isinstance(steps, int) or not MIN_POINTS <= steps <= MAX_PILOT_STEPS:
        raise InputError(f"a pilot needs at least {MIN_POINTS} steps and at most {MAX_PILOT_STEPS}, got {steps!r}",
                         "use e.g. steps=200", "pilot steps")
    seed = int(spec.seed if seed is None else seed)
    wl = spec.workload
    if getattr(wl, "script", None) is not None:  # issue 41: the loop is the script's, not spotwise's to run here
        raise PilotSkipped("the job trains your own script, whose loss curve spotwise does not fit by running your "
                           "loop in process")
    from spotwise.workloads.device import cuda_available

    if str(wl.precision) == "fp16" and not cuda_available():  # before any training (the pilot trains here)
        raise InputError("precision fp16 needs CUDA, and the in-process pilot would train on this machine, which has none",
                         "pass --pilot DIR (a run of this job on GPUs) so no pilot trains here, or use precision: bf16",
                         "workload.precision")
    workers = int(spec.cluster.workers)
    batch = workers * int(wl.batch_size)
    if trains_on_gpus(spec) and not cuda_available():
        raise PilotSkipped(f"the job trains {wl.name} on GPUs and this machine has no CUDA: its pilot is not trained "
                           "on the CPU")
    lr = float(wl.lr)
    losses = np.empty(steps)

    def train(beat: Heartbeat) -> PilotClock:  # every call into the workload's code, bounded (user_calls)
        beat.enter("building it (its function, model and dataset)")
        torch.set_num_threads(1)  # (this thread's too)
        workload = make_workload(wl, seed)
        model = workload.build_model()
        model.train()
        sampler = EpochSampler(len(workload.train), seed)
        clock = PilotClock(steps, budget_s if budget_s is not None else PILOT_BUDGET_S, beat)
        try:
            if wl.plain_sgd_recipe:
                sgd_steps(torch, workload, model, sampler, batch, lr, losses, seed, clock)
            else:  # the job's own recipe (issue 28): its optimizer, schedule, clipping, micro-batches, precision
                recipe_steps(torch, spec, workload, model, sampler, batch, lr, losses, seed, clock)
        finally:
            clock.done()
        return clock

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: threading costs more than it saves
    try:
        clock = run_bounded(train, wl.name)
    finally:
        torch.set_num_threads(threads)
    if clock.steps < MIN_POINTS:
        raise PilotSkipped(f"its in-process pilot would take {clock.projected_s:.0f} s for {MIN_POINTS} steps on this "
                           f"machine, more than the {clock.budget_s:g} s budget")
    losses = losses[: clock.steps]
    cut = clock.steps < steps
    steps = clock.steps
    err = fit_error_model(losses, lr, workers)
    if cut:
        err.notes.append(f"the pilot was cut to {steps} of {clock.planned} steps by its {clock.budget_s:g} s budget on "
                         "this machine (SPOTWISE_PILOT_BUDGET_S); pass --pilot DIR for a fit from a run of the job")
    if not wl.plain_sgd_recipe:
        err.notes.append(f"the pilot trained with the job's recipe (optimizer {wl.optimizer_spec.name if wl.optimizer else 'SGD'}"
                         f", schedule, clipping): paper 000's Thm 1 curve is fitted to its losses as an empirical model")
    err.notes.append(f"in-process pilot: {steps} steps of single-process SGD on {wl.name} with the global batch "
                     f"{workers} x {wl.batch_size} = {batch} (full-sync, all workers active), seed {seed}")

    market = build_market(spec)
    mean_s = float(market.step_seconds(wl.family, float(wl.step_time_s)))
    s = float(spec.cluster.straggler)
    law = MiniBatchTimeLaw(mean_s, s)  # the coordinator's law of one mini-batch's virtual time
    draws = np.asarray(law.draw(np.random.default_rng([seed, 7]), size=steps * workers), dtype=float)
    rt = fit_runtime(draws, float(spec.cluster.sync_overhead_s), seed=seed)
    rt.notes.append(f"time is modelled from the catalog, not measured: {draws.size} mini-batch times drawn from "
                    f"mean {mean_s:.4g} s x ((1 - s) + s Exp(1)) with straggler s = {s:g} "
                    f"({market.instance.name}, family {wl.family!r}); delta = sync_overhead_s = "
                    f"{float(spec.cluster.sync_overhead_s):g} s")
    return err, rt


