"""Real models (issue 28): spotwise's data planes vs torch DDP on gpt-bytes and resnet18-cifar.

Five measurements, each side by side in one run, on this machine (one torch thread per process):

1. **Throughput** (steps/s, samples/s) of the collective plane (``sync: ssgd``) and the parameter
   server (``sync: full``) vs DistributedDataParallel (gloo, ``torch.multiprocessing.spawn``): same
   model, same optimizer (AdamW for gpt-bytes, SGD momentum 0.9 + weight decay 5e-4 for
   resnet18-cifar), same per-worker batch, same number of timed steps after the same warm-up, N = 2
   (and 4 in full mode).  The spotwise side is ``ddp_throughput.spotwise_once`` (timing from the
   step events' commit times); DDP's ranks take the exact blocks spotwise's members take
   (:class:`~spotwise.planes.collective.replica.DataCursor`: member r of k takes block r of each
   step's k*b samples) and run the same ``torch.optim`` optimizer.  Repetitions are interleaved (the
   order of the three sides alternates every repetition); medians.  Goals: collective >= 0.95x DDP,
   PS >= 0.8x DDP.  In the first repetition each DDP rank also times, after its timed loop, its
   compute alone (``no_sync``) and one all-reduce of the flat parameter vector, and the driver times
   the optimizer step on the model: the per-step cost breakdown printed under the table.
2. **Loss at equal samples** (AdamW, a small gpt-bytes): spotwise collective (and PS) vs DDP on the
   same samples in the same order; the held-out loss (the workload's ``evaluate``) at the end and
   the train loss averaged over the last steps.  Goal: within 2 %.
3. **Join with state transfer** at ~25M parameters (gpt-bytes 8x512, AdamW, collective): 2 workers
   + standby 1, scripted revocations and rejoins; the summary's ``join_ms`` (capacity back -> the
   first step the joiner contributed to, state broadcast included) against the median step time.
   Goal: <= 3 steps.
4. **Memory** at ~25M parameters: the coordinator's peak RSS (VmHWM of a fresh driver process
   running the JobController, connected to this run's Ray), each member's / worker's peak RSS
   (``/proc/<pid>/status`` VmHWM of the pids their ``ready()`` reports, read just before they are
   killed; the PS worker's ``memory()`` too), vs a DDP rank's VmHWM read inside the rank, same
   model, optimizer, batch and steps.  Goals: coordinator <= 1.5x a DDP rank, member <= 1.2x.
5. **~100M parameters** (gpt-bytes 12x832) on the collective plane through 3 scripted revocations:
   steps, revocations, joins, wall time, final loss, peak RSS.

    .venv/bin/python benchmarks/real_models.py --quick     # smoke test, < 3 minutes, small models
    .venv/bin/python benchmarks/real_models.py             # the full measurement (~30 minutes on 2 cores)

Results: ``benchmarks/results/real_models.json`` (``real_models_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ddp_throughput
from _common import (
    build_run,
    make_spec,
    med,
    start_ray,
    table,
    with_retries,
    write_result,
)
from ddp_throughput import free_port

GOALS = {"collective": 0.95, "ps": 0.8, "loss_rel": 0.02, "join_steps": 3.0, "coordinator_mem": 1.5, "member_mem": 1.2}

ADAMW = {"name": "AdamW", "lr": 3e-4, "weight_decay": 0.1, "betas": [0.9, 0.95]}
SGDM = {"name": "SGD", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4}
#: every run: no evaluation inside the run, deterministic virtual step times (scripted outages land
#: where intended), a gloo timeout far above a step on a loaded 2-core machine
COMMON: dict[str, Any] = {"workload__eval_every": 100000, "cluster__straggler": 0.0, "cluster__group_timeout_s": 120.0,
                          "workload__step_time_s": 1.0}
#: virtual seconds of one step (step_time_s + the default sync_overhead_s, no straggler noise)
VSTEP = 1.05


def gpt(n_layer: int = 6, n_head: int = 6, n_embd: int = 384, max_eval: int = 8, lr: float = 3e-4) -> dict[str, Any]:
    return {"workload__name": "gpt-bytes", "workload__optimizer": {**ADAMW, "lr": lr},
            "workload__params": {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "block_size": 128,
                                 "max_eval": max_eval}}


def resnet(width: int) -> dict[str, Any]:
    return {"workload__name": "resnet18-cifar", "workload__optimizer": dict(SGDM),
            "workload__params": {"width": width, "blocks": [2, 2, 2, 2], "n_test": 64}}


def n_params(over: dict[str, Any]) -> int:
    from spotwise.workloads.registry import make_workload

    spec = make_spec(**{**COMMON, **over})
    return int(make_workload(spec.workload, spec.seed).info["n_params"])


def describe(over: dict[str, Any]) -> str:
    p = over["workload__params"]
    if over["workload__name"] == "gpt-bytes":
        return f"gpt-bytes {p['n_layer']}x{p['n_embd']}"
    return f"resnet18-cifar w{p['width']}"


# ---------------------------------------------------------------------------------- memory helpers
def proc_status(pid: int | str = "self") -> dict[str, float]:
    """VmHWM / VmRSS of a process in MiB (empty if it is gone)."""
    out: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(("VmHWM:", "VmRSS:", "RssAnon:", "RssShmem:", "RssFile:")):
                    out[line.split(":")[0]] = float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return out


def _actor_id(actor: Any) -> str:
    return actor._actor_id.hex()


class _Tracking:
    """Mixin for a Ray compute: remember each actor's ``ready()`` and read its peak RSS just before it
    is killed (a revocation, the end of the run) or shut down (a standby actor)."""

    call_memory = False

    def _start_actor(self) -> tuple[Any, Any]:
        actor, ready = super()._start_actor()  # type: ignore[misc]
        self.__dict__.setdefault("tracked", {})[_actor_id(actor)] = ready
        return actor, ready

    def _read(self, actor: Any, role: str) -> None:
        import ray

        rec: dict[str, Any] = {"role": role}
        try:
            info = ray.get(self.__dict__.get("tracked", {})[_actor_id(actor)], timeout=60)
            rec["pid"] = int(info["pid"])
            rec.update(proc_status(rec["pid"]))
            if self.call_memory and role == "member":
                rec["memory()"] = ray.get(actor.memory.remote(), timeout=60)
        except Exception as e:  # noqa: BLE001  (best effort: a dead actor has nothing to read)
            rec["error"] = f"{type(e).__name__}: {e}"[:200]
        self.__dict__.setdefault("measured", []).append(rec)

    def kill(self, worker: Any) -> None:
        self._read(worker, "member")
        super().kill(worker)  # type: ignore[misc]

    def shutdown(self) -> None:
        for actor, _ in list(getattr(self, "_standby", [])):
            self._read(actor, "standby")
        super().shutdown()  # type: ignore[misc]


def tracking_compute(spec: Any, standby: int, call_memory: bool = False) -> Any:
    from spotwise.planes.collective.plane import CollectiveCompute
    from spotwise.planes.ps.compute import RayCompute

    base = CollectiveCompute if spec.cluster.data_plane == "collective" else RayCompute
    cls = type(f"Tracking{base.__name__}", (_Tracking, base), {"call_memory": call_memory})
    return cls.for_spec(spec, standby)


# ---------------------------------------------------------------------------------- spotwise
@contextlib.contextmanager
def spec_overrides(over: dict[str, Any]):
    """``ddp_throughput.spotwise_once`` builds its spec with ``make_spec``: add ``over`` to it."""
    orig = ddp_throughput.make_spec
    ddp_throughput.make_spec = lambda **o: orig(**{**over, **o})
    try:
        yield
    finally:
        ddp_throughput.make_spec = orig


def spotwise_throughput(plane: str, n: int, over: dict[str, Any], batch: int, steps: int, warmup: int, tmp: Path) -> dict:
    with spec_overrides({**COMMON, **over}):
        return with_retries(ddp_throughput.spotwise_once, n, steps, warmup, batch, over["workload__name"], tmp, plane)


def step_events(out: Path) -> list[dict[str, Any]]:
    from spotwise.events import read_events

    return list(read_events(out / "events.jsonl", kinds=["step"]))


def median_step_s(steps: list[dict[str, Any]]) -> float | None:
    """Median commit-to-commit seconds of consecutive steps of the same generation (a generation's
    first step, which includes the regroup, is excluded)."""
    d = [b["commit_wall"] - a["commit_wall"] for a, b in itertools.pairwise(steps)
         if a.get("gen") == b.get("gen") and a.get("commit_wall") and b.get("commit_wall")]
    return med(d)


# ---------------------------------------------------------------------------------- DDP
def _ddp_rank(rank: int, n: int, port: int, over: dict[str, Any], batch: int, steps: int, warmup: int,
              opts: dict[str, Any], q: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n, timeout=datetime.timedelta(seconds=300))
    from spotwise.planes.collective.replica import DataCursor
    from spotwise.workloads.registry import make_workload

    spec = make_spec(**{**COMMON, **over, "workload__batch_size": batch})
    wl = make_workload(spec.workload, spec.seed)
    model = DDP(wl.build_model())
    model.train()
    o = spec.workload.optimizer_spec  # the job's optimizer, as tests/test_training_recipe.py's reference()
    opt = getattr(torch.optim, o.name)(model.parameters(), lr=float(spec.workload.lr), **o.kwargs)
    cursor = DataCursor(len(wl.train), int(spec.seed))  # spotwise's data order: block r of each step's n*b
    losses: list[tuple[float, int]] = []
    samples = 0

    def one(timed: bool) -> None:
        nonlocal samples
        sizes = [len(cursor.block(i, batch)) for i in range(n)]
        total = sum(sizes)
        idx = cursor.block(rank, batch)
        w = sizes[rank] * n / total  # DDP averages over ranks: weight to the sample-weighted mean
        if len(idx) == 0:
            idx, w = cursor.block(0, batch), 0.0
        opt.zero_grad(set_to_none=True)
        loss = wl.loss(model, wl.train.batch(idx))
        (loss * w).backward()
        opt.step()
        if opts.get("losses"):
            losses.append((float(loss.detach()), sizes[rank]))
        if timed:
            samples += total
        cursor.advance(n, batch)

    for _ in range(warmup):
        one(False)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        one(True)
    dist.barrier()
    el = time.perf_counter() - t0
    res: dict[str, Any] = {"rank": rank, "wall_s": el, "samples": samples, "losses": losses}
    if opts.get("probe"):  # after the timed loop: compute alone, and one all-reduce of the flat vector
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            with model.no_sync():
                opt.zero_grad(set_to_none=True)
                wl.loss(model, wl.train.batch(cursor.block(rank, batch))).backward()
            ts.append(time.perf_counter() - t)
        P = sum(p.numel() for p in model.parameters())
        flat = torch.zeros(P + 2)
        ar = []
        for _ in range(3):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(flat)
            ar.append(time.perf_counter() - t)
        res["probe"] = {"fwd_bwd_s": med(ts), "allreduce_flat_s": med(ar)}
    res["mem"] = proc_status()
    if opts.get("evaluate") and rank == 0 and wl.test is not None:
        res["eval"] = wl.evaluate(model.module, wl.test)
    q.put(res)
    dist.barrier()
    dist.destroy_process_group()


def ddp_run(n: int, over: dict[str, Any], batch: int, steps: int, warmup: int, **opts: Any) -> dict[str, Any]:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(_ddp_rank, args=(n, free_port(), over, batch, steps, warmup, opts, q), nprocs=n, join=True)
    ranks = sorted((q.get() for _ in range(n)), key=lambda r: r["rank"])
    el = ranks[0]["wall_s"]
    out: dict[str, Any] = {"steps": steps, "wall_s": el, "steps_per_s": steps / el if steps else None,
                           "samples_per_s": ranks[0]["samples"] / el if steps else None,
                           "rank_vmhwm_mib": [r["mem"].get("VmHWM") for r in ranks]}
    if opts.get("probe"):
        out["probe"] = ranks[0]["probe"]
    if opts.get("evaluate"):
        out["eval"] = ranks[0].get("eval")
    if opts.get("losses"):  # the sample-weighted mean loss of each step, over the ranks
        per = zip(*[r["losses"] for r in ranks])
        out["step_losses"] = [sum(l * k for l, k in s) / max(1, sum(k for _, k in s)) for s in per]
    return out


def optimizer_step_s(over: dict[str, Any], n: int) -> dict[str, float]:
    """The PS coordinator's per-step work, timed in this process (1 thread): summing n flat gradients
    and the optimizer step on the model."""
    import numpy as np
    import torch

    from spotwise.workloads.registry import make_workload

    spec = make_spec(**{**COMMON, **over})
    model = make_workload(spec.workload, spec.seed).build_model()
    o = spec.workload.optimizer_spec
    opt = getattr(torch.optim, o.name)(model.parameters(), lr=float(spec.workload.lr), **o.kwargs)
    P = sum(p.numel() for p in model.parameters())
    grads = [np.random.default_rng(i).standard_normal(P, dtype=np.float32) * 1e-3 for i in range(n)]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    ts, ss = [], []
    for _ in range(3):
        t = time.perf_counter()
        acc = grads[0].copy()
        for g in grads[1:]:
            acc += g
        ss.append(time.perf_counter() - t)
        t = time.perf_counter()
        opt.step()
        ts.append(time.perf_counter() - t)
    return {"sum_grads_s": float(med(ss)), "optimizer_step_s": float(med(ts))}


# ---------------------------------------------------------------------------------- 1. throughput
def section_throughput(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    configs = [(describe(o), o, b) for o, b in ((args.gpt, args.gpt_batch), (args.resnet, args.resnet_batch)) if o]
    results, rows, notes = [], [], []
    for label, over, batch in configs:
        P = n_params(over)
        for n in args.workers:
            reps = {"collective": [], "ps": [], "ddp": []}
            probe = None
            n_reps = args.reps if n <= 2 else args.reps_large
            for rep in range(n_reps):
                order = ["collective", "ps", "ddp"] if rep % 2 == 0 else ["ddp", "ps", "collective"]
                for side in order:
                    if side == "ddp":
                        r = ddp_run(n, over, batch, args.steps, args.warmup, probe=rep == 0)
                        probe = r.get("probe", probe)
                    else:
                        r = spotwise_throughput(side, n, over, batch, args.steps, args.warmup, tmp)
                    reps[side].append(r)
                print(f"  [{label} N={n} rep {rep}] " + ", ".join(f"{s} {reps[s][-1]['steps_per_s']:.3f}" for s in reps)
                      + " steps/s", file=sys.stderr, flush=True)
            ddp = {"steps_per_s_median": med([x["steps_per_s"] for x in reps["ddp"]]),
                   "samples_per_s_median": med([x["samples_per_s"] for x in reps["ddp"]]), "reps": reps["ddp"]}
            coord = optimizer_step_s(over, n)
            for plane in ("collective", "ps"):
                xs = reps[plane]
                r = {"workload": label, "n_params": P, "workers": n, "batch": batch, "plane": plane,
                     "spotwise": {"steps_per_s_median": med([x["steps_per_s"] for x in xs]),
                                  "samples_per_s_median": med([x["samples_per_s"] for x in xs]), "reps": xs},
                     "ddp": ddp, "probe": probe, "coordinator_probe": coord}
                r["ratio_steps"] = r["spotwise"]["steps_per_s_median"] / ddp["steps_per_s_median"]
                r["ratio_samples"] = r["spotwise"]["samples_per_s_median"] / ddp["samples_per_s_median"]
                r["reps"] = n_reps
                r["ratio_per_rep"] = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(xs, reps["ddp"])]
                r["goal"] = GOALS[plane]
                r["goal_met"] = r["ratio_steps"] >= GOALS[plane]
                results.append(r)
                rows.append([label, f"{P / 1e6:.1f}M", n, batch, plane, f"{r['spotwise']['steps_per_s_median']:.3f}",
                             r["spotwise"]["samples_per_s_median"], f"{ddp['steps_per_s_median']:.3f}",
                             ddp["samples_per_s_median"], f"{r['ratio_steps']:.2f}",
                             f"{min(r['ratio_per_rep']):.2f}-{max(r['ratio_per_rep']):.2f}",
                             f">= {GOALS[plane]}: " + ("met" if r["goal_met"] else "NOT met")])
            ddp_step = 1.0 / ddp["steps_per_s_median"]
            if probe:
                notes.append(f"{label} N={n}: DDP step {ddp_step:.3f} s; DDP rank compute alone (fwd+bwd, no_sync) "
                             f"{probe['fwd_bwd_s']:.3f} s; one gloo all-reduce of the flat {P / 1e6:.1f}M vector "
                             f"{probe['allreduce_flat_s']:.3f} s (spotwise's collective step does it after backward, "
                             f"DDP overlaps bucketed all-reduces with backward); PS coordinator per step: sum of {n} "
                             f"gradients {coord['sum_grads_s']:.3f} s + {over['workload__optimizer']['name']} step "
                             f"{coord['optimizer_step_s']:.3f} s (1 thread)")
    print("\n## 1. Throughput vs DDP (gloo), same model, optimizer, per-worker batch and data order\n")
    print(table(["workload", "params", "N", "batch/worker", "plane", "spotwise steps/s", "spotwise samples/s",
                 "DDP steps/s", "DDP samples/s", "ratio", "ratio range (per rep)", "goal"], rows))
    print(f"(medians of {args.reps} (N=2) / {args.reps_large} (N>2) interleaved repetitions, {args.steps} timed steps after {args.warmup} warm-up, "
          "1 torch thread per process; gpt-bytes: AdamW, resnet18-cifar: SGD momentum 0.9 wd 5e-4)")
    for line in notes:
        print("  - " + line)
    return {"results": results, "breakdown": notes}


# ---------------------------------------------------------------------------------- 2. loss
def section_loss(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    over = {**args.loss_model, "workload__batch_size": args.loss_batch, "target__iterations": args.loss_steps,
            "cluster__workers": 2, "cluster__standby": 0}
    n, b, steps, last = 2, args.loss_batch, args.loss_steps, max(1, args.loss_steps // 5)
    sides: dict[str, dict[str, Any]] = {}
    for plane in args.loss_planes:
        spec = make_spec(**{**COMMON, **over, **({"cluster__data_plane": "collective"} if plane == "collective" else {})})
        out = tmp / f"loss-{plane}"
        summary = with_retries(lambda s=spec, o=out: build_run(s, o).run())
        ls = [e["loss"] for e in step_events(out)]
        sides[plane] = {"steps": summary.steps, "samples": summary.extra["samples"],
                        "heldout_loss": summary.extra["final_eval"]["loss"], "train_loss_last": sum(ls[-last:]) / last,
                        "first_loss": ls[0]}
    d = ddp_run(n, over, b, steps, 0, evaluate=True, losses=True)
    sides["ddp"] = {"steps": steps, "samples": n * b * steps, "heldout_loss": d["eval"]["loss"],
                    "train_loss_last": sum(d["step_losses"][-last:]) / last, "first_loss": d["step_losses"][0]}
    rows, res = [], {"model": describe(args.loss_model), "n_params": n_params(args.loss_model), "workers": n,
                     "batch": b, "steps": steps, "last_steps_averaged": last, "sides": sides}
    ref = sides["ddp"]
    for name, s in sides.items():
        rel_h = abs(s["heldout_loss"] - ref["heldout_loss"]) / ref["heldout_loss"]
        rel_t = abs(s["train_loss_last"] - ref["train_loss_last"]) / ref["train_loss_last"]
        s["rel_diff_heldout"], s["rel_diff_train"] = rel_h, rel_t
        ok = max(rel_h, rel_t) <= GOALS["loss_rel"]
        s["goal_met"] = ok if name != "ddp" else None
        rows.append([name, s["steps"], s["samples"], f"{s['first_loss']:.4f}", f"{s['heldout_loss']:.4f}",
                     f"{s['train_loss_last']:.4f}", f"{100 * rel_h:.3f}%", f"{100 * rel_t:.3f}%",
                     "-" if name == "ddp" else ("<= 2%: met" if ok else "<= 2%: NOT met")])
    print(f"\n## 2. Loss after equal samples, AdamW ({res['model']}, {res['n_params'] / 1e6:.2f}M params, N={n}, "
          f"batch {b}/worker, {steps} steps)\n")
    print(table(["side", "steps", "samples", "first-step loss", "held-out loss", f"train loss (last {last})",
                 "held-out diff vs DDP", "train diff vs DDP", "goal"], rows))
    print("(same samples in the same order: DDP rank r takes block r of spotwise's DataCursor; held-out loss = "
          "the workload's evaluate on the test split)")
    return res


# ---------------------------------------------------------------------------------- 3./5. revocations
def revocation_run(over: dict[str, Any], iterations: int, outages: list[tuple[float, float, list[int]]], tmp: Path,
                   name: str, batch: int) -> dict[str, Any]:
    from spotwise.capacity.faults import ScriptedRevocation, outage
    from spotwise.events import read_events

    spec = make_spec(**{**COMMON, **over, "workload__batch_size": batch, "target__iterations": iterations,
                        "cluster__workers": 2, "cluster__standby": 1, "cluster__data_plane": "collective",
                        "cluster__replica_every": 1000})
    out = tmp / name
    compute = tracking_compute(spec, 1)
    job = build_run(spec, out, revocation=ScriptedRevocation(tuple(outage(a, b, w) for a, b, w in outages)),
                    compute=compute)
    t0 = time.perf_counter()
    summary = job.run()
    wall = time.perf_counter() - t0
    steps = step_events(out)
    regroups = list(read_events(out / "events.jsonl", kinds=["regroup"]))
    joins = []
    for rg in regroups:
        if rg.get("joiners") and rg.get("survivors"):
            first = next((s for s in steps if s.get("gen") == rg["gen"]), None)
            tm = (first or {}).get("timing") or {}
            br = {}
            if tm and first:
                br = {"form_s": tm.get("formed", 0) - tm.get("plan", 0), "state_s": tm.get("state", 0) - tm.get("formed", 0),
                      "first_step_s": first["commit_wall"] - tm.get("step_start", first["commit_wall"])}
            joins.append({"gen": rg["gen"], "regroup_ms": rg["ms"], "form_ms": rg["form_ms"], "joiners": rg["joiners"],
                          "breakdown": br})
    mem = getattr(compute, "measured", [])
    return {"status": summary.status, "steps": summary.steps, "revocations": summary.revocations, "joins": summary.joins,
            "wall_s": wall, "summary_wall_s": summary.wall_s, "final_loss": summary.final_loss,
            "last_train_loss": steps[-1]["loss"] if steps else None, "first_train_loss": steps[0]["loss"] if steps else None,
            "median_step_s": median_step_s(steps), "join_ms": summary.extra.get("join_ms"),
            "regroup_ms_median": summary.extra.get("regroup_ms_median"), "join_regroups": joins,
            "member_vmhwm_mib": [m.get("VmHWM") for m in mem if m["role"] == "member"],
            "standby_vmhwm_mib": [m.get("VmHWM") for m in mem if m["role"] == "standby"],
            "driver_vmhwm_mib_so_far": proc_status().get("VmHWM"), "outages": outages}


def section_join(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    over = args.big
    P = n_params(over)
    # member 1 out from ~step 3 to ~step 6, member 0 (the leader) from ~step 10 to ~13 (virtual seconds)
    outages = [(3.5 * VSTEP, 5.6 * VSTEP, [1]), (9.5 * VSTEP, 11.6 * VSTEP, [0])]
    r = revocation_run(over, args.join_steps, outages, tmp, "join", args.big_batch)
    r.update(model=describe(over), n_params=P)
    step = r["median_step_s"]
    jm = r["join_ms"] or {}
    r["join_s_median"] = jm.get("median") / 1000.0 if jm.get("median") is not None else None
    r["join_s_max"] = jm.get("max") / 1000.0 if jm.get("max") is not None else None
    r["join_steps_median"] = r["join_s_median"] / step if step and r["join_s_median"] is not None else None
    r["join_steps_max"] = r["join_s_max"] / step if step and r["join_s_max"] is not None else None
    r["goal_met"] = r["join_steps_max"] is not None and r["join_steps_max"] <= GOALS["join_steps"]
    rows = [[r["model"], f"{P / 1e6:.1f}M", args.big_batch, r["status"], r["steps"], r["revocations"], jm.get("count"),
             f"{step:.3f}" if step else "-", f"{r['join_s_median']:.2f}" if r["join_s_median"] is not None else "-",
             f"{r['join_s_max']:.2f}" if r["join_s_max"] is not None else "-",
             f"{r['join_steps_median']:.2f}" if r["join_steps_median"] is not None else "-",
             f"{r['join_steps_max']:.2f}" if r["join_steps_max"] is not None else "-",
             "<= 3 steps: " + ("met" if r["goal_met"] else "NOT met")]]
    print("\n## 3. Join with state transfer, collective plane, AdamW, 2 workers + standby 1\n")
    print(table(["model", "params", "batch/worker", "status", "steps", "revocations", "joins", "median step s",
                 "join s (median)", "join s (max)", "join/step (median)", "join/step (max)", "goal"], rows))
    for j in r["join_regroups"]:
        b = j["breakdown"]
        print(f"  - regroup gen {j['gen']} (joiners {j['joiners']}): regroup {j['regroup_ms'] / 1000:.2f} s "
              f"(form {j['form_ms'] / 1000:.2f} s)" + (f"; members: form {b['form_s']:.2f} s, state broadcast "
                                                       f"{b['state_s']:.2f} s, first step {b['first_step_s']:.2f} s"
                                                       if b else ""))
    print("(join = capacity back -> the first step the joiner contributed to, members' clock: summary extra.join_ms; "
          "it includes the regroup, the broadcast of parameters + AdamW moments, and that first step)")
    return r


def section_big(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    over = args.huge
    P = n_params(over)
    outages = [(2.5 * VSTEP, 4.6 * VSTEP, [1]), (7.5 * VSTEP, 9.6 * VSTEP, [0]), (12.5 * VSTEP, 14.6 * VSTEP, [1])]
    r = revocation_run(over, args.huge_steps, outages, tmp, "big", args.huge_batch)
    r.update(model=describe(over), n_params=P)
    jm = r["join_ms"] or {}
    rows = [[r["model"], f"{P / 1e6:.1f}M", args.huge_batch, r["status"], r["steps"], r["revocations"], r["joins"],
             f"{r['wall_s']:.0f}", f"{r['median_step_s']:.2f}" if r["median_step_s"] else "-",
             f"{jm['median'] / 1000:.1f}" if jm.get("median") is not None else "-",
             f"{r['first_train_loss']:.3f}" if r["first_train_loss"] is not None else "-",
             f"{r['last_train_loss']:.3f}" if r["last_train_loss"] is not None else "-",
             f"{r['final_loss']:.3f}" if r["final_loss"] is not None else "-",
             f"{max(r['member_vmhwm_mib'] or [0]):.0f}", f"{r['driver_vmhwm_mib_so_far']:.0f}"]]
    print("\n## 5. A ~100M-parameter model through 3 scripted revocations (collective, AdamW, 2 workers + standby 1)\n")
    print(table(["model", "params", "batch/worker", "status", "steps", "revocations", "joins", "wall s",
                 "median step s", "join s (median)", "first loss", "last train loss", "final held-out loss",
                 "member peak RSS MiB", "driver peak RSS MiB (whole benchmark)"], rows))
    return r


# ---------------------------------------------------------------------------------- 4. memory
def memory_child(cfg: dict[str, Any]) -> None:
    """In a fresh driver process: connect to the parent's Ray, run one job, report peak RSS."""
    import logging

    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(address=cfg["address"], logging_level=logging.ERROR, log_to_driver=False)
    base = proc_status()
    over = {**COMMON, **cfg["over"], "cluster__workers": cfg["n"], "cluster__standby": 0,
            "target__iterations": cfg["steps"], "workload__batch_size": cfg["batch"]}
    if cfg["plane"] == "collective":
        over["cluster__data_plane"] = "collective"
    spec = make_spec(**over)
    compute = tracking_compute(spec, 0, call_memory=cfg["plane"] == "ps")
    job = build_run(spec, Path(cfg["out"]), compute=compute)
    summary = job.run()
    res = {"plane": cfg["plane"], "steps": summary.steps, "status": summary.status, "baseline": base,
           "coordinator": proc_status(), "members": getattr(compute, "measured", [])}
    ray.shutdown()
    print("RESULT " + json.dumps(res), flush=True)


