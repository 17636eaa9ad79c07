"""Memory per worker actor, per workload, plus the coordinator (driver) process.

For each workload a real ``Coordinator`` (emulated provider, ``--actors`` workers, no standby
actors) runs ``--steps`` fully-synchronous steps; after the last one (from the ``progress``
callback, i.e. while the actors are alive and have computed gradients) it asks every worker
``GradientWorker.memory()`` (VmRSS and peak RSS) and additionally reads the actor's
``/proc/PID/smaps_rollup`` (PSS and USS = private memory: RSS counts the shared pages of
libtorch etc. once per process, PSS splits them, USS is what killing the actor would free).

Baselines in the same run: a bare Ray actor that only ``import torch`` (and one that imports
nothing), and the driver's RSS before any coordinator was built.

    .venv/bin/python benchmarks/actor_memory.py --actors 4
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import build_run, make_spec, med, start_ray, table, with_retries, write_result  # noqa: E402


def proc_mem(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private clean + dirty) of ``pid`` in MiB, from /proc."""
    out = {"rss_mib": None, "pss_mib": None, "uss_mib": None}
    try:
        vals: dict[str, float] = {}
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3 and parts[0].endswith(":") and parts[2] == "kB":
                    vals[parts[0][:-1]] = int(parts[1]) / 1024.0
        out["rss_mib"] = vals.get("Rss")
        out["pss_mib"] = vals.get("Pss")
        out["uss_mib"] = vals.get("Private_Clean", 0.0) + vals.get("Private_Dirty", 0.0)
    except OSError:
        pass
    return out


class _Bare:
    def __init__(self, with_torch: bool) -> None:
        if with_torch:
            import torch  # noqa: F401

            torch.set_num_threads(1)
            torch.zeros(8).sum()  # touch the library once

    def pid(self) -> int:
        return os.getpid()


def bare_actors(k: int, with_torch: bool) -> list[dict]:
    import ray

    cls = ray.remote(num_cpus=0)(_Bare)
    actors = [cls.remote(with_torch) for _ in range(k)]
    pids = ray.get([a.pid.remote() for a in actors])
    mems = [proc_mem(p) for p in pids]
    for a in actors:
        ray.kill(a, no_restart=True)
    return mems


def workload_memory(name: str, actors: int, steps: int, batch: int, tmp: Path) -> dict:
    import ray

    spec = make_spec(**{"cluster__workers": actors, "cluster__standby": 0, "target__iterations": steps,
                        "workload__batch_size": batch, "workload__name": name})
    coord = build_run(spec, tmp / f"mem-{name}")
    seen: dict = {}

    def progress(snap: dict) -> None:
        if snap["step"] != steps:
            return
        ws = sorted(coord.members)
        readies = ray.get([coord.members[w].ready.remote() for w in ws])
        mems = ray.get([coord.members[w].memory.remote() for w in ws])
        seen["workers"] = [{**m, **{f"proc_{k}": v for k, v in proc_mem(r["pid"]).items()}, "n_params": r["n_params"]}
                           for r, m in zip(readies, mems)]
        seen["driver"] = proc_mem(os.getpid())

    coord.progress = progress
    coord.run()
    w = seen["workers"]
    return {
        "workload": name, "actors": len(w), "n_params": w[0]["n_params"],
        "rss_mib_median": med([x["rss_mib"] for x in w]), "peak_rss_mib_median": med([x["peak_rss_mib"] for x in w]),
        "pss_mib_median": med([x["proc_pss_mib"] for x in w]), "uss_mib_median": med([x["proc_uss_mib"] for x in w]),
        "driver_rss_mib": seen["driver"]["rss_mib"], "per_actor": w,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["mlp-digits", "cnn-digits", "sparse-logreg", "pmf"])
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--name", default="actor_memory")
    args = ap.parse_args()

    driver0 = proc_mem(os.getpid())
    start_ray(args.num_cpus)
    driver_ray = proc_mem(os.getpid())
    bare_torch = bare_actors(args.actors, True)
    bare_none = bare_actors(args.actors, False)
    base = {"rss": med([m["rss_mib"] for m in bare_torch]), "pss": med([m["pss_mib"] for m in bare_torch]),
            "uss": med([m["uss_mib"] for m in bare_torch])}
    rows = [["bare actor (no import)", "-", med([m["rss_mib"] for m in bare_none]), "-",
             med([m["pss_mib"] for m in bare_none]), med([m["uss_mib"] for m in bare_none]), "-", "-"],
            ["bare actor + import torch", "-", base["rss"], "-", base["pss"], base["uss"], "1.00", "-"]]
    results = []
    with tempfile.TemporaryDirectory(prefix="sw-mem-") as td:
        for name in args.workloads:
            r = with_retries(workload_memory, name, args.actors, args.steps, args.batch, Path(td))
            r["rss_over_bare_torch_mib"] = r["rss_mib_median"] - base["rss"]
            r["rss_ratio_to_bare_torch"] = r["rss_mib_median"] / base["rss"]
            results.append(r)
            rows.append([name, r["n_params"], r["rss_mib_median"], r["peak_rss_mib_median"], r["pss_mib_median"],
                         r["uss_mib_median"], f"{r['rss_ratio_to_bare_torch']:.2f}", r["driver_rss_mib"]])
            print(f"[{name}] done", file=sys.stderr, flush=True)
    print(table(["worker actor", "params", "RSS MiB", "peak RSS MiB", "PSS MiB", "USS MiB", "RSS / bare+torch",
                 "coordinator (driver) RSS MiB"], rows))
    print(f"(medians over {args.actors} actors each; driver RSS: {driver0['rss_mib']:.0f} MiB at start, "
          f"{driver_ray['rss_mib']:.0f} MiB after ray.init)")
    path = write_result(args.name, {"args": vars(args), "driver_start": driver0, "driver_after_ray_init": driver_ray,
                                    "bare_torch_actor": bare_torch, "bare_actor": bare_none, "results": results})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
