"""The Python API and user-written policies (issue 22)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spotwise
from spotwise.errors import InputError
from _load import bound

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "user-policy.yaml"
POLICIES_DIR = REPO / "examples" / "policies"
TRIALS_DIR = Path(__file__).with_name("user_policies")


@pytest.fixture()
def policy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's and the trial policies' folders importable, as PYTHONPATH would make them."""
    monkeypatch.syspath_prepend(str(POLICIES_DIR))
    monkeypatch.syspath_prepend(str(TRIALS_DIR))


def small(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "api", "seed": 2,
                         "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
                         "target": {"iterations": 30}, "deadline": "1h",
                         "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                         "market": {"revocation": {"model": "lifetime", "mttf_s": 60, "mttr_s": 30}},
                         "outputs": {"checkpoint_every": 0, "plots": False}}
    d.update(over)
    return d


# ---------------------------------------------------------------------------- the API surface
def test_import_is_light_and_every_public_name_resolves() -> None:
    code = ("import sys, spotwise; assert 'torch' not in sys.modules and 'ray' not in sys.modules, 'heavy import'; "
            "[getattr(spotwise, n) for n in spotwise.__all__]; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=bound(120))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_load_spec_takes_a_path_a_dict_or_a_spec_and_raises_input_error() -> None:
    a = spotwise.load_spec(REPO / "examples" / "demo.yaml")
    b = spotwise.load_spec(str(REPO / "examples" / "demo.yaml"))
    c = spotwise.load_spec(a.to_dict())
    assert a == b == c and spotwise.load_spec(a) is a
    with pytest.raises(spotwise.InputError) as e:
        spotwise.load_spec({"name": "x"})
    assert "workload" in str(e.value)
    with pytest.raises(InputError):
        spotwise.load_spec(42)  # type: ignore[arg-type]


def test_simulate_returns_a_summary_with_a_readable_repr(tmp_path: Path) -> None:
    s = spotwise.simulate(small())
    assert isinstance(s, spotwise.RunSummary) and s.status == "completed" and s.steps == 30
    assert "RunSummary('api': simulate completed, 30 steps" in repr(s) and len(repr(s)) < 300
    assert json.loads(json.dumps(s.to_dict()))["steps"] == 30
    out = tmp_path / "sim"
    s2 = spotwise.simulate(small(), out)
    assert (out / "summary.json").is_file() and s2.cost_usd == s.cost_usd


def test_api_errors_raise_and_never_exit(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        spotwise.simulate(small(), pilot_steps=3)
    with pytest.raises(InputError):
        spotwise.plan(small(), objective="fastest")
    with pytest.raises(InputError):
        spotwise.run(None, tmp_path / "o")
    with pytest.raises(InputError):
        spotwise.report([])


# ---------------------------------------------------------------------------- user policies
def test_a_user_policy_is_validated_without_import_at_load_and_imported_where_it_runs(policy_path: None) -> None:
    spec = spotwise.load_spec(small(policies=[{"name": "no_such_module_abc:Nope"}]))  # no import here
    assert spec.policies[0].name == "no_such_module_abc:Nope"
    with pytest.raises(InputError) as e:
        spotwise.load_spec(small(policies=[{"name": "bad name:X"}]))
    assert "package.module:ClassName" in str(e.value)
    with pytest.raises(InputError) as e:
        spotwise.simulate(spec)
    assert "no_such_module_abc" in str(e.value) and "PYTHONPATH" in e.value.fix


@pytest.mark.parametrize(("ref", "words"), [
    ("trial_policies:Missing", "has no class 'Missing'"),
    ("trial_policies:NotAPolicy", "is not a Policy"),
    ("trial_policies:ReturnsJunk", "not a list of decisions"),
])
def test_a_broken_user_policy_is_an_input_error_naming_it(policy_path: None, ref: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        spotwise.simulate(small(policies=[{"name": ref}]))
    assert words in str(e.value) and ref in str(e.value)


def test_a_policy_raising_in_decide_exits_2_with_its_traceback_and_keeps_what_was_committed(
        policy_path: None, tmp_path: Path, cli: Any) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(small(policies=[{"name": "trial_policies:ExplodesAtStep", "params": {"at": 7}}])))
    out = tmp_path / "run"
    code, stdout, err = cli("simulate", str(spec), "--out", str(out))
    assert code == 2, err
    assert "policy trial_policies:ExplodesAtStep raised ZeroDivisionError in decide at step 7" in err
    assert "helper_that_fails" in err and "the user's bug at step 7" in err, "the user's traceback is shown"
    assert "Traceback" in err and "spotwise/control" not in err.split("Traceback", 1)[1].split("ZeroDivisionError")[0]
    steps = [json.loads(line)["step"] for line in (out / "events.jsonl").read_text().splitlines() if '"kind":"step"' in line.replace(" ", "")]
    assert steps == list(range(1, 8))
    ckpt = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines() if '"checkpoint"' in line]
    assert ckpt and ckpt[-1]["step"] == 7, "the step committed before the failure is checkpointed"


def test_the_example_policy_runs_in_simulate_and_run(policy_path: None, ray_session: Any, tmp_path: Path) -> None:
    sim = spotwise.simulate(EXAMPLE, tmp_path / "sim")
    events = [json.loads(line) for line in (tmp_path / "sim" / "events.jsonl").read_text().splitlines()]
    acted = [e for e in events if e["kind"] == "decision" and e["policy"] == "slack-guard"]
    assert acted and acted[0]["acted"] and "SwitchMarket" in acted[0]["decision"] and sim.extra["deadline_met"]
    run = spotwise.run(EXAMPLE, tmp_path / "run")
    assert run.status == "completed" and run.mode == "emulated"
    assert any(e["kind"] == "decision" and e["policy"] == "slack-guard"
               for e in map(json.loads, (tmp_path / "run" / "events.jsonl").read_text().splitlines()))


def test_the_example_policy_is_swept_against_the_built_in_ones_in_one_table(policy_path: None, tmp_path: Path) -> None:
    from slack_guard import SlackGuard  # type: ignore[import-not-found]

    res = spotwise.sweep(EXAMPLE, spec_market=True, horizon="4d", starts="4h", history="1h",
                         strategies=["on-demand", "spot+guard", SlackGuard(margin_h=0.5), "slack_guard:SlackGuard"],
                         out=tmp_path / "sweep")
    names = [s.strategy for s in res.summaries]
    # a user policy is shown by its declared name; a second one of that name also by its reference (issue 29)
    ref = "slack-guard (slack_guard:SlackGuard)"
    assert names == ["on-demand", "spot+guard", "slack-guard", ref]
    by = {s.strategy: s for s in res.summaries}
    assert all(s.windows == by["on-demand"].windows > 5 for s in res.summaries)
    # the policy decides: a wider margin (the default 2 h, more than the job's slack) buys on-demand
    # sooner than 0.5 h does, and nearly as much as on-demand itself
    assert by[ref].mean_on_demand_h > by["slack-guard"].mean_on_demand_h > 0
    assert by[ref].mean_on_demand_h > 0.9 * by["on-demand"].mean_on_demand_h
    assert by["slack-guard"].deadline_met >= by["spot+guard"].deadline_met - 0.2
    assert "slack-guard" in repr(res) or "SweepResult(" in repr(res)
    table = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert {s["strategy"] for s in table["strategies"]} == set(names)
