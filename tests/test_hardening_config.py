"""Issue 18 item 10: numeric fields of the collective plane that break a run are refused (exit 2).

``group_timeout_s: 0.000001`` used to exit 0 with status ``no-capacity``, 0 steps and raw Ray
tracebacks (the members' store connect timeout rounded to 0 ms, so no group ever formed);
``local_steps: 1000000`` made one S-MA step outlast the market (``no-capacity``, 0 steps, exit 0).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from _specs import spec_with

from spotwise.config import GROUP_TIMEOUT_RANGE_S, MAX_LOCAL_STEPS
from spotwise.errors import InputError
from _load import bound

BASE: dict[str, Any] = {
    "name": "collective",
    "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 16},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large",
                "data_plane": "collective", "standby": 0, "replica_every": 5, "group_timeout_s": bound(2)},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


@pytest.mark.parametrize("bad", [0.000001, 0.001, 0.5, 3601.0, 1e300, math.inf, math.nan, "2h"])
def test_group_timeout_outside_its_range_is_refused_with_the_range(bad: Any) -> None:
    with pytest.raises(InputError, match=r"\[1, 3600\]") as e:
        spec_with(BASE, cluster__group_timeout_s=bad)
    assert e.value.where.endswith("group_timeout_s")


@pytest.mark.parametrize("good", [1, 5, "30s", 3600])
def test_group_timeout_inside_its_range_is_kept(good: Any) -> None:
    spec = spec_with(BASE, cluster__group_timeout_s=good)
    lo, hi = GROUP_TIMEOUT_RANGE_S
    assert lo <= spec.cluster.group_timeout_s <= hi


def test_group_timeout_is_checked_on_the_parameter_server_plane_too() -> None:
    with pytest.raises(InputError, match="group_timeout_s"):
        spec_with(BASE, cluster__data_plane="ps", cluster__sync="full", cluster__group_timeout_s=0.000001)


def test_local_steps_are_bounded() -> None:
    assert spec_with(BASE, cluster__sync="sma", cluster__local_steps=MAX_LOCAL_STEPS).cluster.local_steps == MAX_LOCAL_STEPS
    with pytest.raises(InputError, match=f"<= {MAX_LOCAL_STEPS}"):
        spec_with(BASE, cluster__sync="sma", cluster__local_steps=1_000_000)


@pytest.mark.parametrize(("field", "value"), [("group_timeout_s", 0.000001), ("local_steps", 1_000_000)])
def test_the_cli_exits_2_naming_the_field_and_its_range(cli, tmp_path: Path, field: str, value: float) -> None:
    spec = {**BASE, "cluster": {**BASE["cluster"], field: value}}
    if field == "local_steps":
        spec["cluster"]["sync"] = "sma"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    for cmd in ("run", "plan", "simulate"):
        code, out, err = cli(cmd, str(path), "--out", str(tmp_path / f"out-{cmd}")) if cmd == "run" else cli(cmd, str(path))
        assert code == 2, (cmd, code, out, err)
        assert f"cluster.{field}" in err and "Traceback" not in err + out
        assert ("[1, 3600]" if field == "group_timeout_s" else f"<= {MAX_LOCAL_STEPS}") in err
    assert not (tmp_path / "out-run").exists() or not any((tmp_path / "out-run").iterdir())
