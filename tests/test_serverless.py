"""Serverless training (issue 9, paper 004 MLLess): real Lithops localhost functions, a real redis-server.

What must hold:
* BSP (and ISP with v = 0) on functions is exactly synchronous SGD on the global batch;
* ISP pushes only the significant entries and still learns;
* a function that dies or hangs mid-update, and a Redis that loses everything mid-run, lose no
  committed step: the run ends with the very parameters of the fault-free run;
* the scale-in auto-tuner shrinks the pool through the same policy interface;
* functions and the Redis node are billed in the ledger;
* a bad Redis URL or password exits 2.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.events import read_events
from spotwise.market.catalog import Catalog
from spotwise.planes.serverless.schedule import SampleStream, Schedule, worker_batch
from spotwise.planes.serverless.significance import SparseUpdate
from spotwise.planes.serverless.store import (RedisServer, RedisURL, connect, decode_update, encode_update,
                                       parse_redis_url)
from spotwise.workloads.params import flat_grad, flat_params, set_flat_params, zero_grad
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None,
                                reason="redis-server is not installed (README command 2 installs it with apt)")

PMF = {"name": "pmf", "family": "pmf", "batch_size": 256, "lr": 5.0, "eval_every": 1000,
       "params": {"n_users": 300, "n_items": 400, "n_ratings": 20000, "rank": 8}}


def sl_spec(steps: int = 12, workers: int = 2, sync: str = "bsp", **cluster):
    return spec_from_dict({"name": "sl-test", "workload": PMF, "target": {"iterations": steps},
                           "cluster": {"kind": "serverless", "workers": workers, "sync": sync, **cluster},
                           "outputs": {"checkpoint_every": 0, "plots": False}})


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer(tcp=True) as srv:  # an operator's Redis on 127.0.0.1 (--redis-url)
        yield srv


def run_sup(spec, out, shared=None, **kw):
    """Run ``spec`` under the job controller; ``shared``: a RedisServer to use by URL (not owned by the job)."""
    from spotwise.planes.serverless.runner import serverless_controller

    kw.setdefault("heartbeat_timeout_s", 6.0)
    if shared is not None:
        kw["redis_url"] = shared.url
    sup = serverless_controller(spec, out, **kw)
    summary = sup.run()
    return sup, summary


def sgd_reference(spec, steps: int) -> np.ndarray:
    """Single-process SGD on the same global batches: x <- x - lr * mean gradient."""
    wl = make_workload(spec.workload, spec.seed)
    model = wl.build_model()
    sched = Schedule.initial(spec.cluster.workers)
    stream = SampleStream(len(wl.train), spec.seed)
    b = spec.workload.batch_size
    for t in range(steps):
        idx = np.concatenate([worker_batch(sched, stream, w, t, b) for w in sched.members(t)])
        zero_grad(model)
        wl.loss(model, wl.train.batch(idx)).backward()
        g = flat_grad(model)
        set_flat_params(model, flat_params(model) - spec.workload.lr * g)
    return flat_params(model).numpy()


# ---------------------------------------------------------------------------------- store
def test_update_wire_format_round_trips_and_is_sparse():
    u = SparseUpdate(np.array([3, 10, 999_999], np.int64), np.array([0.5, -2.0, 1e-3]), 1_000_000)
    data = encode_update(u)
    assert len(data) == 16 + 3 * 8  # 8 bytes an entry, never the model's size
    back = decode_update(data)
    assert back.size == u.size and np.array_equal(back.indices, u.indices)
    assert np.allclose(back.values, u.values, rtol=1e-6)
    with pytest.raises(ValueError):
        decode_update(data[:-3])
    with pytest.raises(ValueError):
        decode_update(b"nonsense-bytes-here-and-more")


@pytest.mark.parametrize("url, needle", [
    ("localhost:6379", "not a Redis URL"),
    ("http://127.0.0.1:6379", "scheme"),
    ("redis://127.0.0.1:99999", "Port"),
    ("redis://127.0.0.1:6379/abc", "database"),
])
def test_bad_redis_url_is_an_input_error(url, needle):
    with pytest.raises(InputError) as e:
        parse_redis_url(url)
    assert needle in str(e.value)


def test_wrong_password_and_unreachable_redis_are_input_errors(redis_server):
    with pytest.raises(InputError) as e:
        connect(RedisURL("127.0.0.1", redis_server.port, "wrong-password"))
    assert "password" in str(e.value)
    with pytest.raises(InputError) as e:
        connect(RedisURL("127.0.0.1", redis_server.port, ""))
    assert "password" in str(e.value)
    port = RedisServer.__init__.__globals__["_free_port"]()
    with pytest.raises(InputError) as e:
        connect(RedisURL("127.0.0.1", port, "x"), timeout_s=1.0)
    assert "cannot reach" in str(e.value)
    parsed = parse_redis_url(redis_server.url.url)
    assert connect(parsed).ping()


def test_private_redis_server_has_a_password_and_restarts_empty():
    with RedisServer() as srv:
        c = connect(srv.url)
        c.set("k", "v")
        srv.restart()
        c2 = connect(srv.url)
        assert c2.get("k") is None and srv.restarts == 1
        assert len(srv.password) >= 32
    assert not srv.dir.exists()


# ---------------------------------------------------------------------------------- training
def test_bsp_on_functions_is_synchronous_sgd_on_the_global_batch(redis_server, tmp_path):
    spec = sl_spec(steps=10, workers=2, sync="bsp")
    sup, s = run_sup(spec, tmp_path / "run", shared=redis_server)
    assert s.status == "completed" and s.steps == 10
    ref = sgd_reference(spec, 10)
    assert np.allclose(sup.params, ref, rtol=1e-4, atol=1e-5), float(np.abs(sup.params - ref).max())
    # the run directory is a spotwise run directory: events, summary, costs
    ev = read_events(tmp_path / "run" / "events.jsonl")
    kinds = [e["kind"] for e in ev]
    assert kinds[0] == "header" and kinds.count("step") == 10 and kinds[-1] == "end"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["mode"] == "serverless"
    assert s.extra["pushed_fraction"] == pytest.approx(1.0)
    assert s.extra["lost"] == 0 and s.extra["invocations"] == 2


def test_functions_and_redis_are_billed_in_the_ledger(redis_server, tmp_path):
    spec = sl_spec(steps=6, workers=2, sync="bsp", functions="aws-lambda", memory_mb=1024)
    sup, s = run_sup(spec, tmp_path / "run", shared=redis_server)
    bd = s.cost_breakdown["by_category"]
    cat = Catalog.default()
    fp = cat.function("aws-lambda")
    # every invocation (2 workers) plus the supervisor's function, per request and per GB-s
    expect_fn = fp.per_gb_second * 1.0 * s.extra["function_seconds"] + fp.per_request * 3
    assert bd["function"] == pytest.approx(expect_fn, rel=0.02)
    redis_h = cat.instance("M1.2x16").on_demand_per_hour
    assert bd["service"] == pytest.approx(redis_h * s.wall_s / 3600.0, rel=0.05)
    assert s.cost_usd == pytest.approx(bd["function"] + bd["service"])
    assert s.extra["function_seconds"] > s.wall_s  # workers + supervisor ran in parallel


def test_isp_pushes_only_significant_entries_and_learns(redis_server, tmp_path):
    spec = sl_spec(steps=40, workers=2, sync="isp", significance=0.7)
    sup, s = run_sup(spec, tmp_path / "isp", shared=redis_server)
    assert s.status == "completed"
    assert 0.0 < s.extra["pushed_fraction"] < 0.6
    ev = [e for e in read_events(tmp_path / "isp" / "events.jsonl") if e["kind"] == "step"]
    first, last = np.mean([e["loss"] for e in ev[:5]]), np.mean([e["loss"] for e in ev[-5:]])
    assert last < 0.9 * first


def test_isp_with_v_zero_is_bsp(redis_server, tmp_path):
    spec = sl_spec(steps=8, workers=2, sync="isp", significance=0.0)
    sup, s = run_sup(spec, tmp_path / "isp0", shared=redis_server)
    assert np.allclose(sup.params, sgd_reference(spec, 8), rtol=1e-4, atol=1e-5)


def test_ssp_respects_its_staleness_bound_and_learns(redis_server, tmp_path):
    spec = sl_spec(steps=30, workers=3, sync="ssp", staleness=2)
    sup, s = run_sup(spec, tmp_path / "ssp", shared=redis_server)
    assert s.status == "completed" and s.steps == 30
    ev = [e for e in read_events(tmp_path / "ssp" / "events.jsonl") if e["kind"] == "step"]
    assert np.mean([e["loss"] for e in ev[-5:]]) < np.mean([e["loss"] for e in ev[:5]])


# ---------------------------------------------------------------------------------- faults
def test_a_function_that_dies_and_one_that_hangs_mid_update_lose_nothing(redis_server, tmp_path):
    """Worker 0's process dies between computing and committing step 3; worker 1 freezes at step 6
    (no heartbeats: the platform would kill it at its timeout).  Both are fenced and invoked again."""
    spec = sl_spec(steps=10, workers=2, sync="bsp")
    sup, s = run_sup(spec, tmp_path / "f", shared=redis_server, faults={0: "die:3", 1: "hang:6"}, heartbeat_timeout_s=3.0)
    assert s.status == "completed" and s.steps == 10
    assert s.extra["lost"] >= 2 and s.extra["invocations"] >= 4
    # their updates were never applied and their shards were redone: exactly the fault-free result
    assert np.allclose(sup.params, sgd_reference(spec, 10), rtol=1e-4, atol=1e-5)
    lost = [e for e in read_events(tmp_path / "f" / "events.jsonl") if e["kind"] == "function" and e["status"] == "lost"]
    assert {e["worker"] for e in lost} == {0, 1}


def test_a_redis_restart_mid_run_is_survived_without_losing_a_committed_step(tmp_path):
    """spotwise's own redis-server dies: the supervisor restarts it and re-seeds it from its replica."""
    spec = sl_spec(steps=14, workers=2, sync="bsp")
    srv = RedisServer()
    state = {"killed": False}

    def progress(snap):
        if snap["step"] == 6 and not state["killed"]:
            state["killed"] = True
            srv.kill()  # the store and everything in it is gone

    sup, s = run_sup(spec, tmp_path / "r", redis_server=srv, progress=progress)
    assert state["killed"] and s.status == "completed" and s.steps == 14
    assert s.extra["store_reseeds"] >= 1
    assert np.allclose(sup.params, sgd_reference(spec, 14), rtol=1e-4, atol=1e-5)
    store = [e for e in read_events(tmp_path / "r" / "events.jsonl") if e["kind"] == "store"]
    assert store and store[0]["status"] == "started" and store[1]["status"] == "reseeded"
    assert not srv.dir.exists()  # the supervisor stopped its server and removed its directory


