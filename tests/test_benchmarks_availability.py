"""The availability benchmark (issue 23) runs (``--quick``) and the availability guard is no worse than
the previous default against the free-move bound, meeting every deadline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _load import bound

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces" / "skypilot-spot-traces"


def test_quick_run_prints_the_table_and_the_guard_beats_the_old_default() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"SkyPilot traces not at {TRACES}")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "availability_sweep.py"), "--quick"],
                          capture_output=True, text=True, timeout=bound(380), cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows: dict = {}
    multi: dict = {}
    goals: list = []
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 14 and cells[2] in ("spot+guard", "spotwise", "spotwise-avail", "(hindsight schedule)") or \
                len(cells) == 14 and cells[2].startswith("(restart-aware bound)"):
            rows[(cells[1], cells[2].split(":")[0])] = cells
        if len(cells) == 10 and cells[0].startswith("preempt 4-node") and cells[3] in ("spot+guard", "spotwise-avail", "hybrid"):
            multi[(cells[2], cells[3])] = cells
        if len(cells) == 9 and cells[0].startswith("preempt 4-node"):
            goals = cells
    assert len(rows) == 15, proc.stdout
    for f in ("1.25x", "1.5x", "2x"):
        avail, old = rows[(f, "spotwise-avail")], rows[(f, "spotwise")]
        lower, upper = rows[(f, "(restart-aware bound)")], rows[(f, "(hindsight schedule)")]
        assert avail[3] == "100.0%"
        x = {k: float(c[5].rstrip("x")) for k, c in (("avail", avail), ("old", old), ("lo", lower), ("hi", upper))}
        # against the free-move bound: 1 <= restart-aware bound <= hindsight schedule, and the guard is no worse
        # than the old default and never below the restart-aware bound
        assert 1.0 <= x["lo"] <= x["hi"] and x["lo"] <= x["avail"] <= x["old"], x
    # issue 31: the 4-node set as a 4-node job, gang and elastic: every deadline, never below the restart-aware
    # bound, and the default (spotwise-avail, elastic) within 1.05x of its hindsight schedule at 1.5x
    assert len(multi) == 6, proc.stdout
    for cells in multi.values():
        assert cells[4] == "100.0%" and float(cells[7].rstrip("x")) >= 1.0, cells
    assert goals and float(goals[7].rstrip("x")) <= 1.05, goals
    assert "result:" not in proc.stdout, "a quick run must not overwrite the recorded results"
