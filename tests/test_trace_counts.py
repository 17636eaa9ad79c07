"""Issue 31: multi-node SkyPilot traces -- the node count their folder names, the refusal of a count
above it, and the time share at each count (``spotwise.market.counts``, ``spotwise traces show``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import InputError
from spotwise.market.counts import bucket_shares, count_shares, series_nodes
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.traces.skypilot import load_skypilot_json
from spotwise.reports.traces_view import format_count_shares, series_row


def _trace(root: Path, data: list[float], *, nodes_folder: str = "16-node", prices: list[float] | None = None) -> Path:
    d = root / nodes_folder / "aws-08-27-2023"
    d.mkdir(parents=True, exist_ok=True)
    f = d / "us-east-1a_v100_1.json"
    doc: dict[str, object] = {"metadata": {"gap_seconds": 300}, "data": data}
    if prices is not None:
        doc["prices"] = prices
    f.write_text(json.dumps(doc))
    return f


def _series(values: list[float], times: list[float], end: float, **extra: object) -> StepSeries:
    return StepSeries(np.array(times, dtype=float), np.array(values, dtype=float), end,
                      SeriesMeta(id="hand", kind="availability", extra=dict(extra)))


# ------------------------------------------------------------------------------------ the loader
def test_folder_node_count_goes_into_every_series(tmp_path: Path) -> None:
    f = _trace(tmp_path, [0, 16, 3, 16], prices=[1.0, 1.0, 1.1, 1.2])
    avail, price = load_skypilot_json(f)
    assert avail.meta.extra["nodes"] == 16 and type(avail.meta.extra["nodes"]) is int
    assert price.meta.extra["nodes"] == 16
    assert avail.meta.id == "skypilot/aws-08-27-2023:us-east-1a:v100_1"


@pytest.mark.parametrize("folder, nodes", [("4-nodes", 4), ("1-node", 1), ("nodes", None), ("16-node-x", None),
                                           ("availability", None)])  # 0-node is refused: tests/test_hardening_fs.py
def test_folder_names(tmp_path: Path, folder: str, nodes: int | None) -> None:
    (s,) = load_skypilot_json(_trace(tmp_path, [0, 1, 1], nodes_folder=folder))
    assert s.meta.extra.get("nodes") == nodes


def test_no_nodes_folder_sets_no_key(tmp_path: Path) -> None:
    d = tmp_path / "aws-08-27-2023"
    d.mkdir()
    (d / "us-east-1a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [0, 5, 2]}))
    (s,) = load_skypilot_json(d / "us-east-1a_v100_1.json")
    assert "nodes" not in s.meta.extra
    assert series_nodes(s) == 5  # the largest value stands in


def test_count_above_folder_refused(tmp_path: Path) -> None:
    f = _trace(tmp_path, [0, 16, 17, 3])
    with pytest.raises(InputError) as e:
        load_skypilot_json(f)
    msg = str(e.value)
    assert "data[2] = 17 is above the 16 nodes its folder '16-node' names" in msg
    assert "move the file to the folder of its node count" in msg


def test_one_node_folder_refuses_counts(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="above the 1 nodes its folder '1-node'"):
        load_skypilot_json(_trace(tmp_path, [0, 1, 2], nodes_folder="1-node"))


def test_existing_cap_still_applies(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="above 1e\\+06 instances"):
        load_skypilot_json(_trace(tmp_path, [0, 2e6], nodes_folder="3000000-node"))
    with pytest.raises(InputError, match="negative"):
        load_skypilot_json(_trace(tmp_path, [0, -1]))


# ------------------------------------------------------------------------------------ the shares
def test_count_shares_exact() -> None:
    # 0 for 40 s, 3 for 10 s, 16 for 30 s, 8 for 20 s: 100 s in all
    s = _series([0, 3, 16, 8], [0, 40, 50, 80], 100, nodes=16)
    assert count_shares(s) == {0: 0.4, 3: 0.1, 8: 0.2, 16: 0.3}
    assert series_nodes(s) == 16
    buckets = bucket_shares(count_shares(s), 16)
    assert [(b.label, b.share) for b in buckets] == [("0", 0.4), ("1-7", 0.1), ("8-15", 0.2), ("16", 0.3)]


def test_count_shares_always_names_zero_and_full() -> None:
    s = _series([1, 0], [0, 30], 30)  # the last point has no time: all time at 1
    assert count_shares(s) == {0: 0.0, 1: 1.0}
    s16 = _series([16], [0], 60, nodes=16)
    assert count_shares(s16) == {0: 0.0, 16: 1.0}
    assert format_count_shares(series_row(s16)) == "0: 0%, 16: 100%"
    assert count_shares(_series([0, 1, 0], [0, 10, 40], 100)) == pytest.approx({0: 0.7, 1: 0.3})


def test_small_node_counts_listed_one_by_one() -> None:
    s = _series([0, 1, 3, 4], [0, 10, 20, 30], 100, nodes=4)
    assert format_count_shares(series_row(s)) == "0: 10%, 1: 10%, 3: 10%, 4: 70%"


def test_row_json_and_table_text() -> None:
    s = _series([0, 3, 16, 8, 0], [0, 40, 50, 80, 100], 100, nodes=16)  # last point: zero time
    row = series_row(s)
    assert row["nodes"] == 16
    assert row["count_shares"] == {"0": 0.4, "3": 0.1, "8": 0.2, "16": 0.3}
    assert format_count_shares(row) == "0: 40%, 1-7: 10%, 8-15: 20%, 16: 30%"


# ------------------------------------------------------------------------------------ the CLI
def test_cli_refuses_count_above_folder(cli, tmp_path: Path) -> None:
    f = _trace(tmp_path, [0, 16, 17])
    code, out, err = cli("traces", "show", str(f))
    assert code == 2, out + err
    assert "above the 16 nodes its folder '16-node' names" in err and "Traceback" not in err


def test_cli_json_holds_shares(cli, tmp_path: Path) -> None:
    # ticks of 300 s: 0 x2, 16 x5, 5 x1, 12 x2 -> shares 0.2, 0.5, 0.1, 0.2
    f = _trace(tmp_path, [0, 0, 16, 16, 16, 16, 16, 5, 12, 12])
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 0, err
    (s,) = json.loads(out)["series"]
    assert s["nodes"] == 16
    assert s["count_shares"] == pytest.approx({"0": 0.2, "5": 0.1, "12": 0.2, "16": 0.5})
    code, out, err = cli("traces", "show", str(f))
    assert code == 0, err
    assert "0: 20%, 1-7: 10%, 8-15: 20%, 16: 50%" in " ".join(out.split())


def test_real_16_node_traces(traces_dir: Path) -> None:
    folder = traces_dir / "skypilot-spot-traces" / "availability" / "16-node"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    files = sorted(folder.glob("*/*.json"))
    assert files
    for f in files:
        (s,) = load_skypilot_json(f)
        assert s.meta.extra["nodes"] == 16 and series_nodes(s) == 16
        shares = count_shares(s)
        assert sum(shares.values()) == pytest.approx(1.0)
        assert set(shares) <= set(range(17)) and {0, 16} <= set(shares)
        raw = json.loads(f.read_text())["data"]
        assert shares[16] == pytest.approx(raw.count(16) / len(raw))  # ticks are equal: shares = tick counts