def test_an_external_redis_that_comes_back_empty_is_reseeded(tmp_path):
    """A user's Redis (--redis-url) restarts: the supervisor waits for it and re-seeds it."""
    import threading

    spec = sl_spec(steps=12, workers=2, sync="bsp")
    with RedisServer(tcp=True) as srv:
        state = {"killed": False}

        def progress(snap):
            if snap["step"] == 5 and not state["killed"]:
                state["killed"] = True
                srv.kill()
                threading.Timer(1.0, srv.start).start()  # the operator brings it back, empty

        sup, s = run_sup(spec, tmp_path / "x", shared=srv, progress=progress)
    assert s.status == "completed" and s.steps == 12 and s.extra["store_reseeds"] >= 1
    assert np.allclose(sup.params, sgd_reference(spec, 12), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------- scale-in
def test_scale_in_policy_removes_workers_and_merges_their_replicas(redis_server, tmp_path):
    spec = spec_from_dict({"name": "sl-scale", "workload": PMF, "target": {"iterations": 60},
                           "cluster": {"kind": "serverless", "workers": 3, "sync": "isp"},
                           "policies": [{"name": "scale-in", "params": {"interval_s": 0.5, "delta_s": 0.5, "min_workers": 1,
                                                                         "min_fit_points": 5, "knee_window": 3}}],
                           "outputs": {"checkpoint_every": 0, "plots": False}})
    sup, s = run_sup(spec, tmp_path / "sc", shared=redis_server)
    assert s.status == "completed"
    ev = read_events(tmp_path / "sc" / "events.jsonl")
    resizes = [e for e in ev if e["kind"] == "decision" and e["decision"].startswith("Resize(") and e["acted"]]
    merged = [e for e in ev if e["kind"] == "function" and e["status"] == "merged"]
    leaving = [e for e in ev if e["kind"] == "function" and e["status"] == "leaving"]
    assert resizes and len(leaving) == len(resizes)
    # a leave is scheduled one step past the furthest worker's clock (up to MAX_LEAD ahead of the
    # supervisor): every one the job reached is merged, exactly once; one past the end never is
    reached = [e for e in leaving if e["at"] <= s.steps]
    assert reached and sorted(e["worker"] for e in merged) == sorted(e["worker"] for e in reached)
    assert all(m["step"] == e["at"] for m in merged for e in reached if e["worker"] == m["worker"])
    assert s.extra["workers_at_end"] < 3
    steps = [e for e in ev if e["kind"] == "step"]
    assert steps[-1]["active"] < steps[0]["active"]


# ---------------------------------------------------------------------------------- CLI
def test_cli_serverless_run_and_bad_redis_url_exit_codes(cli, tmp_path, redis_server):
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps({"name": "cli-sl", "workload": PMF, "target": {"iterations": 5},
                                "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
                                "outputs": {"checkpoint_every": 0, "plots": False}}))
    code, out, err = cli("run", str(spec), "--out", str(tmp_path / "bad"), "--redis-url", f"redis://:nope@127.0.0.1:{redis_server.port}/0")
    assert code == 2 and "password" in err
    code, out, err = cli("run", str(spec), "--out", str(tmp_path / "bad2"), "--redis-url", "redis//oops")
    assert code == 2 and "Redis URL" in err
    code, out, err = cli("run", str(spec), "--out", str(tmp_path / "ok"), "--json", "--redis-url", redis_server.url.url)
    assert code == 0, err
    out = json.loads(out)
    assert out["mode"] == "serverless" and out["steps"] == 5 and out["status"] == "completed"


