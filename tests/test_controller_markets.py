"""The controller acts on SwitchMarket and Migrate (issue 8): checkpoint, release, switch, restart.

Ray-free (LocalCompute, the job's real workers in this process).  A tiny scripted policy emits
the decisions at given steps; the ledger, the event log and the committed steps are checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from _specs import spec_with

from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.policies.base import Decision, Migrate, Observation, Policy, SwitchMarket
from spotwise.planes.ps.compute import LocalCompute
from spotwise.control.controller import JobController
from spotwise.assemble import build_controller
from spotwise.planes.ps.worker import worker_args_for
from spotwise.capacity.faults import ScriptedRevocation, outage
from spotwise.capacity.provider import EmulatedProvider

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "name": "markets",
    "seed": 4,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 24},
    "cluster": {"instance_type": "c5.xlarge", "workers": 3, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}, "min_charge_s": 0},
    "outputs": {"checkpoint_every": 0, "plots": False},
}
RESTART_S = 30.0
OD = 0.17  # c5.xlarge on-demand $/h in the packaged catalog


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """The control logic needs no Ray."""


class Scripted(Policy):
    """Emits ``script[step]`` after that step commits; records every observation (for the test)."""

    name: ClassVar[str] = "scripted"

    def __init__(self, script: dict[int, Decision]) -> None:
        self.script = script
        self.seen: list[Observation] = []

    def decide(self, obs: Observation) -> list[Decision]:
        self.seen.append(obs)
        d = self.script.get(obs.step)
        return [] if d is None else [d]


def run(tmp_path: Path, script: dict[int, Decision], provider_cls: type[EmulatedProvider] = EmulatedProvider,
        revocation: Any = None, **over: Any) -> tuple[JobController, Scripted, list[dict[str, Any]]]:
    spec = spec_with(BASE, **over)
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        import dataclasses

        market = dataclasses.replace(market, revocation=revocation)
    compute = LocalCompute(worker_args_for(spec))
    provider = provider_cls(market.revocation, spec.cluster.workers, market.horizon_s, spec.seed, compute=compute)
    coord = build_controller(spec, tmp_path / "run", market=market, provider=provider, compute=compute, restart_s=RESTART_S)
    policy = Scripted(script)
    coord.policies = [policy]
    summary = coord.run()
    assert summary.status == "completed" and summary.steps == spec.target.iterations
    events = read_events(tmp_path / "run" / "events.jsonl")
    steps = [e["step"] for e in events if e["kind"] == "step"]
    assert steps == list(range(1, spec.target.iterations + 1)), "no committed step is lost or repeated"
    return coord, policy, events


def test_switch_to_on_demand_and_back(tmp_path: Path) -> None:
    # spot capacity of worker 2 goes away for a while: on-demand must not be revoked meanwhile
    rev = ScriptedRevocation((outage(2.0, 10_000.0, [2]),))
    coord, policy, events = run(tmp_path, {5: SwitchMarket(reason="deadline", market="on-demand"),
                                           15: SwitchMarket(reason="cheap again", market="spot")}, revocation=rev)
    switches = [e for e in events if e["kind"] == "market_switch"]
    assert [(e["from"], e["to"]) for e in switches] == [("spot", "on-demand"), ("on-demand", "spot")]
    decisions = [e for e in events if e["kind"] == "decision"]
    assert len(decisions) == 2 and all(e["acted"] for e in decisions)
    on, off = switches
    for sw in switches:
        assert sw["t"] - sw["start"] == pytest.approx(RESTART_S) and sw["restart_s"] == pytest.approx(RESTART_S)
        assert not [e for e in events if e["kind"] == "step" and sw["start"] < e["t"] < sw["t"]], \
            "no progress during the restart"
        assert sw["cost"] > 0
    # billing: on-demand intervals at the on-demand price, from the switch (restart included) to the switch back
    ivs = coord.ledger.to_dict()["intervals"]
    od = [iv for iv in ivs if iv["market"] == "on_demand" and iv["category"] == "worker"]
    assert len(od) == 3, "all three slots run on on-demand capacity (the revoked spot slot too)"
    for iv in od:
        assert iv["start"] == pytest.approx(on["start"]) and iv["stop"] == pytest.approx(off["start"])
        assert iv["usd"] == pytest.approx(coord.ledger.on_demand_policy.charge(OD, iv["start"], iv["stop"]))
        assert OD * (iv["stop"] - iv["start"]) / 3600.0 <= iv["usd"] <= OD * (iv["stop"] - iv["start"] + 1) / 3600.0
    assert [iv["reason"] for iv in od] == ["released"] * 3
    by_market = coord.ledger.breakdown()["by_market"]
    assert by_market["on_demand"] == pytest.approx(sum(iv["usd"] for iv in od) + coord.ledger.breakdown()["by_category"]["coordinator"])
    # the restart window is billed: the new workers' intervals start at the switch, they join at its end
    joins = [e for e in events if e["kind"] == "join" and e["t"] == pytest.approx(on["t"])]
    assert len(joins) == 3
    # back on spot: the spot model holds again (slot 2 is still out) and spot billing resumes
    spot_after = [iv for iv in ivs if iv["market"] == "spot" and iv["category"] == "worker" and iv["start"] >= off["start"]]
    assert sorted(iv["instance_id"] for iv in spot_after) == ["worker-0", "worker-1"]
    # what the policy saw
    markets = [o.market for o in policy.seen]
    assert markets[:5] == ["spot"] * 5 and markets[5:15] == ["on-demand"] * 10 and markets[15:] == ["spot"] * 9
    assert all(o.restart_s == RESTART_S and o.on_demand_price == OD and o.step_s and o.step_s > 0 for o in policy.seen)
    assert policy.seen[0].place == ("", "c5.xlarge")
    assert coord.counters.restarts == 2 and coord.counters.restart_s == pytest.approx(2 * RESTART_S)
    # a checkpoint precedes each switch
    for sw in switches:
        i = events.index(sw)
        assert any(e["kind"] == "checkpoint" and e["why"] == "market-switch" for e in events[:i])


def test_migrate_to_another_instance_type(tmp_path: Path) -> None:
    """No synthetic market: each instance's price is its catalog price, so the place decides it."""
    coord, policy, events = run(tmp_path, {6: Migrate(reason="faster per dollar", instance_type="c5.2xlarge")},
                                market={"min_charge_s": 0})
    mig = [e for e in events if e["kind"] == "migrate"]
    assert len(mig) == 1 and mig[0]["from"] == ["", "c5.xlarge"] and mig[0]["to"] == ["", "c5.2xlarge"]
    assert mig[0]["t"] - mig[0]["start"] == pytest.approx(RESTART_S) and mig[0]["cost"] > 0
    assert [e["acted"] for e in events if e["kind"] == "decision"] == [True]
    workers = [iv for iv in coord.ledger.to_dict()["intervals"] if iv["category"] == "worker"]
    old = [iv for iv in workers if iv["instance_type"] == "c5.xlarge"]
    new = [iv for iv in workers if iv["instance_type"] == "c5.2xlarge"]
    assert len(old) == 3 and len(new) == 3 and len(workers) == 6
    assert all(iv["stop"] == pytest.approx(mig[0]["start"]) and iv["reason"] == "released" for iv in old)
    assert all(iv["start"] == pytest.approx(mig[0]["start"]) for iv in new), "billed from the restart's start"
    assert all(iv["price_per_hour"]["mean_per_hour"] == pytest.approx(0.34) for iv in new)
    assert coord.market.instance.name == "c5.2xlarge"
    before, after = policy.seen[5], policy.seen[6]
    assert after.place == ("", "c5.2xlarge") and after.on_demand_price == 0.34
    assert after.step_s < before.step_s, "twice the throughput: shorter steps"
    durations = [e["duration"] for e in events if e["kind"] == "step"]
    assert sum(durations[8:]) / len(durations[8:]) < sum(durations[:5]) / 5


