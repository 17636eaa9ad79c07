"""Issue 28 item 6: N spotwise workers without revocations equal torch DistributedDataParallel at the
same samples -- the real DDP (gloo, 2 processes), the same AdamW, schedule and clipping, each rank
taking the block spotwise's sampler gives worker r.  Tolerance (fp32): max |diff| < 1e-5 over the
parameters after 10 steps (the same float operations; the all-reduce sums in another order)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _specs import spec_with
from test_training_recipe import ADAMW, BASE, flat_of, run_local

pytestmark = pytest.mark.timeout(240)

STEPS = 10


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, spec_dict: dict[str, Any], out: str) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from spotwise.config import spec_from_dict
    from spotwise.control.sampler import EpochSampler
    from spotwise.training.recipe import recipe_of
    from spotwise.workloads.registry import make_workload

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    spec = spec_from_dict(spec_dict)
    wl = make_workload(spec.workload, spec.seed)
    model = DDP(wl.build_model())
    opt_spec = spec.workload.optimizer_spec
    opt = getattr(torch.optim, opt_spec.name)(model.parameters(), lr=spec.workload.lr, **opt_spec.kwargs)
    sched = recipe_of(spec.workload, spec.planned_samples()).schedule
    b = spec.workload.batch_size
    sampler = EpochSampler(len(wl.train), spec.seed)
    for step in range(STEPS):
        blocks = [sampler.reserve(b) for _ in range(world)]  # the coordinator reserves one per worker, in order
        opt.zero_grad()
        wl.loss(model, wl.train.batch(blocks[rank].indices)).backward()  # DDP averages the ranks' gradients
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(spec.workload.grad_clip_norm))
        for g in opt.param_groups:
            g["lr"] = sched.lr(spec.workload.lr, step * world * b)
        opt.step()
        for blk in blocks:
            sampler.commit(blk)
    if rank == 0:
        torch.save({k: v for k, v in model.module.state_dict().items()}, out)
    dist.destroy_process_group()


def test_two_workers_equal_distributed_data_parallel(tmp_path: Path) -> None:
    spec = spec_with(BASE, cluster__workers=2, target__iterations=STEPS, workload__optimizer=dict(ADAMW),
                     workload__grad_clip_norm=0.5, workload__schedule={"decay": "cosine", "warmup": 32})
    job, summary = run_local(spec, tmp_path / "run")
    assert summary.steps == STEPS
    out = str(tmp_path / "ddp.pt")
    torch.multiprocessing.spawn(_rank, args=(2, _port(), spec.to_dict(), out), nprocs=2, join=True)
    from spotwise.workloads.registry import make_workload

    model = make_workload(spec.workload, spec.seed).build_model()
    model.load_state_dict(torch.load(out, weights_only=True))
    assert np.max(np.abs(job.params - flat_of(model))) < 1e-5