def test_serverless_spec_validation_exits_2(cli, tmp_path):
    bad = tmp_path / "b.yaml"
    for cluster, needle in [({"sync": "async"}, "VM"), ({"memory_mb": 64}, "memory_mb"), ({"bids": 0.5}, "bids"),
                            ({"functions": "nope"}, "nope"), ({"sync": "ssp"}, "staleness")]:
        bad.write_text(json.dumps({"name": "b", "workload": PMF, "target": {"iterations": 5},
                                   "cluster": {"kind": "serverless", "workers": 2, **cluster}}))
        code, out, err = cli("run", str(bad), "--out", str(tmp_path / "o2"))
        assert code == 2 and needle in err, (cluster, err)


def test_isp_function_death_is_replayed_exactly_from_its_checkpoint(redis_server, tmp_path):
    """Under ISP a dead function's insignificant updates survive: its re-invocation replays from
    its replica checkpoint and the run ends with the very parameters of the fault-free run."""
    spec = sl_spec(steps=30, workers=2, sync="isp", significance=0.7)
    clean, s0 = run_sup(spec, tmp_path / "clean", shared=redis_server, snapshot_every=10, isp_checkpoint_every=10)
    faulty, s1 = run_sup(spec, tmp_path / "faulty", shared=redis_server, snapshot_every=10, isp_checkpoint_every=10,
                         faults={1: "die:16"},
                         heartbeat_timeout_s=3.0)
    assert s1.status == "completed" and s1.extra["lost"] >= 1
    assert np.array_equal(clean.params, faulty.params), float(np.abs(clean.params - faulty.params).max())
    ends = [e for e in read_events(tmp_path / "faulty" / "events.jsonl") if e["kind"] == "function" and e["worker"] == 1
            and e["status"] not in ("invoked", "lost")]
    assert ends and 0.0 < s1.extra["pushed_fraction"] < 1.0


