"""Throughput of spotwise fully-synchronous training vs. torch DistributedDataParallel (gloo).

Both sides train the same model on the same data -- built from
``spotwise.workloads.registry.make_workload`` with the same WorkloadSpec and seed -- with the same
per-worker batch, for the same number of timed steps after the same warm-up, on this machine, in
the same run, with one torch thread per process:

* spotwise, each data plane (``--planes``): the job controller on the emulated provider, N worker
  actors, no revocations, no standby actors, no checkpoints, no evaluation inside the timed
  window.  ``ps``: ``sync: full`` through the coordinator; time = wall clock between the ``step``
  events of step ``warmup`` and of the last step.  ``collective``: ``sync: ssgd``, the members
  all-reduce among themselves; time = the members' commit times of the same two steps.
* DDP: N processes (``torch.multiprocessing.spawn``), gloo on 127.0.0.1, ``torch.set_num_threads(1)``,
  SGD, each rank takes its 1/N slice of a global batch of ``N * batch`` samples.  Time = rank 0's
  wall clock from a barrier after warm-up to a barrier after the last step.

Repetitions are interleaved (spotwise, DDP, spotwise, DDP, ...); medians are reported, and the
ratio spotwise/DDP of the median throughputs.  Goals: PS plane >= 0.8 (issue 8), collective
plane >= 0.9 at N = 2 (issue 10).

    .venv/bin/python benchmarks/ddp_throughput.py --workers 2 4 8 --steps 200 --reps 3
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (
    build_run,
    make_spec,
    med,
    start_ray,
    table,
    with_retries,
    write_result,
)

#: the goal ratio spotwise/DDP of each data plane: the parameter server (issue 8) and the
#: collective plane (issue 10)
GOALS = {"ps": 0.8, "collective": 0.9}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------- spotwise
def spotwise_once(n: int, steps: int, warmup: int, batch: int, workload: str, tmp: Path, plane: str = "ps") -> dict:
    from spotwise.events import read_events

    over = {"cluster__workers": n, "cluster__standby": 0, "target__iterations": warmup + steps,
            "workload__batch_size": batch, "workload__name": workload}
    if plane == "collective":
        over["cluster__data_plane"] = "collective"
    spec = make_spec(**over)
    out = tmp / f"sw-{n}-{time.monotonic_ns()}"
    coord = build_run(spec, out)
    coord.run()
    evs = list(read_events(out / "events.jsonl", kinds=["step"]))
    # the PS plane commits in this process (the event's wall time); the collective plane's steps
    # are committed by the members (their commit time rides on the event)
    walls = [e.get("commit_wall", e["wall"]) for e in evs]
    el = walls[-1] - walls[warmup - 1]
    # exact samples in the timed steps: replay the runtime's sampler (no revocations -> every round
    # reserves one block per worker; blocks are short / missing at an epoch's end)
    from spotwise.control.sampler import EpochSampler

    sampler = EpochSampler(coord.state.n_train, spec.seed)
    samples = 0
    for step in range(len(walls)):
        blocks = []
        for _ in range(n):
            b = sampler.reserve(batch)
            if b is None:
                break
            blocks.append(b)
        if step >= warmup:
            samples += sum(len(b.indices) for b in blocks)
        for b in blocks:
            sampler.commit(b)
    return {"steps": len(walls) - warmup, "wall_s": el, "steps_per_s": (len(walls) - warmup) / el,
            "samples_per_s": samples / el,
            "samples": samples}


# ---------------------------------------------------------------------------------- DDP
def _ddp_rank(rank: int, n: int, port: int, steps: int, warmup: int, batch: int, workload: str, lr: float,
              seed: int, q) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=120))
    from spotwise.workloads.registry import make_workload

    spec = make_spec(workload__batch_size=batch, workload__name=workload, workload__lr=lr, seed=seed)
    wl = make_workload(spec.workload, spec.seed)
    model = DDP(wl.build_model())
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n_train = len(wl.train)
    perm = np.random.default_rng([seed, 0]).permutation(n_train)
    g = n * batch

    def one(step: int) -> None:
        lo = (step * g) % n_train
        idx = np.take(perm, np.arange(lo + rank * batch, lo + (rank + 1) * batch), mode="wrap")
        opt.zero_grad(set_to_none=True)
        loss = wl.loss(model, wl.train.batch(idx))
        loss.backward()
        opt.step()

    for s in range(warmup):
        one(s)
    dist.barrier()
    t0 = time.perf_counter()
    for s in range(warmup, warmup + steps):
        one(s)
    dist.barrier()
    el = time.perf_counter() - t0
    if rank == 0:
        q.put(el)
    dist.barrier()
    dist.destroy_process_group()


def ddp_once(n: int, steps: int, warmup: int, batch: int, workload: str, lr: float, seed: int) -> dict:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(_ddp_rank, args=(n, free_port(), steps, warmup, batch, workload, lr, seed, q), nprocs=n, join=True)
    el = q.get()
    return {"steps": steps, "wall_s": el, "steps_per_s": steps / el, "samples_per_s": steps * n * batch / el}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--planes", nargs="+", choices=sorted(GOALS), default=["ps", "collective"],
                    help="spotwise data planes to measure against DDP")
    ap.add_argument("--steps", type=int, default=200, help="timed steps (after warm-up)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch")
    ap.add_argument("--workload", default="mlp-digits")
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--name", default="ddp_throughput")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    spec = make_spec(workload__batch_size=args.batch, workload__name=args.workload)
    lr, seed = float(spec.workload.lr), int(spec.seed)
    start_ray(args.num_cpus)
    results, rows = [], []
    with tempfile.TemporaryDirectory(prefix="sw-ddp-") as td:
        for n in args.workers:
            sw: dict[str, list[dict]] = {p: [] for p in args.planes}
            dd: list[dict] = []
            for rep in range(args.reps):
                for plane in args.planes:  # interleaved: each plane, then DDP, in every repetition
                    sw[plane].append(with_retries(spotwise_once, n, args.steps, args.warmup, args.batch, args.workload,
                                                  Path(td), plane))
                dd.append(ddp_once(n, args.steps, args.warmup, args.batch, args.workload, lr, seed))
                print(f"[N={n} rep {rep}] " + ", ".join(f"spotwise-{p} {sw[p][-1]['steps_per_s']:.1f}" for p in args.planes)
                      + f", DDP {dd[-1]['steps_per_s']:.1f} steps/s", file=sys.stderr, flush=True)
            ddp = {"steps_per_s_median": med([x["steps_per_s"] for x in dd]),
                   "samples_per_s_median": med([x["samples_per_s"] for x in dd]), "reps": dd}
            for plane in args.planes:
                xs = sw[plane]
                r = {"workers": n, "plane": plane,
                     "spotwise": {"steps_per_s_median": med([x["steps_per_s"] for x in xs]),
                                  "samples_per_s_median": med([x["samples_per_s"] for x in xs]), "reps": xs},
                     "ddp": ddp}
                r["ratio_steps"] = r["spotwise"]["steps_per_s_median"] / ddp["steps_per_s_median"]
                r["ratio_samples"] = r["spotwise"]["samples_per_s_median"] / ddp["samples_per_s_median"]
                r["ratio_per_rep"] = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(xs, dd)]
                r["goal"] = GOALS[plane]
                r["goal_met"] = r["ratio_steps"] >= GOALS[plane]
                results.append(r)
                rows.append([n, plane, r["spotwise"]["steps_per_s_median"], r["spotwise"]["samples_per_s_median"],
                             ddp["steps_per_s_median"], ddp["samples_per_s_median"], f"{r['ratio_steps']:.2f}",
                             f"{r['ratio_samples']:.2f}", f">= {GOALS[plane]}: " + ("met" if r["goal_met"] else "NOT met")])
    print(table(["N", "plane", "spotwise steps/s", "spotwise samples/s", "DDP steps/s", "DDP samples/s",
                 "ratio steps/s", "ratio samples/s", "goal"], rows))
    print(f"(medians of {args.reps} interleaved repetitions, {args.steps} timed steps after {args.warmup} warm-up, "
          f"per-worker batch {args.batch}, {args.workload})")
    path = write_result(args.name, {"args": vars(args), "goals": GOALS, "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
