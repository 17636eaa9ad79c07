"""How much of the time an availability series held each instance count (issue 31).

A multi-node SkyPilot trace (``availability/16-node/...``) counts, every tick, how many of the
job's ``k`` nodes a zone could provide: 0 (none), ``k`` (the whole job) or anything in between
(partial capacity).  :func:`count_shares` gives the *time-weighted* share of each count,
:func:`series_nodes` the node count the series was collected for, and :func:`bucket_shares`
folds the partial counts into a few ranges for a compact summary (``spotwise traces show``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spotwise.market.series import StepSeries

#: at most this many partial counts (1 .. k-1) are listed one by one; more are folded into ranges
MAX_SINGLE_PARTIALS = 4


def series_nodes(s: StepSeries) -> int:
    """The node count of ``s``: ``meta.extra["nodes"]`` (the ``k`` of a ``k-node`` trace folder)
    when it is an int >= 1, else the largest count the series holds (at least 1)."""
    n = s.meta.extra.get("nodes")
    if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
        return n
    return max(1, int(np.floor(float(np.max(s.values)) + 1e-9)))


def count_shares(s: StepSeries) -> dict[int, float]:
    """The share of ``s``'s time spent at each instance count, ``{count: share}`` sorted by count.

    Values are read as counts the way the simulator reads them (``floor(v + 1e-9)``).  Shares are
    time-weighted (value ``i`` weighs ``times[i+1] - times[i]``, the last one ``end - times[-1]``;
    a series of zero length weighs its points equally) and sum to 1.  The keys are 0, the node
    count (:func:`series_nodes`) and every other count that holds for some time, so a 0/1 series
    always gives ``{0: ..., 1: ...}``.
    """
    w = s.weights()
    if not np.sum(w) > 0:
        w = np.ones_like(w)
    counts = np.floor(np.asarray(s.values, dtype=float) + 1e-9).astype(np.int64)
    total = float(np.sum(w))
    shares: dict[int, float] = {0: 0.0, series_nodes(s): 0.0}
    for c in np.unique(counts):
        share = float(np.sum(w[counts == c])) / total
        if share > 0:
            shares[int(c)] = share
    return dict(sorted(shares.items()))


@dataclass(frozen=True)
class CountBucket:
    """The counts ``lo..hi`` (inclusive) and the share of time spent at any of them."""

    lo: int
    hi: int
    share: float

    @property
    def label(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


def _ranges(lo: int, hi: int) -> list[tuple[int, int]]:
    """``lo..hi`` one by one when short, else split in two halves (``1..15`` -> ``1-7``, ``8-15``)."""
    if hi < lo:
        return []
    if hi - lo + 1 <= MAX_SINGLE_PARTIALS:
        return [(c, c) for c in range(lo, hi + 1)]
    mid = (lo + hi + 1) // 2
    return [(lo, mid - 1), (mid, hi)]


def bucket_shares(shares: dict[int, float], nodes: int) -> list[CountBucket]:
    """Fold :func:`count_shares` into buckets: 0, the partial counts (each, or two ranges when there
    are more than :data:`MAX_SINGLE_PARTIALS` of them), the full count ``nodes``, and any counts
    above it.  0 and ``nodes`` are always there; a partial bucket only when some count in it occurs.
    """
    def total(lo: int, hi: int) -> tuple[bool, float]:
        keys = [c for c in shares if lo <= c <= hi]
        return bool(keys), float(sum(shares[c] for c in keys))

    out = [CountBucket(0, 0, total(0, 0)[1])]
    for lo, hi in _ranges(1, nodes - 1):
        seen, share = total(lo, hi)
        if seen:
            out.append(CountBucket(lo, hi, share))
    if nodes >= 1:
        out.append(CountBucket(nodes, nodes, total(nodes, nodes)[1]))
    above = [c for c in shares if c > nodes]
    if above:
        out.append(CountBucket(nodes + 1, max(above), total(nodes + 1, max(above))[1]))
    return out
