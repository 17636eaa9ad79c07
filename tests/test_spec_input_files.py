"""Issue 54 item 9: every spec field that names a local file spotwise reads or ships to the nodes is
checked when the spec is loaded (:mod:`spotwise.spec.input_paths`): a folder, a FIFO, a missing path, a
link to a folder, a device or an oversized file is an exit 2 naming the field -- never an emitted
cluster that fails on every node, and never a hang (a FIFO is not opened)."""

from __future__ import annotations

import copy
import os
import threading
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from _load import bound
from spotwise.errors import InputError

BASE: dict[str, Any] = {
    "name": "files", "seed": 0,
    "workload": {"name": "mlp-digits", "batch_size": 8, "step_time_s": 1.0},
    "target": {"iterations": 10},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "sync": "full", "bids": 0.17},
    "market": {"synthetic": {"kind": "uniform", "low": 0.03, "high": 0.15, "interval_s": 30, "duration_s": "1d"},
               "revocation": {"model": "bid"}},
}


def _set(d: dict[str, Any], field: str, path: str) -> None:
    """``field`` of the spec dict ``d`` names ``path`` (with what else the field needs to be accepted)."""
    w, m = d["workload"], d["market"]
    if field == "workload.requirements":
        w["requirements"] = path
    elif field == "workload.script":
        w.pop("name")
        w["script"] = path
    elif field == "workload.dataset":
        w["dataset"] = path
    elif field == "market.traces[0]":
        m.pop("synthetic")
        m["traces"] = [path]
    elif field == "market.catalog[0]":
        m["catalog"] = [path]
    elif field == "market.revocation.lifetimes":
        m["revocation"] = {"model": "lifetime", "lifetimes": path}
    elif field == "market.synthetic.fit_to":
        m["synthetic"] = {"kind": "uniform", "fit_to": path}
    elif field == "cluster.pools[0].revocation.lifetimes":
        d["cluster"] = {"pools": [{"instance_type": "c5.xlarge", "workers": 2,
                                   "revocation": {"model": "lifetime", "lifetimes": path}}], "sync": "full"}
    elif field == "cluster.pools[0].market.traces[0]":
        d["cluster"] = {"pools": [{"instance_type": "c5.xlarge", "workers": 2, "bids": 0.17,
                                   "market": {"traces": [path]}}],
                        "sync": "full"}
    else:
        raise AssertionError(field)


FIELDS = ["workload.requirements", "workload.script", "workload.dataset", "market.traces[0]", "market.catalog[0]",
          "market.revocation.lifetimes", "market.synthetic.fit_to", "cluster.pools[0].revocation.lifetimes",
          "cluster.pools[0].market.traces[0]"]
#: a dataset may be a folder (the built-in datasets read one) and traces too (load_traces reads a folder's files)
FOLDER_OK = {"workload.dataset", "market.traces[0]", "market.synthetic.fit_to", "cluster.pools[0].market.traces[0]"}
#: a dataset may be a large corpus: no cap
UNCAPPED = {"workload.dataset"}


def _make(kind: str, tmp: Path) -> str:
    """A path of ``kind`` under ``tmp`` (named ``*.py`` so a script field takes it by its name)."""
    p = tmp / f"input-{kind}.py"
    if kind == "folder":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "link-to-folder":
        (tmp / "real-folder").mkdir()
        p.symlink_to(tmp / "real-folder")
    elif kind == "device":
        if not Path("/dev/zero").exists():
            pytest.skip("no /dev/zero here")
        p.symlink_to("/dev/zero")
    elif kind == "oversized":
        with p.open("wb") as fh:
            fh.truncate(64 * 1024)  # the test sets the cap to ~10 kB
    elif kind != "missing":
        raise AssertionError(kind)
    return str(p)


def _no_hang(fn: Callable[[], Any]) -> Any:
    """``fn()``'s result or exception, from a thread: a call that blocks (a FIFO opened) fails the test."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(fn())
        except BaseException as e:  # noqa: BLE001 -- handed to the test
            box.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(bound(20))
    assert not t.is_alive(), "loading the spec blocked"
    return box[0]


def _write(tmp: Path, d: dict[str, Any]) -> Path:
    f = tmp / "job.yaml"
    f.write_text(yaml.safe_dump(d))
    return f


KINDS = ["folder", "fifo", "missing", "link-to-folder", "device", "oversized"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("field", FIELDS)
def test_a_spec_file_field_that_is_not_a_sane_regular_file_exits_2_at_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, kind: str) -> None:
    from spotwise.config import load_spec

    if field in FOLDER_OK and kind in ("folder", "link-to-folder"):
        pytest.skip("a dataset or a trace may be a folder")
    if field in UNCAPPED and kind == "oversized":
        pytest.skip("a dataset may be large")
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "0.01")
    d = copy.deepcopy(BASE)
    _set(d, field, _make(kind, tmp_path))
    err = _no_hang(lambda: load_spec(_write(tmp_path, d)))
    assert isinstance(err, InputError), err
    assert field in str(err.where), (err.where, err)
    assert err.fix and "input-" in err.message, err


@pytest.mark.parametrize("field", ["workload.requirements", "workload.dataset", "market.catalog[0]"])
def test_the_python_api_mapping_is_checked_the_same_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        field: str) -> None:
    import spotwise

    d = copy.deepcopy(BASE)
    _set(d, field, _make("fifo", tmp_path))
    err = _no_hang(lambda: spotwise.load_spec(d))
    assert isinstance(err, InputError) and field in str(err.where), err


def test_regular_files_and_a_dataset_folder_load(tmp_path: Path) -> None:
    from spotwise.config import load_spec

    (tmp_path / "requirements.txt").write_text("einops\n")
    (tmp_path / "data").mkdir()
    d = copy.deepcopy(BASE)
    d["workload"].update(requirements="requirements.txt", dataset="data")
    spec = load_spec(_write(tmp_path, d))
    assert spec.workload.requirements == str(tmp_path / "requirements.txt")
    d = copy.deepcopy(BASE)
    (tmp_path / "train.py").write_text("print('hi')\n")
    _set(d, "workload.script", "train.py")
    assert load_spec(_write(tmp_path, d)).workload.script == str(tmp_path / "train.py")


def test_a_pool_trace_is_read_from_the_spec_folder(tmp_path: Path) -> None:
    from spotwise.config import load_spec

    (tmp_path / "t.json").write_text("{}")
    d = copy.deepcopy(BASE)
    _set(d, "cluster.pools[0].market.traces[0]", "t.json")
    assert load_spec(_write(tmp_path, d)).cluster.pools[0].market.traces == [str(tmp_path / "t.json")]


def test_plan_emit_of_a_requirements_folder_exits_2(cli: Any, tmp_path: Path) -> None:
    d = copy.deepcopy(BASE)
    (tmp_path / "reqs").mkdir()
    d["workload"]["requirements"] = "reqs"
    code, _, err = cli("plan", str(_write(tmp_path, d)), "--emit", f"skypilot={tmp_path / 't.yaml'}")
    assert code == 2 and "workload.requirements" in err and "directory" in err and "Traceback" not in err, err
    assert not (tmp_path / "t.yaml").exists()
