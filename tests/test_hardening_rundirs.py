"""Untrusted run directories (issue 30, items 1-4).

* item 1 -- ``run --resume DIR`` imported and called whatever ``spec.json`` named (``os:system``):
  a resume now imports recorded user code only with the user's own spec (matching references) or
  ``--trust-code``, and references into the standard library, builtins or dunders are refused everywhere.
* item 2 -- ``report DIR`` wrote through links (``report/index.html -> victim``, ``report -> /elsewhere``):
  every file spotwise writes into a run directory is written without following a link.
* item 3 -- ``spec.json -> /dev/zero``, ``events.jsonl`` as a FIFO, ``--lithops-config /dev/zero``:
  only regular files are read, with a size cap, and the message names the file.
* item 4 -- ``--overwrite`` deleted a user folder named ``summary.json/``: only spotwise's own files go.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from _rundirs import copy_run, marking_module, simulated_run, spec_file, tiny_spec

import spotwise
from spotwise.errors import InputError

pytestmark = pytest.mark.timeout(240)

SPEC: dict[str, Any] = tiny_spec("hostile-rundir")
#: a user module whose import leaves a mark: proof that a resume imported (ran) it
EVIL = """import os, pathlib
pathlib.Path(os.environ["HOSTILE_MARK"]).write_text("imported")
def make(**kw):
    raise RuntimeError("the hostile workload ran")
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One modelled run (no Ray): events.jsonl, summary.json, spec.json, checkpoints; tests use copies."""
    return simulated_run(tmp_path_factory, SPEC)


@pytest.fixture()
def run_dir(finished: Path, tmp_path: Path) -> Path:
    return copy_run(finished, tmp_path / "run")


@pytest.fixture()
def evil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``hostile_wl_mod:make`` importable; returns the file its import writes."""
    return marking_module(tmp_path / "code", monkeypatch, "hostile_wl_mod", EVIL, "HOSTILE_MARK")


def _record(run: Path, **workload: Any) -> dict[str, Any]:
    """Rewrite the run's spec.json with these workload fields (what a hostile writer would do)."""
    data = json.loads((run / "spec.json").read_text())
    data["workload"].update(workload)
    (run / "spec.json").write_text(json.dumps(data))
    return data


# ============================================================================ item 1
def test_item1_resume_does_not_import_recorded_user_code_without_the_users_say_so(run_dir: Path, evil: Path, cli) -> None:
    _record(run_dir, name="hostile_wl_mod:make")
    with pytest.raises(InputError, match="--trust-code") as ei:
        spotwise.run(None, run_dir, resume=True)
    assert "hostile_wl_mod:make" in str(ei.value) and "spec.json" in str(ei.value)
    code, _, err = cli("run", "--resume", str(run_dir), "--json")
    assert code == 2 and "--trust-code" in err and "Traceback" not in err
    assert not evil.exists(), "the recorded module was imported"


def test_item1_resume_with_a_different_spec_exits_2_naming_the_difference(run_dir: Path, evil: Path, tmp_path: Path,
                                                                             cli) -> None:
    data = _record(run_dir, name="hostile_wl_mod:make")
    mine = copy.deepcopy(data)
    mine["workload"]["name"] = "mlp-digits"
    code, _, err = cli("run", str(spec_file(tmp_path, mine)), "--resume", str(run_dir))
    assert code == 2 and "does not match" in err and "workload.name" in err and "hostile_wl_mod:make" in err
    assert not evil.exists()
    mine["workload"]["name"] = "other_mod:make"
    with pytest.raises(InputError, match="workload.name is 'hostile_wl_mod:make' in the run directory but 'other_mod:make'"):
        spotwise.run(spec_file(tmp_path, mine, "other.yaml"), run_dir, resume=True)
    assert not evil.exists()


def test_item1_the_matching_spec_or_trust_code_lets_the_resume_import_it(run_dir: Path, evil: Path,
                                                                           tmp_path: Path) -> None:
    from spotwise.control.rundir_io import load_resume_spec

    data = _record(run_dir, name="hostile_wl_mod:make")
    same = spotwise.load_spec(spec_file(tmp_path, data))
    assert load_resume_spec(run_dir, same).workload.name == "hostile_wl_mod:make"
    assert load_resume_spec(run_dir, None, trust_code=True).workload.name == "hostile_wl_mod:make"
    # a built-in workload needs neither
    _record(run_dir, name="mlp-digits")
    assert load_resume_spec(run_dir).workload.name == "mlp-digits"