def test_a_killed_serverless_run_resumes_from_its_checkpoint(cli, tmp_path, redis_server):
    """The supervisor dies at step 7; `spotwise run --resume` continues from the step-5 checkpoint
    and (BSP) ends with exactly the parameters of an uninterrupted run, costs carried over."""
    from spotwise.control.checkpoint import load_latest_checkpoint

    spec = spec_from_dict({"name": "sl-resume", "workload": PMF, "target": {"iterations": 10},
                           "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
                           "outputs": {"checkpoint_every": 5, "plots": False}})
    out = tmp_path / "run"

    class Killed(Exception):
        pass

    def progress(snap):
        if snap["step"] == 7:
            raise Killed()

    from spotwise.planes.serverless.runner import serverless_controller

    with pytest.raises(Killed):
        from spotwise.rundir import open_run_dir

        with open_run_dir(out, "new"):
            serverless_controller(spec, out, redis_url=redis_server.url, progress=progress).run()
    state, _ = load_latest_checkpoint(out)
    assert int(state["step"]) == 5
    code, stdout, err = cli("run", "--resume", str(out), "--json", "--redis-url", redis_server.url.url)
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["status"] == "completed" and summary["steps"] == 10
    final, _ = load_latest_checkpoint(out)
    assert np.allclose(final["params"].numpy(), sgd_reference(spec, 10), rtol=1e-4, atol=1e-5)
    kinds = [e["kind"] for e in read_events(out / "events.jsonl")]
    assert "restore" in kinds and kinds.count("header") == 1
    assert summary["cost_usd"] > state["cost"]["total"] > 0


