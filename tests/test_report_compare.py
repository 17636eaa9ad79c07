"""``spotwise report DIR1 DIR2 ...``: one page comparing runs and sweeps, like for like (issue 22 item 3)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import spotwise
from _load import bound

BASE: dict[str, Any] = {"name": "cmp", "seed": 1,
                        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 20},
                        "target": {"iterations": 40}, "deadline": "1h",
                        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                        "market": {"revocation": {"model": "lifetime", "mttf_s": 60, "mttr_s": 30}},
                        "outputs": {"checkpoint_every": 0, "plots": False}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cmp")
    out = {}
    steady = {"market": {"revocation": {"model": "none"}}}  # no revocations: every step holds 2 x 16 samples
    for name, over in (("a", steady), ("b", {**steady, "seed": 2, "cluster": {**BASE["cluster"], "coordinator_instance": "c5.xlarge"}}),
                       ("longer", {**steady, "target": {"iterations": 80}})):
        spotwise.simulate({**BASE, **over}, root / name)
        out[name] = root / name
    spotwise.sweep({**BASE, "deadline": "3h", "target": {"iterations": 400}}, spec_market=True, horizon="2d",
                   starts="8h", history="1h", restart="60s", strategies="on-demand,spot+guard", out=root / "sweep")
    out["sweep"] = root / "sweep"
    return out


def test_runs_of_the_same_work_compare_without_flags(runs: dict[str, Path], tmp_path: Path) -> None:
    rep = spotwise.report([runs["a"], runs["b"]], tmp_path / "page.html")
    assert rep.kind == "comparison" and rep.flags == [] and [e["name"] for e in rep.entries] == ["cmp", "cmp"]
    page = (tmp_path / "page.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "loss vs time" in page and "loss vs cost" in page
    assert "not like for like" not in page and str(runs["b"]) in page


def test_runs_that_did_different_work_are_flagged(runs: dict[str, Path], tmp_path: Path) -> None:
    rep = spotwise.report([runs["a"], runs["longer"]], tmp_path / "page.html")
    assert any("different target" in f for f in rep.flags) and any("samples" in f for f in rep.flags)
    assert "not like for like" in (tmp_path / "page.html").read_text()


def test_sweeps_get_a_row_per_strategy_and_the_cli_prints_one_json(runs: dict[str, Path], tmp_path: Path, cli: Any) -> None:
    code, out, err = cli("report", str(runs["a"]), str(runs["sweep"]), "--out", str(tmp_path / "mix.html"), "--json")
    assert code == 0, err
    d = json.loads(out)
    kinds = [e["kind"] for e in d["entries"]]
    assert kinds == ["run", "sweep", "sweep"] and {e.get("strategy") for e in d["entries"][1:]} == {"on-demand", "spot+guard"}
    assert any("runs and sweeps side by side" in f for f in d["flags"])
    code, out, err = cli("report", str(runs["a"]), str(tmp_path / "nope"), "--out", str(tmp_path / "x.html"))
    assert code == 2 and "directory not found" in err
    code, out, err = cli("report", str(runs["a"]), str(runs["b"]), "--out", str(tmp_path / "x.txt"))
    assert code == 2 and ".html" in err


def test_a_single_run_keeps_its_own_report(runs: dict[str, Path], cli: Any) -> None:
    code, out, err = cli("report", str(runs["a"]), "--json")
    assert code == 0 and json.loads(out)["steps"] == 40
    assert (runs["a"] / "report" / "index.html").is_file()


def test_the_page_renders_in_a_real_headless_browser(runs: dict[str, Path], tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (the README's test command installs it)")
    page = tmp_path / "page.html"
    spotwise.report([runs["a"], runs["b"], runs["sweep"]], page)
    shot = tmp_path / "shot.png"
    res = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1800", f"--screenshot={shot}",
                          page.as_uri()], capture_output=True, text=True, timeout=bound(120))
    assert res.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, res.stderr[-2000:]
    import matplotlib.image as mpimg

    img = mpimg.imread(shot)
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    assert float(img[..., :3].std()) > 0.05, "the screenshot is not blank: tables and plots were drawn"
