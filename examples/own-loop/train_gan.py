"""A GAN on spot capacity: two models, two optimizers, two commit points per step.

    spotwise run examples/own-loop/gan.yaml --out run        # on the emulated spot market
    python examples/own-loop/train_gan.py --epochs 2          # on its own

The generator learns to draw points on a ring of eight Gaussians.  Each step takes one batch of real
points (and their latent codes: part of the data, so a retried step draws the same ones on any
membership), steps the discriminator, then the generator -- the classic alternating GAN loop, with
both models wrapped (each is DDP over the job's group) and both optimizers wrapped, one
``job.optimizer()`` call each.  The job's step ends at the generator's ``step()`` (the call that
completes the set); if a member is lost in it, the discriminator's step of that batch is taken
back on every member and the whole step is retried, so each batch trains both models exactly once.
"""

import argparse
import contextlib
import json
import math

import torch
import torch.nn.functional as F
from torch import nn

import spotwise.elastic as sw

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=32)
p.add_argument("--epochs", type=float, default=None, help="on its own: how long (under spotwise: the spec's target)")
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--latent", type=int, default=8)
p.add_argument("--width", type=int, default=64)
p.add_argument("--samples", type=int, default=2048)
p.add_argument("--seed", type=int, default=0, help="the data order when run on its own (under spotwise: the spec's)")
p.add_argument("--decay", action="store_true", help="decay both learning rates as 1 / (1 + step / 50) (LambdaLR)")
p.add_argument("--scaler", type=float, default=None,
               help="fp16 autocast and a torch.amp.GradScaler starting at this scale (as on V100s), shared by "
                    "both optimizers, updated once per step")
p.add_argument("--save", default=None, help="torch.save both models' state_dicts here at the end")
p.add_argument("--seen", default=None, help="append the sample ids this process's committed steps trained")
p.add_argument("--report", action="store_true", help="print how far the generated points are from the ring")
args = p.parse_args()

g = torch.Generator().manual_seed(3)
angle = torch.randint(8, (args.samples,), generator=g).float() * (2 * math.pi / 8)
real = torch.stack([angle.cos(), angle.sin()], dim=1) * 2.0 + 0.05 * torch.randn(args.samples, 2, generator=g)
codes = torch.randn(args.samples, args.latent, generator=g)
data = torch.utils.data.TensorDataset(real, codes, torch.arange(args.samples))


def mlp(n_in: int, n_out: int, norm: bool) -> nn.Module:
    w = args.width
    return nn.Sequential(nn.Linear(n_in, w), nn.BatchNorm1d(w) if norm else nn.Identity(), nn.LeakyReLU(0.2),
                         nn.Linear(w, w), nn.LeakyReLU(0.2), nn.Linear(w, n_out))


torch.manual_seed(0)
job = sw.init(seed=args.seed)
G = job.model(mlp(args.latent, 2, norm=True).to(job.device))
D = job.model(mlp(2, 1, norm=False).to(job.device))
scaler = torch.amp.GradScaler(job.device.type, init_scale=args.scaler or 1.0, growth_interval=3,
                               enabled=args.scaler is not None)
given = {"scaler": scaler} if args.scaler is not None else {}
opt_d = job.optimizer(torch.optim.Adam(D.parameters(), lr=args.lr, betas=(0.5, 0.999)), **given)
opt_g = job.optimizer(torch.optim.Adam(G.parameters(), lr=args.lr, betas=(0.5, 0.999)), **given)
scheds = []
if args.decay:  # torch's schedulers on the wrapped optimizers, registered: they count committed steps
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1.0 + s / 50)) for o in (opt_d, opt_g)]
    job.scheduler(*scheds)
seen = []
fp16 = (lambda: torch.autocast(job.device.type, dtype=torch.float16)) if args.scaler is not None else contextlib.nullcontext

for x, z, ids in job.data(data, batch_size=args.batch, epochs=args.epochs):
    x, z = x.to(job.device), z.to(job.device)
    with fp16():
        fake = G(z)
        # the discriminator: real points -> 1, generated ones -> 0
        d_loss = F.binary_cross_entropy_with_logits(D(x), torch.ones(len(x), 1, device=job.device)) + \
            F.binary_cross_entropy_with_logits(D(fake.detach()), torch.zeros(len(x), 1, device=job.device))
    job.backward(scaler.scale(d_loss))
    scaler.step(opt_d)
    opt_d.zero_grad()
    if scheds:
        scheds[0].step()
    # the generator: make the (just updated) discriminator call its points real
    with fp16():
        g_loss = F.binary_cross_entropy_with_logits(D(fake), torch.ones(len(x), 1, device=job.device))
    job.backward(scaler.scale(g_loss))
    if scaler.step(opt_g) is not False:  # the step committed on every member (both models)
        seen.append(ids.tolist())
    scaler.update()
    opt_g.zero_grad()
    opt_d.zero_grad()  # the generator's backward pass reached the discriminator too
    if scheds:
        scheds[1].step()
    job.log(d_loss=d_loss, g_loss=g_loss)

if args.report and job.is_leader:
    with torch.no_grad():
        G.eval()
        pts = G(torch.randn(512, args.latent, generator=torch.Generator().manual_seed(9)).to(job.device)).cpu()
    radius = pts.norm(dim=1)
    print(json.dumps({"radius_mean": round(float(radius.mean()), 3), "radius_std": round(float(radius.std()), 3)}))
if args.save and job.is_leader:
    torch.save({"G": G.state_dict(), "D": D.state_dict(), "scale": scaler.get_scale() if scaler.is_enabled() else 1.0},
               args.save)
if args.seen:
    with open(args.seen, "a") as f:
        f.write(json.dumps({"rank": job.rank, "ids": seen}) + "\n")