def test_sparse_logreg_criteo_trains_on_functions(redis_server, tmp_path):
    spec = spec_from_dict({"name": "sl-lr", "workload": {"name": "sparse-logreg", "family": "logreg", "batch_size": 256, "lr": 0.5,
                                                         "eval_every": 10**6, "params": {"n_samples": 6000, "hash_buckets": 20000}},
                           "target": {"iterations": 40}, "cluster": {"kind": "serverless", "workers": 2, "sync": "isp"},
                           "outputs": {"checkpoint_every": 0, "plots": False}})
    sup, s = run_sup(spec, tmp_path / "lr", shared=redis_server)
    assert s.status == "completed" and s.final_metric is not None and s.final_metric > 0.6
    # a Criteo batch touches a few thousand of the 20,014 weights: updates are far below model size
    assert s.extra["bytes_in"] < 0.25 * 8 * 20014 * 2 * 40


@pytest.mark.parametrize("sync", ["isp"])  # BSP re-invocations are covered by the fault tests (suite time)
def test_functions_that_reach_their_lease_are_reinvoked_and_lose_nothing(redis_server, tmp_path, sync):
    """A platform timeout (lease) ends every invocation many times over; the run ends with exactly
    the parameters of a run whose functions never time out (ISP: residuals carried by the lease-end
    checkpoint)."""
    spec = sl_spec(steps=24, workers=2, sync=sync)  # two lease ends a function, as many re-invocations as at 36
    long, s0 = run_sup(spec, tmp_path / "long", shared=redis_server)
    short, s1 = run_sup(spec, tmp_path / "short", shared=redis_server, lease_steps=9)  # a lease of 9 steps
    assert s1.status == "completed" and s1.extra["leases"] >= 2 and s0.extra["leases"] == 0
    if sync == "isp":  # the replica and residual come back bit for bit from the lease-end checkpoint
        assert np.array_equal(long.params, short.params)
    else:  # a BSP replica is rebuilt from the snapshot plus updates: equal up to float summation order
        assert np.allclose(long.params, short.params, rtol=1e-5, atol=1e-6)
    leases = [e for e in read_events(tmp_path / "short" / "events.jsonl") if e["kind"] == "function" and e["status"] == "lease"]
    assert leases and all(e["steps"] >= 1 for e in leases)


def test_a_supervisor_that_cannot_start_leaves_no_redis_server_behind(tmp_path, monkeypatch):
    import glob
    import shutil
    import tempfile

    from spotwise.planes.serverless.runner import serverless_controller

    # a temp folder of this test's own (short: a unix socket path lives there): other tests' stores,
    # started or reaped meanwhile in /tmp by a parallel worker, are not this test's business
    private = tempfile.mkdtemp(prefix="swt-", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", private)
    try:
        with pytest.raises(InputError):  # resume of a directory without a checkpoint
            serverless_controller(sl_spec(steps=3), tmp_path / "empty", resume=True)
        assert glob.glob(f"{private}/spotwise-redis-*") == []
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_the_serverless_summary_table_renders():
    """``spotwise run`` of a serverless spec without ``--json`` prints this table (it named a
    function it had not imported: a NameError after the run had finished)."""
    import types

    from rich.console import Console

    from spotwise.cli_tables import _serverless_table

    summary = types.SimpleNamespace(
        spec={"name": "sl"}, status="completed", metric_name="rmse", steps=5, final_metric=0.9, final_loss=0.8,
        wall_s=12.5, cost_usd=0.000123, cost_breakdown={"by_category": {"function": 0.0001, "service": 0.000023}},
        extra={"sync": "bsp", "backend": "localhost", "invocations": 10, "lost": 0, "errors": 0,
               "pushed_fraction": None, "workers_at_end": 2})
    console = Console(record=True, width=100)
    console.print(_serverless_table(summary))
    text = console.export_text()
    assert "wall time" in text and "12 s" in text and "10 / 0 / 0" in text
