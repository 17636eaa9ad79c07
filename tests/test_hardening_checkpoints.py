"""Issue 18, checkpoint items, on a real (tiny) run directory.

* item 12 -- when every checkpoint of a run directory is invalid, ``run --resume`` used to say "it
  died before its first checkpoint"; it now says how many checkpoints were found and rejected, and
  why each one was (exit 2).
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
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
    from spotwise.runtime.checkpoint import require_checkpoint

    with pytest.raises(InputError, match="before its first checkpoint"):
        require_checkpoint(tmp_path, warn=None)


def test_item12_checkpoint_files_the_manifest_does_not_list_are_counted(tmp_path: Path) -> None:
    from spotwise.errors import InputError
    from spotwise.runtime.checkpoint import require_checkpoint

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step-00000003.pt").write_bytes(b"x")
    with pytest.raises(InputError, match="1 checkpoint found.*step-00000003.pt: not listed in manifest.json"):
        require_checkpoint(tmp_path, warn=None)
