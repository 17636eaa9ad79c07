"""Deadline-safe policies on the real AWS p2/p3 spot traces, the sweep engine's speed and fidelity.

Three parts, all measured in one process:

1. **Policies on real traces** (issue 8, part 3).  The training_on_a_dime AWS p2/p3 spot price
   histories (Dec 2019 - Mar 2020, every zone with data), one job of 24 h of compute due in 48 h,
   one start every 6 h (each after 7 days of history: hold-out, a strategy decides only from the
   past and the prices in force), every zone in turn as the job's home.  Strategies: on-demand,
   no-interruptions (spot at home as if never revoked), the planner's Thm 3 bid
   (paper 000) without and with the Uniform Progress guard, spot at home with the guard, and
   ``spotwise`` (cheapest place at the start, migration on price divergence, guard).  Reported:
   deadline met (probability, Wilson 95% CI), mean cost against the hindsight oracle (cheapest
   zone and slots, knowing the future; a lower bound) and against on-demand.  Goal: ``spotwise``
   meets >= 99% of deadlines at mean cost <= 1.05x the oracle.
2. **Speed**: simulated worker-iterations per second of the sweep engine against the
   step-by-step simulator (the run's coordinator with modelled compute) on the same job and
   window (baseline measured in the same run).  Goal: >= 1 M/s.
3. **Fidelity** (no policy, then with the Uniform Progress guard forced to on-demand by outages): the sweep engine against the step-by-step simulator on windows of a real trace
   where the price rises above the bid (a quantile of the zone's prices) 2 h into the run and falls
   back within 12 h (a revocation and a rejoin): 6 h of compute due in 24 h: finish time and cost, relative
   difference (goal: within 5%, median over windows).

    .venv/bin/python benchmarks/trace_sweep.py                 # everything (~10 min on 2 cores)
    .venv/bin/python benchmarks/trace_sweep.py --types p3.2xlarge --every 24h   # quick look
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import med, table, write_result  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "training-on-a-dime" / "logs" / "aws" / "cost"
TYPES = ("p2.xlarge", "p2.8xlarge", "p2.16xlarge", "p3.2xlarge", "p3.8xlarge", "p3.16xlarge")
STRATS = "on-demand,no-interruptions,thm3-bid,thm3-bid+guard,spot+guard,spotwise"


def part_policies(series, types, every_h: float) -> dict:
    from spotwise.market.catalog import Catalog
    from spotwise.sim.sweep.places import build_places
    from spotwise.sim.sweep.engine import SweepJob, parse_strategies, sweep, window_starts

    cat = Catalog.default()
    out: dict = {"per_type": {}, "pooled": {}}
    pooled: dict[str, list] = {}
    wi = wall = 0.0
    for inst in types:
        places, _ = build_places(series, cat, "resnet50", inst)
        job = SweepJob(work_s=24 * 3600.0, deadline_s=48 * 3600.0, restart_s=300.0, coordinator_per_hour=0.085,
                       iterations=86400, name=inst)
        starts = window_starts(places, job, every_h * 3600.0)
        res = sweep(job, places, [p.key for p in places], parse_strategies(STRATS), starts)
        wi += res.worker_iterations
        wall += res.wall_s
        rows = []
        for s in res.summaries:
            rows.append([s.strategy, s.windows, f"{s.deadline_met:.1%}", f"{s.deadline_met_ci[0]:.1%}-{s.deadline_met_ci[1]:.1%}",
                         s.mean_cost, f"{s.cost_ratio_of_means:.3f}", f"{s.vs_on_demand:.3f}", s.unfinished, s.mean_on_demand_h, s.mean_moves])
            pooled.setdefault(s.strategy, []).extend(r for r in res.rows if r.strategy == s.strategy)
        out["per_type"][inst] = {"places": len(places), "starts": len(res.starts), **res.to_dict()}
        print(f"\n{inst}: {len(places)} zones (each a home), {len(res.starts)} starts every {every_h:g} h, "
              f"oracle mean {out['per_type'][inst]['oracle_mean_cost']:.2f} $, {res.wall_s:.1f} s")
        print(table(["strategy", "windows", "deadline met", "95% CI", "mean $", "vs oracle", "vs on-demand",
                     "unfinished", "on-demand h", "moves"], rows))
    from spotwise.sim.sweep.engine import wilson

    print("\nPooled over every type, zone and start (cost ratios are means of per-window cost / oracle):")
    rows = []
    for name, rs in pooled.items():
        k = sum(r.deadline_met for r in rs)
        ratio = float(np.mean([r.cost / r.oracle_cost for r in rs]))
        ratio_means = float(np.sum([r.cost for r in rs]) / np.sum([r.oracle_cost for r in rs]))
        od = {id(r0): r0 for r0 in pooled.get("on-demand", [])}
        lo, hi = wilson(k, len(rs))
        out["pooled"][name] = {"windows": len(rs), "deadline_met": k / len(rs), "ci": [lo, hi], "mean_vs_oracle": ratio,
                               "total_vs_oracle": ratio_means}
        rows.append([name, len(rs), f"{k / len(rs):.2%}", f"{lo:.1%}-{hi:.1%}", f"{ratio:.3f}", f"{ratio_means:.3f}"])
        del od
    print(table(["strategy", "windows", "deadline met", "95% CI", "mean cost/oracle", "sum cost/sum oracle"], rows))
    if "on-demand" in pooled:
        for name, rs in pooled.items():
            od_sum = np.sum([r.cost for r in pooled["on-demand"]])
            out["pooled"][name]["vs_on_demand"] = float(np.sum([r.cost for r in rs]) / od_sum)
    sw = out["pooled"].get("spotwise")
    if sw:
        ok = sw["deadline_met"] >= 0.99 and sw["mean_vs_oracle"] <= 1.05
        print(f"\ngoal (spotwise: deadline met >= 99%, mean cost <= 1.05x oracle): "
              f"{sw['deadline_met']:.2%} met, {sw['mean_vs_oracle']:.3f}x -> {'MET' if ok else 'NOT MET'}")
        out["goal_met"] = ok
    out["sweep_worker_iterations_per_s"] = wi / wall if wall else None
    return out


def _controller_window(trace: list[str], zone: str, start: float, bid: float, iterations: int, step_s: float, model,
                       deadline: str = "24h", policies: list | None = None):
    """The step-by-step simulator (the run's coordinator, modelled compute) on one trace window."""
    from spotwise.config import spec_from_dict
    from spotwise.market.series import iso8601
    from spotwise.market.world import build_market
    from spotwise.assemble import build_controller
    from spotwise.capacity.provider import EmulatedProvider
    from spotwise.sim.modelled import ModelledCompute, ModelledState

    d = dict(name="fidelity", seed=0, workload=dict(name="mlp-digits", family="resnet50", step_time_s=9.6 * step_s),
             target=dict(iterations=iterations), deadline=deadline, policies=policies or [],
             cluster=dict(instance_type="p3.2xlarge", workers=1, region=zone, coordinator_instance="c5.large", straggler=0,
                          sync_overhead_s=0, bids=bid),
             market=dict(traces=list(trace), start=iso8601(start), revocation=dict(model="bid", notice_s=0), billing="per-second"))
    spec = spec_from_dict(d)
    market = build_market(spec)
    state = ModelledState(model[0], model[3], model[1])
    compute = ModelledCompute(state)
    provider = EmulatedProvider(market.revocation, 1, market.horizon_s, 0, compute=compute)
    out = Path(tempfile.mkdtemp(prefix="tracefid-"))
    t = time.perf_counter()
    summary = build_controller(spec, out / "run", market=market, provider=provider, compute=compute, state=state, mode="simulate",
                               restart_s=120.0).run()
    return summary, time.perf_counter() - t


def part_fidelity_and_speed(windows: int) -> dict:
    from spotwise.config import spec_from_dict
    from spotwise.market.catalog import Catalog
    from spotwise.market.traces import load_traces
    from spotwise.planner.plan import error_model_for
    from spotwise.sim.sweep.places import build_places
    from spotwise.sim.sweep.engine import Strategy, SweepJob, run_window

    files = {r.name: sorted(str(f) for f in r.glob("*p3.2xlarge.json")) for r in sorted(TRACES.iterdir()) if r.is_dir()}
    places = []
    for region, fs in files.items():
        series = load_traces(fs) if fs else []
        if series:  # some regions' dumps are empty
            for p in build_places(series, Catalog.default(), "resnet50", "p3.2xlarge")[0]:
                places.append((p, fs))
    iterations, step_s = 21600, 1.0  # 6 h of compute, 24 h deadline
    cands = []
    for place, fs in places:
        v, ts = place.price.values, place.price.times
        for q in (0.5, 0.7, 0.9):
            bid = float(np.quantile(v, q))
            for i in range(1, ts.size - 1):
                if v[i - 1] <= bid < v[i]:
                    back = np.nonzero((ts > ts[i]) & (v <= bid))[0]
                    if back.size and ts[back[0]] - ts[i] < 12 * 3600 and ts[i] - 2 * 3600 > place.price.start:
                        cands.append((place, fs, bid, float(ts[i]) - 2 * 3600.0))
    picks = [cands[i] for i in np.linspace(0, len(cands) - 1, min(windows, len(cands))).astype(int)]
    spec0 = spec_from_dict(dict(name="pilot", seed=0, workload=dict(name="mlp-digits", family="resnet50"), target=dict(iterations=10),
                                cluster=dict(instance_type="p3.2xlarge"), market=dict(synthetic=dict(kind="constant", price=1.0))))
    em = error_model_for(spec0, None, 50)
    from spotwise.workloads.registry import make_workload

    model = (em[0], em[1], None, len(make_workload(spec0.workload, 0).train))
    job = SweepJob(work_s=iterations * step_s, deadline_s=24 * 3600.0, restart_s=0.0, coordinator_per_hour=0.085, iterations=iterations)
    rows, dt, dc = [], [], []
    ctrl_wi = ctrl_wall = sweep_wi = sweep_wall = 0.0
    both_unfinished = 0
    for place, fs, bid, st in picks:
        summary, wall = _controller_window(fs, place.zone, st, bid, iterations, step_s, model)
        t = time.perf_counter()
        r = run_window(job, [place], place, st, Strategy("fixed-bid", bid=bid), horizon=st + max(summary.virtual_s, 24 * 3600) + 3600)
        w2 = time.perf_counter() - t
        ctrl_wi += summary.steps
        ctrl_wall += wall
        sweep_wi += r.work_done * iterations
        sweep_wall += w2
        when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(st))
        if summary.status != "completed" or r.finish_s is None:
            agree = summary.status != "completed" and r.finish_s is None
            both_unfinished += agree
            rows.append([when, place.zone, summary.revocations, r.revocations, summary.status, "unfinished" if r.finish_s is None else r.finish_s / 3600,
                         summary.cost_usd, r.cost, "agree" if agree else "DISAGREE", "-", wall, w2])
            continue
        dt.append(abs(r.finish_s - summary.virtual_s) / summary.virtual_s)
        dc.append(abs(r.cost - summary.cost_usd) / summary.cost_usd)
        rows.append([when, place.zone, summary.revocations, r.revocations, summary.virtual_s / 3600,
                     r.finish_s / 3600, summary.cost_usd, r.cost, f"{dt[-1]:.2%}", f"{dc[-1]:.2%}", wall, w2])
    print(f"\nFidelity: sweep engine vs step-by-step simulator, p3.2xlarge in every AWS zone, bid = a quantile of the zone's prices, "
          f"{iterations} steps of {step_s:g} s, 24 h deadline, {len(picks)} windows with a revocation at 2 h and a rejoin within 12 h")
    print(table(["start", "zone", "revoc. ctrl", "revoc. sweep", "time h ctrl", "time h sweep", "cost ctrl", "cost sweep", "d time", "d cost",
                 "wall ctrl s", "wall sweep s"], rows))
    speed_ctrl = ctrl_wi / ctrl_wall
    speed_sweep = sweep_wi / sweep_wall
    print(f"median |d time| {med(dt):.3%}, median |d cost| {med(dc):.3%} (goal <= 5%)")
    print(f"speed: step-by-step {speed_ctrl:,.0f} worker-iterations/s, sweep engine {speed_sweep:,.0f}/s "
          f"({speed_sweep / speed_ctrl:,.0f}x; goal >= 1 M/s)")
    return {"windows": len(picks), "both_unfinished": both_unfinished, "median_rel_time_diff": med(dt), "median_rel_cost_diff": med(dc),
            "max_rel_time_diff": max(dt), "max_rel_cost_diff": max(dc), "ctrl_worker_it_per_s": speed_ctrl,
            "sweep_worker_it_per_s": speed_sweep, "speedup": speed_sweep / speed_ctrl}


