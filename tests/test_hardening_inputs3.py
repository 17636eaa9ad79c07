"""Issue 30 items 12-14: user input that gave exit 1, hung, or was silently accepted.

Item 12: nesting bombs (deep YAML / ``params`` / one deep line of ``events.jsonl``), 5000-digit
integers and ``pmf`` with ``n_users: 1e8`` exit 2 with a message, never a RecursionError, a
ValueError or a MemoryError.  Item 13: the Python API takes one path or a list of paths and refuses
other types.  Item 14: duplicate YAML keys, conflicting duplicate trace rows, zero prices,
``--strategies ''`` and a Redis port 0 are refused (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spotwise.errors import InputError

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.yaml"
DEEP = 5000


def _demo_with(tmp_path: Path, old: str, new: str) -> Path:
    text = DEMO.read_text(encoding="utf-8")
    assert old in text
    p = tmp_path / "spec.yaml"
    p.write_text(text.replace(old, new, 1), encoding="utf-8")
    return p


def _aws(path: Path, prices: list[str], extra: tuple[tuple[int, str], ...] = ()) -> Path:
    """Daily p3.2xlarge prices in us-east-1b; ``extra``: (day index, price) records appended (repeats)."""
    def rec(i: int, price: str) -> dict[str, str]:
        return {"AvailabilityZone": "us-east-1b", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
                "SpotPrice": price, "Timestamp": f"2020-01-{i + 1:02d}T00:00:00.000Z"}
    recs = [rec(i, p) for i, p in enumerate(prices)] + [rec(i, p) for i, p in extra]
    path.write_text(json.dumps({"SpotPriceHistory": recs}), encoding="utf-8")
    return path


_PRICES = [f"{0.9 + 0.01 * (i % 3):.2f}" for i in range(30)]


# ------------------------------------------------------------------------------------------ item 12
def test_item12_deeply_nested_yaml_spec_exits_2(cli, tmp_path: Path) -> None:
    spec = _demo_with(tmp_path, "  eval_every: 50\n", "  eval_every: 50\n  params: {x: " + "[" * DEEP + "]" * DEEP + "}\n")
    code, _out, err = cli("plan", str(spec))
    assert code == 2, err
    assert "nested deeper than 64" in err and str(spec) in err and "line 15" in err and "internal error" not in err


def test_item12_deep_nesting_through_yaml_aliases_is_refused(tmp_path: Path) -> None:
    from spotwise.safeparse import load_yaml

    text = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 200))
    with pytest.raises(InputError, match="nested deeper than 64"):
        load_yaml(text, "x.yaml")
    laughs = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
    with pytest.raises(InputError, match="more than"):
        load_yaml(laughs, "x.yaml")


def test_item12_deeply_nested_params_from_the_api_are_refused() -> None:
    import yaml

    import spotwise

    d = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    x: Any = []
    for _ in range(DEEP):
        x = [x]
    d["workload"]["params"] = {"x": x}
    with pytest.raises(InputError, match="nested deeper than 64"):
        spotwise.load_spec(d)


def test_item12_5000_digit_integer_in_a_spec_exits_2(cli, tmp_path: Path) -> None:
    spec = _demo_with(tmp_path, "  iterations: 300", "  iterations: " + "9" * 5000)
    code, _out, err = cli("plan", str(spec))
    assert code == 2, err
    assert "5000 digits" in err and "line 16" in err and "internal error" not in err


def test_item12_huge_integer_from_the_api_is_refused() -> None:
    import yaml

    import spotwise

    d = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    d["target"]["iterations"] = 10 ** 5000
    with pytest.raises(InputError, match="digits"):
        spotwise.load_spec(d)


def _event_log(path: Path, bomb: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    header = {"t": 0.0, "wall": 0.0, "kind": "header", "schema": 1}
    (path / "events.jsonl").write_text(json.dumps(header) + "\n" + bomb + "\n", encoding="utf-8")
    return path


_EVENT_BOMB = '{"t": 1.0, "wall": 1.0, "kind": "step", "x": ' + "[" * DEEP + "]" * DEEP + "}"


def test_item12_deeply_nested_event_line_in_pilot_exits_2(cli, tmp_path: Path) -> None:
    run = _event_log(tmp_path / "run", _EVENT_BOMB)
    code, _out, err = cli("plan", str(DEMO), "--pilot", str(run))
    assert code == 2, err
    assert "events.jsonl:2" in err and "nested too deeply" in err and "internal error" not in err


def test_item12_event_line_nested_under_the_recursion_limit_is_refused(tmp_path: Path) -> None:
    from spotwise.events import read_events

    run = _event_log(tmp_path / "run", '{"t": 1.0, "wall": 1.0, "kind": "step", "x": ' + "[" * 300 + "]" * 300 + "}")
    with pytest.raises(InputError, match="nested deeper than 64"):
        read_events(run / "events.jsonl")


def test_item12_deeply_nested_event_line_in_status_exits_2(cli, tmp_path: Path) -> None:
    run = _event_log(tmp_path / "run", _EVENT_BOMB)
    (run / "spec.json").write_text("{}", encoding="utf-8")
    code, _out, err = cli("status", str(run))
    assert code == 2, err
    assert "nested too deeply" in err and "internal error" not in err


def test_item12_deeply_nested_spec_json_on_resume_exits_2(cli, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text('{"name": ' + "[" * DEEP + "]" * DEEP + "}", encoding="utf-8")
    code, _out, err = cli("run", "--resume", str(run))
    assert code == 2, err
    assert "spec.json" in err and "nested too deeply" in err and "internal error" not in err


def test_item12_deeply_nested_summary_json_in_report_exits_2(cli, tmp_path: Path) -> None:
    run = _event_log(tmp_path / "run", '{"t": 1.0, "wall": 1.0, "kind": "idle", "seconds": 1.0}')
    (run / "summary.json").write_text('{"schema": ' + "[" * DEEP + "]" * DEEP + "}", encoding="utf-8")
    code, _out, err = cli("report", str(run))
    assert code == 2, err
    assert "summary.json" in err and "nested too deeply" in err and "internal error" not in err


def _pmf_spec(params: dict[str, Any]) -> Any:
    import yaml

    import spotwise

    d = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    d["workload"].update({"name": "pmf", "family": "pmf", "params": params})
    return spotwise.load_spec(d)


def test_item12_pmf_with_1e8_users_is_refused_with_the_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.workloads import memory
    from spotwise.workloads.registry import make_workload

    monkeypatch.setattr(memory, "machine_bytes", lambda: 16 * 10**9)
    spec = _pmf_spec({"n_users": 1e8})
    with pytest.raises(InputError) as ei:
        make_workload(spec.workload, 0)  # before allocating anything (else MemoryError or the OOM killer)
    msg = ei.value.message
    assert "n_users 1e8 needs ~" in msg and "GB" in msg and "this machine has 16.0 GB" in msg and "workload.params" in msg


def test_item12_pmf_defaults_still_fit_a_small_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.workloads import memory
    from spotwise.workloads.registry import make_workload

    monkeypatch.setattr(memory, "machine_bytes", lambda: 2 * 10**9)
    wl = make_workload(_pmf_spec({}).workload, 0)
    assert wl.info["n_users"] == 1000


@pytest.mark.parametrize(("name", "family", "params", "says"), [
    ("sparse-logreg", "logreg", {"hash_buckets": 1e11}, "hash_buckets 1e11"),
    ("gpt-bytes", "gpt", {"n_embd": 600000, "n_head": 6}, "n_embd 600000"),
    ("resnet18-cifar", "resnet18", {"width": 60000}, "width 60000"),
])
def test_item12_other_size_params_are_checked_before_allocating(monkeypatch: pytest.MonkeyPatch, name: str, family: str,
                                                                 params: dict[str, Any], says: str) -> None:
    import yaml

    import spotwise
    from spotwise.workloads import memory
    from spotwise.workloads.registry import make_workload

    monkeypatch.setattr(memory, "machine_bytes", lambda: 16 * 10**9)
    d = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    d["workload"].update({"name": name, "family": family, "params": params})
    with pytest.raises(InputError, match="GB of memory") as ei:
        make_workload(spotwise.load_spec(d).workload, 0)
    assert says in ei.value.message


# ------------------------------------------------------------------------------------------ item 13
def test_item13_plan_traces_string_is_one_path_not_its_characters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spotwise

    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as ei:
        spotwise.plan(str(DEMO), traces="ab")  # iterated: paths 'a' and 'b'
    assert "ab" in (ei.value.where or "") + ei.value.message
    assert (ei.value.where or "").rstrip("/").endswith("ab")


@pytest.mark.parametrize("bad", [5, 1.5, b"t.json", {"t.json": 1}, [Path("a"), 7], object()])
def test_item13_api_path_lists_refuse_other_types(bad: Any) -> None:
    import spotwise

    for call in (lambda: spotwise.plan(str(DEMO), traces=bad), lambda: spotwise.sweep(str(DEMO), traces=bad),
                 lambda: spotwise.report(bad)):
        with pytest.raises(InputError, match="expected a path"):
            call()


def test_item13_path_helpers() -> None:
    from spotwise.api_args import name_list, path_arg, path_list

    assert path_list("a.json", "traces") == ["a.json"]
    assert path_list(Path("a.json"), "traces") == ["a.json"]
    assert path_list(("a", Path("b")), "traces") == ["a", "b"]
    assert path_list(None, "traces") == []
    assert name_list("p3.2xlarge", "types", "x") == ["p3.2xlarge"]
    assert path_arg(None, "out") is None and path_arg(Path("o"), "out") == "o"
    with pytest.raises(InputError, match="types\\[0\\]"):
        name_list([3], "types", "x")
    with pytest.raises(InputError, match="empty path"):
        path_list([""], "traces")
    with pytest.raises(InputError, match="expected a path"):
        path_arg(10 ** 5000, "out")


# ------------------------------------------------------------------------------------------ item 14
def test_item14_duplicate_key_in_a_spec_exits_2(cli, tmp_path: Path) -> None:
    spec = _demo_with(tmp_path, "  workers: 8\n", "  workers: 2\n  workers: 8\n")
    code, _out, err = cli("plan", str(spec))
    assert code == 2, err
    assert "duplicate key 'workers'" in err and "line 21" in err and "first on line 20" in err


def test_item14_yaml_merge_keys_still_override(tmp_path: Path) -> None:
    from spotwise.safeparse import load_yaml

    assert load_yaml("b: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\n", "x.yaml")["d"] == {"x": 3, "y": 2}


def test_item14_duplicate_key_in_a_catalog_and_a_lithops_config(tmp_path: Path) -> None:
    from spotwise.market.catalog import Catalog
    from spotwise.planes.serverless.backend import load_lithops_config

    cat = tmp_path / "cat.yaml"
    cat.write_text("instances: []\ninstances: []\n", encoding="utf-8")
    with pytest.raises(InputError, match="duplicate key 'instances'"):
        Catalog.from_file(cat)
    cfg = tmp_path / "lithops.yaml"
    cfg.write_text("lithops:\n  backend: localhost\n  backend: aws_lambda\n", encoding="utf-8")
    with pytest.raises(InputError, match="duplicate key 'backend'"):
        load_lithops_config(cfg)


def test_item14_conflicting_duplicate_trace_rows_are_refused(tmp_path: Path) -> None:
    from spotwise.market.traces import load_traces

    tr = _aws(tmp_path / "t.json", _PRICES, extra=((5, "5.0"),))
    with pytest.raises(InputError) as ei:
        load_traces([tr])
    msg = ei.value.message
    assert "2020-01-06T00:00:00Z" in msg and "0.92" in msg and "5" in msg and "SpotPriceHistory[30]" in msg


def test_item14_identical_duplicate_trace_rows_are_accepted(tmp_path: Path) -> None:
    from spotwise.market.traces import load_traces

    (s,) = load_traces([_aws(tmp_path / "t.json", _PRICES, extra=((5, _PRICES[5]),))])
    assert len(s.times) == 30 and s.meta.extra["duplicates"] == 1


def test_item14_azure_date_repeated_with_another_price_is_refused(cli, tmp_path: Path) -> None:
    f = tmp_path / "us_east.csv"
    f.write_text("Date,NC6,NC12\n2/1/2020,$0.20,$0.40\n2/1/2020,$0.20,$0.45\n", encoding="utf-8")
    code, out, err = cli("traces", "show", str(f))
    assert code == 2 and "'NC12'" in err and "0.4 (line 2)" in err and "0.45 (line 3)" in err
    f.write_text("Date,NC6,NC12\n2/1/2020,$0.20,$0.40\n2/1/2020,$0.20,$0.40\n2/2/2020,$0.21,$0.41\n", encoding="utf-8")
    code, _out, err = cli("traces", "show", str(f))
    assert code == 0, err


def test_item14_zero_prices_are_refused_naming_the_row(cli, tmp_path: Path) -> None:
    tr = _aws(tmp_path / "t.json", [p if i != 7 else "0.0000" for i, p in enumerate(_PRICES)])
    code, out, err = cli("traces", "show", str(tr))
    assert code == 2 and "SpotPriceHistory[7]" in err and "zero" in err
    f = tmp_path / "us_east.csv"
    f.write_text("Date,NC6\n2/1/2020,$0.20\n2/2/2020,$0.00\n", encoding="utf-8")
    code, out, err = cli("traces", "show", str(f))
    assert code == 2 and "line 3" in err and "zero" in err
    d = tmp_path / "aws-10-26-2022"
    d.mkdir()
    sky = d / "us-west-2a_v100_1.json"
    sky.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 0], "prices": [0.9, 0.0, 0.9]}))
    code, _out, err = cli("traces", "show", str(sky))
    assert code == 2 and "prices[1]" in err and "zero" in err


def test_item14_real_traces_hold_no_zero_or_conflicting_prices(traces_dir: Path) -> None:
    # the decision to refuse (not warn) rests on this: no real trace repeats a time with another price or has a $0 price
    from spotwise.market.traces import load_traces

    series = load_traces([traces_dir])
    prices = [s for s in series if s.kind == "price"]
    assert prices and all(float(s.values.min()) > 0 for s in prices)


def test_item14_empty_strategies_are_refused(cli, tmp_path: Path) -> None:
    import spotwise

    tr = _aws(tmp_path / "t.json", _PRICES)
    code, _out, err = cli("simulate", str(DEMO), "--trace", str(tr), "--strategies", "", "--no-plot")
    assert code == 2, err
    assert "no strategies given" in err and "--strategies" in err
    for empty in ("", " , ", []):
        with pytest.raises(InputError, match="no strategies given"):
            spotwise.sweep(str(DEMO), [str(tr)], strategies=empty)


@pytest.mark.parametrize("url", ["redis://:pw@127.0.0.1:0", "redis://:pw@127.0.0.1:0/0", "redis://:pw@127.0.0.1:65536"])
def test_item14_redis_port_0_or_out_of_range_is_refused(url: str) -> None:
    from spotwise.planes.serverless.store import parse_redis_url

    with pytest.raises(InputError, match="port|Port"):
        parse_redis_url(url)
    assert parse_redis_url("redis://:pw@127.0.0.1").port == 6379
