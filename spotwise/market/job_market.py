"""The market one job lives in: :class:`Market`, the value every executor and the planner read.

:func:`spotwise.market.world.build_market` builds it from a spec (and
:func:`spotwise.market.functions.function_market` for serverless jobs); a job's pools
(:mod:`spotwise.market.pools`) each hold one.  This module holds the value alone, below both, so
that the pools need not import the module that builds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spotwise.errors import InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.catalog import Catalog, InstanceType
from spotwise.market.preemption import RevocationModel
from spotwise.market.series import StepSeries


@dataclass(frozen=True)
class Market:
    """Everything about the outside world one job needs (all times are virtual seconds)."""

    instance: InstanceType
    coordinator: InstanceType
    prices: StepSeries
    revocation: RevocationModel
    billing: BillingPolicy
    catalog: Catalog
    horizon_s: float
    #: the job's pools when the spec has ``cluster.pools`` (issue 21): a
    #: :class:`~spotwise.market.pools.PoolSet` (untyped here: the pools hold markets, so they sit
    #: above this module); the fields above are then the first pool's, except ``revocation``
    #: (every pool's, :class:`~spotwise.market.pools.PooledRevocation`)
    pools: Any = None

    def spot_price(self, t: float) -> float:
        return float(self.prices.value_at(t))

    @property
    def on_demand_price(self) -> float:
        """The worker instance's on-demand $/h (for the 'same job on on-demand' comparison)."""
        if self.instance.on_demand_per_hour is None:
            raise InputError(f"the catalog has no on-demand price for {self.instance.name}",
                             "add on_demand_per_hour to the instance in your catalog file")
        return float(self.instance.on_demand_per_hour)

    def step_seconds(self, family: str, reference_step_s: float) -> float:
        """Mean virtual seconds per mini-batch on this instance: ``reference_step_s / throughput``."""
        return reference_step_s / self.catalog.throughput(self.instance, family)