def test_item1_recorded_user_policies_and_optimizers_need_the_say_so_too(run_dir: Path) -> None:
    from spotwise.control.rundir_io import load_resume_spec

    data = json.loads((run_dir / "spec.json").read_text())
    data["policies"] = [{"name": "somebody_mod:Policy", "params": {}}]
    (run_dir / "spec.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"policies\[0\]\.name=somebody_mod:Policy"):
        load_resume_spec(run_dir)
    data["policies"] = []
    data["workload"]["optimizer"] = {"name": "somebody_mod:Opt"}
    (run_dir / "spec.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="workload.optimizer.name=somebody_mod:Opt"):
        load_resume_spec(run_dir)


@pytest.mark.parametrize("ref", ["os:system", "subprocess:run", "builtins:eval", "os.path:join", "importlib:import_module",
                                 "_posixsubprocess:fork_exec"])
def test_item1_standard_library_references_are_refused_everywhere(ref: str) -> None:
    from spotwise.policies.user import load_policy_class
    from spotwise.sim.sweep.records import user_strategy

    bad_wl = copy.deepcopy(SPEC)
    bad_wl["workload"]["name"] = ref
    with pytest.raises(InputError, match="standard-library"):
        spotwise.load_spec(bad_wl)
    bad_pol = copy.deepcopy(SPEC)
    bad_pol["policies"] = [{"name": ref}]
    with pytest.raises(InputError, match="standard-library"):
        spotwise.load_spec(bad_pol)
    bad_opt = copy.deepcopy(SPEC)
    bad_opt["workload"]["optimizer"] = {"name": ref}
    with pytest.raises(InputError, match="standard-library"):
        spotwise.load_spec(bad_opt)
    with pytest.raises(InputError, match="standard-library"):
        load_policy_class(ref)
    with pytest.raises(InputError, match="standard-library"):
        user_strategy(ref)


@pytest.mark.parametrize("ref", ["mypkg:__init__", "mypkg.__main__:run", "mypkg:__class__"])
def test_item1_dunder_references_are_refused(ref: str) -> None:
    bad = copy.deepcopy(SPEC)
    bad["workload"]["name"] = ref
    with pytest.raises(InputError, match="dunder"):
        spotwise.load_spec(bad)


def test_item1_the_workload_factory_refuses_a_stdlib_reference_that_skipped_validation(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from spotwise.workloads.user import make_user_workload

    marker = tmp_path / "ran"
    fake = SimpleNamespace(name="os:system", params={"command": f"touch {marker}"})
    with pytest.raises(InputError, match="standard-library"):
        make_user_workload(fake, 0)
    assert not marker.exists()


def test_item1_resume_of_a_recorded_os_system_never_runs_the_command(run_dir: Path, tmp_path: Path, cli) -> None:
    marker = tmp_path / "PWNED"
    data = json.loads((run_dir / "spec.json").read_text())
    data["workload"]["name"] = "os:system"
    data["workload"]["params"] = {"command": f"touch {marker}"}
    (run_dir / "spec.json").write_text(json.dumps(data))
    for extra in ((), ("--trust-code",)):
        code, _, err = cli("run", "--resume", str(run_dir), *extra)
        assert code == 2 and "standard-library" in err and "spec.json" in err
    assert not marker.exists()


def test_item1_resume_from_a_uri_goes_through_the_same_check(run_dir: Path, evil: Path, tmp_path: Path) -> None:
    _record(run_dir, name="hostile_wl_mod:make")
    with pytest.raises(InputError, match="--trust-code"):
        spotwise.run(None, f"file://{run_dir}", resume=True, staging=tmp_path / "stage")
    assert not evil.exists()


def test_item1_the_emitted_run_script_resumes_with_the_jobs_own_spec() -> None:
    from spotwise.planner.emit.files import REMOTE_SPEC
    from spotwise.planner.emit.scripts import run_script

    script = run_script(address="auto", notice_source="aws", autoscale=False, uri="s3://b/p")
    line = next(x for x in script.splitlines() if x.strip().startswith("resume)"))
    # every value shell-quoted (issue 38): a plain URI needs no quotes, the home stays outside them
    assert "run --resume s3://b/p " in line and '"$HOME"/' + REMOTE_SPEC.removeprefix("~/") in line


# ============================================================================ item 2
def test_item2_report_never_writes_through_a_link_to_a_file(run_dir: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (run_dir / "report").mkdir()
    (run_dir / "report" / "index.html").symlink_to(victim)
    (run_dir / "report" / "loss_vs_time.png").symlink_to(victim)
    spotwise.report(run_dir)
    assert victim.read_text() == "precious"
    for name in ("index.html", "loss_vs_time.png"):
        p = run_dir / "report" / name
        assert p.is_file() and not p.is_symlink()


def test_item2_report_refuses_a_report_folder_that_links_out(run_dir: Path, tmp_path: Path, cli) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run_dir / "report").symlink_to(elsewhere, target_is_directory=True)
    code, _, err = cli("report", str(run_dir))
    assert code == 2 and "symbolic link" in err and "report" in err
    assert list(elsewhere.iterdir()) == []


def test_item2_run_files_are_never_written_through_links(run_dir: Path, tmp_path: Path) -> None:
    import torch

    from spotwise.control.checkpoint import save_checkpoint
    from spotwise.events import EventLog, atomic_write_text, read_summary, write_summary

    victim = tmp_path / "victim"
    victim.write_text("precious")
    summary = read_summary(run_dir)
    (run_dir / "summary.json").unlink()
    (run_dir / "summary.json").symlink_to(victim)
    write_summary(run_dir, summary)  # the link is replaced, its target untouched
    assert victim.read_text() == "precious" and not (run_dir / "summary.json").is_symlink()
    (run_dir / "events.jsonl").unlink()
    (run_dir / "events.jsonl").symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link"):
        EventLog(run_dir / "events.jsonl", resume=True)
    with pytest.raises(InputError, match="symbolic link"):
        EventLog(run_dir / "events.jsonl")
    assert victim.read_text() == "precious"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "checkpoints").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        save_checkpoint(run_dir, 20, {"step": 20, "params": torch.zeros(2)})
    with pytest.raises(InputError, match="symbolic link"):
        atomic_write_text(run_dir / "checkpoints" / "manifest.json", "{}", root=run_dir)
    assert list(elsewhere.iterdir()) == []


# ============================================================================ item 3
def _no_hang(fn: Any, seconds: float = 20.0) -> BaseException | None:
    """Call ``fn`` in a thread; fail if it blocks (a FIFO opened for reading waits for a writer)."""
    box: list[BaseException | None] = [None]

    def go() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box[0] = e

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "the reader blocked"
    return box[0]


@pytest.mark.parametrize("what", ["spec.json", "events.jsonl", "summary.json"])
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "dir"])
def test_item3_run_files_that_are_not_regular_files_are_refused_naming_them(run_dir: Path, what: str, kind: str) -> None:
    from spotwise.control.rundir_io import load_run_spec

    p = run_dir / what
    p.unlink()
    if kind == "dev-zero":
        p.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
    read = (lambda: load_run_spec(run_dir)) if what == "spec.json" else (lambda: spotwise.report(run_dir, plots=False))
    err = _no_hang(read)
    assert isinstance(err, InputError), err
    assert what in str(err) and ("regular file" in str(err) or "symbolic link" in str(err))


