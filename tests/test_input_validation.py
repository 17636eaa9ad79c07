"""Issue 7: user input that crashed, hung, ate memory or leaked onto stdout.

Items covered (test names carry the item number): 4 (local Ray on loopback only), 5 (validation
does not import user code), 15 (user input errors exit 2, not 1), 16 (non-regular and huge input
files), 17 (worker counts and synthetic markets bounded by what the machine holds), 18 (``--json``
stdout is exactly one JSON object even while Ray and user code write to fd 1).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from _load import bound

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
SPOTWISE = Path(sys.executable).with_name("spotwise")

# a small, valid user workload: tuple (model factory, criterion, train set, test set)
_GOOD_BODY = '''
import torch
from torch import nn


def build(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=g)
    y = (x[:, 0] > 0).long()
    ds = torch.utils.data.TensorDataset(x, y)
    return (lambda: nn.Linear(4, 2)), nn.CrossEntropyLoss(), ds, ds
'''


def _chaos(**top: Any) -> dict[str, Any]:
    d = yaml.safe_load((REPO / "examples" / "chaos.yaml").read_text())
    d.update(top)
    return d


def _write_spec(tmp_path: Path, d: dict[str, Any], name: str = "job.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def _user_module(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch | None = None) -> str:
    """Write ``body`` as a fresh module in ``tmp_path`` (importable in-process and in subprocesses)."""
    name = f"swuser_{uuid.uuid4().hex[:10]}"
    (tmp_path / f"{name}.py").write_text(body)
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return name


def _env_with_path(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


# ------------------------------------------------------------------------------------------- 4
_RAY_PROBE = r'''
import json, os, subprocess, shutil
from spotwise.capacity.raystart import ensure_ray
import ray
ensure_ray(num_cpus=1)
node = ray._private.worker.global_worker.node
out = {"node_ip": node.node_ip_address, "gcs": node.gcs_address,
       "nodes": [n["NodeManagerAddress"] for n in ray.nodes()], "listen": None}
if shutil.which("ss"):
    # every TCP socket that a process of this Ray session listens on
    pids, frontier = set(), {str(os.getpid())}
    while frontier:
        kids = set()
        for p in frontier:
            kids |= set(subprocess.run(["pgrep", "-P", p], capture_output=True, text=True).stdout.split())
        kids -= pids
        pids |= kids
        frontier = kids
    lines = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout.splitlines()
    out["listen"] = [ln.split()[3] for ln in lines if any(f"pid={p}," in ln for p in pids)]
ray.shutdown()
print(json.dumps(out))
'''


def test_item4_local_ray_listens_on_loopback_only(tmp_path: Path) -> None:
    res = subprocess.run([PY, "-c", _RAY_PROBE], capture_output=True, text=True, timeout=bound(240), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["node_ip"] == "127.0.0.1"
    assert info["gcs"].startswith("127.0.0.1:")
    assert info["nodes"] == ["127.0.0.1"]
    if info["listen"] is not None:
        assert info["listen"], "found no listening socket of the Ray session"
        for addr in info["listen"]:
            host = addr.rsplit(":", 1)[0]
            assert host in ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]"), f"Ray listens on {addr}"


def test_item4_readme_says_cluster_needs_ray_auth() -> None:
    text = (REPO / "README.md").read_text()
    assert "## Security" in text
    sec = text.split("## Security", 1)[1].split("\n## ", 1)[0]
    assert "127.0.0.1" in sec and "--ray-address" in sec and "auth" in sec.lower()


# ------------------------------------------------------------------------------------------- 5
def _sidefx_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    marker = tmp_path / "imported.txt"
    body = f"from pathlib import Path\nPath({str(marker)!r}).write_text('imported')\n" + _GOOD_BODY
    return _user_module(tmp_path, body, monkeypatch), marker


def test_item5_simulate_does_not_import_user_module(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod, marker = _sidefx_module(tmp_path, monkeypatch)
    d = _chaos()
    d["workload"]["name"] = f"{mod}:build"
    code, out, err = cli("simulate", str(_write_spec(tmp_path, d)), "--out", str(tmp_path / "sim"))
    assert code == 2 and "does not import a module:function workload" in err
    assert not marker.exists(), "simulate imported the user's workload module while only validating the spec"
    assert mod not in sys.modules


def _fake_pilot_run(d: Path) -> Path:
    d.mkdir()
    lines = [{"t": 0.0, "wall": 0.0, "kind": "header", "schema": 1, "mode": "emulated", "job": "x", "workers": 8,
              "sync": "full", "instance": "c5.xlarge", "seed": 0}]
    for i in range(1, 121):
        lines.append({"t": float(i), "wall": float(i), "kind": "step", "step": i, "loss": 2.0 / (1 + 0.05 * i) + 0.1,
                      "active": 8, "lr": 0.05, "sync": "full", "duration": 1.0 + 0.1 * (i % 3), "retries": 0})
    (d / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def test_item5_plan_with_a_pilot_run_does_not_import_user_module(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod, marker = _sidefx_module(tmp_path, monkeypatch)
    d = yaml.safe_load((REPO / "examples" / "zhang-uniform.yaml").read_text())
    d["workload"]["name"] = f"{mod}:build"
    pilot = _fake_pilot_run(tmp_path / "pilot")
    code, out, err = cli("plan", str(_write_spec(tmp_path, d)), "--pilot", str(pilot), "--json")
    assert code in (0, 2), err
    assert "internal error" not in err
    assert not marker.exists(), "plan imported the user's module although the pilot run made the import unnecessary"


def test_item5_readme_says_workloads_and_spec_json_run_code() -> None:
    sec = (REPO / "README.md").read_text().split("## Security", 1)[1].split("\n## ", 1)[0]
    assert "module:function" in sec and "spec.json" in sec and "trust" in sec.lower()


# ------------------------------------------------------------------------------------------ 15
_RAISING_BODY = '''
def helper():
    raise ValueError("boom in the user's workload")


def build(seed=0):
    helper()
'''


def test_item15_user_workload_that_raises_exits_2_with_its_traceback(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _user_module(tmp_path, _RAISING_BODY, monkeypatch)
    d = _chaos()
    d["workload"]["name"] = f"{mod}:build"
    code, out, err = cli("run", str(_write_spec(tmp_path, d)), "--out", str(tmp_path / "o"))
    assert code == 2, err
    assert "internal error" not in err and "bug in spotwise" not in err
    assert "boom in the user's workload" in err
    assert f"{mod}.py" in err and "helper()" in err  # the user's traceback, their frames
    assert "spotwise/cli.py" not in err  # not ours
    assert err.rstrip().splitlines()[-1].startswith("error:") or "error:" in err
    assert out == ""


def test_item15_user_training_code_that_raises_is_blamed_on_the_workload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss that raises while training (in the driver or in a worker actor) is the workload's error."""
    from spotwise.config import WorkloadSpec
    from spotwise.errors import InputError
    from spotwise.workloads.registry import make_workload

    body = _GOOD_BODY + '''

def bad_loss(model, batch):
    raise RuntimeError("loss exploded")


def build_bad(seed=0):
    _, _, ds, _ = build(seed)
    return (lambda: nn.Linear(4, 2)), bad_loss, ds
'''
    mod = _user_module(tmp_path, body, monkeypatch)
    import numpy as np

    with pytest.raises(InputError) as ei:  # at load now (issue 28: the loss is probed once there)
        wl = make_workload(WorkloadSpec(name=f"{mod}:build_bad"), 0)
        wl.loss(wl.build_model(), wl.train.batch(np.arange(4)))
    assert "loss exploded" in ei.value.message and "workload" in ei.value.message
    assert "bad_loss" in getattr(ei.value, "details", "")