class NoMarkets(EmulatedProvider):
    """A provider that can neither switch markets nor move (like a real cluster)."""

    @property
    def supports_markets(self) -> bool:
        return False

    @property
    def supports_migration(self) -> bool:
        return False


def test_unsupported_decisions_are_logged_not_acted(tmp_path: Path) -> None:
    coord, _, events = run(tmp_path, {3: SwitchMarket(reason="r", market="on-demand"),
                                      4: Migrate(reason="r", instance_type="c5.2xlarge")}, provider_cls=NoMarkets)
    decisions = [e for e in events if e["kind"] == "decision"]
    assert [e["acted"] for e in decisions] == [False, False]
    assert all(e["not_acted"] for e in decisions)
    assert not [e for e in events if e["kind"] in ("market_switch", "migrate")]
    assert set(coord.ledger.breakdown()["by_market"]) == {"spot", "on_demand"}  # on_demand: the coordinator only
    assert not [iv for iv in coord.ledger.to_dict()["intervals"] if iv["category"] == "worker" and iv["market"] != "spot"]


def test_migrate_to_an_unknown_place_is_not_acted(tmp_path: Path) -> None:
    _, _, events = run(tmp_path, {3: Migrate(reason="r", instance_type="no-such-instance")})
    (d,) = [e for e in events if e["kind"] == "decision"]
    assert d["acted"] is False and "no-such-instance" in d["not_acted"]
    assert not [e for e in events if e["kind"] == "migrate"]


def test_a_resumed_run_stays_on_its_market_and_place(tmp_path: Path) -> None:
    """Stopped after a switch to on-demand and a migration, the resumed run continues there."""
    spec = spec_with(BASE, market={"min_charge_s": 0}, target__iterations=16)
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    out = tmp_path / "run"
    script = {3: SwitchMarket(reason="r", market="on-demand"), 5: Migrate(reason="r", instance_type="c5.2xlarge")}

    def coordinator(resume: bool, stop: int | None) -> tuple[JobController, Scripted]:
        compute = LocalCompute(worker_args_for(spec))
        provider = EmulatedProvider(market.revocation, spec.cluster.workers, market.horizon_s, spec.seed, compute=compute)
        coord = build_controller(spec, out, market=market, provider=provider, compute=compute, restart_s=RESTART_S,
                              resume=resume, stop_after_steps=stop)
        policy = Scripted(script if not resume else {})
        coord.policies = [policy]
        return coord, policy

    first, _ = coordinator(False, 8)
    assert first.run().status == "stopped"
    again, policy = coordinator(True, None)
    assert again.market.instance.name == "c5.2xlarge" and again.worker_market == "on_demand"
    summary = again.run()
    assert summary.status == "completed" and summary.steps == 16
    assert {o.market for o in policy.seen} == {"on-demand"} and {o.place for o in policy.seen} == {("", "c5.2xlarge")}
    ivs = again.ledger.to_dict()["intervals"]
    workers = [iv for iv in ivs if iv["category"] == "worker"]
    assert workers and all(iv["market"] == "on_demand" and iv["instance_type"] == "c5.2xlarge" for iv in workers), \
        "the open on-demand intervals were reopened, not restarted on spot"
    steps = [e["step"] for e in read_events(out / "events.jsonl") if e["kind"] == "step"]
    assert steps == list(range(1, 17))
