"""Training scripts that misuse spotwise.elastic, one per ``--mode`` (the bad-input tests of issue 41)."""

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

import spotwise.elastic as sw

p = argparse.ArgumentParser()
p.add_argument("--mode", required=True, choices=["lr-per-rank", "pulls-per-rank", "data-twice", "no-batch", "hang",
                                                   "around-the-wrapper"])
args = p.parse_args()

if args.mode == "hang":  # never takes a batch
    while True:
        time.sleep(0.05)
torch.manual_seed(0)
X = torch.randn(64, 4)
Y = (X.sum(1) > 0).long()
data = torch.utils.data.TensorDataset(X, Y)
job = sw.init()
model = job.model(nn.Linear(4, 2))
opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
if args.mode == "no-batch":
    raise SystemExit(0)  # returns without a batch
batches = job.data(data, batch_size=4)
if args.mode == "data-twice":
    batches = job.data(data, batch_size=4)
it = iter(batches)
while True:
    x, y = next(it)
    if args.mode == "pulls-per-rank" and job.rank == 0:
        x, y = next(it)  # the leader takes two batches a step, the others one
    if args.mode == "lr-per-rank":
        for g in opt.param_groups:
            g["lr"] = 0.1 * (1 + job.rank)  # a rate that depends on the member: replicas would drift apart
    forward = model.module if args.mode == "around-the-wrapper" else model  # DDP's classic pitfall
    job.backward(F.cross_entropy(forward(x), y))
    opt.step()
    opt.zero_grad()
