"""Run honesty (issue 7): what a run reports must be what happened.

* item 6 -- a resumed run is billed exactly like the uninterrupted run of the same virtual
  timeline (no new minimum charge, no restarted billing hour);
* item 8 -- every provider revocation is announced by its notice, ``notice_s`` before the
  revocation (or when the capacity was granted, if that is later), and events of one instant are
  ordered ``available < notice < revoke``;
* item 9 -- an unfinished run never meets its deadline;
* item 17 -- a run that cannot commit a step is stopped (runtime detection), and a spec whose
  workers cannot outlive a step is refused up front; both are input errors (CLI exit 2).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _specs import spec_with
import yaml

from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.events import read_events, read_summary
from spotwise.market.preemption import BidRevocation, ExponentialLifetime, MarketEvent
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.control.controller import JobController
from spotwise.assemble import build_controller
from spotwise.planes.ps.worker import worker_args_for
from spotwise.capacity.faults import ScriptedRevocation, outage
from spotwise.capacity.provider import EmulatedProvider

pytestmark = pytest.mark.timeout(240)

BASE: dict[str, Any] = {
    "name": "honesty",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 20},
    "cluster": {"instance_type": "c5.xlarge", "workers": 3, "coordinator_instance": "c5.large", "standby": 2},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 5, "plots": False},
}


def make_spec(**over: Any):
    return spec_with(BASE, **over)


def coordinator(spec, out: Path, revocation=None, horizon_s: float = 7 * 24 * 3600.0, **kw: Any) -> JobController:
    """The run's controller with in-process workers (LocalCompute: the same GradientWorker the Ray
    actors run, no Ray): what these items test is time, money and the run directory."""
    market = build_market(spec, horizon_s=horizon_s)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    kw.setdefault("compute", LocalCompute(worker_args_for(spec)))
    return build_controller(spec, out, market=market, **kw)


def run(spec, out: Path, revocation=None, horizon_s: float = 7 * 24 * 3600.0, **kw: Any):
    coord = coordinator(spec, out, revocation, horizon_s, **kw)
    return coord, coord.run()


def assert_same_costs(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["total"] == pytest.approx(b["total"], rel=1e-9, abs=1e-15)
    for key in ("by_category", "by_market", "by_instance"):
        assert set(a[key]) == set(b[key]), key
        for k in a[key]:
            assert a[key][k] == pytest.approx(b[key][k], rel=1e-9, abs=1e-15), (key, k)


# ---------------------------------------------------------------------------------- item 6
@pytest.mark.parametrize("billing", ["per-second", "per-hour"])
def test_item6_resumed_ledger_equals_uninterrupted(tmp_path: Path, billing: str) -> None:
    """Stop at step 7 (final checkpoint), resume to 20: billed like the run that never stopped.

    Worker 1 is revoked at t=2 s and back at t=6 s, so the checkpoint holds a closed worker
    interval (carried as money) and open ones (continued from their original start); a 20-step
    job lasts well under the 60 s minimum charge and the billing hour, so any restarted interval
    would show.
    """
    spec = make_spec(market__billing=billing)
    rev = ScriptedRevocation((outage(2.0, 6.0, [1]),))
    _, full = run(spec, tmp_path / "full", revocation=rev)
    assert full.status == "completed" and full.steps == 20

    part = tmp_path / "part"
    _, first = run(spec, part, revocation=rev, stop_after_steps=7)
    assert first.status == "stopped" and first.steps == 7
    _, resumed = run(spec, part, revocation=rev, resume=True)
    assert resumed.status == "completed" and resumed.steps == 20
    assert resumed.virtual_s == pytest.approx(full.virtual_s, rel=1e-12), "the same virtual timeline"
    assert resumed.cost_usd == pytest.approx(full.cost_usd, rel=1e-9)
    assert_same_costs(resumed.cost_breakdown, full.cost_breakdown)
    assert resumed.joins == full.joins, "continuing a worker across a resume is not a new join"
    # the checkpoint-time running cost the stopped run reported is what the full run had then
    assert first.cost_usd <= full.cost_usd + 1e-12


@pytest.mark.parametrize("policy", ["per-second", "per-hour"])
def test_item6_ledger_snapshot_and_reopen_continue_billing(policy: str) -> None:
    """Ledger level: settle at T, reopen the open intervals elsewhere, stop later == never interrupted."""
    from spotwise.market.billing import BillingPolicy, Ledger

    pol = BillingPolicy.per_second(minimum_s=60) if policy == "per-second" else BillingPolicy.per_hour()
    prices = _flipping_prices()

    def story(led: Ledger, t_from: float, t_to: float) -> None:
        for t, what, iid in ((0.0, "start", "c"), (0.0, "start", "w0"), (0.0, "start", "w1"), (12.0, "stop", "w1"),
                             (15.0, "start", "w1"), (41.0, "stop", "w0")):
            if t_from <= t < t_to:
                if what == "start":
                    led.start(iid, t, 0.1 if iid == "c" else prices, category="coordinator" if iid == "c" else "worker",
                              market="on_demand" if iid == "c" else "spot")
                else:
                    led.stop(iid, t, reason="revoked")

    whole = Ledger(pol)
    story(whole, 0.0, 100.0)
    whole.close(50.0)

    first = Ledger(pol)
    story(first, 0.0, 20.0)
    snap = first.snapshot(20.0)
    assert sorted(e["instance_id"] for e in snap["open"]) == ["c", "w0", "w1"]
    second = Ledger(pol)
    for e in snap["open"]:
        second.reopen(e, 0.1 if e["instance_id"] == "c" else prices)
    story(second, 20.0, 100.0)
    second.close(50.0)
    resumed_total = snap["settled"]["total"] + second.total()
    assert resumed_total == pytest.approx(whole.total(), rel=1e-12)
    by_inst = dict(snap["settled"]["by_instance"])
    for k, v in second.breakdown()["by_instance"].items():
        by_inst[k] = by_inst.get(k, 0.0) + v
    for k, v in whole.breakdown()["by_instance"].items():
        assert by_inst[k] == pytest.approx(v, rel=1e-12), k


def test_item6_resume_of_a_finished_run_costs_nothing_more(tmp_path: Path) -> None:
    """Resuming a completed run (final checkpoint) is a no-op, also for the bill."""
    spec = make_spec(target__iterations=6)
    out = tmp_path / "run"
    _, done = run(spec, out)
    _, again = run(spec, out, resume=True)
    assert again.steps == done.steps == 6
    assert again.cost_usd == pytest.approx(done.cost_usd, rel=1e-9)
    assert_same_costs(again.cost_breakdown, done.cost_breakdown)


# ---------------------------------------------------------------------------------- item 8
_RANK = {"available": 0, "notice": 1, "revoke": 2}


def _flipping_prices(period: float = 5.0, n: int = 400, seed: int = 4) -> StepSeries:
    rng = np.random.default_rng(seed)
    vals = np.where(rng.random(n) < 0.5, 0.05, 0.10)
    meta = SeriesMeta(id="test:flip", kind="price", instance="c5.xlarge", source="test")
    return StepSeries(np.arange(n) * period, vals, n * period, meta)


def _check_provider_timeline(evs: list[MarketEvent], notice_s: float) -> int:
    """Per worker: available, notice, revoke alternate; notice at max(revoke - notice_s, available)."""
    up_since: dict[int, float] = {}
    noticed: dict[int, float] = {}
    capped = 0
    for ev in evs:
        w = ev.worker
        if ev.kind == "available":
            assert w not in up_since, f"worker {w} available twice"
            up_since[w] = ev.t
        elif ev.kind == "notice":
            assert w in up_since and w not in noticed, f"notice for worker {w} that is not up or already noticed"
            noticed[w] = ev.t
        else:
            assert w in noticed, f"worker {w} revoked at t={ev.t} without a notice"
            expected = max(ev.t - notice_s, up_since[w])
            assert noticed[w] == pytest.approx(expected, abs=1e-9)
            assert ev.t - noticed[w] <= notice_s + 1e-9, "a notice is never earlier than the provider's notice time"
            capped += noticed[w] > ev.t - notice_s + 1e-9
            del up_since[w], noticed[w]
    return capped


@pytest.mark.parametrize("notice_s", [0.0, 7.0])
def test_item8_provider_delivers_every_notice_in_causal_order(notice_s: float) -> None:
    """Bid market: the provider's queue yields available < notice < revoke, no notice swallowed.

    Prices flip every 5 s, the notice is 7 s, so many runs above the bid are shorter than the
    notice (the notice is capped at the moment capacity was granted -- the same instant as the
    ``available`` event, after it) and some start at t = 0 (the initial state must not eat them).
    """
    prices = _flipping_prices()
    model = BidRevocation(prices, 0.07, notice_s=notice_s)
    prov = EmulatedProvider(model, 3, 2000.0, seed=1)
    initial = prov.available_at_start()
    evs = [MarketEvent(0.0, w, "available") for w in sorted(initial)]
    order: list[MarketEvent] = []
    while prov.peek_time() is not None:
        order.append(prov.pop_event())
    evs += order
    capped = _check_provider_timeline(evs, notice_s)
    if notice_s > 0:
        assert capped > 0, "the test market has runs shorter than the notice"
    for a, b in zip(order, order[1:]):
        if a.t == b.t:
            assert _RANK[a.kind] <= _RANK[b.kind], f"{a} before {b}"
    for ev in order:
        if ev.kind == "notice":
            assert ev.revoke_at is not None and ev.revoke_at >= ev.t


def test_item8_zero_delay_replacement_stays_causal() -> None:
    """A replacement at the revocation instant (mttr 0) comes after the revocation it replaces."""
    model = ExponentialLifetime(mttf_s=50.0, mttr_s=0.0, notice_s=10.0)
    prov = EmulatedProvider(model, 2, 1000.0, seed=2)
    evs = [MarketEvent(0.0, w, "available") for w in sorted(prov.available_at_start())]
    while prov.peek_time() is not None:
        evs.append(prov.pop_event())
    _check_provider_timeline(evs, 10.0)
    assert sum(ev.kind == "revoke" for ev in evs) > 5


def test_item8_bid_market_run_acts_on_every_notice(tmp_path: Path) -> None:
    """In a run, every market revocation in events.jsonl follows its notice by notice_s (or the cap)."""
    notice_s = 7.0
    spec = make_spec(**{"target__iterations": 15, "cluster__workers": 2, "cluster__bids": 0.07,
                        "cluster__sync_overhead_s": 0.0, "outputs__checkpoint_every": 0,
                        "market__revocation": {"model": "bid", "notice_s": notice_s}})
    out = tmp_path / "run"
    prices = _flipping_prices()
    _, summary = run(spec, out, revocation=BidRevocation(prices, 0.07, notice_s=notice_s))
    assert summary.steps == 15
    ev = [e for e in read_events(out / "events.jsonl") if e["kind"] in ("join", "notice", "revoke")]
    joined: dict[int, float] = {}
    noticed: dict[int, dict[str, Any]] = {}
    revokes = capped = 0
    for e in ev:
        w = e["worker"]
        if e["kind"] == "join":
            joined[w] = e["t"]
            noticed.pop(w, None)
        elif e["kind"] == "notice":
            assert w in joined and w not in noticed
            noticed[w] = e
        elif e["reason"] == "market":
            revokes += 1
            assert w in noticed, f"worker {w} revoked at t={e['t']} without a notice"
            n = noticed.pop(w)
            assert n["t"] == pytest.approx(max(e["t"] - notice_s, joined[w]), abs=1e-9)
            assert n["revoke_at"] == pytest.approx(e["t"], abs=1e-9), "the notice says when the revocation comes"
            capped += n["t"] > e["t"] - notice_s + 1e-9
    assert revokes >= 2 and capped >= 1
    rank = {"join": 0, "notice": 1, "revoke": 2}
    for a, b in zip(ev, ev[1:]):
        if a["t"] == b["t"]:
            assert rank[a["kind"]] <= rank[b["kind"]], f"{a} logged before {b}"
    assert summary.extra["notices"] >= revokes


# ---------------------------------------------------------------------------------- item 9
def test_item9_unfinished_run_does_not_meet_deadline(tmp_path: Path) -> None:
    """A run that stops at no-capacity with steps to go has not met its deadline, however early it stopped."""
    spec = make_spec(**{"target__iterations": 1000, "deadline": 3600.0, "cluster__workers": 2})
    rev = ScriptedRevocation((outage(4.0, 1e9, [0, 1]),))
    out = tmp_path / "run"
    _, s = run(spec, out, revocation=rev, horizon_s=600.0)
    assert s.status == "no-capacity" and s.steps < 1000
    assert s.virtual_s <= 3600.0
    assert s.extra["deadline_met"] is False
    assert read_summary(out).extra["deadline_met"] is False

    _, ok = run(make_spec(**{"target__iterations": 4, "deadline": 3600.0}), tmp_path / "ok")
    assert ok.status == "completed" and ok.extra["deadline_met"] is True


# ---------------------------------------------------------------------------------- item 17
def test_item17_runtime_no_progress_is_stopped(tmp_path: Path) -> None:
    """Capacity for 10 ms of every second, steps of ~1 s: no round can ever commit -> stopped, exit-2 error."""
    spec = make_spec(**{"cluster__workers": 1, "cluster__standby": 1, "target__iterations": 10})
    rev = ScriptedRevocation(tuple(outage(k + 0.01, k + 1.0, [0]) for k in range(400)))
    out = tmp_path / "run"
    coord = coordinator(spec, out, revocation=rev, horizon_s=400.0)
    coord.no_progress_attempts = 8
    with pytest.raises(InputError) as err:
        coord.run()
    msg = str(err.value)
    assert "no step committed" in msg and " -- " in msg, "says what happened and how to fix it"
    s = read_summary(out)
    assert s.status == "no-progress" and s.steps == 0
    assert s.extra["deadline_met"] in (None, False)
    assert s.extra.get("stop_message")
    assert s.virtual_s < 40.0, "stopped after a few attempts, not at the horizon"
    ends = read_events(out / "events.jsonl", kinds=["end"])
    assert ends and ends[-1]["status"] == "no-progress"


def test_item17_stuck_run_on_the_cli_exits_2_with_its_summary_and_report(ray_session, tmp_path: Path, cli,
                                                                          monkeypatch) -> None:
    """The CLI edge of a stuck run: exit 2, the one JSON object is the run's summary, the report is written."""
    import json

    import spotwise.control.runner as runner

    real_build = runner.build_market

    def stuck_market(spec):  # capacity for 10 ms of every second, steps of ~1 s
        rev = ScriptedRevocation(tuple(outage(k + 0.01, k + 1.0, [0]) for k in range(400)))
        return dataclasses.replace(real_build(spec, horizon_s=400.0), revocation=rev)

    monkeypatch.setattr(runner, "build_market", stuck_market)
    monkeypatch.setattr(runner.JobController, "no_progress_attempts", 6)  # each attempt starts a new actor
    d = copy.deepcopy(BASE)
    d["cluster"].update(workers=1, standby=1)
    d["outputs"]["plots"] = True
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(d))
    out = tmp_path / "run"
    code, stdout, stderr = cli("run", str(path), "--out", str(out), "--json")
    assert code == 2, stderr
    assert "no step committed" in stderr and "internal error" not in stderr
    assert json.loads(stdout)["status"] == "no-progress"
    assert (out / "report" / "index.html").is_file()


def test_item17_hopeless_lifetime_refused_up_front(ray_session, tmp_path: Path, cli) -> None:
    """mttf_s: 1e-9 with ~1 s steps: refused before any worker starts, CLI exit 2 naming mttf_s."""
    d = copy.deepcopy(BASE)
    d["market"]["revocation"] = {"model": "lifetime", "mttf_s": 1e-9}
    spec = spec_from_dict(d)
    with pytest.raises(InputError) as err:
        coordinator(spec, tmp_path / "direct")
    assert "mttf_s" in str(err.value)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(d))
    code, stdout, stderr = cli("run", str(path), "--out", str(tmp_path / "cli"), "--json")
    assert code == 2, stderr
    assert "mttf_s" in stderr
    # a lifetime comfortably above a step is accepted (the check does not refuse volatile markets)
    d["market"]["revocation"] = {"model": "lifetime", "mttf_s": 5.0}
    from spotwise.control.progress import check_progress_possible

    ok = spec_from_dict(d)
    check_progress_possible(ok, build_market(ok))
