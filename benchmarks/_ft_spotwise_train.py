"""spotwise's side of benchmarks/torchft_side_by_side.py: the model of _ft_model.py on the spotwise.elastic
API (in place: revocations survived without a restart), one epoch of exactly-once batches."""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _ft_model as m  # noqa: E402

import spotwise.elastic as sw  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--samples", type=int, required=True)
p.add_argument("--batch", type=int, default=64)
args = p.parse_args()
torch.set_num_threads(1)
job = sw.init()
model = job.model(m.model().to(job.device))
opt = job.optimizer(m.optimizer(model.parameters()))
for x, y, _ids in job.data(m.dataset(args.samples), batch_size=args.batch, epochs=1):
    loss = F.cross_entropy(model(x), y)
    job.backward(loss)
    opt.step()
