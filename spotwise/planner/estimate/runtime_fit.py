"""The runtime half of a pilot: a shifted-exponential (or empirical) law fitted to per-step durations.

:class:`RuntimeFit` and :func:`fit_runtime` (the KS test with a bootstrap, rejecting at 5 %);
the shift is carried in ``RuntimeModel.delta`` (see :mod:`spotwise.planner.estimate.pilot`'s docstring,
which re-exports these names, for the paper's runtime model this feeds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spotwise.errors import InputError
from spotwise.theory.runtime import RuntimeModel

#: fewest points a fit accepts (losses or durations)
MIN_POINTS = 10
KS_LEVEL = 0.05
_KS_BOOT = 300

@dataclass(frozen=True, eq=False)
class RuntimeFit:
    """Runtime distribution fitted to per-mini-batch (or per-step) durations.

    ``model`` is the chosen :class:`RuntimeModel` (``kind``: ``"exponential"`` or
    ``"empirical"``); ``exponential`` and ``empirical`` are both candidates.  The exponential
    candidate is ``shift + Exp(mean)``, with ``shift`` folded into ``delta`` (module docstring).
    ``ks_stat``/``ks_pvalue`` test that hypothesis (p-value by parametric bootstrap).
    ``unit`` says what one sample is: ``"mini-batch"`` (one worker's time, use ``expected(y)``
    for ``y`` workers) or ``"step"`` (a whole iteration at ``active`` workers, Delta included:
    ``expected(1)`` is then ``E[R(active)]``).
    """

    model: RuntimeModel
    kind: str
    exponential: RuntimeModel | None
    empirical: RuntimeModel
    shift: float
    mean: float
    ks_stat: float
    ks_pvalue: float
    n_samples: int
    sample_mean: float
    notes: list[str] = field(default_factory=list)
    unit: str = "mini-batch"
    active: int | None = None


def _shifted_exp_params(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unbiased location/scale of a shifted exponential along the last axis."""
    n = x.shape[-1]
    lo = x.min(axis=-1)
    mean = x.mean(axis=-1)
    scale = n * (mean - lo) / (n - 1)
    shift = np.maximum(lo - scale / n, 0.0)
    scale = mean - shift
    return shift, scale


def _ks_stat(x_sorted: np.ndarray, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    n = x_sorted.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (x_sorted - shift[..., None]) / scale[..., None]
    cdf = np.where(z > 0, -np.expm1(-np.maximum(z, 0.0)), 0.0)
    i = np.arange(1, n + 1)
    return np.maximum(np.max(i / n - cdf, axis=-1), np.max(cdf - (i - 1) / n, axis=-1))


def fit_runtime(durations: np.ndarray, delta: float = 0.0, *, seed: int = 0) -> RuntimeFit:
    """Fit the runtime model to ``durations`` (seconds, one per mini-batch).

    ``delta`` is the parameter server's time added to every iteration (``RuntimeModel.delta``);
    pass 0 when the durations already include it.  Chooses the shifted exponential unless a KS
    test rejects it at 5 %, else the empirical model; ``notes`` say which and why.  ``seed``
    seeds the bootstrap of the KS p-value.  Raises :class:`InputError` for fewer than 10 samples
    or negative/non-finite ones.
    """
    where = "pilot durations"
    x = np.asarray(durations, dtype=float).reshape(-1)
    if x.size < MIN_POINTS:
        raise InputError(f"need at least {MIN_POINTS} durations to fit a runtime distribution, got {x.size}",
                         "run the pilot for more steps (e.g. 200)", where)
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise InputError("durations must be finite and >= 0", "drop corrupt samples before fitting", where)
    if not (math.isfinite(delta) and delta >= 0):
        raise InputError(f"delta must be a finite number >= 0, got {delta!r}", where=where)
    n = int(x.size)
    notes = [f"measured: {n} durations, mean {x.mean():.4g} s, min {x.min():.4g} s, max {x.max():.4g} s"]
    empirical = RuntimeModel.empirical(x, delta)
    shift_a, scale_a = _shifted_exp_params(x)
    shift, scale = float(shift_a), float(scale_a)
    xs = np.sort(x)
    if not scale > 1e-12 * max(1.0, float(x.mean())):
        notes.append("all durations are equal: no exponential part; chose the empirical model (a constant time)")
        return RuntimeFit(model=empirical, kind="empirical", exponential=None, empirical=empirical, shift=shift,
                          mean=0.0, ks_stat=1.0, ks_pvalue=0.0, n_samples=n, sample_mean=float(x.mean()), notes=notes)
    d = float(_ks_stat(xs, np.array(shift), np.array(scale)))
    # Lilliefors-style p-value: the parameters come from the same sample, so simulate the null
    rng = np.random.default_rng([seed, n])
    sims = np.sort(rng.exponential(1.0, size=(_KS_BOOT, n)), axis=1)  # the statistic is location/scale invariant
    s_shift, s_scale = _shifted_exp_params(sims)
    d_null = _ks_stat(sims, s_shift, s_scale)
    p = float((1 + np.sum(d_null >= d)) / (_KS_BOOT + 1))
    expo = RuntimeModel.exponential(1.0 / scale, delta + shift)
    notes.append(f"exponential fit: shift {shift:.4g} s + Exp(mean {scale:.4g} s) (unbiased location/scale); "
                 f"the shift is folded into delta ({delta:g} + {shift:.4g}) -- exact for full and N-sync order "
                 "statistics, approximate for N-batch SGD")
    if p >= KS_LEVEL:
        notes.append(f"chose exponential: KS D = {d:.4f}, bootstrap p = {p:.3f} >= {KS_LEVEL} (not rejected)")
        model, kind = expo, "exponential"
    else:
        notes.append(f"chose empirical: the exponential hypothesis is rejected by KS (D = {d:.4f}, bootstrap "
                     f"p = {p:.3f} < {KS_LEVEL}); order statistics are computed from the {n} samples")
        model, kind = empirical, "empirical"
    return RuntimeFit(model=model, kind=kind, exponential=expo, empirical=empirical, shift=shift, mean=scale,
                      ks_stat=d, ks_pvalue=p, n_samples=n, sample_mean=float(x.mean()), notes=notes)