def test_item15_binary_catalog_exits_2(cli, tmp_path: Path) -> None:
    cat = tmp_path / "cat.yaml"
    cat.write_bytes(bytes(range(256)) * 4)
    d = _chaos()
    d["market"]["catalog"] = [str(cat)]
    code, _, err = cli("simulate", str(_write_spec(tmp_path, d)))
    assert code == 2 and "internal error" not in err
    assert "UTF-8" in err and "cat.yaml" in err


def test_item15_tiny_interval_market_exits_2(cli, tmp_path: Path) -> None:
    d = _chaos()
    d["market"]["synthetic"] = {"kind": "uniform", "low": 0.03, "high": 0.15, "interval_s": 1e-9}
    code, _, err = cli("simulate", str(_write_spec(tmp_path, d)))
    assert code == 2 and "internal error" not in err and "MemoryError" not in err
    assert "interval_s" in err and "not available yet" not in err


@pytest.mark.parametrize("where", ["job", "synthetic"])
def test_item15_negative_seed_exits_2(cli, tmp_path: Path, where: str) -> None:
    d = _chaos()
    if where == "job":
        d["seed"] = -1
    else:
        d["market"]["synthetic"] = {"kind": "uniform", "low": 0.03, "high": 0.15, "seed": -1}
    code, _, err = cli("simulate", str(_write_spec(tmp_path, d)))
    assert code == 2 and "seed" in err and "not available yet" not in err


