"""Paper 003 Figure 5 on the real training_on_a_dime traces: cost of one training job per strategy.

For each model (ResNet-50, Transformer) a single-GPU job of ``--work`` V100-hours (default 96 =
the paper's "4 V100-days") is placed with every strategy of
:mod:`spotwise.planner.placement.over_time` -- ``cheapest_v100`` (baseline: cheapest 1xV100 zone of AWS
us-east-1 at the start), ``gpu_type``, ``multi_gpu`` (both AWS us-east-1), ``multi_cloud`` (AWS,
all 9 regions, and Azure, chosen at the start) and ``dynamic`` (re-decided hourly, moves only
when the saving over the remaining work beats the move cost) -- plus ``dynamic`` re-decided
daily.  Jobs start at 00:00 UTC on every day from the first day all series are priced (Azure
starts 2020-02-24) to the last day on which every strategy still finishes inside the traces
(they end 2020-03-23/24); the table reports the mean cost over those starts and the cost
reduction over the baseline *measured in the same run* (ratio of mean costs; min-max over the
starts in brackets).

Moves cost ``--restart-s`` seconds at the new instance's price plus the checkpoint's egress
(``--egress``, $/GB) when the region or cloud changes; checkpoints are 0.098 GB for ResNet-50
and 0.408 GB for the Transformer (paper 003 Table 2; BERT-Base stands in for the Transformer).

Throughputs are paper 003 Table 1 (relative to a K80); a job on an n-GPU instance is "packed"
(pays 1/n of the price, one GPU's speed), see spotwise/planner/placement/over_time.py.

    .venv/bin/python benchmarks/placement_paper003.py
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spotwise.errors import InfeasibleError  # noqa: E402
from spotwise.market.catalog import Catalog  # noqa: E402
from spotwise.market.series import iso8601  # noqa: E402
from spotwise.market.traces import load_traces  # noqa: E402
from spotwise.planner.placement.over_time import STRATEGIES, MoveCost, PlacementJob, build_options, plan_placement  # noqa: E402

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "training-on-a-dime" / "logs"
MODELS = {"resnet50": ("ResNet-50", 0.098), "transformer": ("Transformer", 0.408)}
#: paper 003 Sec. 3.2.3: "We can reduce costs by up to 3.5x compared to the baseline".
PAPER_MAX_REDUCTION = 3.5
DAY = 86400.0


def run(work: float, restart_s: float, egress: float, traces: Path, multi_gpu: str = "packed") -> dict:
    series = load_traces([traces / "aws" / "cost", traces / "azure" / "cost"])
    cat = Catalog.default()
    move = MoveCost(restart_s=restart_s, egress_per_gb=egress)
    variants = [(s, s, 3600.0) for s in STRATEGIES] + [("dynamic_daily", "dynamic", DAY)]
    out: dict = {"work_v100_hours": work, "restart_s": restart_s, "egress_per_gb": egress, "multi_gpu": multi_gpu, "models": {}}
    for fam, (label, ckpt) in MODELS.items():
        options, skipped = build_options(series, cat, fam, multi_gpu=multi_gpu)  # type: ignore[arg-type]
        first = max(o.series.start for o in options)
        t = datetime.fromtimestamp(first, tz=timezone.utc)
        day0 = datetime(t.year, t.month, t.day, tzinfo=timezone.utc).timestamp()
        if day0 < first:
            day0 += DAY
        last_end = max(o.series.end for o in options)
        job = PlacementJob(work, fam, checkpoint_gb=ckpt, name=label)
        per: dict[str, list] = {v: [] for v, _, _ in variants}
        starts, skipped_starts = [], []
        t0 = day0
        while t0 < last_end:
            try:
                res = {v: plan_placement(job, options, strategy=s, start=t0, period_s=p, move=move) for v, s, p in variants}
            except InfeasibleError as exc:
                skipped_starts.append((iso8601(t0), str(exc).split(" -- ")[0]))
                t0 += DAY
                continue
            starts.append(iso8601(t0))
            for v, r in res.items():
                per[v].append(r)
            t0 += DAY
        base = np.array([r.total_cost for r in per["cheapest_v100"]])
        rows = {}
        for v, rs in per.items():
            cost = np.array([r.total_cost for r in rs])
            red = base / cost
            used: dict[str, int] = {}
            for r in rs:
                for o in r.options_used:
                    used[o] = used.get(o, 0) + 1
            rows[v] = {
                "mean_cost": float(cost.mean()), "reduction": float(base.mean() / cost.mean()),
                "reduction_min": float(red.min()), "reduction_max": float(red.max()),
                "mean_hours": float(np.mean([r.total_time_h for r in rs])), "mean_moves": float(np.mean([r.moves for r in rs])),
                "max_moves": int(max(r.moves for r in rs)), "move_cost": float(np.mean([r.move_cost for r in rs])),
                "top_options": sorted(used, key=lambda k: -used[k])[:3],
            }
        out["models"][fam] = {"label": label, "checkpoint_gb": ckpt, "options": len(options), "starts": starts,
                              "skipped_starts": len(skipped_starts), "first_skip": skipped_starts[0] if skipped_starts else None,
                              "rows": rows}
    return out


def print_table(res: dict) -> None:
    print(f"job: {res['work_v100_hours']:g} V100-hours; move = {res['restart_s']:g} s restart at the new price "
          f"+ checkpoint egress ${res['egress_per_gb']:g}/GB across regions/clouds; multi-GPU instances: {res['multi_gpu']}")
    for fam, m in res["models"].items():
        st = m["starts"]
        print(f"\n{m['label']} ({m['options']} priced options, {len(st)} daily starts {st[0][:10]} .. {st[-1][:10]}, "
              f"{m['skipped_starts']} later starts skipped: job would outlast the traces)")
        print(f"  {'strategy':15s} {'mean $':>8s} {'reduction vs 1xV100':>22s} {'hours':>7s} {'moves':>9s} {'move $':>7s}  most used")
        for v, r in m["rows"].items():
            redn = f"{r['reduction']:.2f}x [{r['reduction_min']:.2f}-{r['reduction_max']:.2f}]"
            print(f"  {v:15s} {r['mean_cost']:8.2f} {redn:>22s} {r['mean_hours']:7.1f} {r['mean_moves']:5.2f}/{r['max_moves']:<3d} "
                  f"{r['move_cost']:7.3f}  {', '.join(r['top_options'])}")
        dyn, mc = m["rows"]["dynamic"], m["rows"]["multi_cloud"]
        print(f"  dynamic vs multi_cloud (paper Figure 6 quantity): {mc['mean_cost'] / dyn['mean_cost']:.3f}x")
    best = max(r["reduction"] for m in res["models"].values() for r in m["rows"].values())
    print(f"\nlargest mean reduction over the 1xV100 baseline: {best:.2f}x (paper 003: up to {PAPER_MAX_REDUCTION}x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=float, default=96.0, help="V100-hours of work per job (default 96 = 4 V100-days)")
    ap.add_argument("--restart-s", type=float, default=300.0, help="restart time per move, seconds (default 300)")
    ap.add_argument("--egress", type=float, default=0.09, help="checkpoint egress $/GB across regions/clouds (default 0.09)")
    ap.add_argument("--traces", type=Path, default=TRACES, help="training_on_a_dime logs/ folder")
    ap.add_argument("--multi-gpu", choices=["packed", "data_parallel"], default="packed",
                    help="n-GPU instances: packed (job pays 1/n, one GPU's speed; default) or data_parallel (whole instance, n x speed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON to this path")
    a = ap.parse_args()
    if not a.traces.is_dir():
        print(f"SKIPPED: real traces not found at {a.traces} (see DESIGN.md, 'Real data')")
        return
    t = time.perf_counter()
    res = run(a.work, a.restart_s, a.egress, a.traces, a.multi_gpu)
    print_table(res)
    print(f"(wall {time.perf_counter() - t:.1f} s)")
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
