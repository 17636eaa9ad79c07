"""Issue 41 item 2: ``spotwise launch SPEC train.py -- ARGS`` -- the spec says where and how long, the
command line names the training script and its arguments (:mod:`spotwise.spec.launch`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import spotwise
from spotwise.errors import InputError
from spotwise.spec.launch import launch_spec

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).parent / "user_scripts" / "train_mlp.py"

JOB: dict[str, Any] = {
    "name": "launched", "seed": 2,
    "workload": {"batch_size": 8},
    "target": {"samples": 240},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0,
                "replica_every": 5, "group_timeout_s": 5},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


def job_file(folder: Path, **workload: Any) -> Path:
    d = json.loads(json.dumps(JOB))
    d["workload"].update(workload)
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "job.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_the_script_and_its_args_come_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = job_file(tmp_path / "specs")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(SCRIPT.read_text())
    monkeypatch.chdir(tmp_path / "code")  # the script's path is the command line's: relative to this folder
    job = launch_spec(spec, "train.py", ["--lr", "0.02"])
    assert job.workload.script == str((tmp_path / "code" / "train.py").resolve())
    assert job.workload.args == ["--lr", "0.02"] and job.workload.name == "script"
    assert job.cluster.data_plane == "collective" and job.target.samples == 240
    # no args given: the spec's own; args given: they replace the spec's
    spec2 = job_file(tmp_path / "specs2", args=["--lr", "0.5"])
    assert launch_spec(spec2, "train.py").workload.args == ["--lr", "0.5"]
    assert launch_spec(spec2, "train.py", []).workload.args == []
    # the same script named in the spec too is not a conflict; a mapping works as a spec
    spec3 = job_file(tmp_path / "code", script="train.py")
    assert launch_spec(spec3, "train.py").workload.script == job.workload.script
    assert launch_spec(JOB, str(SCRIPT), ["--no-bn"]).workload.args == ["--no-bn"]


@pytest.mark.parametrize("workload,script,words", [
    ({"name": "mlp-digits"}, "train.py", "the spec trains workload.name 'mlp-digits'; launch trains 'train.py'"),
    ({"script": "other.py"}, "train.py", "the spec trains workload.script 'other.py' and the command line 'train.py'"),
    ({}, "missing.py", "training script 'missing.py' not found"),
    ({}, "train.txt", "'train.txt' is not a .py file"),
    ({"optimizer": "adamw"}, "train.py", "a script's recipe is its own"),
])
def test_a_spec_that_says_something_else_exits_2_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any, workload: dict[str, Any], script: str, words: str) -> None:
    (tmp_path / "train.py").write_text("print('never run')\n")
    (tmp_path / "other.py").write_text("print('never run')\n")
    (tmp_path / "train.txt").write_text("")
    monkeypatch.chdir(tmp_path)
    spec = job_file(tmp_path, **workload)
    with pytest.raises(InputError) as e:
        launch_spec(spec, script)
    assert words in str(e.value)
    code, _, err = cli("launch", str(spec), script, "--out", str(tmp_path / "run"))
    assert code == 2 and words in " ".join(err.split()), err
    assert not (tmp_path / "run").exists()


def test_launch_trains_the_script_with_its_args_and_resume_names_a_changed_arg(
        ray_session: Any, tmp_path: Path, cli: Any) -> None:
    spec = job_file(tmp_path)
    out, saved = tmp_path / "run", tmp_path / "final.pt"
    code, stdout, err = cli("launch", str(spec), str(SCRIPT), "--out", str(out), "--json", "--",
                            "--lr", "0.02", "--save", str(saved))
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["status"] == "completed" and summary["steps"] >= 240 // 16
    assert saved.stat().st_size > 0, "the script got its arguments (--save)"
    recorded = json.loads((out / "spec.json").read_text())["workload"]
    assert recorded["script"] == str(SCRIPT.resolve()) and recorded["args"] == ["--lr", "0.02", "--save", str(saved)]
    # the records hold the rate the script's optimizer stepped with (its param_groups), not the spec's
    # workload.lr (which a script never reads): issue 55 item 7
    from spotwise.events import read_events

    first = [e["lr"] for e in read_events(out / "events.jsonl", kinds=["step"])]
    assert first and all(lr == pytest.approx(0.02) for lr in first) and summary["extra"]["lr"] == pytest.approx(0.02)
    # resuming with other arguments: the field is named with the flag that allows it, nothing runs
    with pytest.raises(InputError, match="workload.args") as e:
        spotwise.launch(spec, SCRIPT, ["--lr", "0.05"], out, resume=True)
    assert "--allow-changes" in str(e.value)
    code, _, err = cli("launch", str(spec), str(SCRIPT), "--resume", str(out), "--", "--lr", "0.05")
    assert code == 2 and "--allow-changes" in " ".join(err.split()), err
    # allowed: the run goes on (a longer target) with the new arguments from the resumed step
    longer = job_file(tmp_path / "longer", **{})
    d = yaml.safe_load(longer.read_text())
    d["target"]["samples"] = 480
    longer.write_text(yaml.safe_dump(d))
    saved2 = tmp_path / "final2.pt"
    done = spotwise.launch(longer, SCRIPT, ["--lr", "0.05", "--save", str(saved2)], out, resume=True, allow_changes=True)
    assert done.status == "completed" and done.steps > len(first)
    assert saved2.stat().st_size > 0, "the resumed script ran with the new arguments"
    # ... and the records say what it stepped with: the optimizer's rate came back with its state (as
    # torch's load_state_dict restores param_groups), so 0.02 throughout -- never the new argument's 0.05
    lrs = [e["lr"] for e in read_events(out / "events.jsonl", kinds=["step"])]
    assert len(lrs) == done.steps and all(lr == pytest.approx(0.02) for lr in lrs), lrs
    assert json.loads((out / "spec.json").read_text())["workload"]["args"] == ["--lr", "0.05", "--save", str(saved2)]
    with pytest.raises(InputError, match="applies to a resume"):
        spotwise.launch(spec, SCRIPT, [], tmp_path / "other", allow_changes=True)


def test_emitted_files_mount_the_training_script_and_say_what_else_the_nodes_need(tmp_path: Path) -> None:
    """A script job's launch files carry the script (its node spec points at the mounted copy) and a note
    says its own imports and packages must be on the nodes."""
    from spotwise.planner.emit.files import node_files, node_spec_dict

    spec = launch_spec(job_file(tmp_path), SCRIPT, ["--lr", "0.02"])
    files = node_files(spec, tmp_path)
    assert files.mounts == {"~/spotwise-job/inputs/0-train_mlp.py": str(SCRIPT.resolve())}
    node = node_spec_dict(spec, files, tmp_path)["workload"]
    assert node["script"] == "inputs/0-train_mlp.py" and node["args"] == ["--lr", "0.02"]
    assert any("training script is mounted on its own" in n for n in files.notes)
