"""Replica offers on the training thread vs off it (issue 40 item 3), against no offers at all.

One process, one torch thread, a member's :class:`~spotwise.planes.collective.replica.Replica`
training gpt-bytes with AdamW (the optimizer state is twice the model) by its local step
(``gradient`` + ``sgd``, what every member does between all-reduces), with three ways of offering
the replica, interleaved per repetition, medians of the per-step times:

* ``none``: no offers (the baseline);
* ``inline``: what a member did before this issue -- every ``replica_every`` steps a copy of the
  flat vector and ``torch.save`` of the whole extra state into memory, both on the training thread;
* ``offers``: :class:`~spotwise.planes.collective.offers.ReplicaOffers` -- a copy between two steps,
  serialised on a background thread -- scheduled by
  :class:`~spotwise.planes.collective.offers.OfferSchedule` (at most every ``replica_every`` steps,
  stretched to keep the measured cost within 2 %).

On this 2-core CPU machine the background thread competes with training for the cores (on a GPU
machine it runs beside the GPU's work), so the ``offers`` figure here is an upper bound of its cost.

    .venv/bin/python benchmarks/replica_offers.py                       # ~3 minutes
    .venv/bin/python benchmarks/replica_offers.py --layers 6 --embd 384 # the 10.8M model (slower steps)
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
import torch.distributed as dist
from _common import med, table, write_result


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    from spotwise.config import WorkloadSpec
    from spotwise.planes.collective.replica import DataCursor, Replica
    from spotwise.spec.load import build as build_spec
    from spotwise.training.recipe import Recipe
    from spotwise.workloads.registry import make_workload

    spec = build_spec(WorkloadSpec, {"name": "gpt-bytes", "batch_size": args.batch,
                                     "optimizer": {"name": "AdamW", "lr": 3e-4, "weight_decay": 0.1},
                                     "params": {"n_layer": args.layers, "n_head": 4, "n_embd": args.embd,
                                                "block_size": 128, "max_eval": 4}}, "workload")
    wl = make_workload(spec, 0)
    rep = Replica(wl, "cpu", Recipe(spec.optimizer_spec, None, None, 1, "fp32"), float(spec.lr))
    return rep, DataCursor(len(wl.train), 0)


def run(rep: Any, cursor: Any, mode: str, steps: int, every: int, b: int) -> list[float]:
    from spotwise.planes.collective.offers import OfferSchedule, ReplicaOffers

    store = dist.HashStore()
    offers = ReplicaOffers(torch.device("cpu"), lambda: store)
    sched = OfferSchedule(every)
    times: list[float] = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        loss, n = rep.gradient(cursor.block(0, b))
        rep.sgd(rep.buf[: rep.N], n, 3e-4)
        cursor.advance(1, b)
        if mode == "inline" and step % every == 0:
            vec = np.ascontiguousarray(rep.host_params().copy(), dtype=np.float32)
            bio = io.BytesIO()
            torch.save(rep.extra_state(), bio)
            assert vec.nbytes and bio.getbuffer().nbytes  # (then dropped, as a fetched offer is)
        elif mode == "offers":
            sched.observe_step(time.perf_counter() - t0)
            if sched.due(step):
                spent = offers.offer({"step": step}, rep.flat, rep.extra_state())
                sched.offered(step)
                done = offers.last_cost
                sched.observe_offer(sum(done) if any(done) else spent)
        times.append(time.perf_counter() - t0)
        while store.queue_len("replicas"):  # the coordinator's fetch is not part of this figure
            store.queue_pop("replicas")
    offers.close()
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--embd", type=int, default=192)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, nargs="+", default=[20, 1],
                    help="replica_every values (1: a replica every step, e.g. gcd(replica_every, checkpoint_every) = 1)")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rep, cursor = build(args)
    n_params = int(rep.N)
    run(rep, cursor, "none", 10, 20, args.batch)  # warm-up
    per: dict[str, list[float]] = {"none": []}
    modes = [("none", 0)] + [(f"{m} every {e}", e) for e in args.every for m in ("inline", "offers")]
    for name, _ in modes:
        per[name] = []
    for r in range(args.reps):
        order = modes if r % 2 == 0 else modes[::-1]
        for name, every in order:
            t = run(rep, cursor, name.split()[0], args.steps, max(1, every), args.batch)
            per[name].append(sum(t) / len(t))
            print(f"rep {r + 1} {name:16s} {1000 * per[name][-1]:.2f} ms/step", flush=True)
    base = med(per["none"])
    rows = [[name, f"{1000 * med(v):.2f}", f"{base / med(v):.3f}", f"{100 * (med(v) / base - 1):+.1f} %"]
            for name, v in per.items()]
    print(f"gpt-bytes {args.layers}x{args.embd}, {n_params / 1e6:.2f}M values, AdamW, batch {args.batch}x128, "
          f"{args.steps} steps x {args.reps} interleaved reps (medians of the mean step time)")
    print(table(["offers", "ms/step", "speed vs none", "step time"], rows))
    write_result("replica_offers", {"args": vars(args), "n_values": n_params, "mean_step_s": per,
                                    "speed_vs_none": {k: base / med(v) for k, v in per.items()}})


if __name__ == "__main__":
    main()
