"""Elastic runtime on Ray: equivalence, sync modes, membership changes and fault injection.

Every run here is bounded in time (pytest-timeout) and asserts that all target steps are
committed, that the committed step counter only moves forward (except back to the last checkpoint
after a coordinator kill), and that nothing is left hanging.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from _specs import single_process_sgd, spec_with

from spotwise.events import read_events, read_summary
from spotwise.market.world import build_market
from spotwise.assemble import build_controller
from spotwise.capacity.faults import ScriptedRevocation, outage, random_outages
from spotwise.control.sampler import EpochSampler
from spotwise.policies.base import Decision, Observation, Policy, SwitchSync
from _load import bound

pytestmark = pytest.mark.timeout(240)

BASE: dict[str, Any] = {
    "name": "t",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 30},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large", "standby": 2},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 10, "plots": False},
}


def make_spec(**over: Any):
    return spec_with(BASE, **over)


def run(spec, out: Path, revocation=None, **kw):
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    coord = build_controller(spec, out, market=market, **kw)
    return coord, coord.run()


def steps_of(out: Path) -> list[int]:
    return [e["step"] for e in read_events(out / "events.jsonl", kinds=["step"])]


def assert_steps_monotone(out: Path, target: int) -> None:
    steps = steps_of(out)
    assert steps == list(range(1, target + 1)), "every step committed exactly once, in order"


# ---------------------------------------------------------------------------------- sampler
def test_sampler_every_sample_once_per_epoch_despite_releases() -> None:
    rng = np.random.default_rng(0)
    s = EpochSampler(103, seed=1)
    committed: dict[int, list[int]] = {}
    while s.epoch < 3:
        blocks = [b for b in (s.reserve(int(rng.integers(1, 12))) for _ in range(int(rng.integers(1, 5)))) if b is not None]
        for b in blocks:
            if rng.random() < 0.35:
                s.release(b)  # revoked / cancelled / aborted
            else:
                committed.setdefault(b.epoch, []).extend(b.indices.tolist())
                s.commit(b)
    for epoch in (0, 1, 2):
        assert sorted(committed[epoch]) == list(range(103)), f"epoch {epoch} lost or repeated samples"


def test_sampler_state_round_trip() -> None:
    s = EpochSampler(50, seed=2)
    a, b = s.reserve(7), s.reserve(9)
    assert a is not None and b is not None
    s.commit(a)
    s2 = EpochSampler.from_state(s.state())  # b is in flight: a checkpoint counts it as released
    out1 = [s2.reserve(10).indices.tolist() for _ in range(3)]  # type: ignore[union-attr]
    s.release(b)
    out2 = [s.reserve(10).indices.tolist() for _ in range(3)]  # type: ignore[union-attr]
    assert out1 == out2


# ---------------------------------------------------------------------------------- numerics
def test_full_sync_equals_single_process_sgd(ray_session, tmp_path: Path) -> None:
    """Fully-synchronous, fixed seed, no revocations == plain SGD on the same global batch (1e-5)."""
    spec = make_spec(target__iterations=25, cluster__workers=2, workload__batch_size=8, cluster__standby=0)
    coord, summary = run(spec, tmp_path / "run")
    assert summary.steps == 25 and summary.status == "completed"

    assert np.max(np.abs(coord.params - single_process_sgd(spec, 25, 2 * 8))) < 1e-5


@dataclasses.dataclass(frozen=True)
class SyncPlan(Policy):
    """From each listed (virtual) time on, the listed sync mode and N: the revocations' clock."""
    name: ClassVar[str] = "sync-plan"
    plan: tuple[tuple[float, str, int | None], ...] = ()

    def decide(self, obs: Observation) -> list[Decision]:
        want = [(sync, n) for at, sync, n in self.plan if obs.t >= at]
        if not want or (obs.sync, obs.sync_n) == want[-1]:
            return []
        return [SwitchSync(reason=f"test: {want[-1][0]} from t={obs.t:.0f}", sync=want[-1][0], sync_n=want[-1][1])]


#: one run takes the three modes through revocations: N-sync (3) through two workers lost at once, then
#: N-batch (4) and async through one each (the modes share the membership path; each through the
#: whole pattern in a run of its own: the extended tier)
SWITCHED = ("n-sync", 3, ((30.0, "n-batch", 4), (50.0, "async", None)))


@pytest.mark.parametrize(("sync", "n", "plan"), [pytest.param(*SWITCHED, id="n-sync>n-batch>async")] + [
    pytest.param(sync, n, (), marks=pytest.mark.extended, id=f"{sync}-{n}" if n else sync)  # covered by SWITCHED
    for sync, n in (("n-sync", 3), ("n-batch", 4), ("async", None))])
