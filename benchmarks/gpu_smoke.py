"""GPU smoke benchmark (issue 20 item 4): spotwise on GPUs, one worker per GPU, vs torch DDP over NCCL.

Both spotwise data planes train with ``cluster.device: cuda`` on a GPU instance type
(``p3.2xlarge``: one V100 per worker in the catalog), so every worker actor asks Ray for one GPU
and keeps its model, batches and flat buffers there: ``ps`` (``sync: full`` through the
coordinator: gradients copied to the host once per step) and ``collective`` (``sync: ssgd``: the
members all-reduce their flat gradient buffers over NCCL).  Against them, DDP
(``torch.nn.parallel.DistributedDataParallel``, NCCL) with one process per GPU, the same model,
data, per-worker batch, warm-up and timed steps.  Steps per second are measured as in
``benchmarks/ddp_throughput.py`` (whose structure this follows): spotwise between the ``step``
events of step ``warmup`` and of the last step, DDP on rank 0 between two barriers; repetitions
are interleaved and medians reported, with the ratio spotwise/DDP.

On a machine without CUDA it prints ``no CUDA device: skipped`` and exits 0 (2 with
``--require-gpu``).  It has not been run on a GPU yet (``docs/benchmarks.md``).

    .venv/bin/python benchmarks/gpu_smoke.py --steps 300 --reps 2
    .venv/bin/python benchmarks/gpu_smoke.py --workload cnn-digits --workers 4 --require-gpu
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import build_run, make_spec, med, start_ray, table, write_result
from ddp_throughput import free_port

PLANES = ("ps", "collective")
#: the catalog's single-GPU type: a worker on it asks Ray for one GPU
GPU_TYPE = "p3.2xlarge"


def gpu_overrides(n: int, batch: int, workload: str) -> dict:
    """The benchmark's spec (``benchmarks/_common.py`` BASE) on GPUs: ``n`` workers of ``GPU_TYPE``."""
    return {"cluster__workers": n, "cluster__standby": 0, "cluster__instance_type": GPU_TYPE, "cluster__device": "cuda",
            "workload__batch_size": batch, "workload__name": workload, "workload__family": "resnet50"}


# ---------------------------------------------------------------------------------- spotwise
def spotwise_once(n: int, steps: int, warmup: int, batch: int, workload: str, tmp: Path, plane: str) -> dict:
    from spotwise.events import read_events

    over = {**gpu_overrides(n, batch, workload), "target__iterations": warmup + steps}
    if plane == "collective":
        over.update(cluster__data_plane="collective", cluster__sync="ssgd")
    spec = make_spec(**over)
    out = tmp / f"sw-{plane}-{n}-{time.monotonic_ns()}"
    build_run(spec, out).run()
    evs = list(read_events(out / "events.jsonl", kinds=["step"]))
    walls = [e.get("commit_wall", e["wall"]) for e in evs]  # the members' commit times on the collective plane
    el = walls[-1] - walls[warmup - 1]
    return {"steps": len(walls) - warmup, "wall_s": el, "steps_per_s": (len(walls) - warmup) / el}


# ---------------------------------------------------------------------------------- DDP (NCCL)
def _ddp_rank(rank: int, n: int, port: int, steps: int, warmup: int, batch: int, workload: str, lr: float,
              seed: int, q) -> None:
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from spotwise.workloads.device import to_device
    from spotwise.workloads.registry import make_workload

    torch.set_num_threads(1)
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("nccl", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=120))
    spec = make_spec(workload__batch_size=batch, workload__name=workload, workload__lr=lr, seed=seed)
    wl = make_workload(spec.workload, spec.seed)
    model = DDP(wl.build_model().to(device), device_ids=[rank])
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    n_train = len(wl.train)
    perm = np.random.default_rng([seed, 0]).permutation(n_train)
    g = n * batch

    def one(step: int) -> None:
        lo = (step * g) % n_train
        idx = np.take(perm, np.arange(lo + rank * batch, lo + (rank + 1) * batch), mode="wrap")
        opt.zero_grad(set_to_none=True)
        loss = wl.loss(model, to_device(wl.train.batch(idx), device))
        loss.backward()
        opt.step()
        float(loss.detach())  # as spotwise reads each step's loss: the step is done when it returns

    for s in range(warmup):
        one(s)
    dist.barrier()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(warmup, warmup + steps):
        one(s)
    torch.cuda.synchronize()
    dist.barrier()
    el = time.perf_counter() - t0
    if rank == 0:
        q.put(el)
    dist.barrier()
    dist.destroy_process_group()