def section_memory(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import ray

    over = args.big
    P = n_params(over)
    n, steps, b = 2, args.mem_steps, args.big_batch
    addr = ray.get_runtime_context().gcs_address
    res: dict[str, Any] = {"model": describe(over), "n_params": P, "workers": n, "steps": steps, "batch": b, "planes": {}}
    ddp = ddp_run(n, over, b, steps, 0)
    res["ddp_rank_vmhwm_mib"] = ddp["rank_vmhwm_mib"]
    ddp_peak = max(ddp["rank_vmhwm_mib"])
    rows = [["DDP", "rank (max of 2)", f"{ddp_peak:.0f}", "1.00", "-"]]
    for plane in args.mem_planes:
        cfg = {"address": addr, "over": over, "n": n, "steps": steps, "batch": b, "plane": plane, "out": str(tmp / f"mem-{plane}")}
        p = subprocess.run([sys.executable, __file__, "--memory-child", json.dumps(cfg)], check=False,
                           capture_output=True, text=True, timeout=1800, env={**os.environ, "OMP_NUM_THREADS": "1"})
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"memory child ({plane}) failed: {p.stderr[-3000:]}")
        r = json.loads(line[len("RESULT "):])
        coord = r["coordinator"]["VmHWM"]
        mem = [m.get("VmHWM") for m in r["members"] if m["role"] == "member" and m.get("VmHWM")]
        r["coordinator_ratio"] = coord / ddp_peak
        r["member_ratio"] = max(mem) / ddp_peak if mem else None
        r["coordinator_goal_met"] = r["coordinator_ratio"] <= GOALS["coordinator_mem"]
        r["member_goal_met"] = r["member_ratio"] is not None and r["member_ratio"] <= GOALS["member_mem"]
        res["planes"][plane] = r
        rows.append([plane, "coordinator (driver)", f"{coord:.0f}", f"{r['coordinator_ratio']:.2f}",
                     "<= 1.5: " + ("met" if r["coordinator_goal_met"] else "NOT met")])
        rows.append([plane, "member (max of 2)" if plane == "collective" else "worker (max of 2)",
                     f"{max(mem):.0f}" if mem else "-", f"{r['member_ratio']:.2f}" if mem else "-",
                     "<= 1.2: " + ("met" if r["member_goal_met"] else "NOT met")])
        extra = [m.get("memory()") for m in r["members"] if m.get("memory()")]
        if extra:
            r["memory_method"] = extra
    print(f"\n## 4. Peak RSS (VmHWM) at {P / 1e6:.1f}M parameters ({res['model']}, AdamW, N={n}, batch {b}, {steps} steps)\n")
    print(table(["side", "process", "peak RSS MiB", "ratio to a DDP rank", "goal"], rows))
    for plane, r in res["planes"].items():
        print(f"  - {plane}: driver VmHWM after imports + Ray connect, before the job: "
              f"{r['baseline'].get('VmHWM', 0):.0f} MiB"
              + (f"; worker memory(): {[round(m['peak_rss_mib']) for m in r['memory_method']]} MiB peak"
                 if r.get("memory_method") else ""))
    for plane, r in res["planes"].items():
        shm = [round(m.get("RssShmem", 0)) for m in r["members"] if m["role"] == "member"]
        anon = [round(m.get("RssAnon", 0)) for m in r["members"] if m["role"] == "member"]
        print(f"  - {plane} members at the end: RssAnon {anon} MiB, RssShmem {shm} MiB (pages of Ray's object store the "
              f"process wrote or read: shared, allocated once per node)")
    print("(coordinator: a fresh driver process running the JobController, connected to this run's Ray; members: "
          "/proc/<pid>/status VmHWM of the actors' pids, read just before they are killed at the run's end)")
    return res