def test_item15_huge_seed_exits_2(cli, tmp_path: Path) -> None:
    code, _, err = cli("simulate", str(_write_spec(tmp_path, _chaos(seed=2**70))))
    assert code == 2 and "seed" in err and "not available yet" not in err


# ------------------------------------------------------------------------------------------ 16
def test_item16_traces_show_refuses_dev_zero(cli) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    code, out, err = cli("traces", "show", "/dev/zero")
    assert code == 2 and "not a regular file" in err and out == ""


def test_item16_spec_and_catalog_refuse_dev_zero(cli, tmp_path: Path) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")
    code, _, err = cli("simulate", "/dev/zero")
    assert code == 2 and "not a regular file" in err
    d = _chaos()
    d["market"]["catalog"] = ["/dev/zero"]
    code, _, err = cli("simulate", str(_write_spec(tmp_path, d)))
    assert code == 2 and "not a regular file" in err


def test_item16_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    from spotwise.errors import InputError
    from spotwise.market.traces import load_traces

    fifo = tmp_path / "prices.json"
    os.mkfifo(fifo)
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            load_traces([fifo])
        except InputError as e:
            result["err"] = e.message

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "reading a FIFO blocked"
    assert "not a regular file" in result.get("err", "")


def test_item16_size_cap_is_enforced_and_configurable(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = [{"AvailabilityZone": "us-east-2a", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{1 + i / 1000:.3f}", "Timestamp": f"2020-02-20T{i // 60:02d}:{i % 60:02d}:00.000Z"}
               for i in range(200)]
    f = tmp_path / "p3.json"
    f.write_text(json.dumps({"SpotPriceHistory": records}))
    assert f.stat().st_size > 20_000
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "0.01")  # 10 kB
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 2 and "SPOTWISE_MAX_FILE_MB" in err and out == ""
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "1")
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 0, err
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "lots")
    code, _, err = cli("traces", "show", str(f))
    assert code == 2 and "SPOTWISE_MAX_FILE_MB" in err


# ------------------------------------------------------------------------------------------ 17
@pytest.mark.parametrize("workers", [1e300, 1.0e18, 2.5])
def test_item17_workers_must_be_a_sane_integer(cli, tmp_path: Path, workers: float) -> None:
    d = _chaos()
    d["cluster"]["workers"] = workers
    code, _, err = cli("simulate", str(_write_spec(tmp_path, d)))
    assert code == 2 and "workers" in err and "not available yet" not in err


def test_item17_run_caps_local_workers_by_machine_memory(cli, tmp_path: Path) -> None:
    d = _chaos()
    d["cluster"]["workers"] = 10000
    code, out, err = cli("run", str(_write_spec(tmp_path, d)), "--out", str(tmp_path / "o"))
    assert code == 2, err
    assert "cluster.workers" in err and "MiB" in err and "SPOTWISE_MAX_LOCAL_WORKERS" in err and "--ray-address" in err
    assert not (tmp_path / "o").exists()


def test_item17_local_worker_cap_env_var(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 6 workers + 0 standby against a cap of 4: refused before Ray starts
    d = _chaos()
    d["cluster"].update({"workers": 6, "standby": 0})
    d["target"]["iterations"] = 5
    monkeypatch.setenv("SPOTWISE_MAX_LOCAL_WORKERS", "4")
    code, _, err = cli("run", str(_write_spec(tmp_path, d)), "--out", str(tmp_path / "o"))
    assert code == 2 and "at most 4" in err and "SPOTWISE_MAX_LOCAL_WORKERS" in err
    monkeypatch.setenv("SPOTWISE_MAX_LOCAL_WORKERS", "-3")
    code, _, err = cli("run", str(_write_spec(tmp_path, d)), "--out", str(tmp_path / "o"))
    assert code == 2 and "SPOTWISE_MAX_LOCAL_WORKERS" in err


def test_item17_local_cap_counts_growth_and_standby() -> None:
    from spotwise.config import ClusterSpec
    from spotwise.errors import InputError
    from spotwise.capacity.raystart import check_local_workers, local_worker_limit

    limit = local_worker_limit()
    assert limit >= 1
    check_local_workers(ClusterSpec(instance_type="c5.xlarge", workers=1, standby=0))
    with pytest.raises(InputError):
        check_local_workers(ClusterSpec(instance_type="c5.xlarge", workers=1, max_workers=limit + 1, standby=0))
    with pytest.raises(InputError):
        check_local_workers(ClusterSpec(instance_type="c5.xlarge", workers=limit, standby=1))


def test_item17_cluster_run_checks_spot_capacity(ray_session, tmp_path: Path) -> None:
    """The session's Ray has 8 'spot' units: 10 workers are refused when the run starts, before any actor."""
    from spotwise.config import spec_from_dict
    from spotwise.errors import InputError
    from spotwise.capacity.cluster import check_spot_capacity, cluster_controller

    assert check_spot_capacity(workers=8) == 8
    with pytest.raises(InputError) as ei:
        check_spot_capacity(workers=10)
    assert "10 workers" in ei.value.message and "spot" in ei.value.message

    class NoActors:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"the provider was used ({name}) although the cluster cannot hold the job")

    d = _chaos()
    d["cluster"]["workers"] = 10
    spec = spec_from_dict(d)
    with pytest.raises(InputError) as ei:
        cluster_controller(spec, tmp_path / "o", provider=NoActors())
    assert "cluster.workers" in ei.value.message


