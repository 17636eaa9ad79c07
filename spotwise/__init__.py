"""spotwise: train ML models cheaply on volatile cloud capacity.

The Python API (issue 22; the ``spotwise`` command is a thin layer over it, see :mod:`spotwise.api`):

* :func:`load_spec` -- a validated :class:`JobSpec` from a YAML path or a dict;
* :func:`plan` -- the recommended :class:`Plan` (strategy, workers, bids, expected cost and time, P(deadline));
* :func:`run` -- real training on the emulated spot market (or a Ray cluster), a :class:`RunSummary`;
* :func:`launch` -- :func:`run` of your own training script (``spotwise.elastic``) under a spec's cluster and target;
* :func:`eject` -- a built-in or ``module:function`` job written out as your own script on ``spotwise.elastic``;
* ``from spotwise import job`` -- in your training script: the job it runs in (``spotwise.elastic.init()``;
  a torchrun script converts in 5 lines, docs/own-loop.md);
* :func:`simulate` -- a modelled run in virtual time, a :class:`RunSummary`;
* :func:`sweep` -- strategies (built-in, or your own :class:`Policy`) replayed over real traces, a :class:`SweepResult`;
* :func:`report` -- a run's report, or one HTML page comparing runs and sweeps, a :class:`Report`.

Errors you can cause raise :class:`InputError` (the CLI exits 2 on it).  Policies are
``decide(observation) -> [decisions]`` (``docs/policies.md``): subclass :class:`Policy` and return
:class:`SwitchMarket`, :class:`Resize`, ... from :class:`Observation`.

See DESIGN.md (shared) for the architecture: spec + market -> planner -> plan -> executor
(simulator | emulated Ray | real Ray) with policies -> event log -> ledger -> report.
"""

from __future__ import annotations

from typing import Any

from spotwise.errors import InfeasibleError, InputError, SpotwiseError
from spotwise.policies.base import (Checkpoint, Decision, Migrate, Noop, Observation, PlaceQuote, Policy, Rebid, Resize,
                                    SetLearningRate, SwitchMarket, SwitchSync, TopUp)

__version__ = "0.1.0"

#: lazily imported names -> their module (``import spotwise`` stays light: no torch, no Ray)
_LAZY = {
    "load_spec": "spotwise.api", "check_spec": "spotwise.api", "plan": "spotwise.api", "run": "spotwise.api",
    "launch": "spotwise.api", "simulate": "spotwise.api", "sweep": "spotwise.api", "report": "spotwise.api",
    "JobSpec": "spotwise.config", "RunSummary": "spotwise.events", "Plan": "spotwise.planner.plan.records",
    "SweepResult": "spotwise.sim.sweep", "Strategy": "spotwise.sim.sweep", "Report": "spotwise.reports.compare",
    "UserPolicyError": "spotwise.policies.user", "eject": "spotwise.spec.eject",
}

__all__ = ["__version__", "InputError", "InfeasibleError", "SpotwiseError", "Policy", "Observation", "Decision", "Noop",
           "Resize", "Rebid", "SwitchSync", "SetLearningRate", "Migrate", "SwitchMarket", "TopUp", "Checkpoint", "PlaceQuote",
           *_LAZY]


def __getattr__(name: str) -> Any:
    if name == "job":  # ``from spotwise import job``: this process's job (spotwise.elastic.init()), never cached here
        from spotwise.elastic import init

        return init()
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spotwise' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
