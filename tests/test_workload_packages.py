"""The workload's own packages on the nodes (issue 42 item 3): ``workload.packages`` and
``workload.requirements`` are checked at load and installed by the emitted setups, each value one shell word.

The setup's install lines are run here with the venv's ``python`` replaced by a recorder, so what pip would
receive is compared word for word with the spec's values (requirements with markers, extras, URLs and shell
characters included).  tests/test_emit_rehearsal.py installs real wheels through them in a fresh venv.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.config import load_spec, spec_from_dict
from spotwise.errors import InputError
from spotwise.planner import emit

REPO = Path(__file__).resolve().parents[1]
URI = "s3://bucket/spotwise-job"

#: requirements a user writes, the awkward ones included (markers with quotes, extras, a URL, a semicolon, $)
PACKAGES = ["timm==1.0.9", "einops>=0.8", "transformers[torch]>=4.40; python_version >= \"3.10\"",
            "mylib @ git+https://github.com/me/mylib.git@v1.2", "weird-name_ok.1 ~= 2.0",
            "pywin32; os_name == 'nt' and platform_release != '$(reboot)'"]


def _spec_dict(**workload: Any) -> dict[str, Any]:
    d = yaml.safe_load((REPO / "examples" / "p3-24h-traces.yaml").read_text())
    d["workload"].update(workload)
    return d


def _rec() -> dict[str, Any]:
    return {"strategy": "one-bid", "place": "us-east-1b", "instance": "p3.2xlarge", "workers": 4, "bids": [0.95] * 4,
            "expected_cost": 12.5, "ranked_places": [{"zone": "us-east-1b", "instance": "p3.2xlarge"}]}


@pytest.mark.parametrize("value, field, says", [
    (["-e ."], "packages[0]", "pip option"),
    (["--index-url=https://evil.example/simple"], "packages[0]", "pip option"),
    (["https://example.com/x-1.0-py3-none-any.whl"], "packages[0]", "NAME @ URL"),
    (["timm==1.0\nrm -rf /"], "packages[0]", "control character"),
    (["timm", "timm"], "packages[1]", "twice"),
    (["not a requirement!"], "packages[0]", "not a pip requirement"),
    ({"timm": "1.0"}, "packages", "YAML list"),
    ([f"p{i}" for i in range(101)], "packages", "requirements file"),
])
def test_bad_packages_exit_2_at_load_naming_the_entry(value: Any, field: str, says: str) -> None:
    with pytest.raises(InputError) as e:
        spec_from_dict(_spec_dict(packages=value))
    assert e.value.where.endswith(field) and says in str(e.value), (e.value.where, str(e.value))


def test_good_packages_load_as_given() -> None:
    assert spec_from_dict(_spec_dict(packages=PACKAGES)).workload.packages == PACKAGES
    with pytest.raises(InputError, match="YAML list"):
        spec_from_dict(_spec_dict(packages="timm==1.0.9"))
    with pytest.raises(InputError) as e:
        spec_from_dict(_spec_dict(requirements="reqs.txt\u202e"))
    assert e.value.where.endswith("requirements")


def _recorded_installs(setup: str, tmp: Path) -> list[list[str]]:
    """Run the setup's install lines after spotwise's with a recorder as the venv's python: pip's argv each."""
    home = tmp / "home"
    (home / "spotwise-venv" / "bin").mkdir(parents=True, exist_ok=True)
    log = tmp / "argv.jsonl"
    rec = home / "spotwise-venv" / "bin" / "python"
    rec.write_text(f"#!/usr/bin/env python3\nimport json, sys\nopen({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    rec.chmod(0o755)
    lines = setup.splitlines()
    start = next(i for i, ln in enumerate(lines) if "SPOTWISE_INSTALL" in ln and "pip install" in ln) + 1
    end = next(i for i, ln in enumerate(lines) if 'bin/spotwise" --help' in ln)
    body = "\n".join(["set -e", *lines[start:end]])
    res = subprocess.run(["bash", "-c", body], env={**os.environ, "HOME": str(home)}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_emitted_setups_install_the_packages_and_the_requirements_file_word_for_word(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "requirements.txt").write_text("timm==1.0.9\n--extra-index-url https://download.pytorch.org/whl/cu121\n")
    d = _spec_dict(packages=PACKAGES, requirements="requirements.txt")
    d["market"]["traces"] = []  # the example's traces live outside this folder; none are needed to emit
    (job / "spec.yaml").write_text(yaml.safe_dump(d))
    spec = load_spec(str(job / "spec.yaml"))
    assert spec.workload.requirements == str((job / "requirements.txt").resolve())
    task = emit.skypilot_task(_rec(), spec, uri=URI)
    cluster = emit.ray_cluster_config(_rec(), spec)
    for setup, mounts in ((task["setup"], task["file_mounts"]), (cluster["setup_commands"][0], cluster["file_mounts"])):
        target = next(t for t, s in mounts.items() if s == str((job / "requirements.txt").resolve()))
        assert target.startswith("~/spotwise-job/inputs/")
        got = _recorded_installs(setup, tmp_path)
        # after spotwise and s3fs (outputs.uri): the packages as given, then the mounted file
        assert got[-2] == ["-m", "pip", "install", "-q", *PACKAGES]
        assert got[-1] == ["-m", "pip", "install", "-q", "-r", str(tmp_path / "home" / target[2:])]
        (tmp_path / "argv.jsonl").unlink()
    # the nodes' spec points at the mounted copy, relative to the spec's folder there
    from spotwise.planner.emit.files import node_files, node_spec_dict

    node = node_spec_dict(spec, node_files(spec))
    assert f"~/spotwise-job/{node['workload']['requirements']}" == target
    assert node["workload"]["packages"] == PACKAGES


def test_without_workload_packages_the_setup_installs_nothing_more(tmp_path: Path) -> None:
    spec = spec_from_dict(_spec_dict())
    spec.market.traces = []
    got = _recorded_installs(emit.skypilot_task(_rec(), spec, uri="file:///shared/run")["setup"], tmp_path)
    # a p3.2xlarge node installs NVML's bindings for the GPU busy share (GPU_PACKAGES), nothing of the workload's
    from spotwise.planner.emit.scripts import GPU_PACKAGES

    assert got == [["-m", "pip", "install", "-q", *GPU_PACKAGES]]


def test_a_missing_requirements_file_exits_2_at_load(tmp_path: Path) -> None:
    d = _spec_dict(requirements="nope.txt")
    d["market"]["traces"] = []
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(d))
    with pytest.raises(InputError) as e:  # issue 54 item 9: at load, not only at --emit
        load_spec(str(tmp_path / "spec.yaml"))
    assert "workload.requirements" in str(e.value) and "does not exist" in str(e.value)


def test_the_planned_spec_keeps_them_with_the_requirements_path_relative_to_it(tmp_path: Path) -> None:
    import spotwise
    from test_planned_spec import SPEC, _prices

    _prices(tmp_path / "data")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "requirements.txt").write_text("einops\n")
    d = yaml.safe_load(SPEC.format(target="iterations: 200"))
    d["market"]["traces"] = [str(tmp_path / "data" / "c5.json")]
    d["workload"].update(packages=PACKAGES[:2], requirements=str(tmp_path / "job" / "requirements.txt"))
    (tmp_path / "out").mkdir()
    spotwise.plan(d, pilot_steps=10, write_spec=tmp_path / "out" / "planned.yaml")
    doc = yaml.safe_load((tmp_path / "out" / "planned.yaml").read_text())
    assert doc["workload"]["requirements"] == os.path.join("..", "job", "requirements.txt")
    assert doc["workload"]["packages"] == PACKAGES[:2]
    spec = load_spec(tmp_path / "out" / "planned.yaml")
    assert Path(spec.workload.requirements) == (tmp_path / "job" / "requirements.txt").resolve()


def test_a_resume_may_change_what_the_nodes_install_but_not_the_workload() -> None:
    from spotwise.control.rundir_io import check_resume_changes

    recorded = spec_from_dict(_spec_dict())
    given = spec_from_dict(_spec_dict(packages=["timm==1.0.9"], requirements="requirements.txt"))
    changes = check_resume_changes(recorded, given, "--resume run")
    assert set(changes) == {"workload.packages", "workload.requirements"}
    with pytest.raises(InputError, match="workload.batch_size"):
        check_resume_changes(recorded, spec_from_dict(_spec_dict(packages=["timm"], batch_size=7)), "--resume run")
