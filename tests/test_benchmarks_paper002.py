"""The paper 002 reproductions benchmark runs (``--quick``) and shows the direction of its effect:
workers split across regions train slower and pay egress (Fig. 8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _load import bound

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]


def _row(out: str, config: str) -> list[str]:
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == config:
            return cells
    raise AssertionError(f"no row {config!r} in:\n{out}")


def test_fig8_quick_prints_the_table_and_cross_region_is_slower() -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "paper002_reproductions.py"), "--only", "fig8", "--quick"],
                          capture_output=True, text=True, timeout=bound(110), cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Fig. 8 -- location" in out and "slowdown vs (4,0,0)" in out and "link model (catalog networks: gcp)" in out
    same, split = _row(out, "(4, 0, 0)"), _row(out, "(2, 2, 0)")
    assert same[2] == "+0.0%" and float(same[4]) == 0.0, "one region: no slowdown, no egress"
    assert float(split[2].rstrip("%")) > 10.0, "workers outside the parameter server's region slow training"
    assert float(split[1]) > float(same[1]) and float(split[4]) > 0.0, "slower, and the crossing bytes pay egress"


def test_fig7_quick_the_parameter_server_limits_4_v100() -> None:
    """With the PS network model (ps_gbps 8, one server) 4 V100 are PS-bound: slower than without it, and the
    mixes' slowdown against them shrinks (the paper's observation; without the model every mix is the sum of
    its catalog speeds)."""
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "paper002_reproductions.py"), "--only", "fig7", "--quick"],
                          capture_output=True, text=True, timeout=bound(110), cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "Fig. 7 -- heterogeneous hardware" in out and "no PS network model / 1 PS at ps_gbps 8" in out
    pair = lambda cell: [float(x.strip().rstrip("%")) for x in cell.split("/")]
    v100, mix = _row(out, "(0, 0, 4)"), _row(out, "(2, 1, 1)")
    no_ps, one_ps = pair(v100[1])
    assert one_ps > 1.3 * no_ps, "one 8 Gbps parameter server slows 4 V100 markedly"
    slow_no_ps, slow_one_ps = pair(mix[5])
    assert slow_one_ps < slow_no_ps, "a PS-bound 4 V100 loses less to a slower mix"
