"""A built-in or ``module:function`` workload trained by a loop written on :mod:`spotwise.elastic` (issue 41 item 2).

This file is both a module and a training script.  :func:`train` is the training a spec's
``workload:`` mapping describes -- the model, loss and data of a built-in workload (``resnet18-cifar``,
``gpt-bytes``, ``mlp-digits``, ...) or of a ``module:function``, with the spec's recipe (optimizer,
schedule in committed samples, clipping, accumulation, precision, evaluation) -- written as a client
of the same API a user's own ``train.py`` uses: ``job.model``, ``job.optimizer`` (``step()`` is the
commit point), ``job.data`` (exactly-once, resumable batches), ``job.backward``, ``job.log``.

``spotwise eject SPEC --out DIR`` (:mod:`spotwise.spec.eject`) copies this file to ``DIR/train.py``
with the job's workload written into :data:`WORKLOAD` and writes ``DIR/job.yaml`` (the spec with
``workload: {script: train.py, ...}``): ``spotwise run DIR/job.yaml`` trains the same workload through
the elastic API on the same market, and the script is the user's to change -- a second model, an EMA
teacher, a loss over several batches -- where ``loss(model, batch)`` ends.  ``python DIR/train.py``
runs it as a plain process (``--epochs`` bounds it there).

**The same training as the collective plane's own S-SGD step** (``papers/001_30a454edd897cf47.txt``
Sec. 3.3, "updated using averaged gradients"), step for step while no step crosses an epoch's end: the
model is built from the run's seed (``job.seed``), member ``r`` of ``k`` takes block ``r`` of the step's
``k * batch_size`` positions in the same seeded epoch order, the gradient is the members' mean (every
block full), the float buffers (BatchNorm statistics) their sample-weighted mean, and the learning rate
the schedule's at the committed samples (``job.samples``).  Accumulation pulls ``accumulate``
micro-batches of ``batch_size / accumulate`` per step (under ``no_sync`` but the last), each loss
weighted ``1 / accumulate``.  Where they differ: this loop's steps are always full (a step that reaches
an epoch's end takes the next epoch's first samples, :mod:`spotwise.elastic.positions`) where the
built-in step is short there; evaluation results are ``job.log`` metrics (``eval_loss``, ...), not
``eval`` events; sparse-gradient workloads (embedding tables) are refused (DDP's buckets are dense).
``tests/test_workload_loop.py`` shows the equality.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, Mapping

import numpy as np
import torch

#: the job's ``workload:`` mapping (``spotwise eject`` writes it here); ``--workload JSON`` overrides it
WORKLOAD: dict[str, Any] | None = None
#: the run's seed when this script runs on its own (under spotwise: the spec's ``seed``)
SEED = 0
#: folders (relative to this file's) a ``module:function`` workload is imported from
PATHS: list[str] = []


def _spec(workload: Mapping[str, Any], here: str) -> Any:
    """The workload mapping as a checked :class:`~spotwise.config.WorkloadSpec`; a relative dataset
    path is this script's folder's."""
    from spotwise.config import WorkloadSpec
    from spotwise.errors import InputError
    from spotwise.spec.load import build

    if not isinstance(workload, Mapping):
        raise InputError("no workload to train", "run `spotwise eject SPEC --out DIR`, which writes it into "
                         "DIR/train.py, or pass --workload '{\"name\": \"mlp-digits\"}'", "WORKLOAD")
    if "script" in workload:
        raise InputError("the workload is a training script already", "run that script", "WORKLOAD.script")
    spec = build(WorkloadSpec, dict(workload), "workload")
    if spec.dataset and not os.path.isabs(spec.dataset):
        spec.dataset = os.path.normpath(os.path.join(here, spec.dataset))
    return spec


def _has_unused_parameters(model: torch.nn.Module, wl: Any, spec: Any, device: torch.device) -> bool:
    """Whether a trainable parameter of ``model`` gets no gradient from a loss (DDP then needs
    ``find_unused_parameters``, on every member alike: the same model and samples): one backward pass
    on the first two samples, the RNG forked and the buffers (BatchNorm's statistics) put back after,
    so neither the model nor the run's random stream moves -- and no copy of the model is made."""
    from spotwise.training.state import autocast_for
    from spotwise.workloads.base import check_loss
    from spotwise.workloads.device import to_device

    kept = [(b, b.detach().clone()) for b in model.buffers()]
    idx = np.arange(min(2, len(wl.train)), dtype=np.int64)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            with autocast_for(str(spec.precision), device):
                loss = check_loss(wl.loss(model, to_device(wl.train.batch(idx), device)))
            loss.float().backward()
        return any(q.requires_grad and q.grad is None for q in model.parameters())
    finally:
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for b, v in kept:
                b.copy_(v)


def _optimizers(spec: Any, model: torch.nn.Module, lr: float) -> list[torch.optim.Optimizer]:
    """The recipe's optimizer(s) over the trainable parameters (the papers' plain SGD without one)."""
    opt = spec.optimizer_spec
    params = [q for q in model.parameters() if q.requires_grad]
    if opt is None:
        return [torch.optim.SGD(params, lr=lr)]
    built = opt.build(params, lr, model=model)
    return list(getattr(built, "optimizers", [built]))


def train(job: Any, workload: Mapping[str, Any], here: str = ".", epochs: float | None = None) -> dict[str, float]:
    """Train ``workload`` (a spec's ``workload:`` mapping) as the job ``job`` (``spotwise.elastic.init()``)
    until its data ends -- the spec's target under spotwise, ``epochs`` in a plain process; the last
    evaluation's results (empty without one).  ``here``: the folder a relative dataset path is in."""
    from spotwise.errors import InputError
    from spotwise.training.recipe import recipe_of
    from spotwise.training.state import autocast_for, check_precision_device, set_group_rates
    from spotwise.workloads.base import check_loss
    from spotwise.workloads.device import to_device
    from spotwise.workloads.registry import make_workload

    spec = _spec(workload, here)
    A, b = int(spec.accumulate), int(spec.batch_size)
    if b % A:
        raise InputError(f"batch_size {b} is not a multiple of accumulate {A}", "the loop pulls `accumulate` "
                         "micro-batches of batch_size / accumulate per step: make batch_size a multiple", "batch_size")
    device = job.device
    if not job.launched:  # on its own: fp16 needs CUDA (under spotwise the spec's cluster was checked, and the
        check_precision_device(str(spec.precision), device)  # coordinator runs this far on its CPU)
    wl = make_workload(spec, job.seed)  # the same initial model on every member: built from the run's seed
    if wl.sparse_grads:
        raise InputError(f"workload {spec.name} has sparse gradients (embedding tables), which DDP's buckets do "
                         "not reduce", "train it with `spotwise run` on its own spec (the built-in step takes "
                         "sparse gradients)", "workload.name")
    # a schedule without a total is resolved for the spec's target when the spec is loaded: eject writes it
    recipe = recipe_of(spec, None)
    lr = float(spec.lr)
    module = to_device(wl.build_model(), device)
    unused = _has_unused_parameters(module, wl, spec, device)
    model = job.model(module, find_unused_parameters=unused)
    opts = _optimizers(spec, model.module, lr)
    scaler = torch.amp.GradScaler(device.type) if spec.precision == "fp16" else None
    optimizer = job.optimizer(*opts, scaler=scaler)
    # each group keeps its ratio to the job's base rate (several optimizers: each entry's own lr)
    bases = [float(g["lr"]) for g in optimizer.param_groups]
    clip = spec.grad_clip_norm
    params = [q for q in model.parameters() if q.requires_grad]
    batches = iter(job.data(wl.train, batch_size=b // A, num_workers=int(spec.loader.num_workers),
                            prefetch=int(spec.loader.prefetch), pin_memory=bool(spec.loader.pin_memory),
                            epochs=epochs))
    last: dict[str, float] = {}
    evaluated = -1
    while True:
        # the schedule at the committed samples (the same on every member), each group at its ratio to the base
        set_group_rates(optimizer.param_groups, bases, lr, recipe.lr_at(lr, job.samples))
        for j in range(A):
            batch = next(batches, None)
            if batch is None:
                return last
            with model.no_sync() if j < A - 1 else contextlib.nullcontext():  # one all-reduce per step
                with autocast_for(str(spec.precision), device):
                    loss = check_loss(wl.loss(model, to_device(batch, device)))
                loss = loss.float() * (1.0 / A) if A > 1 else loss  # each micro-batch's weight, as the built-in step
                job.backward(scaler.scale(loss) if scaler is not None else loss)
        if scaler is not None:
            scaler.unscale_(optimizer)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, float(clip))
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if wl.test is not None and job.step and job.step % int(spec.eval_every) == 0 and job.step != evaluated \
                and job.is_leader:
            evaluated, last = job.step, _evaluate(wl, model.module)
            job.log(**{f"eval_{k}": v for k, v in last.items()})
            if not job.launched:  # on its own: the progress a spotwise run shows in its events and status
                print(f"step {job.step}: " + ", ".join(f"eval {k} {v:.4g}" for k, v in last.items()), flush=True)


