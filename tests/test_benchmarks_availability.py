"""The availability benchmark (issue 23) runs (``--quick``) and the availability guard is no worse than
the previous default against the free-move bound, meeting every deadline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces" / "skypilot-spot-traces"


def test_quick_run_prints_the_table_and_the_guard_beats_the_old_default() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"SkyPilot traces not at {TRACES}")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "availability_sweep.py"), "--quick"],
                          capture_output=True, text=True, timeout=280, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[2] in ("spot+guard", "spotwise", "spotwise-avail"):
            rows[(cells[1], cells[2])] = cells
    assert len(rows) == 9, proc.stdout
    for f in ("1.25x", "1.5x", "2x"):
        avail, old = rows[(f, "spotwise-avail")], rows[(f, "spotwise")]
        assert avail[3] == "100.0%"
        assert 1.0 <= float(avail[5].rstrip("x")) <= float(old[5].rstrip("x"))
    assert "result:" not in proc.stdout, "a quick run must not overwrite the recorded results"
