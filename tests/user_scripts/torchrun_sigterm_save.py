"""A torchrun DDP script as people write them, knowing nothing of spotwise: env-based rank detection,
``init_process_group``, DDP, AdamW, leader-only logging, and a checkpoint saved when the process gets
SIGTERM (as torchrun, SLURM and Kubernetes stop a job) into ``$CKPT_DIR`` or ``--ckpt`` -- resumed from
when it exists.  ``--fail-at N`` raises at step N (a bug in the script)."""

import argparse
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--ckpt", default=os.environ.get("SPOTWISE_CHECKPOINT_DIR", "ckpt"))
p.add_argument("--steps", type=int, default=1000)
p.add_argument("--fail-at", type=int, default=-1)
args = p.parse_args()

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
else:
    rank, world = 0, 1
master = rank == 0
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
step = 0
path = os.path.join(args.ckpt, "state.pt")
if os.path.exists(path):
    ck = torch.load(path)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    step = ck["step"]
if ddp:
    model = DDP(model)
raw = model.module if ddp else model


def save_and_leave(signum, frame):
    if master:
        os.makedirs(args.ckpt, exist_ok=True)
        torch.save({"model": raw.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
        os.replace(path + ".tmp", path)
        print(f"saved step {step} on SIGTERM", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, save_and_leave)
if master:
    print(json.dumps({"started_at": step, "world": world}), flush=True)
g = torch.Generator().manual_seed(1000 + rank)
while step < args.steps:
    x = torch.randn(32, 16, generator=g)
    y = x.sum(dim=1, keepdim=True)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    if step + 1 == args.fail_at:
        raise RuntimeError(f"a bug in the script at step {step + 1}")
    opt.step()
    step += 1
if ddp:
    dist.destroy_process_group()