def test_item17_absurd_market_horizon_is_input_error(tmp_path: Path) -> None:
    """A fine interval is fine for a short market, but not over a horizon stretched by a long deadline."""
    from spotwise.config import spec_from_dict
    from spotwise.errors import InputError
    from spotwise.market.world import build_market

    d = _chaos(deadline="1000d")
    d["market"]["synthetic"] = {"kind": "gaussian", "interval_s": 0.5, "duration_s": "1d"}
    spec = spec_from_dict(d)
    with pytest.raises(InputError) as ei:
        build_market(spec)
    assert "interval_s" in ei.value.message and "price points" in ei.value.message


# ------------------------------------------------------------------------------------------ 18
_NOISY_BODY = _GOOD_BODY.replace("def build(seed=0):", '''def build(seed=0):
    import os, subprocess, sys
    print("noise from print()")
    sys.stdout.flush()
    os.write(1, b"noise on fd 1\\n")
    subprocess.run(["echo", "noise from a child process"], check=False)''')


def test_item18_json_stdout_survives_driver_and_child_process_output(tmp_path: Path) -> None:
    mod = _user_module(tmp_path, _NOISY_BODY)
    d = yaml.safe_load((REPO / "examples" / "zhang-uniform.yaml").read_text())
    d["workload"]["name"] = f"{mod}:build"
    spec = _write_spec(tmp_path, d)
    res = subprocess.run([PY, "-m", "spotwise.cli", "plan", str(spec), "--pilot", str(_fake_pilot_run(tmp_path / "p")),
                          "--json"], capture_output=True, text=True, timeout=bound(300), env=_env_with_path(tmp_path), cwd=tmp_path)
    assert res.returncode in (0, 2), res.stderr[-3000:]
    if res.returncode == 0:
        json.loads(res.stdout)
    else:
        assert res.stdout == ""
    # and through the in-process pilot, which builds (and so imports and calls) the workload
    res = subprocess.run([PY, "-m", "spotwise.cli", "plan", str(spec), "--pilot-steps", "20", "--json"],
                         capture_output=True, text=True, timeout=bound(300), env=_env_with_path(tmp_path), cwd=tmp_path)
    assert "noise" in res.stderr, "the user code's output should still be visible, on stderr"
    if res.returncode == 0:
        doc = json.loads(res.stdout)  # the whole of stdout is one JSON object
        assert isinstance(doc, dict)
    else:
        assert res.returncode == 2 and res.stdout == "", res.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.extended
def test_item18_run_json_with_16_workers_prints_only_json(tmp_path: Path) -> None:
    """At 16+ workers Ray's raylet warns about worker start-up concurrency; none of it may reach stdout."""
    if not SPOTWISE.exists():
        pytest.skip("spotwise console script not installed in this environment (pip install -e .)")
    d = _chaos()
    d["cluster"].update({"workers": 16, "standby": 0})
    d["market"].pop("revocation", None)  # 16 processes starting at once is the point, not churn
    d["target"]["iterations"] = 3
    d["outputs"] = {"plots": False, "checkpoint_every": 0}
    spec = _write_spec(tmp_path, d)
    res = subprocess.run([str(SPOTWISE), "run", str(spec), "--out", str(tmp_path / "o"), "--json"],
                         capture_output=True, text=True, timeout=bound(580), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)  # the whole of stdout
    assert doc["steps"] >= 3


def test_user_tracebacks_keep_their_frames_whatever_sys_tracebacklimit_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library may set ``sys.tracebacklimit = 0`` for the whole process (SkyPilot does when it
    raises); the user's traceback spotwise prints must still show the user's frames."""
    import sys

    from spotwise.workloads.user import user_traceback

    def users_helper() -> None:
        raise ValueError("boom")

    monkeypatch.setattr(sys, "tracebacklimit", 0, raising=False)
    try:
        users_helper()
    except ValueError as e:
        text = user_traceback(e)
    assert "users_helper" in text and "ValueError: boom" in text