def test_item3_resume_of_a_spec_json_fifo_exits_2_at_once(run_dir: Path, cli) -> None:
    (run_dir / "spec.json").unlink()
    os.mkfifo(run_dir / "spec.json")
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(cli("run", "--resume", str(run_dir))), daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive() and box[0][0] == 2 and "FIFO" in box[0][2]


def test_item3_an_oversized_spec_json_is_refused_by_the_cap(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.control.rundir_io import load_run_spec

    with (run_dir / "spec.json").open("ab") as fh:
        fh.truncate(2 * 1024 * 1024)
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "1")
    with pytest.raises(InputError, match="spec.json is larger than"):
        load_run_spec(run_dir)


def test_item3_lithops_config_dev_zero_is_refused() -> None:
    from spotwise.planes.serverless.backend import load_lithops_config

    err = _no_hang(lambda: load_lithops_config("/dev/zero"))
    assert isinstance(err, InputError) and "not a regular file" in str(err) and "/dev/zero" in str(err)


# ============================================================================ item 4
@pytest.mark.parametrize("name", ["summary.json", "events.jsonl", "model.pt"])
def test_item4_overwrite_never_deletes_a_user_folder_under_a_file_name(run_dir: Path, name: str, cli) -> None:
    p = run_dir / name
    if p.exists():
        p.unlink()
    p.mkdir()
    (p / "thesis.tex").write_text("years of work")
    code, _, err = cli("simulate", str(spec_file(run_dir.parent, copy.deepcopy(SPEC))), "--out", str(run_dir), "--overwrite")
    assert code == 2 and name in err and "refusing to delete" in err
    assert (p / "thesis.tex").read_text() == "years of work"


