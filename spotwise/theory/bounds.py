"""Error bounds of synchronous SGD with a changing number of active workers.

``papers/000_3c734f3ffedcac15.txt`` Sec. III-B.  Constants (Assumptions 1-2 and strong convexity):
``L`` (Lipschitz smoothness), ``c`` (strong convexity, ``c <= L``), ``mu`` and ``M_G``
(first-moment constants of the stochastic gradient, eq. (7)-(9); ``mu = mu_G = 1`` for an unbiased
gradient), ``M`` (gradient-noise constant, eq. (9)), step size ``alpha`` with
``0 < alpha < mu/(L M_G)``, and ``G1 = E[G(w_1)]`` (the paper assumes ``G* >= 0`` so ``G1`` bounds
the initial gap).  Write ``beta = 1 - alpha c mu``.

* Thm 1, eq. (10)::

      E[G(w_{J+1}) - G*] <= beta^J G1 + (alpha^2 L M / 2) sum_{j=1}^J beta^{J-j} E[1/y_j]

  With a constant ``E[1/y_j] = v`` the sum is geometric:
  ``beta^J G1 + (alpha L M v / (2 c mu)) (1 - beta^J)``; the *floor* (``J -> inf``) is
  ``alpha L M v / (2 c mu)``.  N-sync and N-batch-sync SGD use ``v = 1/N`` (below eq. (10)).
* Thm 2, eq. (11): ``n_j = ceil(n1 eta^{j-1})``, ``E[1/y_j] <= d / n_j^chi``::

      beta^J G1 + (B / n1^chi) beta^{J-1} (1 - x^J)/(1 - x),  x = 1/(eta^chi beta),  B = alpha^2 L M d / 2

  (evaluated in the overflow-free form ``(beta^{J-1} - eta^{-chi J}/beta)/(1 - x)``; ``x = 1``
  gives ``J beta^{J-1}``).  The proof sums with ``n_j = n1 eta^{j-1}``; the ceiling only makes
  ``n_j`` larger, so the bound still holds.
* Remark 3, eq. (12), workers capped at ``n_max``::

      beta^J G1 + B max{ beta^{J-1}(1 - x^J)/(n1^chi (1 - x)),  (1 - beta^J)/(n_max^chi alpha c mu) }

  **Caveat (implemented as printed, but flagged):** the true Thm-1 sum with
  ``n_j = min(n1 eta^{j-1}, n_max)`` is ``sum_j beta^{J-j} max{a_j, b_j}``, which is *at least*
  ``max{sum a_j, sum b_j}`` -- so eq. (12) can understate the Thm-1 bound (by at most a factor
  2 on the variance term).  :func:`error_bound_capped_exact` evaluates the exact sum; both have
  the floor ``alpha L M d / (2 c mu n_max^chi)``.
* eq. (22): ``Q(eps) = 2 c mu (eps - beta^J G1) / (alpha L M (1 - beta^J))`` -- the largest
  ``E[1/y]`` for which J iterations reach ``eps``.
* Corollary 2, eq. (24): ``J = log_beta((eps - floor)/(G1 - floor))`` with
  ``floor = alpha L M E[1/y]/(2 c mu)`` -- the inverse ``phi^-1(eps)`` of the static bound used by
  Thm 3-6.  :func:`iterations_for_error` returns the smallest integer ``J >= 1`` whose bound is
  ``<= eps`` (closed form for a static ``E[1/y]``, monotone search for the growth bounds) and raises
  :class:`InfeasibleError` when ``eps`` is at or below the floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spotwise.errors import InfeasibleError, InputError

_J_CAP = 10**8


@dataclass(frozen=True)
class ErrorModel:
    """Constants of paper 000 Thm 1-2 (see the module docstring for their meaning).

    ``d`` and ``chi`` describe ``E[1/y_j] <= d / n_j^chi`` (Thm 2, Thm 7).  ``M_G`` is optional;
    when given, the step-size condition ``alpha < mu/(L M_G)`` of Thm 1 is enforced.
    """

    alpha: float
    c: float
    mu: float
    L: float
    M: float
    G1: float
    M_G: float | None = None
    d: float = 1.0
    chi: float = 1.0

    def __post_init__(self) -> None:
        where = "error model"
        for name in ("alpha", "c", "mu", "L", "M", "d"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise InputError(f"{name} must be a finite number > 0, got {v!r}", where=where)
        if not (math.isfinite(self.G1) and self.G1 >= 0):
            raise InputError(f"G1 = E[G(w_1)] must be finite and >= 0 (paper 000 assumes G* >= 0), got {self.G1!r}", where=where)
        if not (math.isfinite(self.chi) and self.chi >= 0):
            raise InputError(f"chi must be >= 0, got {self.chi!r}", where=where)
        if self.c > self.L:
            raise InputError(f"strong convexity c={self.c} exceeds smoothness L={self.L}",
                             "paper 000 Thm 1 needs c <= L; check the constants", where)
        if not self.alpha * self.c * self.mu < 1:
            raise InputError(f"alpha*c*mu = {self.alpha * self.c * self.mu:g} must be < 1",
                             "use a smaller step size alpha", where)
        if self.M_G is not None:
            if not (math.isfinite(self.M_G) and self.M_G > 0):
                raise InputError(f"M_G must be > 0, got {self.M_G!r}", where=where)
            if not self.alpha < self.mu / (self.L * self.M_G):
                raise InputError(f"step size alpha={self.alpha:g} violates alpha < mu/(L M_G) = "
                                 f"{self.mu / (self.L * self.M_G):g} (paper 000 Thm 1)", "use a smaller step size", where)

    @property
    def beta(self) -> float:
        """Contraction factor ``1 - alpha c mu``."""
        return 1.0 - self.alpha * self.c * self.mu

    @property
    def B(self) -> float:
        """``alpha^2 L M d / 2`` (Thm 2, Thm 7)."""
        return self.alpha**2 * self.L * self.M * self.d / 2.0

    def floor(self, inv_y: float) -> float:
        """Asymptotic error of Thm 1 with constant ``E[1/y] = inv_y``: ``alpha L M inv_y / (2 c mu)``."""
        return self.alpha * self.L * self.M * inv_y / (2.0 * self.c * self.mu)


# ----------------------------------------------------------------------------------- Thm 1
def error_bound(J: int | np.ndarray, model: ErrorModel, inv_y: float) -> float | np.ndarray:
    """Thm 1 / eq. (10) with constant ``E[1/y_j] = inv_y``: ``beta^J G1 + floor (1 - beta^J)``."""
    Jf = np.asarray(J, dtype=float)
    bj = model.beta**Jf
    out = bj * model.G1 + model.floor(inv_y) * (1.0 - bj)
    return float(out) if np.ndim(out) == 0 else out


def error_bound_sequence(model: ErrorModel, inv_y: np.ndarray | list[float]) -> float:
    """Thm 1 / eq. (10) for a sequence ``E[1/y_1..J]`` (iterated recursion of the proof)."""
    e = model.G1
    k = model.alpha**2 * model.L * model.M / 2.0
    for v in np.asarray(inv_y, dtype=float):
        e = model.beta * e + k * v
    return float(e)


# ----------------------------------------------------------------------------------- Thm 2
def _growth_term(J: np.ndarray, model: ErrorModel, eta: float | np.ndarray) -> np.ndarray:
    """``beta^{J-1} (1 - x^J)/(1 - x)`` in overflow-free form."""
    b = model.beta
    eta = np.asarray(eta, dtype=float)
    x = 1.0 / (eta**model.chi * b)
    near = np.abs(1.0 - x) < 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        gen = (b ** (J - 1.0) - eta ** (-model.chi * J) / b) / np.where(near, 1.0, 1.0 - x)
    return np.where(near, J * b ** (J - 1.0), gen)


def error_bound_growth(J: int | np.ndarray, model: ErrorModel, n1: float, eta: float | np.ndarray) -> float | np.ndarray:
    """Thm 2 / eq. (11): ``n_j = ceil(n1 eta^{j-1})`` provisioned workers, ``E[1/y_j] <= d/n_j^chi``."""
    _check_growth(n1, eta)
    Jf = np.asarray(J, dtype=float)
    out = model.beta**Jf * model.G1 + model.B / n1**model.chi * _growth_term(Jf, model, eta)
    return float(out) if np.ndim(out) == 0 else out


def error_bound_capped(J: int | np.ndarray, model: ErrorModel, n1: float, eta: float, n_max: float) -> float | np.ndarray:
    """Remark 3 / eq. (12) *as printed* (see the module caveat; exact sum: :func:`error_bound_capped_exact`)."""
    _check_growth(n1, eta)
    if not n_max >= n1:
        raise InputError(f"n_max ({n_max}) must be >= n1 ({n1})", where="Remark 3")
    Jf = np.asarray(J, dtype=float)
    b = model.beta
    grow = _growth_term(Jf, model, eta) / n1**model.chi
    cap = (1.0 - b**Jf) / (n_max**model.chi * model.alpha * model.c * model.mu)
    out = b**Jf * model.G1 + model.B * np.maximum(grow, cap)
    return float(out) if np.ndim(out) == 0 else out


def error_bound_capped_exact(J: int, model: ErrorModel, n1: float, eta: float, n_max: float) -> float:
    """Thm 1 summed exactly with ``E[1/y_j] = d / min(n1 eta^{j-1}, n_max)^chi`` (O(J))."""
    _check_growth(n1, eta)
    j = np.arange(1, int(J) + 1, dtype=float)
    n = np.minimum(n1 * eta ** (j - 1.0), n_max)
    return error_bound_sequence(model, model.d / n**model.chi)


def _check_growth(n1: float, eta: float | np.ndarray) -> None:
    if not (math.isfinite(n1) and n1 > 0):
        raise InputError(f"n1 must be > 0, got {n1!r}", where="Thm 2")
    if not np.all(np.isfinite(eta) & (np.asarray(eta) >= 1)):
        raise InputError(f"the growth rate eta must be >= 1, got {eta!r}", where="Thm 2")


# ----------------------------------------------------------------------------------- eq. (22), (24)
def error_constraint_q(eps: float, J: int, model: ErrorModel) -> float:
    """``Q(eps)`` of eq. (22): the largest ``E[1/y]`` for which ``J`` iterations reach error ``eps``."""
    bj = model.beta ** float(J)
    return 2.0 * model.c * model.mu * (eps - bj * model.G1) / (model.alpha * model.L * model.M * (1.0 - bj))


def iterations_for_error_real(eps: float, model: ErrorModel, inv_y: float) -> float:
    """Corollary 2 / eq. (24) as a real number (``InfeasibleError`` at or below the floor)."""
    fl = model.floor(inv_y)
    _floor_check(eps, fl, model, f"E[1/y] = {inv_y:.4g}")
    if model.G1 <= eps:
        return 0.0
    return math.log((eps - fl) / (model.G1 - fl)) / math.log(model.beta)


def _floor_check(eps: float, fl: float, model: ErrorModel, what: str) -> None:
    if not (math.isfinite(eps) and eps > 0):
        raise InputError(f"the error target must be a finite number > 0, got {eps!r}", where="error target")
    if eps <= fl:
        raise InfeasibleError(
            f"error target eps={eps:.4g} is at or below the asymptotic error floor {fl:.4g} of the paper 000 "
            f"Thm 1 bound (alpha L M E[1/y] / (2 c mu) with {what}); no number of iterations reaches it",
            "provision more (or more reliable) workers to lower E[1/y], use a smaller step size alpha, "
            "or relax eps above the floor",
            "error constraint",
        )


def iterations_for_error(eps: float, model: ErrorModel, *, inv_y: float | None = None, n1: float | None = None,
                         eta: float | None = None, n_max: float | None = None, exact_cap: bool = False) -> int:
    """``phi^-1(eps)``: the smallest integer ``J >= 1`` whose error bound is ``<= eps``.

    * ``inv_y`` given: static ``E[1/y]`` (Thm 1), closed form eq. (24), rounded up.
    * ``n1, eta`` given: Thm 2 (eq. (11)); with ``n_max`` also Remark 3 (eq. (12), or its exact
      sum with ``exact_cap=True``); monotone search (doubling, then the first ``J`` in the bracket).

    Raises :class:`InfeasibleError` when ``eps`` is at or below the asymptotic floor.
    """
    if inv_y is not None:
        Jr = iterations_for_error_real(eps, model, inv_y)
        J = max(1, math.ceil(Jr - 1e-9))
        while error_bound(J, model, inv_y) > eps * (1 + 1e-12):  # guard against rounding
            J += 1
        return J
    if n1 is None or eta is None:
        raise InputError("iterations_for_error needs inv_y, or n1 and eta", where="error target")
    _check_growth(n1, eta)
    if n_max is not None:
        fl = model.alpha * model.L * model.M * model.d / (2 * model.c * model.mu * n_max**model.chi)
        what = f"n_max = {n_max:g}, chi = {model.chi:g}"
        if exact_cap:
            _floor_check(eps, fl, model, what)
            e, k = model.G1, model.alpha**2 * model.L * model.M / 2.0
            for j in range(1, _J_CAP + 1):  # the Thm 1 recursion, one pass
                n = min(n1 * eta ** (j - 1.0), n_max)
                e = model.beta * e + k * model.d / n**model.chi
                if e <= eps:
                    return j
            raise InfeasibleError(f"error target eps={eps:.4g} needs more than {_J_CAP} iterations ({what})",
                                  "provision more workers or relax eps", "error constraint")  # pragma: no cover
        f = lambda Js: np.atleast_1d(error_bound_capped(Js, model, n1, eta, n_max))  # noqa: E731
    else:
        fl = 0.0 if (model.chi > 0 and eta > 1) else model.alpha * model.L * model.M * model.d / (2 * model.c * model.mu * n1**model.chi)
        what = f"n1 = {n1:g}, eta = {eta:g}, chi = {model.chi:g}"
        f = lambda Js: np.atleast_1d(error_bound_growth(Js, model, n1, eta))  # noqa: E731
    _floor_check(eps, fl, model, what)
    hi = 1
    while f(hi)[0] > eps:
        hi *= 2
        if hi > _J_CAP:
            raise InfeasibleError(f"error target eps={eps:.4g} needs more than {_J_CAP} iterations under the Thm 2 bound ({what})",
                                  "provision more workers, grow them faster, or relax eps", "error constraint")
    lo = 1
    step = 1 << 16
    while lo <= hi:  # first J in [lo, hi] with bound <= eps, scanning in vectorised chunks
        Js = np.arange(lo, min(hi, lo + step - 1) + 1)
        ok = np.nonzero(f(Js) <= eps)[0]
        if ok.size:
            return int(Js[ok[0]])
        lo = int(Js[-1]) + 1
    return hi  # pragma: no cover - hi itself satisfies the bound