# ---------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke test: small models, N=2, one repetition (< 3 minutes)")
    ap.add_argument("--sections", type=int, nargs="+", default=[1, 2, 3, 4, 5], choices=[1, 2, 3, 4, 5])
    ap.add_argument("--workers", type=int, nargs="+", default=None, help="N for the throughput section (full: 2 4)")
    ap.add_argument("--reps", type=int, default=None, help="interleaved repetitions at N=2 (full: 3)")
    ap.add_argument("--reps-large", type=int, default=None, help="interleaved repetitions at N>2 (full: 2)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (full: 6)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps (full: 2)")
    ap.add_argument("--resnet-width", type=int, default=None, help="resnet18-cifar width (full: 64 = ResNet-18)")
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--name", default=None)
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    if args.memory_child:
        memory_child(json.loads(args.memory_child))
        return

    q = args.quick
    d = lambda v, quick, full: v if v is not None else (quick if q else full)
    args.workers = d(args.workers, [2], [2, 4])
    args.reps = d(args.reps, 1, 3)
    args.reps_large = d(args.reps_large, 1, 2)
    args.steps = d(args.steps, 3, 6)
    args.warmup = d(args.warmup, 1, 2)
    args.resnet_width = d(args.resnet_width, 8, 64)
    args.gpt = gpt(2, 4, 128) if q else gpt()
    args.gpt_batch = 8
    args.resnet = None if q else resnet(args.resnet_width)  # quick: the gpt-bytes path only
    args.loss_planes = ["collective"] if q else ["collective", "ps"]
    args.mem_planes = ["collective"] if q else ["collective", "ps"]
    args.resnet_batch = 16
    args.loss_model = gpt(2, 4, 128, max_eval=256, lr=1e-3)
    args.loss_batch = 8
    args.loss_steps = 30 if q else 150
    args.big = gpt(2, 4, 128) if q else gpt(8, 8, 512)
    args.big_batch = 8
    args.join_steps = 16
    args.mem_steps = 3 if q else 4
    args.huge = gpt(2, 4, 128) if q else gpt(12, 8, 832, max_eval=8)
    args.huge_batch = 2
    args.huge_steps = 16
    name = args.name or ("real_models_quick" if q else "real_models")

    t_start = time.perf_counter()
    start_ray(args.num_cpus)
    import ray

    out: dict[str, Any] = {"command": " ".join([os.path.relpath(sys.executable, Path(__file__).resolve().parents[1])] + sys.argv), "goals": GOALS,
                           "args": {k: v for k, v in vars(args).items() if k != "memory_child"}, "sections": {},
                           "section_wall_s": {}}
    fns = {1: ("throughput", section_throughput), 2: ("loss", section_loss), 3: ("join", section_join),
           4: ("memory", section_memory), 5: ("big_model", section_big)}
    try:
        with tempfile.TemporaryDirectory(prefix="sw-real-") as td:
            for s in args.sections:
                key, fn = fns[s]
                t = time.perf_counter()
                out["sections"][key] = fn(args, Path(td))
                out["section_wall_s"][key] = time.perf_counter() - t
                print(f"(section {s} took {out['section_wall_s'][key]:.0f} s)", flush=True)
                write_result(name, out)  # partial results survive a later failure
    finally:
        ray.shutdown()
    out["wall_s"] = time.perf_counter() - t_start
    path = write_result(name, out)
    print(f"\ntotal {out['wall_s']:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