def ddp_once(n: int, steps: int, warmup: int, batch: int, workload: str, lr: float, seed: int) -> dict:
    import torch.multiprocessing as mp

    q = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_ddp_rank, args=(n, free_port(), steps, warmup, batch, workload, lr, seed, q), nprocs=n, join=True)
    el = q.get()
    return {"steps": steps, "wall_s": el, "steps_per_s": steps / el}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=None, help="workers = GPUs used (default: every GPU)")
    ap.add_argument("--planes", nargs="+", choices=PLANES, default=list(PLANES))
    ap.add_argument("--steps", type=int, default=300, help="timed steps (after warm-up)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch")
    ap.add_argument("--workload", default="mlp-digits")
    ap.add_argument("--require-gpu", action="store_true", help="exit 2 instead of 0 when there is no CUDA device")
    ap.add_argument("--name", default="gpu_smoke")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: skipped (benchmarks/gpu_smoke.py measures spotwise on GPUs against DDP over NCCL)")
        return 2 if args.require_gpu else 0
    gpus = torch.cuda.device_count()
    n = args.workers or gpus
    if not 1 <= n <= gpus:
        print(f"--workers {n}: this machine has {gpus} CUDA devices (one worker per GPU)", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    spec = make_spec(workload__batch_size=args.batch, workload__name=args.workload)
    lr, seed = float(spec.workload.lr), int(spec.seed)
    start_ray(os.cpu_count() or 2)  # Ray finds the GPUs itself
    import ray

    print(f"Ray: {ray.cluster_resources().get('GPU', 0):g} GPUs, {torch.cuda.get_device_name(0)}; {n} workers",
          file=sys.stderr)
    sw: dict[str, list[dict]] = {p: [] for p in args.planes}
    dd: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sw-gpu-") as td:
        for rep in range(args.reps):
            for plane in args.planes:  # interleaved: each plane, then DDP, in every repetition
                sw[plane].append(spotwise_once(n, args.steps, args.warmup, args.batch, args.workload, Path(td), plane))
            dd.append(ddp_once(n, args.steps, args.warmup, args.batch, args.workload, lr, seed))
            print(f"[rep {rep}] " + ", ".join(f"spotwise-{p} {sw[p][-1]['steps_per_s']:.1f}" for p in args.planes)
                  + f", DDP {dd[-1]['steps_per_s']:.1f} steps/s", file=sys.stderr, flush=True)
    ddp = med([x["steps_per_s"] for x in dd])
    results, rows = [], []
    for plane in args.planes:
        mine = med([x["steps_per_s"] for x in sw[plane]])
        results.append({"plane": plane, "workers": n, "spotwise_steps_per_s": mine, "ddp_steps_per_s": ddp,
                        "ratio": mine / ddp, "reps": sw[plane]})
        rows.append([n, plane, mine, ddp, f"{mine / ddp:.2f}"])
    print(table(["GPUs", "plane", "spotwise steps/s", "DDP (NCCL) steps/s", "ratio"], rows))
    print(f"(medians of {args.reps} interleaved repetitions, {args.steps} timed steps after {args.warmup} warm-up, "
          f"per-worker batch {args.batch}, {args.workload}, {torch.cuda.get_device_name(0)})")
    path = write_result(args.name, {"args": vars(args), "gpu": torch.cuda.get_device_name(0), "gpus": gpus,
                                    "ddp": {"steps_per_s_median": ddp, "reps": dd}, "results": results})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
