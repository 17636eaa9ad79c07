"""Where pools are: regions, the link between a worker and a parameter server in another region,
and what crossing it costs in time and egress money (issue 21 item 2).

``papers/002_a246f6afe29b4bfb.txt`` Sec. III-G (Fig. 8) trains with workers split over us-east1,
us-central1 and us-west1 and the parameter server in the region with the most workers: "a subset
of the workers have to communicate with a parameter server that resides in a different data
center", and training is up to 48% slower.  The paper does not measure the link, so spotwise
*models* it: every exchange of a worker whose region is not the parameter server's (it pulls the
parameters and pushes its gradient) takes

    exchange_s = rtt_s + bytes * 8 / (gbps * 1e9)

more than inside one region, and its bytes pay the cloud's inter-region egress price (both
directions leave a region).  The figures (``networks:`` in the packaged catalog) name their
sources; a user catalog can override them.  Inside one region the exchange is part of the
instance's measured mini-batch time (``workload.step_time_s``), as before.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from spotwise.errors import InputError

_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)[a-z]$")
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")


def region_of(place: str | None) -> str:
    """The region of a zone or region name (``us-east-1a`` -> ``us-east-1``, ``us-west1-b`` ->
    ``us-west1``; a region is its own region; ``None`` -> ``""``, the cluster's default place)."""
    if not place:
        return ""
    p = str(place)
    for pat in (_AWS_ZONE, _GCP_ZONE):
        m = pat.match(p)
        if m:
            return m.group(1)
    return p


@dataclass(frozen=True)
class NetworkLink:
    """The inter-region link of one cloud (a catalog ``networks:`` entry)."""

    cloud: str
    rtt_s: float
    gbps: float
    egress_per_gb: float
    source: str = ""

    def __post_init__(self) -> None:
        where = f"catalog networks[{self.cloud!r}]"
        for name, lo_open in (("rtt_s", False), ("gbps", True), ("egress_per_gb", False)):
            v = getattr(self, name)
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) and (v > 0 if lo_open else v >= 0)
            if not ok:
                raise InputError(f"{name} must be a finite number {'> 0' if lo_open else '>= 0'}, got {v!r}",
                                 "see the networks: section of spotwise/market/data/catalog.yaml", where)
            object.__setattr__(self, name, float(v))

    def exchange_s(self, nbytes: float) -> float:
        """Extra seconds one exchange of ``nbytes`` takes across regions (latency + transfer)."""
        return self.rtt_s + 8.0 * float(nbytes) / (self.gbps * 1e9)

    def egress_usd(self, nbytes: float) -> float:
        return float(nbytes) / 1e9 * self.egress_per_gb
