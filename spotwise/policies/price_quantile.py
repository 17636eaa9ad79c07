"""The quantile function ``F^-1`` of a price description, as the ``dynamic-bids`` policy takes it.

``price`` is ``{"kind": "uniform", "low", "high"}``, ``{"kind": "gaussian", "mean", "variance", "low"}``
(truncated Gaussian, :class:`spotwise.market.synthetic.TruncatedGaussianPrice`) or
``{"kind": "quantiles", "values": [F^-1(0), ..., F^-1(1)]}`` on an even grid of levels
(``papers/000_3c734f3ffedcac15.txt`` Thm 3 needs ``F^-1``).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def price_ppf(price: dict[str, Any], q: float) -> float:
    """``F^-1(q)`` of ``price``; :class:`ValueError` for an unknown ``kind``."""
    kind = price.get("kind")
    if kind == "uniform":
        lo, hi = float(price["low"]), float(price["high"])
        return lo + q * (hi - lo)
    if kind == "gaussian":
        from spotwise.market.synthetic import TruncatedGaussianPrice

        dist = TruncatedGaussianPrice(mu=float(price["mean"]), variance=float(price["variance"]),
                                      low=max(0.0, float(price.get("low", 0.0))))
        return float(dist.ppf(min(q, 1.0 - 1e-9)))
    if kind == "quantiles":
        vals = np.asarray(price["values"], dtype=float)
        return float(np.interp(q, np.linspace(0.0, 1.0, vals.size), vals))
    raise ValueError(f"unknown price kind {kind!r} (uniform, gaussian or quantiles)")
