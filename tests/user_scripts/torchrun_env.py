"""A torchrun-style script that writes down what it sees of torch.distributed (issue 55 item 1).

Each process appends JSON lines to ``--record DIR/<pid>.jsonl``: once at its start (the environment,
``dist.get_rank()`` / ``get_world_size()`` after ``init_process_group``, whether the model DDP
returned is a DDP, ``job.rank`` / ``job.world`` / ``job.joining``) and once per step (its rank and
world then, ``RANK`` / ``WORLD_SIZE``, an all-reduce of ones on the default group, the script's
``master_process`` computed once at its top).  ``--mode`` makes it misuse the API on purpose.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from spotwise import job

p = argparse.ArgumentParser()
p.add_argument("--record", required=True)
p.add_argument("--steps", type=int, default=1000)
p.add_argument("--mode", default="ok", choices=["ok", "nccl", "subgroup", "fsdp", "raise-in-member", "barrier"])
args = p.parse_args()

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="nccl" if args.mode == "nccl" else "gloo")
    ddp_rank = int(os.environ["RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    master_process = ddp_rank == 0
else:
    master_process = True
    ddp_rank, ddp_world_size = 0, 1
if args.mode == "raise-in-member" and not os.environ.get("SPOTWISE_PROBE"):
    raise RuntimeError("failing on purpose in a member, before the first batch")
if args.mode == "barrier":
    dist.barrier()

os.makedirs(args.record, exist_ok=True)
path = os.path.join(args.record, f"{os.getpid()}.jsonl")


def record(**kw):
    with open(path, "a") as f:
        f.write(json.dumps(kw) + "\n")


torch.manual_seed(0)
raw = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
if args.mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    fully_shard(raw)
opt = job.optimizer(torch.optim.SGD(raw.parameters(), lr=0.05))
model = DDP(raw, process_group=dist.new_group([0]) if args.mode == "subgroup" else None)
record(kind="start", env={k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                        "MASTER_ADDR", "MASTER_PORT", "SPOTWISE_JOINING",
                                                        "SPOTWISE_PROBE", "TORCHELASTIC_RUN_ID")},
       dist_rank=dist.get_rank(), dist_world=dist.get_world_size(), initialized=dist.is_initialized(),
       is_ddp=isinstance(model, DDP), module_is_raw=model.module is raw, job_rank=job.rank, job_world=job.world,
       joining=job.joining, master=master_process)

data = torch.randn(1000, 5, generator=torch.Generator().manual_seed(1))


def get_batch():
    ix = job.randint(len(data), (8,))
    return data[ix, :4], data[ix, 4:]


X, Y = get_batch()
for it in job.steps(args.steps):
    loss = ((model(X) - Y) ** 2).mean()
    X, Y = get_batch()
    loss.backward()
    opt.step()
    opt.zero_grad()
    ones = torch.ones(1)
    dist.all_reduce(ones)
    record(kind="step", it=it, rank=dist.get_rank(), world=dist.get_world_size(), env_rank=os.environ["RANK"],
           env_world=os.environ["WORLD_SIZE"], allreduce=float(ones), master=master_process, job_rank=job.rank,
           backend=dist.get_backend())
dist.destroy_process_group()
record(kind="end", initialized=dist.is_initialized())
