"""Measured loss-curve priors for the built-in GPU workloads (issue 42 item 1).

A plan of a job that trains ``resnet18-cifar`` or ``gpt-bytes`` on GPUs never trains the model on
the planning machine's CPU (:func:`~spotwise.planner.estimate.pilot_training.trains_on_gpus`).
Without ``--pilot DIR`` its error model comes from the workload's *measured prior*: the per-step
training losses of the workload's in-process pilot at its default recipe, recorded once by
``tools/measure_priors.py`` with the pilot's own code and shipped in ``spotwise/data/priors/``.  A
loss per step depends on the model, data, recipe, global batch and seed, not on the hardware, so the
curve is the one a pilot of that configuration records on a GPU (up to float rounding).

The plan fits paper 000's Thm 1 shape to it exactly as it fits a pilot
(:func:`~spotwise.planner.estimate.pilot.fit_error_model`, ``papers/000_3c734f3ffedcac15.txt`` Thm 1,
eq. (20)), at the prior's own step size and number of workers (Thm 1's variance term scales with
``E[1/y]``, so a job with another number of workers gets the floor for its own count), and says
in its notes that the curve is a prior, how it was measured, and where the user's job differs from it
(:func:`differences`: model shape, data, global batch, learning rate, optimizer, precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from spotwise.errors import InputError

#: the workloads with a shipped prior, and the defaults of their model/data parameters
_PRIORED = ("resnet18-cifar", "gpt-bytes")
#: parameters that change only evaluation, not the training curve
_EVAL_ONLY = frozenset({"n_test", "max_eval", "test_fraction"})


def model_params(workload: Any) -> dict[str, Any]:
    """``workload.params`` merged over the built-in's defaults (what shapes its model and data)."""
    from spotwise.workloads.base import read_params

    if workload.name == "resnet18-cifar":
        from spotwise.workloads.resnet import RESNET_DEFAULTS as defaults
    elif workload.name == "gpt-bytes":
        from spotwise.workloads.gpt import GPT_DEFAULTS as defaults
    else:
        raise ValueError(f"no shipped prior for workload {workload.name!r}")
    p = read_params(dict(workload.params or {}), defaults, workload.name)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.items()}


@dataclass(frozen=True)
class MeasuredPrior:
    """One shipped curve: ``losses[j]`` is the training loss of pilot step ``j + 1`` (before its update)."""

    workload: str
    params: dict[str, Any]
    data: str
    workers: int
    batch_size: int
    lr: float
    optimizer: dict[str, Any] | None
    precision: str
    seed: int
    losses: tuple[float, ...]
    measured: dict[str, Any] = field(default_factory=dict)
    #: the schedule's learning rate at the first and the last measured step (a warm-up rises through it)
    lr_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.workload not in _PRIORED:
            raise ValueError(f"a prior for an unknown workload {self.workload!r}")
        if self.workers < 1 or self.batch_size < 1:
            raise ValueError("a prior's workers and batch_size must be >= 1")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"a prior's lr must be positive and finite, got {self.lr!r}")
        if len(self.losses) < 10 or not all(math.isfinite(v) for v in self.losses):
            raise ValueError("a prior needs at least 10 finite losses")

    @property
    def global_batch(self) -> int:
        return self.workers * self.batch_size

    def describe(self) -> str:
        m = self.measured
        opt = (self.optimizer or {}).get("name", "SGD")
        return (f"{len(self.losses)} pilot steps of {self.workload} ({self.data} data) at a global batch of "
                f"{self.workers} x {self.batch_size}, {opt} lr {self.lr:g}"
                + (f" (the schedule at {self.lr_range[0]:.3g} -> {self.lr_range[1]:.3g} over these steps)"
                   if self.lr_range else "") + f", {self.precision}, seed {self.seed}; "
                f"measured {m.get('date', '?')} with torch {m.get('torch', '?')} on {m.get('machine', '?')} "
                "(a loss per step does not depend on the hardware)")


def load_prior(workload: str) -> MeasuredPrior | None:
    """The shipped prior of ``workload`` (a built-in's name, never a path), or ``None``."""
    from spotwise.safeparse import loads_json

    if workload not in _PRIORED:
        return None
    res = resources.files("spotwise").joinpath("data", "priors", f"{workload}.json")
    if not res.is_file():
        return None
    d = loads_json(res.read_text(), f"spotwise/data/priors/{workload}.json", "shipped prior")
    try:
        return MeasuredPrior(workload=str(d["workload"]), params=dict(d["params"]), data=str(d["data"]),
                             workers=int(d["workers"]), batch_size=int(d["batch_size"]), lr=float(d["lr"]),
                             optimizer=d.get("optimizer"), precision=str(d.get("precision", "fp32")),
                             seed=int(d["seed"]), losses=tuple(float(v) for v in d["losses"]),
                             measured=dict(d.get("measured") or {}),
                             lr_range=(float(d["lr_first"]), float(d["lr_last"])) if "lr_first" in d else None)
    except (KeyError, TypeError, ValueError) as e:  # a broken install, not the user's input
        raise InputError(f"the shipped prior of {workload} is unreadable ({e})", "reinstall spotwise",
                         f"spotwise/data/priors/{workload}.json") from e


def differences(prior: MeasuredPrior, spec: Any) -> list[str]:
    """Where ``spec``'s job differs from the prior's measured configuration (empty: the same job)."""
    wl = spec.workload
    out: list[str] = []
    mine = model_params(wl)
    changed = sorted(k for k in set(mine) | set(prior.params)
                     if k not in _EVAL_ONLY and mine.get(k) != prior.params.get(k))
    if changed:
        out.append("model/data parameters " + ", ".join(f"{k} {mine.get(k)!r} (prior {prior.params.get(k)!r})"
                                                         for k in changed))
    data = "a dataset file" if wl.dataset else prior.data
    if wl.dataset:
        out.append(f"data: {data} (the prior trained on the built-in {prior.data} data)")
    gb = int(spec.cluster.workers) * int(wl.batch_size)
    if gb != prior.global_batch:
        out.append(f"global batch {spec.cluster.workers} x {wl.batch_size} = {gb} (prior {prior.global_batch})")
    if not math.isclose(float(wl.lr), prior.lr, rel_tol=1e-9):
        out.append(f"lr {float(wl.lr):g} (prior {prior.lr:g})")
    if (wl.optimizer or None) != (prior.optimizer or None):
        out.append(f"optimizer {(wl.optimizer or {}).get('name', 'SGD')} {wl.optimizer or {}} (prior {prior.optimizer})")
    if str(wl.precision) != prior.precision:
        out.append(f"precision {wl.precision} (prior {prior.precision})")
    return out
