"""Run-directory safety (issue 7, items 1, 2, 3, 19 and the run-directory part of 15).

* item 1 -- ``checkpoints/manifest.json`` is untrusted: only ``step-NNNNNNNN.pt`` files inside the
  run's checkpoint folder are read or removed; anything else is an exit-2 error.
* item 2 -- ``--overwrite`` / ``demo --out`` remove only what spotwise wrote, in a directory that
  carries spotwise's marker; any other non-empty directory is refused.
* item 3 -- one spotwise process per run directory (``fcntl.flock``); a second one exits 2.
* item 15 (part) -- binary / non-UTF-8 / truncated run files, checkpoints with a valid checksum but
  wrong content, and an ``--out`` that is a file or unwritable are user input: exit 2, never 1,
  and the ``--out`` check happens before Ray starts.
* item 19 -- a full disk while writing a checkpoint: no ``.tmp-PID`` file stays behind, and the
  message says the disk is full (exit 2).
"""

from __future__ import annotations

import copy
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import valid_state
import torch
from _load import bound
from _rundirs import tiny_spec

pytestmark = pytest.mark.timeout(240)

SPEC: dict[str, Any] = tiny_spec("rundir-safety")  # a 10-step modelled job, checkpoints at 5 and 10


def _spec_file(tmp_path: Path, **over: Any) -> Path:
    import yaml

    d = copy.deepcopy(SPEC)
    d.update(over)
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _invoke(*args: str) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from spotwise.cli import app

    res = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def finished_run(ray_session, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real (tiny) run, checkpoints at steps 5 and 10; tests work on copies of it."""
    base = tmp_path_factory.mktemp("finished")
    out = base / "run"
    code, stdout, err = _invoke("run", str(_spec_file(base)), "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["steps"] == 10
    return out


@pytest.fixture()
def run_copy(finished_run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(finished_run, dst, symlinks=True)
    return dst


@pytest.fixture()
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail (exit 1 through the CLI) if the runner gets as far as starting Ray."""
    import spotwise.control.runner as runner

    def boom(*a: Any, **k: Any) -> None:
        raise AssertionError("Ray was started although the run directory should have been refused first")

    monkeypatch.setattr(runner, "ensure_ray", boom)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "checkpoints" / "manifest.json").read_text())


def _write_manifest(out: Path, entries: list[dict[str, Any]]) -> None:
    (out / "checkpoints" / "manifest.json").write_text(json.dumps({"checkpoints": entries}))


def _events(out: Path) -> list[dict[str, Any]]:
    from spotwise.events import read_events

    return read_events(out / "events.jsonl")


def _tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp-" in p.name)


# ------------------------------------------------------------------ states for pure checkpoint tests
def _state(step: int, shape: tuple[int, ...] = (4,), **over: Any) -> dict[str, Any]:
    return valid_state(step, shape, **over)


# ============================================================================ item 1
@pytest.mark.parametrize("style", ["absolute", "dotdot"])
def test_item1_manifest_path_outside_run_dir_is_refused(cli, run_copy: Path, tmp_path: Path, style: str) -> None:
    """A manifest entry naming a file outside OUT/checkpoints is neither loaded nor resumed from."""
    victim = tmp_path / "elsewhere" / "victim.pt"
    victim.parent.mkdir()
    shutil.copy(run_copy / "checkpoints" / "step-00000005.pt", victim)
    name = str(victim) if style == "absolute" else "../../elsewhere/victim.pt"
    entries = _manifest(run_copy)["checkpoints"] + [{"file": name, "step": 99, "sha256": _sha(victim)}]
    _write_manifest(run_copy, entries)
    code, _, err = cli("run", "--resume", str(run_copy), "--json")
    assert code == 2, err
    assert "manifest.json" in err and "victim.pt" in err and "internal error" not in err
    assert victim.exists()


def test_item1_rotation_never_deletes_files_outside_the_checkpoint_folder(tmp_path: Path) -> None:
    """keep-N rotation with a hostile manifest: refused (exit-2 error), the outside file survives."""
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import save_checkpoint

    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    victim = tmp_path / "precious.txt"
    victim.write_text("do not delete")
    _write_manifest(out, [{"file": "../../precious.txt", "step": 1, "sha256": "0" * 64}])
    with pytest.raises(InputError, match="manifest.json"):
        save_checkpoint(out, 5, _state(5), keep=1)
    assert victim.read_text() == "do not delete"