def part_guard_fidelity(windows: int) -> dict:
    """The Uniform Progress guard in the controller against the sweep engine: outages that force it to on-demand."""
    from spotwise.config import spec_from_dict
    from spotwise.market.catalog import Catalog
    from spotwise.market.traces import load_traces
    from spotwise.planner.plan import error_model_for
    from spotwise.sim.sweep.places import build_places
    from spotwise.sim.sweep.engine import Strategy, SweepJob, run_window
    from spotwise.workloads.registry import make_workload

    iterations, step_s = 21600, 1.0  # 6 h of compute due in 12 h
    cands = []
    for region in sorted(TRACES.iterdir()):
        fs = sorted(str(f) for f in region.glob("*p3.2xlarge.json"))
        series = load_traces(fs) if fs else []
        if not series:
            continue
        for place in build_places(series, Catalog.default(), "resnet50", "p3.2xlarge")[0]:
            v, ts = place.price.values, place.price.times
            bid = float(np.median(v))
            for i in range(1, ts.size - 1):  # the price rises above the bid 30 min in and stays there > 4 h
                if v[i - 1] <= bid < v[i] and ts[i] - 1800 > place.price.start + 7 * 86400:
                    back = np.nonzero((ts > ts[i]) & (v <= bid))[0]
                    if (float(ts[back[0]]) if back.size else place.end) - ts[i] > 4 * 3600:
                        cands.append((place, fs, bid, float(ts[i]) - 1800.0))
    picks = [cands[i] for i in np.linspace(0, len(cands) - 1, min(windows, len(cands))).astype(int)]
    spec0 = spec_from_dict(dict(name="pilot", seed=0, workload=dict(name="mlp-digits", family="resnet50"), target=dict(iterations=10),
                                cluster=dict(instance_type="p3.2xlarge"), market=dict(synthetic=dict(kind="constant", price=1.0))))
    em = error_model_for(spec0, None, 50)
    model = (em[0], em[1], None, len(make_workload(spec0.workload, 0).train))
    job = SweepJob(work_s=iterations * step_s, deadline_s=12 * 3600.0, restart_s=120.0, start_s=0.0, rejoin_s=0.0,
                   coordinator_per_hour=0.085, iterations=iterations)
    rows, dt, dc = [], [], []
    met_ctrl = met_sweep = 0
    for place, fs, bid, st in picks:
        summary, wall = _controller_window(fs, place.zone, st, bid, iterations, step_s, model, deadline="12h",
                                           policies=[{"name": "uniform-progress"}])
        r = run_window(job, [place], place, st, Strategy("thm3-bid+guard", bid=bid, policies=("uniform-progress",)), tick_s=60.0)
        ok_c = summary.status == "completed" and summary.virtual_s <= job.deadline_s
        met_ctrl += ok_c
        met_sweep += r.deadline_met
        if r.finish_s is not None and summary.status == "completed":
            dt.append(abs(r.finish_s - summary.virtual_s) / summary.virtual_s)
            dc.append(abs(r.cost - summary.cost_usd) / summary.cost_usd)
        od = summary.cost_breakdown.get("by_market", {}).get("on_demand", 0.0)
        rows.append([time.strftime("%Y-%m-%d %H:%M", time.gmtime(st)), place.zone, summary.virtual_s / 3600,
                     None if r.finish_s is None else r.finish_s / 3600, summary.cost_usd, r.cost, od, r.market_switches,
                     f"{dt[-1]:.2%}" if dt else "-", f"{dc[-1]:.2%}" if dc else "-"])
    print(f"\nGuard fidelity: the Uniform Progress guard in the controller (step by step) vs the sweep engine (60 s ticks); "
          f"p3.2xlarge, 6 h of compute due in 12 h, bid = the zone's median, {len(picks)} windows where the price rises "
          "above it 30 min in and stays there > 4 h; restart 120 s")
    print(table(["start", "zone", "time h ctrl", "time h sweep", "cost ctrl", "cost sweep", "on-demand $ ctrl (incl. coord.)",
                 "switches sweep", "d time", "d cost"], rows))
    print(f"deadline met: controller {met_ctrl}/{len(picks)}, sweep {met_sweep}/{len(picks)}; median |d time| {med(dt):.3%}, "
          f"median |d cost| {med(dc):.3%} (goal <= 5%)")
    return {"windows": len(picks), "met_controller": met_ctrl, "met_sweep": met_sweep, "median_rel_time_diff": med(dt),
            "median_rel_cost_diff": med(dc), "max_rel_time_diff": max(dt) if dt else None, "max_rel_cost_diff": max(dc) if dc else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--every", default="6h", help="start spacing, e.g. 6h")
    ap.add_argument("--fidelity-windows", type=int, default=8)
    ap.add_argument("--skip-policies", action="store_true")
    args = ap.parse_args()
    if not TRACES.is_dir():
        print(f"SKIPPED: the AWS traces are not at {TRACES}")
        return
    from spotwise.market.traces import load_traces
    from spotwise.spec.load import parse_duration

    payload: dict = {"command": " ".join(sys.argv)}
    if not args.skip_policies:
        series = load_traces(str(TRACES))
        payload["policies"] = part_policies(series, [t for t in args.types.split(",") if t], parse_duration(args.every, "--every") / 3600)
    payload["fidelity"] = part_fidelity_and_speed(args.fidelity_windows)
    payload["guard_fidelity"] = part_guard_fidelity(args.fidelity_windows)
    print(f"\nresult: {write_result('trace_sweep', payload)}")


if __name__ == "__main__":
    main()
