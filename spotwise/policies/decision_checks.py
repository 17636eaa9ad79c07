"""What a user policy's ``decide`` returned, checked in one place (issue 30 item 10).

:class:`~spotwise.policies.user.GuardedPolicy` wraps every user policy in every executor -- a real
or emulated run and ``simulate`` (the controller) and trace sweeps (the sweep engine) -- and hands
each result to :func:`checked_decisions` before any executor acts on it.  A result must be a list
(or tuple) of :class:`~spotwise.policies.base.Decision` values -- ``None`` (a forgotten ``return``)
is refused like any other junk (docs/policies.md) -- and each decision's fields must have their
types, be finite and lie in their ranges: ``Resize(workers=nan)`` would otherwise provision zero
workers and end the run ``no-capacity`` with exit 0.  The dataclasses' own ``__post_init__`` checks
let NaN and infinities through (``nan < 0`` is false), and a frozen dataclass can be changed behind
them, so the checks are repeated here whole.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from spotwise.policies.base import (
    MARKETS,
    Checkpoint,
    Decision,
    Migrate,
    Noop,
    Rebid,
    Resize,
    SetLearningRate,
    SwitchMarket,
    TopUp,
    SwitchSync,
)

#: the synchronisation modes a SwitchSync may name (:data:`spotwise.control.sync.SYNC_STRATEGIES`,
#: repeated here so that the policies never import the control package)
SYNC_MODES = ("full", "n-sync", "n-batch", "async", "ssgd", "sma", "adpsgd")

CONTRACT = "return a list of spotwise decisions (Noop, Resize, SwitchMarket, ...; docs/policies.md)"


class BadDecision(ValueError):
    """A policy's result is not a list of valid decisions: ``str`` says what it returned, ``fix`` how to mend it."""

    def __init__(self, what: str, fix: str = CONTRACT) -> None:
        super().__init__(what)
        self.fix = fix


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _whole(d: Decision, field: str, value: Any, low: int) -> int:
    """``value`` as an int >= ``low``: an int, or a finite float with no fraction (``2.0``)."""
    if _real(value) and math.isfinite(float(value)) and float(value) == int(value) and int(value) >= low:
        return int(value)
    raise BadDecision(f"{d.describe()} whose {field} is {_short(value)}",
                      f"give {type(d).__name__}.{field} a whole number >= {low} (an int), never NaN or infinite")


def _positive(d: Decision, field: str, value: Any) -> float:
    if _real(value) and math.isfinite(float(value)) and float(value) > 0:
        return float(value)
    raise BadDecision(f"{d.describe()} whose {field} is {_short(value)}",
                      f"give {type(d).__name__}.{field} a finite number > 0")


def _text(d: Decision, field: str, value: Any, optional: bool) -> None:
    if (optional and value is None) or (isinstance(value, str) and value):
        return
    raise BadDecision(f"{d.describe()} whose {field} is {_short(value)}",
                      f"give {type(d).__name__}.{field} a non-empty string" + (" (or None)" if optional else ""))


def check_decision(d: Decision) -> Decision:
    """``d`` with its fields checked (numbers normalised: ``Resize(workers=2.0)`` -> ``2``); raises :class:`BadDecision`."""
    if not isinstance(d.reason, str):
        raise BadDecision(f"{type(d).__name__} whose reason is {_short(d.reason)}", "give every decision a reason string")
    if isinstance(d, Resize):
        return dataclasses.replace(d, workers=_whole(d, "workers", d.workers, 0))
    if isinstance(d, Rebid):
        bids = d.bids
        if not isinstance(bids, (tuple, list)) or not bids:
            raise BadDecision(f"{d.describe()} with no bids", "give Rebid.bids one positive $/h price per worker "
                              "(a tuple with at least one)")
        return dataclasses.replace(d, bids=tuple(_positive(d, "bids", b) for b in bids))
    if isinstance(d, SetLearningRate):
        return dataclasses.replace(d, lr=_positive(d, "lr", d.lr))
    if isinstance(d, SwitchSync):
        if d.sync not in SYNC_MODES:
            raise BadDecision(f"{d.describe()} naming the sync mode {_short(d.sync)}",
                              f"give SwitchSync.sync one of {', '.join(SYNC_MODES)}")
        n = None if d.sync_n is None else _whole(d, "sync_n", d.sync_n, 1)
        return dataclasses.replace(d, sync_n=n)
    if isinstance(d, SwitchMarket):
        if d.market not in MARKETS:
            raise BadDecision(f"{d.describe()}", f"give SwitchMarket.market one of {', '.join(MARKETS)}")
        return d
    if isinstance(d, Migrate):
        _text(d, "instance_type", d.instance_type, False)
        _text(d, "region", d.region, True)
        _text(d, "cloud", d.cloud, True)
        return d
    if isinstance(d, TopUp):
        return dataclasses.replace(d, on_demand=_whole(d, "on_demand", d.on_demand, 0))
    if isinstance(d, (Noop, Checkpoint)):
        return d
    return d  # a Decision subclass of the user's own: the executor logs that it does not know it


def checked_decisions(out: Any) -> list[Decision]:
    """A policy's result as a list of checked decisions; :class:`BadDecision` for anything else."""
    if not isinstance(out, (list, tuple)) or not all(isinstance(d, Decision) for d in out):
        hint = " (a decide that returns nothing returns None: return [] to do nothing)" if out is None else ""
        raise BadDecision(f"{_short(out)}, not a list of decisions{hint}")
    return [check_decision(d) for d in out]