def test_item1_manifest_entry_that_is_a_symlink_out_is_refused(tmp_path: Path) -> None:
    """A well-named entry that is a symlink leading out of the folder is refused too."""
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import load_latest_checkpoint, save_checkpoint

    out = tmp_path / "run"
    save_checkpoint(out, 5, _state(5))
    outside = tmp_path / "outside.pt"
    torch.save(_state(7), outside)
    (out / "checkpoints" / "step-00000007.pt").symlink_to(outside)
    entries = _manifest(out)["checkpoints"] + [{"file": "step-00000007.pt", "step": 7, "sha256": _sha(outside)}]
    _write_manifest(out, entries)
    with pytest.raises(InputError, match="step-00000007.pt"):
        load_latest_checkpoint(out)


# ============================================================================ item 2
@pytest.mark.parametrize("command", ["run", "demo"])
def test_item2_overwrite_refuses_a_directory_that_is_not_a_spotwise_run(cli, no_ray, tmp_path: Path, command: str) -> None:
    """--overwrite / demo --out on a user's directory that merely holds an events.jsonl: exit 2, nothing deleted."""
    d = tmp_path / "mywork"
    d.mkdir()
    (d / "events.jsonl").write_text("my own event log\n")
    (d / "thesis.tex").write_text("\\documentclass{article}")
    if command == "run":
        code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(d), "--overwrite")
    else:
        code, _, err = cli("demo", "--out", str(d))
    assert code == 2, err
    assert "not a spotwise run directory" in err
    assert (d / "thesis.tex").exists() and (d / "events.jsonl").read_text() == "my own event log\n"


def test_item2_overwrite_removes_only_spotwise_files(cli, run_copy: Path, tmp_path: Path) -> None:
    """In a spotwise run directory, --overwrite replaces spotwise's files and leaves the user's alone."""
    (run_copy / "notes.txt").write_text("mine")
    (run_copy / "data").mkdir()
    (run_copy / "data" / "x.csv").write_text("1,2\n")
    old_events = (run_copy / "events.jsonl").read_text()
    (run_copy / "events.jsonl").write_text(old_events + old_events.splitlines()[0] + "\n")  # marks the old log
    code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(run_copy), "--overwrite", "--json")
    assert code == 0, err
    assert (run_copy / "notes.txt").read_text() == "mine" and (run_copy / "data" / "x.csv").exists()
    kinds = [e["kind"] for e in _events(run_copy)]
    assert kinds.count("header") == 1 and "restore" not in kinds, "a fresh log, not the old one"


def test_item2_removal_unlinks_symlinks_instead_of_following_them(tmp_path: Path) -> None:
    """A spotwise name that is a symlink is never followed; since issue 30 item 4 it is not even removed
    (spotwise never makes links: the link is the user's): --overwrite refuses, and what it points to is untouched."""
    from spotwise.errors import InputError
    from spotwise.rundir import open_run_dir

    d = tmp_path / "run"
    with open_run_dir(d, "new"):
        pass
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (d / "report").symlink_to(target, target_is_directory=True)
    (d / "summary.json").symlink_to(target / "keep.txt")
    with pytest.raises(InputError, match="symbolic link"):
        open_run_dir(d, "overwrite")
    assert (d / "report").is_symlink() and (d / "summary.json").is_symlink()
    assert (target / "keep.txt").read_text() == "keep"


def test_item2_marker_directory_can_be_overwritten_again_and_again(tmp_path: Path) -> None:
    """The demo's default --out keeps working run after run: marker + spotwise names only."""
    from spotwise.rundir import MARKER, open_run_dir

    d = tmp_path / "spotwise-demo"
    for _ in range(3):
        with open_run_dir(d, "overwrite"):
            (d / "events.jsonl").write_text("x\n")
            (d / "checkpoints").mkdir()
            (d / "checkpoints" / "step-00000001.pt").write_bytes(b"x")
            assert not (d / "on-demand").exists(), "the previous run's on-demand baseline went with it"
            (d / "on-demand").mkdir()
            (d / "on-demand" / "events.jsonl").write_text("x\n")
        assert (d / MARKER).is_file()


def test_item2_fresh_run_into_a_run_directory_without_overwrite_is_refused(tmp_path: Path) -> None:
    from spotwise.errors import InputError
    from spotwise.rundir import open_run_dir

    d = tmp_path / "run"
    with open_run_dir(d, "new"):
        (d / "events.jsonl").write_text("x\n")
    with pytest.raises(InputError, match="already holds a run"):
        with open_run_dir(d, "new"):
            pass
    assert (d / "events.jsonl").exists()


