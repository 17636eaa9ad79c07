"""Simulator fidelity and speed against the emulated runtime, measured in the same process.

For each spec (revocations from a bid market, Bernoulli churn, exponential lifetimes) and seed,
the same job is run twice:

* **baseline** -- ``spotwise run`` on the emulated provider: real PyTorch training in Ray actors,
  modelled time and money (``Coordinator`` with ``RayCompute``);
* **simulated** -- ``spotwise simulate``: the same coordinator with modelled compute and loss
  (``spotwise.sim.simulate.simulate_job``; the loss model is fitted once per spec by a 200-step
  in-process pilot, outside the timed part).

Reported per run: relative difference of virtual time and cost (issue 8 goal: within 5%, median
over seeds), equality of revocations/joins/steps, and wall-clock seconds of each; then the
medians, the speed-up (emulated wall / simulated wall) and the simulator's worker-iterations per
second (committed contributions / simulated wall; issue 8 goal: >= 1 M/s).

    .venv/bin/python benchmarks/simulate_fidelity.py --seeds 0 1 2 --iterations 200
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import make_spec, med, start_ray, table, write_result  # noqa: E402

SPECS = {
    "bid": {"cluster__bids": [0.17, 0.17, 0.17, 0.17, 0.09, 0.09, 0.09, 0.09], "cluster__workers": 8,
            "market": {"synthetic": {"kind": "uniform", "low": 0.03, "high": 0.15, "interval_s": 30, "seed": 0},
                       "revocation": {"model": "bid"}}},
    "bernoulli": {"cluster__workers": 8, "cluster__straggler": 0.5,
                  "market__revocation": {"model": "bernoulli", "q": 0.05, "rejoin_p": 0.3, "notice_s": 0}},
    "lifetime": {"cluster__workers": 8, "cluster__sync": "n-sync", "cluster__sync_n": 6,
                 "market__revocation": {"model": "lifetime", "mttf_s": 40, "mttr_s": 20, "notice_s": 5}},
}


def one(name: str, seed: int, iterations: int, model) -> dict:
    from spotwise.events import read_events
    from spotwise.market.world import build_market
    from spotwise.assemble import build_controller
    from spotwise.capacity.provider import EmulatedProvider
    from spotwise.sim.modelled import ModelledCompute, ModelledState

    spec = make_spec(seed=seed, target__iterations=iterations, **SPECS[name])
    tmp = Path(tempfile.mkdtemp(prefix=f"simfid-{name}-{seed}-"))
    t0 = time.perf_counter()
    run = build_controller(spec, tmp / "run", market=build_market(spec)).run()
    run_wall = time.perf_counter() - t0

    market = build_market(spec)
    state = ModelledState(model[0], n_train=model[1], g_star=model[2])
    compute = ModelledCompute(state)
    provider = EmulatedProvider(market.revocation, max(spec.cluster.workers, spec.cluster.max_workers or 0),
                                market.horizon_s, spec.seed, compute=compute)
    t0 = time.perf_counter()
    sim = build_controller(spec, tmp / "sim", market=market, provider=provider, compute=compute, state=state,
                         mode="simulate").run()
    sim_wall = time.perf_counter() - t0
    contributions = sum(e["contributions"] for e in read_events(tmp / "sim" / "events.jsonl", kinds=["step"]))
    return {
        "spec": name, "seed": seed, "steps": run.steps,
        "d_time": abs(sim.virtual_s - run.virtual_s) / run.virtual_s,
        "d_cost": abs(sim.cost_usd - run.cost_usd) / run.cost_usd,
        "same_churn": (sim.revocations, sim.joins, sim.steps) == (run.revocations, run.joins, run.steps),
        "revocations": run.revocations, "run_wall_s": run_wall, "sim_wall_s": sim_wall,
        "worker_iters_per_s": contributions / sim_wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--specs", nargs="+", default=list(SPECS), choices=list(SPECS))
    args = ap.parse_args()

    from spotwise.planner.plan import error_model_for
    from spotwise.workloads.registry import make_workload

    start_ray()
    rows = []
    for name in args.specs:
        spec = make_spec(target__iterations=args.iterations, **SPECS[name])
        em, g_star, *_ = error_model_for(spec, None, 200)
        model = (em, len(make_workload(spec.workload, spec.seed).train), g_star)
        for seed in args.seeds:
            r = one(name, seed, args.iterations, model)
            rows.append(r)
            print(f"{name} seed {seed}: steps {r['steps']}, revocations {r['revocations']}, d_time {r['d_time']:.2e}, "
                  f"d_cost {r['d_cost']:.2e}, same churn {r['same_churn']}, emulated {r['run_wall_s']:.1f} s, "
                  f"simulated {r['sim_wall_s']:.3f} s", flush=True)
    print()
    print(table(["spec", "seed", "steps", "revocations", "|d time|", "|d cost|", "same churn", "emulated s", "simulated s",
                 "speed-up"],
                [[r["spec"], r["seed"], r["steps"], r["revocations"], f"{r['d_time']:.1e}", f"{r['d_cost']:.1e}",
                  r["same_churn"], f"{r['run_wall_s']:.1f}", f"{r['sim_wall_s']:.3f}",
                  f"{r['run_wall_s'] / r['sim_wall_s']:.0f}x"] for r in rows]))
    summary = {
        "median_d_time": med([r["d_time"] for r in rows]), "median_d_cost": med([r["d_cost"] for r in rows]),
        "all_same_churn": all(r["same_churn"] for r in rows),
        "median_speedup": med([r["run_wall_s"] / r["sim_wall_s"] for r in rows]),
        "median_worker_iters_per_s": med([r["worker_iters_per_s"] for r in rows]),
    }
    print(f"\nmedian |d time| {summary['median_d_time']:.1e}, median |d cost| {summary['median_d_cost']:.1e} "
          f"(goal <= 5e-2); same revocations/joins/steps in every run: {summary['all_same_churn']}")
    print(f"simulated vs emulated wall time: median {summary['median_speedup']:.0f}x faster; "
          f"simulator: median {summary['median_worker_iters_per_s']:,.0f} worker-iterations/s (goal >= 1,000,000)")
    write_result("simulate_fidelity", {"args": vars(args), "rows": rows, "summary": summary})


if __name__ == "__main__":
    main()
