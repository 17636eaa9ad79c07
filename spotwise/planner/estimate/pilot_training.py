"""The in-process pilot's training loop, and how long it may train here (issue 42 item 1).

:func:`spotwise.planner.estimate.pilot.run_pilot` trains the job's workload on this machine for a
few hundred steps to fit paper 000's Thm 1 error curve (``papers/000_3c734f3ffedcac15.txt``).  Its
steps run here (:func:`pilot_loop`: the papers' SGD or the job's recipe), within a time budget
(:class:`PilotClock`), and a job that trains a GPU model on GPU workers is not trained on a CPU at all
(:func:`trains_on_gpus`, :class:`PilotSkipped`): the plan then uses a stated prior and says how to
measure the curve.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any, Callable

import numpy as np

from spotwise.errors import InputError
from spotwise.planner.estimate.runtime_fit import MIN_POINTS

#: issue 42 item 1: seconds an in-process pilot may train on this machine (projected from its first
#: steps: a pilot that fits keeps all its steps, so a fast workload's plan is the same on any machine;
#: a slower one trains fewer, at least MIN_POINTS; one that cannot fit MIN_POINTS is not run)
PILOT_BUDGET_S = float(os.environ.get("SPOTWISE_PILOT_BUDGET_S", "60"))
#: the built-in workloads that train on GPUs: their pilot runs only where CUDA is (a user's workload
#: is bounded by the budget instead)
GPU_WORKLOADS = ("resnet18-cifar", "gpt-bytes")


def trains_on_gpus(spec: Any) -> bool:
    """Whether ``spec`` trains one of :data:`GPU_WORKLOADS` on GPU workers (``device: cuda``, or an
    instance type the catalog lists with accelerators and ``device`` not ``cpu``)."""
    c = spec.cluster
    if spec.workload.name not in GPU_WORKLOADS or str(c.device) == "cpu" or c.kind != "vm":
        return False
    if str(c.device) == "cuda":
        return True
    from spotwise.spec.plane_choice import gpus_of

    types = [p.instance_type for p in c.pools] if c.pools else [c.instance_type]
    return any((gpus_of(t, [str(p) for p in spec.market.catalog], c.cloud) or ("", 0))[1] > 0 for t in types)


class PilotSkipped(Exception):
    """No in-process pilot was trained (a GPU workload without a GPU here, or one too slow for the
    budget): the plan uses the stated prior error model and says how to measure it."""


class PilotClock:
    """How many of a pilot's steps fit its time budget (projected from the steps so far), with
    progress on stderr once it has run for more than 2 s."""

    def __init__(self, steps: int, budget_s: float, heartbeat: Any = None) -> None:
        self.planned, self.steps, self.budget_s = int(steps), int(steps), float(budget_s)
        #: a :class:`~spotwise.planner.estimate.user_calls.Heartbeat` told of each step (the user-code bound)
        self.heartbeat = heartbeat
        if heartbeat is not None:
            heartbeat.enter("its first step (a batch of its dataset, its model, its loss)")
        self.t0 = time.perf_counter()
        self.projected_s = 0.0
        self._shown = 0.0

    def after(self, done: int) -> bool:
        """``done`` steps are done: whether to go on."""
        if self.heartbeat is not None:
            self.heartbeat.enter(f"step {done + 1} (a batch of its dataset, its model, its loss)")
        el = time.perf_counter() - self.t0
        per = el / max(1, done)
        self.projected_s = per * MIN_POINTS
        if done >= 2 and per * self.steps > self.budget_s:  # keep what fits, never fewer than MIN_POINTS
            self.steps = max(min(self.steps, int(self.budget_s / per)), MIN_POINTS)
            if per * MIN_POINTS > self.budget_s:
                self.steps = done
                return False
        if el > 2.0 and el - self._shown >= 2.0:
            self._shown = el
            print(f"plan: in-process pilot step {done}/{self.steps} ({el:.0f} s; budget {self.budget_s:g} s)",
                  file=sys.stderr, flush=True)
        return done < self.steps

    def done(self) -> None:
        if self._shown:
            print(f"plan: pilot done: {self.steps} steps in {time.perf_counter() - self.t0:.0f} s", file=sys.stderr,
                  flush=True)


def pilot_loop(torch: Any, sampler: Any, batch: int, losses: np.ndarray, seed: int,
                step: Callable[[int, np.ndarray], float], clock: "PilotClock | None" = None) -> None:
    """``losses[j] = step(j, indices)`` for global batches from ``sampler`` (a seeded, forked RNG),
    as many as ``clock`` lets run (all of them without one)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for j in range(losses.size):
            block = sampler.reserve(batch)
            if block is None:  # pragma: no cover - nothing else holds reservations here
                raise RuntimeError("the epoch sampler has no samples left to reserve")
            losses[j] = step(j, block.indices)
            sampler.commit(block)
            if clock is not None and not clock.after(j + 1):
                return