# ============================================================================ item 3
def test_item3_second_resume_on_a_locked_run_dir_exits_2(run_copy: Path) -> None:
    """Another process resuming a directory this process has locked exits 2 and names the holder."""
    from spotwise.rundir import lock_run_dir

    exe = Path(sys.executable).with_name("spotwise")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "spotwise.cli"]
    before = (run_copy / "events.jsonl").read_bytes()
    with lock_run_dir(run_copy):
        res = subprocess.run([*cmd, "run", "--resume", str(run_copy), "--json"], capture_output=True, text=True,
                             timeout=bound(120), env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert res.returncode == 2, res.stderr
    assert "in use by another spotwise process" in res.stderr and f"pid {os.getpid()}" in res.stderr
    assert (run_copy / "events.jsonl").read_bytes() == before, "the locked run's log is untouched"


def test_item3_lock_is_exclusive_and_released(cli, no_ray, tmp_path: Path) -> None:
    """In-process: a held lock refuses a fresh run into the directory too; released, it can be taken again."""
    from spotwise.errors import InputError
    from spotwise.rundir import lock_run_dir, open_run_dir

    d = tmp_path / "run"
    with open_run_dir(d, "new"):
        with pytest.raises(InputError, match="in use by another spotwise process"):
            lock_run_dir(d)
        code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(d), "--overwrite")
        assert code == 2 and "in use by another spotwise process" in err
    with lock_run_dir(d):
        pass


# ============================================================================ item 15 (run-directory part)
BAD_CONTENTS = {"binary": b"\x80\x81\xfe\xff\x00\x01PK\x03\x04", "truncated": b'{"checkpoints": [{"file": "step-000'}


@pytest.mark.parametrize("bad", sorted(BAD_CONTENTS))
def test_item15_bad_manifest_exits_2(cli, no_ray, run_copy: Path, bad: str) -> None:
    (run_copy / "checkpoints" / "manifest.json").write_bytes(BAD_CONTENTS[bad])
    code, _, err = cli("run", "--resume", str(run_copy))
    assert code == 2, err
    assert "manifest.json" in err and "internal error" not in err


@pytest.mark.parametrize("bad", sorted(BAD_CONTENTS) + ["not-an-object"])
def test_item15_bad_spec_json_exits_2(cli, no_ray, run_copy: Path, bad: str) -> None:
    (run_copy / "spec.json").write_bytes(BAD_CONTENTS.get(bad, b"[1, 2, 3]"))
    code, _, err = cli("run", "--resume", str(run_copy))
    assert code == 2, err
    assert "spec.json" in err and "internal error" not in err


@pytest.mark.parametrize("which", ["events.jsonl", "summary.json"])
def test_item15_binary_events_or_summary_exit_2_in_report(cli, run_copy: Path, which: str) -> None:
    p = run_copy / which
    p.write_bytes(b"\xff\xfe\x00garbage\x80\n" + p.read_bytes())
    code, _, err = cli("report", str(run_copy), "--json")
    assert code == 2, err
    assert which in err and "internal error" not in err


def test_item15_binary_events_on_resume_exits_2(cli, run_copy: Path) -> None:
    p = run_copy / "events.jsonl"
    p.write_bytes(p.read_bytes()[:40] + b"\xff\xfe\x80\x00\n" + p.read_bytes()[40:])
    code, _, err = cli("run", "--resume", str(run_copy))
    assert code == 2, err
    assert "events.jsonl" in err and "internal error" not in err


@pytest.mark.parametrize("problem", ["shape", "nan", "missing-key", "not-a-dict"])
def test_item15_checkpoint_with_valid_checksum_but_bad_content_falls_back(tmp_path: Path, problem: str) -> None:
    from spotwise.control.checkpoint import load_latest_checkpoint, save_checkpoint

    out = tmp_path / "run"
    save_checkpoint(out, 5, _state(5))
    bad: Any
    if problem == "shape":
        bad = _state(10, shape=(3, 2))
    elif problem == "nan":
        bad = _state(10, params=torch.tensor([1.0, float("nan"), 0.0, 0.0]))
    elif problem == "missing-key":
        bad = {k: v for k, v in _state(10).items() if k != "lr"}
    else:
        bad = torch.zeros(4)
    save_checkpoint(out, 10, bad)  # written properly: the checksum in the manifest verifies
    warnings: list[str] = []
    found = load_latest_checkpoint(out, expect_shape=(4,), warn=warnings.append)
    assert found is not None
    state, path = found
    assert state["step"] == 5 and path.name == "step-00000005.pt"
    assert len(warnings) == 1 and "step-00000010.pt" in warnings[0] and "step 5" in warnings[0]


