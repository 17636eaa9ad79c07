"""Issue 42 item 5: ``spotwise plan --write-spec FILE`` writes the user's spec -- comments, order and
layout kept -- with the plan's decisions applied and marked, its paths relative to the written file
(no symbolic link resolved), so it loads from another folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.timeout(300)

SPEC = """\
# my job: a small CNN on the spot market of a price series I keep beside this file
name: mine
workload:
  name: mlp-digits          # the built-in digits MLP
  batch_size: 16
target:
  {target}
deadline: 2h
cluster:
  instance_type: c5.xlarge
  workers: 2
  coordinator_instance: c5.large
  bids: 0.2                 # $/h
market:
  traces: [prices/c5.json]   # relative to this file
  revocation: {{model: bid}}
  billing: per-second
outputs: {{plots: false}}
"""


def _prices(folder: Path) -> None:
    import json

    folder.mkdir(parents=True)
    pts = [{"Timestamp": f"2020-01-01T{h:02d}:00:00Z", "SpotPrice": f"{0.06 + 0.01 * (h % 5):.3f}",
            "InstanceType": "c5.xlarge", "AvailabilityZone": "us-east-1a", "ProductDescription": "Linux/UNIX"}
           for h in range(24)]
    (folder / "c5.json").write_text(json.dumps({"SpotPriceHistory": pts}))


@pytest.mark.parametrize("target,length", [("iterations: 200", "iterations"), ("samples: 6400", "samples")])
def test_the_written_spec_is_the_users_with_the_plan_marked_and_loads_elsewhere(
        cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, length: str) -> None:
    real = tmp_path / "real" / "job"
    _prices(real / "prices")
    (real / "job.yaml").write_text(SPEC.format(target=target))
    os.symlink(real, tmp_path / "link")  # the user's folder reached through a link: kept as given
    out = tmp_path / "planned" / "here"
    out.mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "link")
    monkeypatch.setenv("PWD", str(tmp_path / "link"))  # as the user's shell has it
    code, _, err = cli("plan", "job.yaml", "--pilot-steps", "10", "--write-spec", str(out / "planned.yaml"))
    assert code == 0, err
    text = (out / "planned.yaml").read_text()
    assert text.startswith("# mine with the plan applied: ")
    assert "# my job: a small CNN on the spot market" in text and "# the built-in digits MLP" in text, "comments kept"
    assert text.index("workload:") < text.index("target:") < text.index("cluster:") < text.index("market:")
    assert "# planned" in text
    doc = yaml.safe_load(text)
    assert doc["market"]["traces"] == [os.path.relpath(tmp_path / "link" / "prices" / "c5.json", out)]
    assert "/real/" not in text, "no symbolic link resolved"
    assert len(text.splitlines()) < 45, "the user's spec, not a dump of every default"
    if length == "samples":
        assert doc["target"] == {"samples": 6400} and "iterations" not in doc["target"], "the job's length stays"
    # it loads from any folder: its paths are the written file's
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    from spotwise.config import load_spec

    spec = load_spec(out / "planned.yaml")
    assert Path(spec.market.traces[0]).resolve() == (real / "prices" / "c5.json").resolve()
    assert spec.cluster.workers == doc["cluster"]["workers"] and spec.name == "mine"
    # the pair moves together
    os.rename(tmp_path / "planned", tmp_path / "moved")
    os.rename(tmp_path / "real", tmp_path / "also-moved")
    (tmp_path / "link").unlink()
    os.symlink(tmp_path / "also-moved" / "job", tmp_path / "link")
    assert load_spec(tmp_path / "moved" / "here" / "planned.yaml").name == "mine"


def test_a_spec_given_as_a_dict_is_written_whole_with_relative_paths(tmp_path: Path) -> None:
    import spotwise

    real = tmp_path / "data"
    _prices(real)
    d = yaml.safe_load(SPEC.format(target="iterations: 200"))
    d["market"]["traces"] = [str(real / "c5.json")]
    (tmp_path / "out").mkdir()
    spotwise.plan(d, pilot_steps=10, write_spec=tmp_path / "out" / "planned.yaml")
    doc = yaml.safe_load((tmp_path / "out" / "planned.yaml").read_text())
    assert doc["market"]["traces"] == [os.path.join("..", "data", "c5.json")]
    assert doc["name"] == "mine" and doc["cluster"]["workers"] >= 1