def recipe_steps(torch: Any, spec: Any, workload: Any, model: Any, sampler: Any, batch: int, lr: float,
                  losses: np.ndarray, seed: int, clock: "PilotClock | None" = None) -> None:
    """Like :func:`_sgd` with the job's recipe: the real optimizer through the same
    :class:`~spotwise.training.state.Updater` the runtime uses, the schedule at the samples committed."""
    from spotwise.training.recipe import UserOptimizerError, recipe_of
    from spotwise.training.state import FlatModel, Updater, forward_backward

    recipe = recipe_of(spec.workload, spec.planned_samples())
    fm = FlatModel(model, "cpu")
    try:
        up = Updater(fm, recipe, lr)

        def step(j: int, idx: np.ndarray) -> float:
            model.zero_grad(set_to_none=True)
            loss = forward_backward(model, workload.loss, workload.train.batch, idx, recipe, fm.device)
            grad = torch.cat([(p.grad.to_dense() if p.grad.is_sparse else p.grad).reshape(-1) if p.grad is not None
                              else torch.zeros(p.numel()) for p in fm.params])
            if not up.apply(grad, recipe.lr_at(lr, j * batch)):
                raise InputError(f"the pilot's loss diverged at step {j + 1} (NaN or infinite gradient)",
                                 "lower the learning rate, add a warm-up or grad_clip_norm", "workload.optimizer")
            return float(loss)

        pilot_loop(torch, sampler, batch, losses, seed, step, clock)
    except UserOptimizerError as e:  # e.g. capturable: true, fine on the job's GPUs, not on the pilot's CPU
        e.fix += ("; the in-process pilot steps the optimizer on this machine's CPU: to plan a GPU job from "
                  "elsewhere, pass --pilot DIR (a run of the job)")
        e.args = (e.message,)
        raise


def sgd_steps(torch: Any, workload: Any, model: Any, sampler: Any, batch: int, lr: float, losses: np.ndarray, seed: int,
         clock: "PilotClock | None" = None) -> None:
    """Plain SGD ``w -= lr g`` on global batches from ``sampler``; ``losses[j]`` = loss before step j's update."""

    from spotwise.workloads.base import check_loss

    def step(j: int, idx: np.ndarray) -> float:
        model.zero_grad(set_to_none=True)
        loss = check_loss(workload.loss(model, workload.train.batch(idx)))  # a vector: exit 2 naming its shape
        if not math.isfinite(float(loss.detach())):  # as the runs do (issue 30 item 10): a diverged pilot is no fit
            raise InputError(f"the pilot's loss is {float(loss.detach())} at step {j + 1}: training diverged",
                             "lower the learning rate (workload.lr), add a warm-up or grad_clip_norm, or fix the "
                             "workload's loss", "workload")
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is None:
                    continue
                g = p.grad.to_dense() if p.grad.is_sparse else p.grad
                p.sub_(lr * g)
        return float(loss.detach())

    pilot_loop(torch, sampler, batch, losses, seed, step, clock)