def test_other_sync_modes_learn_through_revocations(ray_session, tmp_path: Path, sync: str, n: int | None,
                                                    plan: tuple) -> None:
    # no standby spares: the joiners start on demand (spares are test_many_at_once's and the chaos runs')
    over: dict[str, Any] = {"cluster__sync": sync, "target__iterations": 120, "cluster__workers": 4, "cluster__standby": 0}
    if n is not None:
        over["cluster__sync_n"] = n
    spec = make_spec(**over)
    if plan:
        rev = ScriptedRevocation((outage(5, 15, [0, 1]), outage(35, 41, [2]), outage(55, 61, [3])))
    else:
        rev = ScriptedRevocation((outage(5, 15, [0, 1]), outage(18, 26, [2])))
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    coord = build_controller(spec, tmp_path / "run", market=dataclasses.replace(market, revocation=rev))
    if plan:
        coord.policies.append(SyncPlan(plan=plan))
    summary = coord.run()
    assert summary.steps == 120 and summary.revocations == (4 if plan else 3)
    assert_steps_monotone(tmp_path / "run", 120)
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    losses = [e["loss"] for e in steps]
    assert np.mean(losses[-20:]) < 0.6 * np.mean(losses[:10]), "training makes progress"
    if sync == "async" or plan:
        assert all(e["contributions"] == 1 for e in steps if e["sync"] == "async")
    if plan:  # every mode ran, and each one with a worker short
        short = {e["sync"] for e in steps if e["active"] < 4}
        assert short == {e["sync"] for e in steps} == {"n-sync", "n-batch", "async"}, short


# ---------------------------------------------------------------------------------- faults
@pytest.mark.slow
def test_many_at_once_then_all_workers(ray_session, tmp_path: Path) -> None:
    """Most workers at once, later the whole cluster: idle, then resume in place (3 workers: 2 at
    once, then all 3 -- the same paths as 8, with a third of the actor starts)."""
    spec = make_spec(**{"cluster__workers": 3, "cluster__standby": 1, "target__iterations": 60})
    rev = ScriptedRevocation((outage(10, 30, range(2)), outage(40, 70, range(3))))
    coord, summary = run(spec, tmp_path / "run", revocation=rev)
    out = tmp_path / "run"
    assert summary.steps == 60 and summary.status == "completed"
    assert_steps_monotone(out, 60)
    ev = read_events(out / "events.jsonl")
    assert sum(e["kind"] == "revoke" for e in ev) == 2 + 3
    idle = [e for e in ev if e["kind"] == "idle"]
    assert idle and idle[0]["start"] == pytest.approx(40, abs=3) and idle[0]["duration"] > 20
    assert idle[0]["t"] == pytest.approx(idle[0]["start"] + idle[0]["duration"])
    steps = [e for e in ev if e["kind"] == "step"]
    assert any(e["lost"] > 0 and e["contributions"] < 3 for e in steps), \
        "a step whose workers were revoked mid-way completes with the survivors' whole gradients"
    assert summary.extra["aborted_steps"] >= 1, "a step none of whose workers survived is aborted and retried"
    # killed actors are really gone, joiners are new processes
    assert coord.compute.killed >= 5  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.extended  # random revocations, several at once, every step committed once: test_bernoulli_chaos_example
def test_random_revocations_chaos(ray_session, tmp_path: Path) -> None:
    spec = make_spec(**{"cluster__workers": 3, "target__iterations": 50, "cluster__standby": 1})
    rev = ScriptedRevocation(random_outages(3, horizon=75, count=4, seed=5, fraction=0.5, duration=(2, 20)))  # 2 at once
    coord, summary = run(spec, tmp_path / "run", revocation=rev)  # a hang is pytest-timeout's
    assert summary.steps == 50
    assert_steps_monotone(tmp_path / "run", 50)
    assert summary.revocations > 3


@pytest.mark.slow
def test_bernoulli_chaos_example(ray_session, tmp_path: Path) -> None:
    """examples/chaos.yaml semantics: Bernoulli revocations per iteration, several at once."""
    spec = make_spec(**{"cluster__workers": 4, "target__iterations": 20, "cluster__standby": 1,
                        "market__revocation": {"model": "bernoulli", "q": 0.1, "rejoin_p": 0.15, "notice_s": 0}})
    coord, summary = run(spec, tmp_path / "run")
    assert summary.steps == 20
    assert_steps_monotone(tmp_path / "run", 20)
    assert summary.revocations > 5
    ev = read_events(tmp_path / "run" / "events.jsonl")
    revoke_times = [e["t"] for e in ev if e["kind"] == "revoke"]
    assert max(revoke_times.count(t) for t in set(revoke_times)) >= 2, "several revocations at the same instant"


