"""A small training script on the spotwise.elastic API (issue 41): what tests run under spotwise.

Run on its own (``python train_mlp.py --epochs 1``) it is a plain loop; under ``spotwise run`` it
is every member's loop.  ``--fail-at STEP`` raises there (the tests of a failing script);
``--out FILE`` writes the final parameters and the samples it saw (the exactly-once tests).
"""

import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

import spotwise.elastic as sw

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--epochs", type=float, default=None)
p.add_argument("--fail-at", type=int, default=None)
p.add_argument("--seen", default=None, help="append what this process committed to this file at the end")
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seed", type=int, default=0, help="the data order when run on its own")
p.add_argument("--no-bn", action="store_true")
p.add_argument("--save", default=None, help="torch.save the final model state_dict here")
p.add_argument("--loader-workers", type=int, default=0, help="DataLoader worker processes building the batches")
p.add_argument("--sched", action="store_true", help="warmup + cosine by torch's LambdaLR, registered with job.scheduler")
p.add_argument("--pace", type=float, default=0.0, help="sleep this many seconds after each step (tests acting mid-run)")
p.add_argument("--leader-eval-every", type=int, default=0, help="every N steps the leader alone evaluates (nanoGPT-style)")
p.add_argument("--leader-eval-s", type=float, default=0.0, help="... for this many seconds (a slow eval or torch.save)")
p.add_argument("--eval-log", default=None, help="append the step of each leader-only evaluation to this file")
args = p.parse_args()

torch.manual_seed(0)
gen = torch.Generator().manual_seed(1)
X = torch.randn(240, 8, generator=gen)
Y = (X.sum(1) > 0).long()
IDS = torch.arange(240)
data = torch.utils.data.TensorDataset(X, Y, IDS)

norm = nn.Identity() if args.no_bn else nn.BatchNorm1d(16)
model = nn.Sequential(nn.Linear(8, 16), norm, nn.ReLU(), nn.Linear(16, 2))
job = sw.init(seed=args.seed)
model = job.model(model.to(job.device))
decay = [q for q in model.parameters() if q.dim() >= 2]
rest = [q for q in model.parameters() if q.dim() < 2]
opt = job.optimizer(torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                      lr=args.lr))
if args.sched:  # torch's own scheduler on the wrapped optimizer: 4 steps of warmup, then cosine over 60
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 4 if s < 4 else 0.5 * (1 + math.cos(math.pi * min(1.0, (s - 4) / 56))))
    job.scheduler(sched)
seen = []
for x, y, ids in job.data(data, batch_size=args.batch, epochs=args.epochs, num_workers=args.loader_workers):
    if args.fail_at is not None and job.step + 1 == args.fail_at:
        raise ValueError(f"failing on purpose at step {job.step + 1}")
    loss = F.cross_entropy(model(x.to(job.device)), y.to(job.device))
    job.backward(loss)
    if opt.step():
        seen.append(ids.tolist())
    opt.zero_grad()
    if args.sched:
        sched.step()  # after a dropped step it does nothing: the schedule counts committed steps
    job.log(loss=loss, lr=opt.param_groups[0]["lr"])
    if args.pace:
        time.sleep(args.pace)
    if args.leader_eval_every and job.step % args.leader_eval_every == 0 and job.is_leader:
        # the leader alone evaluates between two steps while its peers wait in the next step
        t_end = time.monotonic() + args.leader_eval_s
        model.eval()
        with torch.no_grad():
            while time.monotonic() < t_end:
                model(X)
                time.sleep(0.05)
        model.train()
        if args.eval_log:
            with open(args.eval_log, "a") as f:
                f.write(f"{job.step}\n")
if args.seen:
    with open(args.seen, "a") as f:
        f.write(json.dumps({"rank": job.rank, "steps": job.step, "samples": job.samples}) + "\n")
if args.save and job.is_leader:
    torch.save(model.state_dict(), args.save)
