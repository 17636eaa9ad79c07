"""Issue 38: numeric SPOTWISE_* variables in range, the URI lease fencing a paused holder, Ray under memory limits.

* ``SPOTWISE_LEASE_TTL_S=inf`` (or nan, 0, negative, absurd) and every other numeric ``SPOTWISE_*``
  variable is refused with exit 2 naming it and its range, before anything loads (no Ray);
* a lease holder paused past the TTL whose lease another machine took over neither heartbeats over
  it nor uploads (``file://``, as in ``test_uri_lease.py``); a real run that loses its lease stops
  with exit 2 and the run continues, resumed from the URI, from its last committed checkpoint;
* a local Ray's object store is sized to the memory limits, and a ``ulimit -v`` too small exits 2
  with what to set -- no C stack dump, no Ray started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.capacity import raystart
from spotwise.capacity.raystart import (RAY_MIN_OBJECT_STORE_MIB, RAYLET_VMEM_MIB, RUN_VMEM_MIB, MemoryLimits, local_object_store_bytes,
                                        object_store_mib)
from spotwise.envvars import NUMERIC_ENV, check_numeric_env, env_number
from spotwise.errors import InputError
from spotwise.remote.lease import LEASE, LeaseLost, RemoteLease
from spotwise.remote.mirror import RunMirror
from spotwise.remote.uri import connect
from _load import bound

DIGITS = {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000}
CLUSTER = {"instance_type": "c5.xlarge", "workers": 1, "coordinator_instance": "c5.large", "standby": 0}


def _spec(uri: str | None, iterations: int = 30, every: int = 10) -> dict[str, Any]:
    outputs: dict[str, Any] = {"checkpoint_every": every, "plots": False}
    if uri:
        outputs["uri"] = uri
    return {"name": "lease-run", "seed": 5, "workload": DIGITS, "target": {"iterations": iterations}, "cluster": CLUSTER,
            "market": {"synthetic": {"kind": "constant", "price": 0.07}}, "outputs": outputs}


def _remote(tmp_path: Path):
    root = tmp_path / "bucket"
    root.mkdir()
    return connect(f"file://{root}"), root


def _land_lease(root: Path, doc: dict[str, Any]) -> None:
    """Another machine's lease lands at once, as spotwise writes it (aside, then renamed): a heartbeat reading the
    file meanwhile never sees it half-written -- a torn lease counts as none ("it is gone"), not as the new holder."""
    tmp = root / f".{LEASE}.tmp-test"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, root / LEASE)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------- item 1
@pytest.mark.parametrize("name", sorted(NUMERIC_ENV))
@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "0", "-3", "1e30", "lots", "1e400"])
def test_every_numeric_variable_refuses_non_finite_zero_negative_and_absurd_values(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    spec = NUMERIC_ENV[name]
    with pytest.raises(InputError) as err:
        env_number(name)
    msg = str(err.value)
    assert name in msg and f"from {spec.lo:g} to {spec.hi:g}" in msg and spec.unit in msg, msg
    with pytest.raises(InputError, match=name):
        check_numeric_env()


def test_values_in_range_are_taken_and_counts_must_be_whole(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", " 0.6 ")
    assert env_number("SPOTWISE_LEASE_TTL_S") == pytest.approx(0.6)
    monkeypatch.setenv("SPOTWISE_MAX_LOCAL_WORKERS", "2.5")
    with pytest.raises(InputError, match="SPOTWISE_MAX_LOCAL_WORKERS.*whole number"):
        env_number("SPOTWISE_MAX_LOCAL_WORKERS")
    monkeypatch.setenv("SPOTWISE_MAX_LOCAL_WORKERS", "4")
    assert raystart.local_worker_limit() == 4
    monkeypatch.delenv("SPOTWISE_MAX_LOCAL_WORKERS")
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", "")  # blank: the default
    assert env_number("SPOTWISE_LEASE_TTL_S") == 90.0
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", "inf")
    remote, _ = _remote(tmp_path)
    with pytest.raises(InputError, match="SPOTWISE_LEASE_TTL_S"):  # never a lease that waits forever
        RemoteLease(remote)


def test_the_cli_refuses_an_infinite_ttl_before_anything_loads(cli: Any, monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path, ray_unimportable: None) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(f"file://{tmp_path / 'bucket'}")))
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", "inf")
    code, out, err = cli("run", str(spec), "--out", str(tmp_path / "out"))
    assert code == 2 and "SPOTWISE_LEASE_TTL_S: 'inf' is not a number of seconds from 0.5 to 86400" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists() and not (tmp_path / "bucket").exists()
    monkeypatch.delenv("SPOTWISE_LEASE_TTL_S")
    monkeypatch.setenv("SPOTWISE_OBJECT_STORE_MB", "-1")
    code, out, err = cli("demo", "--out", str(tmp_path / "demo"))
    assert code == 2 and "SPOTWISE_OBJECT_STORE_MB" in err and "from 75 to" in err, err
    assert not (tmp_path / "demo").exists()


# ---------------------------------------------------------------------------------------------- item 2
def _pause(lease: RemoteLease) -> None:
    """The holder stops beating (a SIGSTOP, a suspended VM): its heartbeat thread stands still."""
    lease._stop.set()
    assert lease._thread is not None
    lease._thread.join(timeout=5)
    lease._stop.clear()


def test_a_holder_paused_past_the_ttl_neither_heartbeats_over_the_new_holder_nor_uploads(tmp_path: Path) -> None:
    remote, root = _remote(tmp_path)
    local = tmp_path / "local"
    (local / "checkpoints").mkdir(parents=True)
    (local / "events.jsonl").write_text('{"kind": "header"}\n')
    (local / "spec.json").write_text("{}")
    first = RemoteLease(remote, ttl_s=0.6, wait_s=0.1)
    first.acquire()
    mirror = RunMirror(remote, local, lease=first)
    mirror.sync()  # uploads while it holds the lease
    assert (root / "events.jsonl").is_file()
    _pause(first)
    time.sleep(0.7)  # past the TTL: its lease is stale
    second = RemoteLease(remote, ttl_s=0.6, wait_s=2.0)
    second.acquire()  # a relaunch takes the stale lease over
    try:
        taken = _tree(root)
        assert json.loads(taken[LEASE])["owner"] == second.owner
        # the first holder comes back: its next heartbeat re-reads the lease and stops instead of writing
        with pytest.raises(LeaseLost, match="lost the run's lease") as err:
            first.renew()
        assert "--resume file://" in str(err.value) and err.value.where == remote.uri
        assert first.lost is err.value
        # and its uploads are refused before any byte is written (a grown log, a new file)
        (local / "events.jsonl").write_text('{"kind": "header"}\n{"kind": "step"}\n')
        (local / "summary.json").write_text("{}")
        for upload in (mirror.sync, mirror.sync_events, mirror.checkpoint_saved):
            with pytest.raises(LeaseLost):
                upload()
        mirror.finish(failed=True)  # the run stopped for it: quiet, nothing written
        with pytest.raises(LeaseLost):
            mirror.finish(failed=False)  # a run that ended normally meanwhile still exits 2
        first.release()  # never removes the new holder's lease
        time.sleep(0.5)  # the new holder beats on, undisturbed
        after = _tree(root)
        assert {k: v for k, v in after.items() if k != LEASE} == {k: v for k, v in taken.items() if k != LEASE}
        assert json.loads(after[LEASE])["owner"] == second.owner
        second.check()  # the new holder still holds it
    finally:
        second.release()
    assert not (root / LEASE).exists()


def test_the_heartbeat_thread_stops_at_once_when_another_holder_took_the_lease(tmp_path: Path) -> None:
    remote, root = _remote(tmp_path)
    first = RemoteLease(remote, ttl_s=0.6, wait_s=0.1)
    first.acquire()
    foreign = {"owner": "node-b:77:abcdef", "heartbeat": time.time(), "ttl_s": 0.6}
    _land_lease(root, foreign)  # another machine's takeover, landed between two beats
    deadline = time.monotonic() + bound(5)
    while first.lost is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert isinstance(first.lost, LeaseLost) and "node-b:77 holds it now" in str(first.lost)
    assert first._thread is not None
    first._thread.join(timeout=bound(2))
    assert not first._thread.is_alive()  # the heartbeat stopped with it
    time.sleep(0.5)
    assert json.loads((root / LEASE).read_text()) == foreign  # never written over
    with pytest.raises(LeaseLost):
        first.check()
    first.release()
    assert json.loads((root / LEASE).read_text()) == foreign


def test_an_upload_after_a_pause_renews_the_lease_first_and_a_vanished_lease_counts_as_lost(tmp_path: Path) -> None:
    remote, root = _remote(tmp_path)
    now = [1000.0]
    lease = RemoteLease(remote, ttl_s=60.0, wait_s=0.1, elapsed=lambda: now[0])
    lease.acquire()
    try:
        beat = json.loads((root / LEASE).read_text())["heartbeat"]
        time.sleep(0.01)
        lease.check()  # a fresh heartbeat: a re-read suffices
        assert json.loads((root / LEASE).read_text())["heartbeat"] == beat
        now[0] += 45.0  # paused for longer than ttl/2 (the thread beats every 20 s): renew before writing
        lease.check()
        assert json.loads((root / LEASE).read_text())["heartbeat"] > beat
        (root / LEASE).unlink()  # gone: taken over and released elsewhere, or removed by hand
        with pytest.raises(LeaseLost, match="it is gone"):
            lease.check()
        assert not (root / LEASE).exists()  # not recreated
    finally:
        lease.release()


@pytest.mark.timeout(300)
def test_a_run_whose_lease_is_taken_over_exits_2_and_resumes_from_the_uri(cli: Any, ray_session: Any, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    remote_dir = tmp_path / "bucket" / "job"
    uri = f"file://{remote_dir}"
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(uri, iterations=30, every=10)))
    monkeypatch.setenv("SPOTWISE_LEASE_TTL_S", "0.6")
    seen: dict[str, Any] = {}
    original = RunMirror.checkpoint_saved

    def paused_then_taken_over(self: RunMirror, path: Path | None = None) -> None:
        """At the second checkpoint: the node was paused past the TTL and another machine took the run over."""
        seen["calls"] = seen.get("calls", 0) + 1
        if seen["calls"] == 2:
            foreign = {"owner": "node-b:42:feedbeef", "heartbeat": time.time(), "ttl_s": 0.6}
            _land_lease(remote_dir, foreign)
            seen["tree"] = _tree(remote_dir)
        original(self, path)

    monkeypatch.setattr(RunMirror, "checkpoint_saved", paused_then_taken_over)
    code, out, err = cli("run", str(spec_file), "--out", str(tmp_path / "node1"), "--json")
    assert code == 2, err[-3000:]
    assert "lost the run's lease" in err and "node-b:42 holds it now" in err and f"--resume {uri}" in err, err
    assert "Traceback" not in err and "internal error" not in err
    after = _tree(remote_dir)
    # nothing written to the URI after the takeover: its committed state is the one before (step 10)
    assert {k: v for k, v in after.items() if not k.startswith("events")} == \
        {k: v for k, v in seen["tree"].items() if not k.startswith("events")}
    manifest = json.loads(after["checkpoints/manifest.json"])
    assert [e["step"] for e in manifest["checkpoints"]][-1] == 10
    assert json.loads(after[LEASE])["owner"] == "node-b:42:feedbeef"
    # the other machine goes away (its lease goes stale); the run resumes from the URI and completes
    monkeypatch.setattr(RunMirror, "checkpoint_saved", original)
    time.sleep(0.7)
    code, out, err = cli("run", "--resume", uri, "--out", str(tmp_path / "node2"), "--json")
    assert code == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["status"] == "completed" and summary["steps"] == 30
    events = [json.loads(line) for line in (remote_dir / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in events if e["kind"] == "restore"][-1] == 10
    assert not (remote_dir / LEASE).exists()


# ---------------------------------------------------------------------------------------------- item 3
GIB = 1024.0


def test_the_object_store_is_sized_to_the_memory_the_process_may_use() -> None:
    # no limit below the machine's memory: Ray's own default (30 % of the RAM)
    assert object_store_mib(MemoryLimits(None, None, 24 * GIB)) is None
    assert object_store_mib(MemoryLimits(None, 64 * GIB, 24 * GIB)) is None  # a cgroup above the RAM binds nothing
    # a cgroup limit below the RAM: 30 % of it
    assert object_store_mib(MemoryLimits(None, 8 * GIB, 24 * GIB)) == int(0.3 * 8 * GIB)
    # ulimit -v: at most its headroom over what a process maps besides the store
    assert object_store_mib(MemoryLimits(4 * GIB, None, 24 * GIB)) == int(4 * GIB - RUN_VMEM_MIB)
    assert object_store_mib(MemoryLimits(64 * GIB, None, 24 * GIB)) == int(0.3 * 24 * GIB)
    assert object_store_mib(MemoryLimits(4 * GIB, 2 * GIB, 24 * GIB)) == int(0.3 * 2 * GIB)
    # issue 54 item 6: under the review's `ulimit -v 8000000` the raylet must be able to map the store twice
    # (its headroom alone, 5,508 MiB, crashed the raylet's mmap in a resumed collective run)
    limit = 8_000_000 / 1024
    store = object_store_mib(MemoryLimits(limit, None, 24 * GIB))
    assert store == int((limit - RAYLET_VMEM_MIB) / 2) and 2 * store + RAYLET_VMEM_MIB <= limit
    assert store + RUN_VMEM_MIB <= limit
    with pytest.raises(InputError, match="may map it twice"):
        object_store_mib(MemoryLimits(limit, None, 24 * GIB), 5000)
    # Ray's minimum is kept (the headroom is just enough)
    assert object_store_mib(MemoryLimits(RUN_VMEM_MIB + RAY_MIN_OBJECT_STORE_MIB, None, 24 * GIB)) == RAY_MIN_OBJECT_STORE_MIB
    # never more than Ray accepts beside a small /dev/shm (it refuses a store over max(10 GB, /dev/shm))
    assert object_store_mib(MemoryLimits(64 * GIB, 60 * GIB, 100 * GIB, shm=1000)) == int(1e10 / 2**20)
    # $SPOTWISE_OBJECT_STORE_MB wins when it fits
    assert object_store_mib(MemoryLimits(None, None, 24 * GIB), 512) == 512
    assert object_store_mib(MemoryLimits(4 * GIB, None, 24 * GIB), 512) == 512


@pytest.mark.parametrize("limits, env, words", [
    (MemoryLimits(2 * GIB, None, 24 * GIB), None, ["ulimit -v", "is 2048 MiB", f"at least {RUN_VMEM_MIB + 75} MiB",
                                                    f"ulimit -v {(RUN_VMEM_MIB + 75) * 1024}"]),
    (MemoryLimits(None, 1000, 24 * GIB), None, ["memory.max", "is 1000 MiB", "--ray-address"]),
    (MemoryLimits(3 * GIB, None, 24 * GIB), 2048, ["SPOTWISE_OBJECT_STORE_MB=2048", "does not fit", "at most"]),
    (MemoryLimits(None, 4 * GIB, 24 * GIB), 8192, ["SPOTWISE_OBJECT_STORE_MB=8192", "more than the memory"]),
    (MemoryLimits(None, None, 64 * GIB, shm=1000), 20000, ["SPOTWISE_OBJECT_STORE_MB=20000", "/dev/shm", "--shm-size"]),
])
def test_a_limit_too_small_for_ray_is_refused_with_what_to_set(limits: MemoryLimits, env: float | None,
                                                               words: list[str]) -> None:
    with pytest.raises(InputError) as err:
        object_store_mib(limits, env)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_the_cgroup_limit_is_read_from_v2_or_v1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    v2, v1 = tmp_path / "v2", tmp_path / "v1" / "memory.limit_in_bytes"
    v2.mkdir()
    v1.parent.mkdir()
    monkeypatch.setattr(raystart, "_CGROUP_V2", v2)
    monkeypatch.setattr(raystart, "_CGROUP_V1_LIMIT", v1)
    assert raystart._cgroup_limit_mib() is None  # neither file
    v1.write_text("9223372036854771712\n")  # v1's "unlimited"
    assert raystart._cgroup_limit_mib() is None
    v1.write_text(str(3 << 30))
    assert raystart._cgroup_limit_mib() == 3 * GIB
    (v2 / "memory.max").write_text("max\n")
    assert raystart._cgroup_limit_mib() is None
    (v2 / "memory.max").write_text(str(2 << 30))
    assert raystart._cgroup_limit_mib() == 2 * GIB
    monkeypatch.setattr(raystart, "memory_limits", lambda: MemoryLimits(None, 2 * GIB, 24 * GIB))
    assert local_object_store_bytes() == int(0.3 * 2 * GIB) << 20


def _import_torch_s(env: dict[str, str]) -> float:
    """Seconds a fresh interpreter takes to import PyTorch here and now (the step a refused run may take)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env=env, timeout=bound(300))
    return time.monotonic() - t0


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kib", [600 * 1024, 2048 * 1024])
def test_spotwise_run_under_a_small_ulimit_exits_2_saying_what_to_set(tmp_path: Path, kib: int) -> None:
    """600 MB: refused before PyTorch is imported; 2 GB (which used to die in Ray's mmap with a C stack dump):
    refused before Ray starts.  Either way one message, exit 2, fast."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(None, iterations=5, every=0)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTWISE_", "RAY_"))}
    cmd = f'ulimit -v {kib} && exec "{sys.executable}" -m spotwise.cli run "{spec}" --out "{tmp_path / "out"}"'
    # "fast" relative to importing PyTorch just before and after (load slows both): ~2x measured, 10x allowed
    base = _import_torch_s(env)
    t0 = time.monotonic()
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env, timeout=max(100, 20 * base))
    took = time.monotonic() - t0
    assert res.returncode == 2, res.stderr[-3000:]
    base = max(base, _import_torch_s(env))
    assert took < 10 * base, f"took {took:.1f} s; importing PyTorch {base:.1f} s"
    err = res.stderr
    assert "ulimit -v" in err and f"at least {RUN_VMEM_MIB + 75} MiB" in err and f"is {kib // 1024} MiB" in err, err
    for dump in ("StackTrace", "Traceback", "***", "raylet", "internal error"):
        assert dump not in err, err
    assert not (tmp_path / "out" / "events.jsonl").exists()


# ---------------------------------------------------------------------------------------------- the mirror reads no link
def test_the_mirror_never_uploads_through_a_link_planted_in_the_run_directory(tmp_path: Path) -> None:
    """A link planted in the local run directory (a file or the checkpoints folder) is not followed by the
    uploads: what it points at never reaches the URI."""
    from spotwise.errors import InputError

    remote, root = _remote(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("SECRET-KEY\n")
    (secret / "manifest.json").write_text('{"checkpoints": []}')
    local = tmp_path / "local"
    local.mkdir()
    (local / "spec.json").symlink_to(secret / "key")
    (local / "events.jsonl").symlink_to(secret / "key")
    (local / "checkpoints").symlink_to(secret)
    mirror = RunMirror(remote, local)
    mirror.sync_events()  # a link in its place: skipped
    with pytest.raises(InputError, match="link"):
        mirror.sync_checkpoints()
    assert mirror._put_file("spec.json") is False
    assert not any(b"SECRET" in data for data in _tree(root).values())
