"""Multi-node jobs on partial capacity (issue 31): the sweep's window executor on count traces.

Every number is worked out by hand in the comments.  A place gives ``k`` spot nodes (a count
series with ``meta.extra["nodes"]``); a job of N nodes holds ``min(k, N)``, waits below
``min_workers``, progresses at ``rate(k)`` (linear here: ``k / N``) and bills each node it holds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.policies.base import Decision, Observation, Policy, TopUp
from spotwise.policies.topup import HybridTopUp
from spotwise.sim.sweep.partial import check_reading, worker_rates
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.engine import Strategy, SweepJob, run_window

H = 3600.0
T0 = 1_000_000.0
OD = 3.06
P3 = Catalog.default().instance("p3.2xlarge")
SPOT = Strategy("spot", "home", "on-demand", "spot", ())
TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "skypilot-spot-traces"


def count_place(points: list[tuple[float, float]], end: float, nodes: int, price: float = 0.9, zone: str = "z-1a") -> Place:
    t, v = zip(*points)
    cap = StepSeries(np.array(t, float), np.array(v, float), end,
                     SeriesMeta(f"cap:{zone}", "availability", "aws", zone[:-1], zone, "p3.2xlarge", extra={"nodes": nodes}))
    pr = StepSeries(np.array([T0]), np.array([price]), end, SeriesMeta(f"price:{zone}", "price", "aws", zone[:-1], zone, "p3.2xlarge"))
    return Place(zone, zone[:-1], P3, pr, OD, 1.0, cap)


def job(**kw: object) -> SweepJob:
    base = dict(work_s=2 * H, deadline_s=6 * H, workers=4, restart_s=0.0, coordinator_per_hour=0.5, min_workers=1)
    base.update(kw)
    return SweepJob(**base)  # type: ignore[arg-type]


def test_elastic_job_trains_on_the_nodes_it_gets() -> None:
    # 4 nodes for 1 h, 2 nodes for 1 h, then 4.  2 h of work at full width, no restarts:
    # 1 h at rate 1 (1 h of work) + 1 h at rate 1/2 (0.5 h) + 0.5 h at rate 1: finish 2.5 h.
    # Nodes: 4 x 1 h + 2 x 1 h + 4 x 0.5 h = 8 node-hours x 0.9 = 7.2 $; coordinator 2.5 h x 0.5 = 1.25 $.
    p = count_place([(T0, 4), (T0 + H, 2), (T0 + 2 * H, 4)], T0 + 20 * H, 4)
    r = run_window(job(), [p], p, T0, SPOT)
    assert r.finish_s == pytest.approx(2.5 * H)
    assert r.cost == pytest.approx(7.2 + 1.25)
    assert r.deadline_met and r.revocations == 1
    # node-hours / N: spot 8 / 4 = 2 job-hours
    assert r.spot_s == pytest.approx(2 * H)


def test_a_gang_waits_below_min_workers() -> None:
    # min_workers 4: [1 h, 2 h) holds nothing (2 of 4 nodes), so the work ends at 3 h:
    # 4 x 2 h = 8 node-hours x 0.9 = 7.2 $; coordinator 3 h x 0.5 = 1.5 $; idle 1 h.
    p = count_place([(T0, 4), (T0 + H, 2), (T0 + 2 * H, 4)], T0 + 20 * H, 4)
    r = run_window(job(min_workers=4), [p], p, T0, SPOT)
    assert r.finish_s == pytest.approx(3 * H)
    assert r.cost == pytest.approx(7.2 + 1.5)
    assert r.idle_s == pytest.approx(H)


def test_counts_above_the_job_are_capped_and_joiners_restart() -> None:
    # 16 of 16 nodes on the trace; a job of 4 gets 4.  Rejoin 600 s: the trace gives 2 nodes on
    # [1 h, 2 h) and 4 again from 2 h; the 2 joiners compute from 2 h + 600 s.
    # Start (start_s 0): 1 h at rate 1 -> 1 h of work; 1 h at 1/2 -> 0.5 h; 600 s at 1/2 -> 1/12 h;
    # left 2 - 1 - 0.5 - 1/12 = 5/12 h at rate 1: finish 2 h + 600 s + 1500 s = 2.5833 h.
    # Node-hours: 4 + 2 + 4 x (1/6 + 5/12) = 8.3333 x 0.9 = 7.5 $; coordinator 2.58333 x 0.5.
    p = count_place([(T0, 16), (T0 + H, 2), (T0 + 2 * H, 16)], T0 + 20 * H, 16)
    r = run_window(job(start_s=0.0, rejoin_s=600.0, restart_s=600.0), [p], p, T0, SPOT)
    assert r.finish_s == pytest.approx(2 * H + 2100.0)
    assert r.cost == pytest.approx(0.9 * (6 + 4 * 2100.0 / H) + 0.5 * (2 * H + 2100.0) / H)
    assert r.restart_spot_s == pytest.approx(2 * 600.0 / 4)  # 2 joiners x 600 s, in job-equivalents


class _TopUpAt(Policy):
    """Asks for on-demand nodes once, at its first decision."""

    name = "test-topup"

    def __init__(self, keep: bool) -> None:
        self.keep = keep

    def decide(self, obs: Observation) -> list[Decision]:
        return [] if obs.on_demand_nodes or obs.t > 0 else [TopUp(reason="test", on_demand=4, keep=self.keep)]


def test_top_up_fills_what_spot_does_not_give_and_yields_to_spot() -> None:
    # 1 spot node on [0, 1 h), 4 from 1 h; TopUp(4) at t = 0: 3 on-demand nodes fill (rate 1 from 0).
    # At 1 h three spot nodes join (rejoin 0: ready at once) and the on-demand nodes leave: 2 h of
    # work in 2 h.  Spot node-hours 1 + 4 = 5 x 0.9 = 4.5 $; on-demand 3 x 1 h x 3.06 = 9.18 $;
    # coordinator 2 h x 0.5 = 1 $.
    p = count_place([(T0, 1), (T0 + H, 4)], T0 + 20 * H, 4)
    from spotwise.sim.sweep.window import WindowRun

    strat = Strategy("t", "home", "on-demand", "spot", ())
    r = WindowRun(job(), [p], p, T0, strat, [_TopUpAt(False)], 600.0, T0 + 20 * H).run()
    assert r.finish_s == pytest.approx(2 * H)
    assert r.cost == pytest.approx(4.5 + 9.18 + 1.0)
    # keep: the 3 on-demand nodes stay, spot fills only the 1 they leave: 1 x 2 h x 0.9 + 3 x 2 h x 3.06 + 1
    r = WindowRun(job(), [p], p, T0, strat, [_TopUpAt(True)], 600.0, T0 + 20 * H).run()
    assert r.finish_s == pytest.approx(2 * H)
    assert r.cost == pytest.approx(1.8 + 18.36 + 1.0)


def test_hybrid_top_up_meets_a_deadline_spot_alone_misses() -> None:
    # 1 of 4 nodes the whole time: spot alone runs at 1/4 and needs 8 h for 2 h of work (deadline 4 h).
    # hybrid-topup (Uniform Progress over node counts; ticks every 600 s, d = 300 s, ep(t) = t / 2,
    # and 1 node's rate 1/4 is below the line's 1/2):
    #   600: behind (150 < 300): top up, 3 on-demand nodes ready at 900 (done 225);
    #   2400: done 1725 >= ep(3000) = 1500: release (hysteresis); then 1/4 again;
    #   4800: done 2325 < 2400: top up (ready 5100, done 2400); 6000: done 3300 >= ep(6600): release;
    #   7800: done 3750 < 3900: top up (ready 8100, done 3825); 9600: done 5325 >= ep(10200): release;
    #   12000: done 5925, slack (14400 - 12000) - 1275 = 1125 s <= net 2 x 300 + 600: top up and keep
    #   (ready 12300, done 6000); the last 1200 s at full width: finish 13500 s.
    p = count_place([(T0, 1)], T0 + 20 * H, 4)
    j = job(deadline_s=4 * H, restart_s=300.0, start_s=0.0)
    alone = run_window(j, [p], p, T0, SPOT)
    assert not alone.deadline_met
    hyb = run_window(j, [p], p, T0, Strategy("h", "home", "on-demand", "spot", ("hybrid-topup",)))
    assert hyb.deadline_met
    assert hyb.finish_s == pytest.approx(13500.0, abs=1.0)
    # on-demand node-seconds: 3 x (2400-600) + 3 x (6000-4800) + 3 x (9600-7800) + 3 x (13500-12000), in job-equivalents
    assert hyb.on_demand_s == pytest.approx(3 * (1800 + 1200 + 1800 + 1500) / 4)


def test_one_node_job_reads_a_count_trace_only_when_told() -> None:
    p = count_place([(T0, 3)], T0 + 20 * H, 16)
    with pytest.raises(InputError) as e:
        check_reading(SweepJob(2 * H, 6 * H, workers=1), [p])
    assert "min_workers" in e.value.fix and "workers: 16" in e.value.fix
    check_reading(SweepJob(2 * H, 6 * H, workers=1, min_workers=1), [p])  # the 1-node reading, chosen
    check_reading(SweepJob(2 * H, 6 * H, workers=16, min_workers=16), [p])
    with pytest.raises(InputError, match="more nodes than the traces ever give"):
        check_reading(SweepJob(2 * H, 6 * H, workers=32, min_workers=32), [p])


@pytest.mark.parametrize("bad", [0, 5, -1, 2.5, True])
def test_min_workers_out_of_range_is_refused(bad: object) -> None:
    with pytest.raises(InputError, match="min_workers"):
        SweepJob(2 * H, 6 * H, workers=4, min_workers=bad)  # type: ignore[arg-type]


def test_rates_follow_the_straggler_law() -> None:
    from spotwise.control.sync import make_sync
    from spotwise.theory.runtime import MiniBatchTimeLaw

    # no straggler, no overhead: linear
    lin = worker_rates(make_sync("full", None), MiniBatchTimeLaw(1.0, 0.0), 4)
    assert lin == pytest.approx((0.25, 0.5, 0.75, 1.0))
    # exponential mini-batches (eq. 14): throughput k / H_k; rate(1) = (1 / 1) / (4 / H_4) = H_4 / 4
    exp = worker_rates(make_sync("full", None), MiniBatchTimeLaw(1.0, 1.0), 4)
    h4 = 1 + 1 / 2 + 1 / 3 + 1 / 4
    assert exp[0] == pytest.approx(h4 / 4)
    assert exp[1] == pytest.approx((2 / 1.5) / (4 / h4))
    assert exp[-1] == 1.0


def test_hybrid_policy_rules() -> None:
    pol = HybridTopUp()
    base = dict(step=0, t=0.0, active=1, provisioned=4, max_workers=4, reference_workers=4, base_lr=1.0, lr=1.0, sync="full",
                deadline_s=4 * H, target_iterations=7200, step_s=1.0, restart_s=300.0, next_decision_s=600.0, spot_nodes=1)
    assert pol.decide(Observation(**base)) == []  # on the line (0 = ep(0)), 2 h of slack
    # rule 1: behind the line (100 s < ep(600) = 300 s) on 1 of 4 nodes (rate 1/4 < the line's 1/2): fill
    (d,) = pol.decide(Observation(**dict(base, t=600.0, step=100)))
    assert isinstance(d, TopUp) and d.on_demand == 4 and not d.keep
    # ... but 3 of 4 nodes progress faster than the line (3/4 > 1/2): they catch up alone
    assert pol.decide(Observation(**dict(base, t=600.0, step=100, spot_nodes=3))) == []
    # rule 3: topped up and ahead of ep(t + 2d) = ep(1200) = 600: release, if the spot nodes can train alone
    ahead = dict(base, t=600.0, step=700, on_demand_nodes=3)
    (d,) = pol.decide(Observation(**ahead))
    assert isinstance(d, TopUp) and d.on_demand == 0
    assert pol.decide(Observation(**dict(ahead, spot_nodes=0))) == []
    # rule 4: slack 1000 s < net 1200 s: top up and keep; once kept, nothing more
    late = dict(base, t=2 * H - 1000.0)
    (d,) = pol.decide(Observation(**late))
    assert isinstance(d, TopUp) and d.on_demand == 4 and d.keep
    assert pol.decide(Observation(**dict(late, on_demand_nodes=3, on_demand_kept=True))) == []


def _spec(tmp: Path, **cluster: object) -> Path:
    d = {"name": "multi", "workload": {"name": "mlp-digits", "family": "resnet50", "step_time_s": 9.6},
         "target": {"iterations": 3600}, "deadline": "16h",
         "cluster": {"instance_type": "p3.2xlarge", "workers": 1, "straggler": 0.3, "coordinator_instance": "c5.large", **cluster},
         "market": {"synthetic": {"kind": "constant", "price": 1.0}}}
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _sky(tmp: Path, data: list[int], nodes: int = 16) -> Path:
    folder = tmp / f"{nodes}-node" / "aws-08-27-2023"
    folder.mkdir(parents=True)
    for zone in ("us-east-1a", "us-east-1b"):
        (folder / f"{zone}_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": data}))
    return folder


def test_simulate_cli_asks_which_reading_then_sweeps_both(cli, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    data = [int(x) for x in rng.integers(0, 17, size=12 * 24 * 4)]  # 4 days of 5-minute counts
    trace = _sky(tmp_path, data)
    code, _, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(trace), "--starts", "12h", "--history", "1d",
                       "--spot-price", "0.92", "--no-plot", "--json")
    assert code == 2 and "min_workers" in err
    costs = {}
    for mw in (1, 16):
        spec = _spec(tmp_path, workers=16, min_workers=mw)
        code, out, err = cli("simulate", str(spec), "--trace", str(trace), "--starts", "12h", "--history", "1d",
                             "--spot-price", "0.92", "--no-plot", "--json", "--strategies", "spotwise-avail,hybrid")
        assert code == 0, err
        res = json.loads(out)
        costs[mw] = {s["strategy"]: s for s in res["strategies"]}
        assert all(s["deadline_met"] == 1.0 for s in res["strategies"])
    # a random count trace rarely gives all 16 nodes: the gang waits, the elastic job trains
    assert costs[1]["spotwise-avail"]["mean_cost"] < costs[16]["spotwise-avail"]["mean_cost"]


def test_spec_min_workers_is_validated(cli, tmp_path: Path) -> None:
    for bad in (0, 5):
        code, out, err = cli("plan", str(_spec(tmp_path, workers=4, min_workers=bad)))
        assert code == 2 and "min_workers" in err + out


def test_simulate_and_run_wait_below_min_workers(cli, tmp_path: Path) -> None:
    # The controller (simulate here; run shares it) on a 4-node count trace of 60 s ticks: 4 nodes
    # for 12 min, 2 for 12 min, then 4.  Elastic (min_workers 1) trains on the 2; a gang
    # (min_workers 4) waits for all 4 (its 2 stay held): at most the step in flight at 720 s commits.
    folder = tmp_path / "4-node" / "aws-08-03-2023"
    folder.mkdir(parents=True)
    data = [4] * 12 + [2] * 12 + [4] * 600
    (folder / "us-east-1a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": data,
                                                                 "prices": [0.9] * len(data)}))
    steps_in_gap = {}
    for mw in (1, 4):
        d = {"name": "mw", "workload": {"name": "mlp-digits", "family": "resnet50", "step_time_s": 9.6},
             "target": {"iterations": 2000},
             "cluster": {"instance_type": "p3.2xlarge", "workers": 4, "min_workers": mw, "straggler": 0,
                         "coordinator_instance": "c5.large"},
             "market": {"traces": [str(folder / "us-east-1a_v100_1.json")], "revocation": {"model": "trace"}}}
        spec = tmp_path / f"spec{mw}.yaml"
        spec.write_text(yaml.safe_dump(d))
        code, _, err = cli("simulate", str(spec), "--out", str(tmp_path / f"out{mw}"), "--json")
        assert code == 0, err
        events = [json.loads(line) for line in (tmp_path / f"out{mw}" / "events.jsonl").read_text().splitlines()]
        steps = [e for e in events if e["kind"] == "step"]
        assert len(steps) == 2000
        steps_in_gap[mw] = sum(1 for e in steps if 721.0 <= e["t"] < 1440.0)
        if mw == 4:
            assert any(e["kind"] == "idle" for e in events)
    assert steps_in_gap[4] == 0 and steps_in_gap[1] > 500


def test_availability_guard_partial_rules() -> None:
    from spotwise.policies.availability_guard import AvailabilityGuard
    from spotwise.policies.base import Migrate, PlaceQuote

    g = AvailabilityGuard()  # net 2 x 300 + 600 = 1200 s; on-demand threshold 1200 + 15 x 300 = 5700 s
    here = PlaceQuote("z-1a", "p3.2xlarge", 0.9, 1.0, True, "z-1", 3600.0, 0.5, 2)
    there = PlaceQuote("z-1b", "p3.2xlarge", 0.9, 1.0, True, "z-1", 7200.0, 0.9, 16)
    base = dict(step=0, t=0.0, active=2, provisioned=16, max_workers=16, reference_workers=16, base_lr=1.0, lr=1.0, sync="full",
                deadline_s=36 * H, target_iterations=24 * 3600, step_s=1.0, restart_s=300.0, next_decision_s=600.0,
                spot_nodes=2, place=("z-1a", "p3.2xlarge"), places=(here, there))
    # 2 of 16 nodes here (rate 1/8), 16 there: a gain of 7/8 >= 0.5 -- move (12 h of slack cover it)
    (d,) = g.decide(Observation(**base))
    assert isinstance(d, Migrate) and d.region == "z-1b"
    # nowhere better: spot only while the slack is above the threshold
    alone = dict(base, places=(here,))
    assert g.decide(Observation(**alone)) == []
    # slack 5000 s <= 5700 s: top up (spot replaces the on-demand nodes when it comes); 1000 s <= net: keep
    thin = dict(alone, t=12 * H - 5000.0)
    (d,) = g.decide(Observation(**thin))
    assert isinstance(d, TopUp) and d.on_demand == 16 and not d.keep
    (d,) = g.decide(Observation(**dict(alone, t=12 * H - 1000.0, on_demand_nodes=14)))
    assert isinstance(d, TopUp) and d.keep
    # topped up below the threshold and a zone with every node: leave the on-demand nodes, move
    ds = g.decide(Observation(**dict(base, t=12 * H - 5000.0, on_demand_nodes=14)))
    assert [type(x) for x in ds] == [TopUp, Migrate] and ds[0].on_demand == 0
    # below the net, kept: no move (it would cost a restart the slack cannot pay)
    assert g.decide(Observation(**dict(base, t=12 * H - 1000.0, on_demand_nodes=14, on_demand_kept=True))) == []


@pytest.mark.slow
@pytest.mark.parametrize("folder,n", [("availability/16-node/aws-08-27-2023", 16), ("preemption/4-node/aws-08-03-2023", 4)])
def test_no_strategy_below_the_lower_bound_on_skypilot_multi_node_sets(folder: str, n: int) -> None:
    from spotwise.market.traces import load_traces
    from spotwise.sim.sweep.places import build_places
    from spotwise.sim.sweep.engine import STRATEGIES, parse_strategies, sweep, window_starts

    path = TRACES / folder
    if not path.is_dir():
        pytest.skip(f"SkyPilot traces not found at {path}")
    places, _ = build_places(load_traces([str(path)]), Catalog.default(), "resnet50", "p3.2xlarge", ["p3.2xlarge"],
                             spot_price=0.918)
    strategies = parse_strategies([s for s in STRATEGIES if s != "no-interruptions"])  # that one ignores outages
    for mw in (1, n):
        j = SweepJob(24 * H, 36 * H, workers=n, min_workers=mw, restart_s=300.0, coordinator_per_hour=0.085, history_s=86400.0)
        starts = window_starts(places, j, 36 * H, warmup_s=86400.0)
        res = sweep(j, places, [p.key for p in places], strategies, starts, hindsight=True)
        assert res.rows
        for r in res.rows:
            assert r.free_cost is not None and r.restart_bound is not None and r.hindsight_cost is not None
            assert r.free_cost <= r.restart_bound + 1e-6 <= r.hindsight_cost + 2e-6
            if r.deadline_met:
                assert r.cost >= r.restart_bound - 1e-6, (mw, r.strategy, r.start, r.cost, r.restart_bound)


def test_a_pool_on_a_count_trace_needs_all_its_workers() -> None:
    from spotwise.sim.sweep.pools import PoolPlace, _up

    p = count_place([(T0, 3), (T0 + H, 4)], T0 + 20 * H, 16)
    pool = PoolPlace("a", p, 4, 1.0, OD)
    assert not _up(pool, T0) and _up(pool, T0 + H)  # 3 of the pool's 4 nodes is not the pool
    assert _up(PoolPlace("b", p, 2, 1.0, OD), T0)


def test_uniform_progress_nets_a_job_running_on_part_of_its_nodes() -> None:
    from spotwise.policies.base import SwitchMarket
    from spotwise.policies.deadline_guard import UniformProgress

    up = UniformProgress()  # net 2 x 300 + 600 = 1200 s
    base = dict(step=0, t=2 * H - 1000.0, active=2, provisioned=16, max_workers=16, reference_workers=16, base_lr=1.0, lr=1.0,
                sync="full", deadline_s=4 * H, target_iterations=7200, step_s=1.0, restart_s=300.0, next_decision_s=600.0,
                spot_nodes=2)
    # 2 of 16 nodes "running" with 1000 s of slack: the slack shrinks as if idle -- on-demand (rule 4)
    (d,) = up.decide(Observation(**base))
    assert isinstance(d, SwitchMarket) and d.market == "on-demand"
    assert up.decide(Observation(**dict(base, active=16, spot_nodes=16))) == []  # full width: exploitation
    assert up.decide(Observation(**dict(base, spot_nodes=None))) == []  # an executor without node counts: as before