def test_item15_no_checkpoint_with_valid_content_exits_2(tmp_path: Path) -> None:
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import require_checkpoint, save_checkpoint

    out = tmp_path / "run"
    save_checkpoint(out, 5, _state(5, shape=(9,)))
    with pytest.raises(InputError, match="no valid checkpoint"):
        require_checkpoint(out, expect_shape=(4,), warn=lambda m: None)


def test_item15_resume_falls_back_past_a_wrong_shape_checkpoint_and_says_so(cli, run_copy: Path) -> None:
    """End to end: the newest checkpoint verifies but holds the wrong shape; resume uses step 5 and warns."""
    ck = run_copy / "checkpoints" / "step-00000010.pt"
    state = torch.load(ck, weights_only=True)
    state["params"] = torch.zeros(7)
    torch.save(state, ck)
    entries = _manifest(run_copy)["checkpoints"]
    for e in entries:
        if e["file"] == ck.name:
            e["sha256"] = _sha(ck)
    _write_manifest(run_copy, entries)
    code, stdout, err = cli("run", "--resume", str(run_copy), "--json")
    assert code == 0, err
    assert "step-00000010.pt" in err and "falling back" in err
    restore = [e for e in _events(run_copy) if e["kind"] == "restore"]
    assert [r["step"] for r in restore] == [5]
    assert len(restore[0]["skipped"]) == 1 and "step-00000010.pt" in restore[0]["skipped"][0], "the log says so too"
    assert json.loads(stdout)["steps"] == 10


def test_item15_out_that_is_a_file_exits_2_before_ray(cli, no_ray, tmp_path: Path) -> None:
    f = tmp_path / "out.txt"
    f.write_text("a file, not a directory")
    code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(f))
    assert code == 2, err
    assert "not a directory" in err and "--out" in err
    assert f.read_text() == "a file, not a directory"
    code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(f / "sub"))
    assert code == 2 and "internal error" not in err


def test_item15_unwritable_out_exits_2_before_ray(cli, no_ray, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        target = ro / "run"
    else:  # root ignores file modes; /sys refuses new directories even to root
        if not Path("/sys").is_dir():
            pytest.skip("no read-only location to test against as root")
        target = Path("/sys/spotwise-test-unwritable")
    try:
        code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(target))
    finally:
        if os.geteuid() != 0:
            (tmp_path / "ro").chmod(0o700)
    assert code == 2, err
    assert "--out" in err and "internal error" not in err


# ============================================================================ item 19
def _enospc(*a: Any, **k: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_item19_disk_full_during_checkpoint_write_leaves_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import save_checkpoint

    out = tmp_path / "run"
    save_checkpoint(out, 5, _state(5))
    before = _manifest(out)

    def partial_save(obj: Any, f: Any, *a: Any, **k: Any) -> None:
        f.write(b"PK\x03\x04 half a checkpoint")
        _enospc()

    monkeypatch.setattr(torch, "save", partial_save)
    with pytest.raises(InputError, match="disk is full") as ei:
        save_checkpoint(out, 10, _state(10))
    assert str(out / "checkpoints") in str(ei.value)
    assert _tmp_files(out) == []
    assert not (out / "checkpoints" / "step-00000010.pt").exists()
    assert _manifest(out) == before


def test_item19_disk_full_writing_the_manifest_leaves_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.errors import InputError
    from spotwise.events import atomic_write_text

    target = tmp_path / "summary.json"
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(InputError, match="disk is full"):
        atomic_write_text(target, "{}\n")
    assert _tmp_files(tmp_path) == [] and not target.exists()


def test_item19_disk_full_mid_run_exits_2_and_says_so(cli, ray_session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    monkeypatch.setattr(torch, "save", lambda *a, **k: _enospc())
    code, _, err = cli("run", str(_spec_file(tmp_path)), "--out", str(out), "--json")
    assert code == 2, err
    assert "disk is full" in err and "internal error" not in err
    assert _tmp_files(out) == []