def _evaluate(wl: Any, module: torch.nn.Module) -> dict[str, float]:
    """The workload's evaluation on its held-out set, as the built-in step's leader does it."""
    module.eval()
    try:
        with torch.no_grad():
            res = wl.evaluate(module, wl.test)
    finally:
        module.train()
    return {str(k): float(v) for k, v in res.items()}


def main(argv: list[str] | None = None) -> None:
    """``python train.py [--epochs E] [--workload JSON]``: train :data:`WORKLOAD` (module docstring)."""
    import spotwise.elastic as sw
    from spotwise.errors import InputError
    from spotwise.safeparse import loads_json

    ap = argparse.ArgumentParser(description="train a spotwise workload through spotwise.elastic")
    ap.add_argument("--workload", default=None, help="the workload mapping as JSON (default: WORKLOAD in this file)")
    ap.add_argument("--epochs", type=float, default=1.0, help="epochs when run on its own (under spotwise: the "
                    "spec's target)")
    args = ap.parse_args(argv)
    here = os.path.dirname(os.path.abspath(__file__))
    for p in PATHS:
        folder = os.path.normpath(os.path.join(here, p))
        if folder not in sys.path:
            sys.path.insert(0, folder)
    workload = loads_json(args.workload, "--workload", "argument") if args.workload else WORKLOAD
    job = sw.init(seed=SEED)
    try:
        train(job, workload, here, epochs=float(args.epochs))
    except InputError as e:
        if job.launched:  # under spotwise: the run reports it as the script's error (exit 2, its traceback)
            raise
        print(f"error: {e}", file=sys.stderr)  # on its own: a user's error exits 2 saying how to fix it
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
