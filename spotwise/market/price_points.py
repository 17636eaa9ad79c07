"""The cap on how many price points an i.i.d. synthetic market may generate.

Kept apart from :mod:`spotwise.config` (which checks a spec's market against it) and
:mod:`spotwise.market.synthetic` (which generates the series) so that neither imports the other.
"""

from __future__ import annotations

import math

from spotwise.errors import InputError

MAX_PRICE_POINTS = 10_000_000


def check_price_points(duration_s: float, interval_s: float, where: str = "interval_s") -> int:
    """Number of price points ``ceil(duration_s / interval_s)`` of an i.i.d. synthetic market.

    Raises :class:`InputError` (naming ``where``) when it exceeds :data:`MAX_PRICE_POINTS`:
    an ``interval_s`` of 1e-9 over a week would be 6e14 points, petabytes of memory.
    """
    n = duration_s / interval_s
    if not (math.isfinite(n) and n <= MAX_PRICE_POINTS):
        raise InputError(
            f"a price every {interval_s:g} s over {duration_s:g} s of market is {n:.3g} price points "
            f"(at most {MAX_PRICE_POINTS:,} are generated)",
            f"raise interval_s to at least {duration_s / MAX_PRICE_POINTS:.3g} s (spot prices change every few "
            "seconds at most; paper 000 redraws every 4 s), or shorten duration_s / the deadline", where)
    return max(1, math.ceil(n - 1e-9))
