"""``E[1/y]``: the expected inverse number of active workers, and the exponent ``chi``.

``papers/000_3c734f3ffedcac15.txt`` Thm 1 bounds the error through ``E[1/y_j]``; Thm 2, Thm 7 and
Sec. V use a bound ``E[1/y_j] <= d / n_j^chi``.

**Convention (the paper's).**  Sec. III-A: "We do not count 'iterations' where the number of active
workers is 0" -- an iteration only runs with ``y >= 1``, and the idle time with ``y = 0`` is
charged to the completion time (Lemma 1), not to the error.  So ``y_j`` is distributed as the
number of active workers *conditioned on* ``y >= 1``; the proof of Lemma 3 normalises by
``1/(1 - q^n)`` accordingly.  All functions here follow that convention.

* Binomial availability (each of ``n`` workers active independently with probability ``p``,
  preempted with ``q = 1 - p``)::

      E[1/y | y >= 1] = sum_{k=1}^n (1/k) C(n,k) p^k q^(n-k) / (1 - q^n)

  computed exactly (log-space binomial pmf).  The identity of the paper's ref. [46],
  ``E[1/(z+1)] = (1 - q^(n+1)) / ((n+1) p)`` for unconditioned ``z ~ Bin(n, p)``, is
  :func:`inv_plus_one_binomial`.
* Uniform ``y`` on ``{1..n}`` (Lemma 3): ``E[1/y] = H_n / n <= (ln n + 1)/n``.

**On chi.**  Lemma 3 states ``E[1/y] <= O(n^-1/2)`` for the uniform law and ``O(n^-chi)`` with
``chi in (0, 1)`` for the binomial one.  Both are valid but loose: since ``1/y <= 2/(y+1)`` for
``y >= 1``, the [46] identity gives ``E[1/y | y >= 1] <= 2(1+q)/(p n)``, i.e. ``chi = 1`` with
``d = 2(1+q)/p`` (:func:`binomial_d_chi_one`; ``n E[1/y | y>=1] -> 1/p``).  For the uniform law
``H_n/n`` is ``O(n^-chi)`` for every ``chi < 1`` but not for ``chi = 1``.  :func:`smallest_d`
gives the tightest ``d`` for a chosen ``chi`` over a range of ``n``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from spotwise.errors import InputError
from spotwise.theory.runtime import harmonic


def _check(n: int, p: float | None = None) -> None:
    if int(n) != n or n < 1:
        raise InputError(f"the number of provisioned workers must be an integer >= 1, got {n!r}", where="E[1/y]")
    if p is not None and not (0 < p <= 1):
        raise InputError(f"the probability that a worker is active must lie in (0, 1], got {p!r}", where="E[1/y]")


def active_pmf_binomial(n: int, p: float) -> np.ndarray:
    """``P(y = k | y >= 1)`` for ``k = 1..n`` (index ``k-1``), ``y ~ Bin(n, p)``."""
    _check(n, p)
    k = np.arange(1, n + 1, dtype=float)
    if p == 1.0:
        out = np.zeros(n)
        out[-1] = 1.0
        return out
    logc = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    logpmf = logc + k * math.log(p) + (n - k) * math.log1p(-p)
    pmf = np.exp(logpmf)
    return pmf / pmf.sum()  # normalising by sum_{k>=1} = 1 - q^n: conditioning on y >= 1


def inv_active_binomial(n: int, p: float) -> float:
    """``E[1/y | y >= 1]`` for ``y ~ Bin(n, p)`` (paper 000 Lemma 3 convention), exact."""
    pmf = active_pmf_binomial(n, p)
    return float(np.sum(pmf / np.arange(1, n + 1)))


def inv_plus_one_binomial(n: int, p: float) -> float:
    """``E[1/(z+1)] = (1 - q^(n+1)) / ((n+1) p)`` for unconditioned ``z ~ Bin(n, p)`` ([46] in paper 000)."""
    _check(n, p)
    q = 1.0 - p
    return (1.0 - q ** (n + 1)) / ((n + 1) * p)


def inv_active_uniform(n: int) -> float:
    """``E[1/y] = H_n / n`` for ``y`` uniform on ``{1..n}`` (paper 000 Lemma 3)."""
    _check(n)
    return float(harmonic(n)) / n


def binomial_d_chi_one(p: float) -> float:
    """``d`` with ``E[1/y | y>=1] <= d/n`` for every ``n`` (``chi = 1``): ``d = 2(1+q)/p``.

    Proof: ``1/y <= 2/(y+1)`` on ``y >= 1``, so ``E[1/y | y>=1] <= 2 E[1/(z+1)]/(1-q^n) =
    2(1-q^{n+1})/((n+1) p (1-q^n))`` and ``(1-q^{n+1})/(1-q^n) <= 1+q``, ``n/(n+1) < 1``.
    """
    _check(1, p)
    return 2.0 * (2.0 - p) / p


def smallest_d(inv_y: np.ndarray, ns: np.ndarray, chi: float) -> float:
    """Smallest ``d`` with ``inv_y[i] <= d / ns[i]^chi`` for all ``i``: ``max_i ns[i]^chi inv_y[i]``."""
    ns = np.asarray(ns, dtype=float)
    inv_y = np.asarray(inv_y, dtype=float)
    if ns.shape != inv_y.shape or ns.size == 0:
        raise InputError("inv_y and ns must be non-empty arrays of the same shape", where="smallest_d")
    return float(np.max(ns ** chi * inv_y))