def test_item4_overwrite_refuses_user_files_inside_spotwises_folders_and_links(run_dir: Path, tmp_path: Path) -> None:
    from spotwise.rundir import open_run_dir

    (run_dir / "report").mkdir()
    (run_dir / "report" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="report/notes.txt was not written by spotwise"):
        open_run_dir(run_dir, "overwrite")
    assert (run_dir / "report" / "notes.txt").read_text() == "mine" and (run_dir / "summary.json").is_file()
    shutil.rmtree(run_dir / "report")
    target = tmp_path / "keep"
    target.mkdir()
    (run_dir / "report").symlink_to(target, target_is_directory=True)
    with pytest.raises(InputError, match="symbolic link"):
        open_run_dir(run_dir, "overwrite")
    assert (run_dir / "report").is_symlink() and (run_dir / "summary.json").is_file()
    (run_dir / "report").unlink()
    with open_run_dir(run_dir, "overwrite"):  # spotwise's own files only: removed
        assert not (run_dir / "summary.json").exists() and not (run_dir / "checkpoints").exists()


def test_a_resume_that_changes_a_fixed_field_exits_2_naming_every_one(run_dir: Path, tmp_path: Path, cli) -> None:
    """Issue 41 item 5: `run SPEC --resume DIR` with a changed spec never ignores the change
    silently.  Fields a resume applies (learning rate, schedule, targets, ...) come back as the spec
    to run (tests/test_resume_changes.py runs them); fields the checkpoint was made with (the batch
    size, the model, the seed) exit 2 before Ray starts, each named."""
    from spotwise.control.rundir_io import load_resume_spec

    data = json.loads((run_dir / "spec.json").read_text())
    assert load_resume_spec(run_dir, spotwise.load_spec(spec_file(tmp_path, data, "same.yaml"))).to_dict() == data
    ok = copy.deepcopy(data)
    ok["workload"]["lr"] = data["workload"]["lr"] / 10
    ok["target"]["iterations"] = int(data["target"].get("iterations") or 10) + 50
    got = load_resume_spec(run_dir, spotwise.load_spec(spec_file(tmp_path, ok, "ok.yaml")))
    assert got.workload.lr == ok["workload"]["lr"] and got.target.iterations == ok["target"]["iterations"]
    mine = copy.deepcopy(ok)
    mine["workload"]["batch_size"] = int(data["workload"]["batch_size"]) + 1
    mine["seed"] = int(data["seed"]) + 1
    code, out, err = cli("run", str(spec_file(tmp_path, mine)), "--resume", str(run_dir), "--json")
    assert code == 2 and "Traceback" not in err, err
    assert "workload.batch_size" in err and "seed" in err and "cannot change" in err, err
    assert "workload.lr" not in err.split("(a resume may")[0], "an appliable change is not named as a problem"
    with pytest.raises(InputError, match="workload.batch_size"):
        spotwise.run(spec_file(tmp_path, mine, "again.yaml"), run_dir, resume=True)