def test_growth_policy_resizes(ray_session, tmp_path: Path) -> None:
    spec = make_spec(**{"cluster__workers": 2, "cluster__max_workers": 4, "target__iterations": 25, "cluster__standby": 0,
                        "policies": [{"name": "exp-growth", "params": {"eta": 1.2, "n1": 2}}, {"name": "lr-scaling"}]})
    coord, summary = run(spec, tmp_path / "run")
    assert summary.steps == 25
    actives = [e["active"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["step"])]
    assert actives[0] == 2 and actives[-1] == 4 and len(set(actives)) >= 2 and actives == sorted(actives)


def test_ledger_and_summary(ray_session, tmp_path: Path) -> None:
    spec = make_spec(**{"cluster__workers": 2, "target__iterations": 10, "market__min_charge_s": 0, "cluster__standby": 0})
    coord, summary = run(spec, tmp_path / "run")
    s = read_summary(tmp_path / "run")
    assert s.steps == 10
    # two workers at 0.07 $/h and a c5.large coordinator (on-demand) for the whole virtual time,
    # each billed per started second
    T = math.ceil(s.virtual_s)
    od = coord.market.coordinator.on_demand_per_hour
    assert s.cost_usd == pytest.approx((2 * 0.07 + od) * T / 3600, rel=1e-6)
    assert s.cost_breakdown["by_category"]["coordinator"] == pytest.approx(od * T / 3600, rel=1e-6)


# ---------------------------------------------------------------------------------- coordinator kill
def _spotwise(*args: str, **kw: Any) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("spotwise")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)


@pytest.mark.slow
def test_coordinator_kill_9_and_resume(ray_session, tmp_path: Path, cli) -> None:
    """The killed run is a `spotwise run` process of its own; the resume is the same command in-process,
    on the session's Ray (a second CLI process would only start a second Ray)."""
    spec_path = tmp_path / "job.yaml"
    d = copy.deepcopy(BASE)
    d["target"] = {"iterations": 40}
    d["cluster"].update({"workers": 2, "standby": 0})  # what is killed is the coordinator: two workers show it
    d["outputs"] = {"checkpoint_every": 5, "plots": False}
    d["market"] = {"synthetic": {"kind": "constant", "price": 0.07},
                   "revocation": {"model": "bernoulli", "q": 0.04, "rejoin_p": 0.5, "notice_s": 0}}
    import yaml

    spec_path.write_text(yaml.safe_dump(d))
    out = tmp_path / "run"
    proc = _spotwise("run", str(spec_path), "--out", str(out), "--json")
    deadline = time.monotonic() + bound(150)
    killed_at = None
    while time.monotonic() < deadline:
        time.sleep(0.2)
        ev = out / "events.jsonl"
        if ev.exists():
            steps = [json.loads(l)["step"] for l in ev.read_text().splitlines() if '"kind":"step"' in l and l.endswith("}")]
            if steps and steps[-1] >= 17:
                proc.send_signal(signal.SIGKILL)
                killed_at = steps[-1]
                break
        if proc.poll() is not None:
            break
    proc.wait(timeout=bound(30))
    assert killed_at is not None, f"run ended before it could be killed: {proc.stderr.read() if proc.stderr else ''}"
    # the newest committed checkpoint is the manifest's newest entry: a kill -9 between the
    # manifest's rename and the ``checkpoint`` event's append leaves one the event log does not name
    from spotwise.control.checkpoint import CHECKPOINT_DIR, MANIFEST

    manifest = json.loads((out / CHECKPOINT_DIR / MANIFEST).read_text())
    newest_committed = max(e["step"] for e in manifest["checkpoints"])
    code, stdout, stderr = cli("run", "--resume", str(out), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["steps"] == 40 and summary["status"] == "completed"
    events = read_events(out / "events.jsonl")
    restore = [e for e in events if e["kind"] == "restore"]
    assert len(restore) == 1 and restore[0]["step"] <= killed_at
    i_restore = events.index(restore[0])
    ckpts = [e["step"] for e in events[:i_restore] if e["kind"] == "checkpoint"]
    assert restore[0]["step"] == newest_committed, "resumed from the newest checkpoint (periodic or on notice)"
    assert max(ckpts) <= newest_committed, "every logged checkpoint was committed before its event"
    # the step counter only goes back once: to the checkpoint, at the restore
    seq = [e["step"] if e["kind"] == "step" else ("R", e["step"]) for e in events if e["kind"] in ("step", "restore")]
    i = seq.index(("R", restore[0]["step"]))
    before, after = seq[:i], seq[i + 1:]
    assert before == list(range(1, len(before) + 1))
    assert after == list(range(restore[0]["step"] + 1, 41))
    assert killed_at - restore[0]["step"] < 5 + 5, "at most the steps since the last checkpoint are lost"
