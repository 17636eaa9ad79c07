"""Issue 18, checkpoint items, on a real (tiny) run directory.

* item 12 -- when every checkpoint of a run directory is invalid, ``run --resume`` used to say "it
  died before its first checkpoint"; it now says how many checkpoints were found and rejected, and
  why each one was (exit 2).
* item 9 -- a full disk while saving a checkpoint exited 1 (torch's ``RuntimeError: unexpected pos
  N vs M``, "a bug in spotwise"): it is now a full disk (exit 2), the temporary file is removed,
  the previous checkpoint stays, and the message says how much space the checkpoint needs and how
  much is free.  Tested on a real, tiny tmpfs (root only: skipped where ``mount`` is refused) and,
  everywhere, with a file object that raises ENOSPC under the real ``torch.save``.
"""

from __future__ import annotations

import builtins
import copy
import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _checkpoints import valid_state
import torch
import yaml

pytestmark = pytest.mark.timeout(240)

SPEC: dict[str, Any] = {
    "name": "hardening-checkpoints",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 10},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 5, "plots": False},
}


def _invoke(*args: str) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from spotwise.cli import app

    res = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture(scope="module")
def finished_run(ray_session, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run: checkpoints at steps 5 and 10; the tests work on copies of it."""
    base = tmp_path_factory.mktemp("finished")
    spec = base / "job.yaml"
    spec.write_text(yaml.safe_dump(copy.deepcopy(SPEC)))
    out = base / "run"
    code, stdout, err = _invoke("run", str(spec), "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["steps"] == 10
    assert sorted(p.name for p in (out / "checkpoints").glob("step-*.pt")) == ["step-00000005.pt", "step-00000010.pt"]
    return out


@pytest.fixture()
def run_copy(finished_run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(finished_run, dst, symlinks=True)
    return dst


def _rehash(out: Path) -> None:
    """Make the manifest's checksums match the files again (content problems, not torn files)."""
    man = out / "checkpoints" / "manifest.json"
    data = json.loads(man.read_text())
    for e in data["checkpoints"]:
        e["sha256"] = hashlib.sha256((out / "checkpoints" / e["file"]).read_bytes()).hexdigest()
    man.write_text(json.dumps(data))


# ============================================================================ item 12
def test_item12_every_checkpoint_torn_resume_names_the_count_and_each_reason(run_copy: Path) -> None:
    ck = run_copy / "checkpoints"
    five, ten = ck / "step-00000005.pt", ck / "step-00000010.pt"
    five.write_bytes(b"")  # emptied
    ten.write_bytes(ten.read_bytes()[: ten.stat().st_size // 2])  # truncated
    code, _, err = _invoke("run", "--resume", str(run_copy), "--json")
    assert code == 2, err
    assert "2 checkpoints found" in err and "before its first checkpoint" not in err
    assert "step-00000005.pt: it is empty" in err
    assert "step-00000010.pt: its checksum does not match" in err
    assert "Traceback" not in err


def test_item12_checkpoints_of_another_model_are_rejected_with_the_shape(run_copy: Path) -> None:
    """Checksums verify but the content is another spec's (a wrong parameter shape) or not a checkpoint."""
    ck = run_copy / "checkpoints"
    state = torch.load(ck / "step-00000010.pt", weights_only=True)
    state["params"] = torch.zeros(7)
    torch.save(state, ck / "step-00000010.pt")
    (ck / "step-00000005.pt").write_bytes(b"not a torch file at all" * 10)
    _rehash(run_copy)
    code, _, err = _invoke("run", "--resume", str(run_copy), "--json")
    assert code == 2, err
    assert "2 checkpoints found" in err
    assert "step-00000010.pt: params has shape (7,)" in err
    assert "step-00000005.pt: it is not a loadable checkpoint" in err
    assert "Traceback" not in err


def test_item12_a_run_without_checkpoints_still_says_it_stopped_before_the_first(tmp_path: Path) -> None:
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import require_checkpoint

    with pytest.raises(InputError, match="before its first checkpoint"):
        require_checkpoint(tmp_path, warn=None)


def test_item12_checkpoint_files_the_manifest_does_not_list_are_counted(tmp_path: Path) -> None:
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import require_checkpoint

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-00000003.pt").write_bytes(b"x")
    with pytest.raises(InputError, match="1 checkpoint found.*step-00000003.pt: not listed in manifest.json"):
        require_checkpoint(tmp_path, warn=None)


@pytest.mark.parametrize("counters, reason", [
    ({"made_up": 1}, "counters holds 'made_up', which is no counter of a run"),
    ({"revocations": 1.5}, "counters.revocations is 1.5, not a count"),
    ({"joins": -1}, "counters.joins is -1, not a count"),
    ({"notices": True}, "counters.notices is True, not a count"),
    ({"idle_s": float("nan")}, "counters.idle_s is nan, not a finite number >= 0"),
    ({"samples": "12"}, "counters.samples is '12', not a count"),
])
def test_issue54_a_checkpoint_whose_counters_are_not_a_runs_is_refused_with_exit_2(
        run_copy: Path, counters: dict[str, Any], reason: str) -> None:
    """Checksums verify, the counters do not (a hand-made run directory): exit 2 naming the counter, never a
    TypeError out of ``Counters(**...)`` (exit 1)."""
    ck = run_copy / "checkpoints"
    for name in ("step-00000005.pt", "step-00000010.pt"):
        state = torch.load(ck / name, weights_only=True)
        state["counters"].update(counters)
        torch.save(state, ck / name)
    _rehash(run_copy)
    code, _, err = _invoke("run", "--resume", str(run_copy), "--json")
    assert code == 2, err
    assert f"step-00000010.pt: {reason}" in err and "Traceback" not in err


def _put(path: tuple[Any, ...], value: Any) -> Any:
    def change(state: dict[str, Any]) -> None:
        node: Any = state
        for k in path[:-1]:
            node = node[k]
        if value is _DROP:
            node.pop(path[-1])
        else:
            node[path[-1]] = value
    return change


_DROP = object()


@pytest.mark.parametrize("change, reason", [
    (_put(("made_up",), 1), "it holds 'made_up', which no spotwise checkpoint holds"),
    (_put(("sampler", "extra"), 1), "sampler holds 'extra'"),
    (_put(("sampler", "cursor"), "3"), "sampler.cursor is '3', not a count"),
    (_put(("timeline", "t"), float("nan")), "timeline.t is nan"),
    (_put(("timeline", "popped"), -1), "timeline.popped is -1, not a count"),
    (_put(("carried",), _DROP), "it lacks carried"),
    (_put(("counters", "joins"), _DROP), "counters lacks joins"),
    (_put(("ledger", "open", 0, "t0"), -5.0), "ledger.open[].t0 is -5.0"),
    (_put(("cost", "total"), float("inf")), "the checkpoint's cost.total is inf"),
    (_put(("place",), "c5.xlarge"), "place is 'c5.xlarge', not [instance type, region or null]"),
    (_put(("dur_rng",), "{}"), "dur_rng is not a random generator's state"),
    (_put(("plane_carried",), _DROP), "it lacks plane_carried"),
], ids=["top-level", "sampler-key", "sampler-type", "timeline-nan", "timeline-negative", "carried-missing",
        "counter-missing", "ledger-negative", "cost-inf", "place-type", "rng-state", "plane-totals-missing"])
def test_issue54_a_checkpoint_whose_records_are_not_spotwises_is_refused_with_exit_2(
        run_copy: Path, change: Any, reason: str) -> None:
    """Every record a resume reads (tests/test_checkpoint_records.py has every class on every record), end to
    end: exit 2 naming the record and why, never exit 1 (``KeyError: 'n'``, an ``IndexError`` from ``place``)."""
    ck = run_copy / "checkpoints"
    for name in ("step-00000005.pt", "step-00000010.pt"):
        state = torch.load(ck / name, weights_only=True)
        change(state)
        torch.save(state, ck / name)
    _rehash(run_copy)
    code, _, err = _invoke("run", "--resume", str(run_copy), "--json")
    assert code == 2, err
    assert f"step-00000010.pt: {reason}" in " ".join(err.split()) and "Traceback" not in err, err


@pytest.mark.parametrize("change, reason", [
    (_put(("sampler", "n"), 10**6), "the checkpoint's sampler"),
    (_put(("timeline", "popped"), 10**6), "the checkpoint's market position"),
], ids=["another-data-set", "timeline-past-its-end"])
def test_issue54_a_checkpoint_that_does_not_fit_the_job_is_refused_with_exit_2(
        run_copy: Path, change: Any, reason: str) -> None:
    ck = run_copy / "checkpoints"
    (ck / "step-00000010.pt").unlink()
    state = torch.load(ck / "step-00000005.pt", weights_only=True)
    change(state)
    torch.save(state, ck / "step-00000005.pt")
    (ck / "manifest.json").write_text(json.dumps({"checkpoints": [{"file": "step-00000005.pt", "step": 5, "sha256": ""}]}))
    _rehash(run_copy)
    code, _, err = _invoke("run", "--resume", str(run_copy), "--json")
    assert code == 2 and reason in err and "Traceback" not in err, err


# ============================================================================ item 9
def _tmp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if ".tmp-" in p.name)


def _state(step: int, n: int = 4) -> dict[str, Any]:
    return valid_state(step, (n,))


@pytest.fixture()
def tiny_disk(tmp_path: Path):
    """``mount(size)``: a real tmpfs of ``size`` (e.g. "256k") under tmp_path; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)
        if res.returncode != 0:
            pytest.skip(f"mount -t tmpfs is not permitted here: {res.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _needed_bytes(message: str) -> float:
    m = re.search(r"the checkpoint needs ([\d.,]+) (B|KiB|MiB|GiB)", message)
    assert m, message
    return float(m.group(1).replace(",", "")) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)]


def _assert_full_disk_handled(out: Path, message: str, state_bytes: int) -> None:
    from spotwise.control.checkpoint import require_checkpoint

    assert "disk is full" in message and "free there" in message
    assert state_bytes <= _needed_bytes(message) <= state_bytes + 8 * 1024  # the tensors plus the zip's few kB
    assert _tmp_files(out) == []
    assert not (out / "checkpoints" / "step-00000010.pt").exists()
    state, path = require_checkpoint(out, warn=None)  # the previous checkpoint is intact
    assert path.name == "step-00000005.pt" and state["step"] == 5
    assert "continues from step 5" in message


def test_item9_a_real_full_disk_while_saving_a_checkpoint_is_a_full_disk(tiny_disk) -> None:
    from spotwise.errors import InputError
    from spotwise.control.checkpoint import save_checkpoint

    out = tiny_disk("256k") / "run"
    save_checkpoint(out, 5, _state(5))
    before = (out / "checkpoints" / "manifest.json").read_text()
    big = _state(10, n=100_000)  # 400 kB of parameters: torch's zip writer runs out of disk mid-record
    with pytest.raises(InputError) as ei:
        save_checkpoint(out, 10, big)
    msg = str(ei.value)
    assert str(out / "checkpoints") in msg
    assert (out / "checkpoints" / "manifest.json").read_text() == before
    _assert_full_disk_handled(out, msg, 100_000 * 4)
    free = shutil.disk_usage(out).free
    assert re.search(r"([\d.,]+ (B|KiB|MiB)) are free there", msg)
    assert free < 400_000


def test_item9_torch_short_write_over_enospc_is_recognised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No mount needed: the file object raises ENOSPC after 1 kB; the real torch.save turns that into
    its own ``RuntimeError: ... unexpected pos``, which must still be read as a full disk."""
    import spotwise.control.checkpoint as ck
    from spotwise.errors import InputError

    out = tmp_path / "run"
    ck.save_checkpoint(out, 5, _state(5))
    real_open = builtins.open

    class FillingFile:
        def __init__(self, fh: Any) -> None:
            self.fh, self.written = fh, 0

        def write(self, b: Any) -> int:
            n = memoryview(b).nbytes
            if self.written + n > 1024:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += n
            return self.fh.write(b)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.fh, name)

        def __enter__(self) -> FillingFile:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.fh.close()

    def filling_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        fh = real_open(file, mode, *a, **k)
        return FillingFile(fh) if "w" in mode and ".tmp-" in str(file) else fh

    monkeypatch.setattr(ck, "open", filling_open, raising=False)
    # the real torch error, as save_checkpoint sees it
    with pytest.raises(RuntimeError, match="unexpected pos") as raw:
        with filling_open(tmp_path / ".probe.tmp-1", "wb") as fh:
            torch.save(_state(10, n=10_000), fh)
    assert isinstance(raw.value.__context__, OSError) and raw.value.__context__.errno == errno.ENOSPC
    with pytest.raises(InputError, match="disk is full") as ei:
        ck.save_checkpoint(out, 10, _state(10, n=10_000))
    monkeypatch.undo()
    _assert_full_disk_handled(out, str(ei.value), 10_000 * 4)


def test_item9_a_run_whose_disk_fills_exits_2_with_the_space_needed(tiny_disk, ray_session, tmp_path: Path) -> None:
    """End to end on a real 48 kB tmpfs: the run's small files fit, its first checkpoint (~41 kB) does
    not.  Before the fix: exit 1, "RuntimeError: unexpected pos 2304 vs 2198 (this is a bug in spotwise)"."""
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(copy.deepcopy(SPEC)))
    out = tiny_disk("48k") / "run"
    code, _, err = _invoke("run", str(spec), "--out", str(out), "--json")
    assert code == 2, err
    assert "disk is full" in err and "the checkpoint needs" in err and "free there" in err
    assert "internal error" not in err and "unexpected pos" not in err
    assert _tmp_files(out) == []
