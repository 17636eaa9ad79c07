"""Nothing lost on SIGTERM or kill -9 (issue 30 items 5, 6 and 7).

* Item 5: SIGTERM writes a final checkpoint of the *last committed step* on every plane, then the
  run exits 143 and ``--resume`` continues from that step (with ``checkpoint_every: 1000`` the
  SIGTERM checkpoint is the only one).
* Item 6: SIGTERM always exits 143, never 130 -- also when Ray turned the interrupt into a plain
  ``KeyboardInterrupt`` (what ``ray.get`` does with any KeyboardInterrupt raised while it blocks).
* Item 7: the children of a serverless run (its private ``redis-server``, its Lithops function
  processes) die with a driver killed by SIGKILL, and its private password folder goes too.

The item-5 runs on the VM planes also run under the memory limits of issue 54 item 6 (what
``test_memory_limits.py`` ran as runs of their own): the parameter-server run and its resume at the
documented minimum (``ulimit -v`` of :data:`RUN_VMEM_MIB` plus Ray's smallest store), the collective run
stopped with SIGTERM and resumed under the review's ``ulimit -v 8000000`` (with the store at the whole
headroom the raylet, which may map it twice, died in ``mmap``: exit 1, no summary).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from spotwise import signals
from spotwise.capacity.raystart import RAY_MIN_OBJECT_STORE_MIB, RUN_VMEM_MIB
from spotwise.signals import Terminated, sigterm_as_interrupt
from _load import bound

psutil = pytest.importorskip("psutil")

PMF = {"name": "pmf", "family": "pmf", "batch_size": 256, "lr": 5.0, "eval_every": 1000,
       "params": {"n_users": 300, "n_items": 400, "n_ratings": 20000, "rank": 8}}
DIGITS = {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000}
VM_CLUSTER = {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0}
NO_PERIODIC = {"checkpoint_every": 1000, "plots": False}  # only the SIGTERM checkpoint can exist

# the SIGTERM lands a few steps after the 6th (the waits below): each target leaves the resume most of the run
SPECS: dict[str, dict[str, Any]] = {
    "serverless": {"name": "fin-sl", "workload": PMF, "target": {"iterations": 30},
                   "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"}, "outputs": NO_PERIODIC},
    "ps": {"name": "fin-ps", "seed": 5, "workload": DIGITS, "target": {"iterations": 50}, "cluster": VM_CLUSTER,
           "market": {"synthetic": {"kind": "constant", "price": 0.07}}, "outputs": NO_PERIODIC},
    # members lease steps ahead of the log: a longer run, so SIGTERM surely lands mid-run (it lands a few steps
    # after the 6th, step 11-12 here: 60 leaves ~50 to spare)
    "collective": {"name": "fin-coll", "seed": 5, "workload": DIGITS, "target": {"iterations": 60},
                   "cluster": {**VM_CLUSTER, "data_plane": "collective", "group_timeout_s": bound(2), "replica_every": 5},
                   "market": {"synthetic": {"kind": "constant", "price": 0.07}}, "outputs": NO_PERIODIC},
}
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
#: ``ulimit -v`` (KiB) of the item-5 run and its resume, per plane (issue 54 item 6): the documented minimum
#: (docs/security.md) on the PS plane, the review's limit on the collective plane
MINIMUM_KIB = (RUN_VMEM_MIB + RAY_MIN_OBJECT_STORE_MIB) * 1024
REVIEW_KIB = 8_000_000
LIMIT_KIB: dict[str, int | None] = {"ps": MINIMUM_KIB, "collective": REVIEW_KIB, "serverless": None}


def _cli(args: list[str], kib: int | None = None) -> tuple[list[str], dict[str, str]]:
    """``python -m spotwise.cli ARGS``, under ``ulimit -v KIB`` (inherited by every process it starts; ``exec``:
    the pid is the CLI's) with none of this session's ``SPOTWISE_*`` settings nor its Ray's address."""
    cmd = [sys.executable, "-m", "spotwise.cli", *args]
    if kib is None:
        return cmd, ENV
    env = {k: v for k, v in ENV.items() if not k.startswith(("SPOTWISE_", "RAY_ADDRESS"))}
    return ["bash", "-c", f'ulimit -v {kib} && exec "$@"', "limited", *cmd], env


def _events(out: Path) -> list[dict[str, Any]]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            continue
    return rows


def _steps(out: Path) -> list[int]:
    return [int(e["step"]) for e in _events(out) if e.get("kind") == "step"]


def _start(spec: dict[str, Any], tmp_path: Path, name: str = "run",
           kib: int | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / name
    cmd, env = _cli(["run", str(path), "--out", str(out)], kib)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return proc, out


def _wait_for_steps(proc: subprocess.Popen[bytes], out: Path, n: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while len(_steps(out)) < n:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1].decode(errors="replace")[-2000:])
        assert time.monotonic() < deadline, f"fewer than {n} committed steps within {timeout:g} s"
        time.sleep(0.05)


def _sigterm(proc: subprocess.Popen[bytes], timeout: float = 120) -> str:
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err.decode(errors="replace")


def _need_redis(plane: str) -> None:
    if plane == "serverless" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")


# ---------------------------------------------------------------------------------- item 5
def _holding(needle: str) -> list[str]:
    """Live processes whose command line mentions ``needle`` (the run's private folder)."""
    hits = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and needle in " ".join(p.info["cmdline"] or []):
                hits.append(f"{p.pid} {' '.join(p.info['cmdline'])[:120]}")
        except psutil.Error:
            continue
    return hits


# ---------------------------------------------------------------------------------- item 5 (and issue 18 item 3)
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("plane", ["ps", "collective", "serverless"])
def test_sigterm_checkpoints_the_last_committed_step_and_resume_continues_from_it(tmp_path, plane):
    """A real SIGTERM to the process only (as Kubernetes sends it to a container's main process) stops
    the run as cleanly as Ctrl-C, on every plane: exit 143 with a one-line message and no traceback,
    a final checkpoint of the last committed step (the only one: checkpoint_every 1000), no process
    the run started (its Ray processes, its private redis-server, its Lithops function processes --
    every descendant seen during the run) still alive, re-parented or not, the private
    ``/tmp/spotwise-redis-*`` folder removed, and ``--resume`` continuing from exactly that step.
    (One run per plane covers issue 18 item 3 and issue 30 item 5: the two were the same path.)
    The VM planes' run and resume run under :data:`LIMIT_KIB` (issue 54 item 6): neither dumps a stack
    (Ray's ``StackTrace``, ``mmap failed``) on the way."""
    _need_redis(plane)
    kib = LIMIT_KIB[plane]
    proc, out = _start(SPECS[plane], tmp_path, kib=kib)
    seen: set[Any] = set()
    deadline = time.monotonic() + bound(240)
    while len(_steps(out)) < 6:  # an event wait; the bound only ends a hang
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1].decode(errors="replace")[-2000:])
        assert time.monotonic() < deadline, "fewer than 6 committed steps within 240 s"
        seen |= _descendants(proc.pid)
        time.sleep(0.05)
    seen |= _descendants(proc.pid)
    err = _sigterm(proc)
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-2000:]
    assert seen, "the run started no process (the check would prove nothing)"
    events = _events(out)
    private = None
    if plane == "serverless":  # the private store's folder: named when it started (the store event)
        started = [e for e in events if e.get("kind") in ("header", "store")
                   and (e.get("kind") == "header" or e.get("status") == "started")]
        m = re.search(r"(/(?:[\w.-]+/)*spotwise-redis-\w+)/", json.dumps(started))
        assert m, started
        private = m.group(1)
    end = time.monotonic() + bound(20)
    while (_alive(list(seen)) or (private and _holding(private))) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _alive(list(seen)), _alive(list(seen))
    if private:
        assert not _holding(private), _holding(private)
        assert not os.path.exists(private), f"{private} was left behind"
    last = max(_steps(out))
    ckpts = [e for e in events if e.get("kind") == "checkpoint"]
    assert [c.get("why") for c in ckpts] == ["sigterm"], ckpts  # checkpoint_every 1000: only the SIGTERM one
    assert ckpts[0]["step"] == last, (ckpts, last)
    assert last < SPECS[plane]["target"]["iterations"] and not (out / "summary.json").exists()

    from spotwise.control.checkpoint import load_latest_checkpoint

    found = load_latest_checkpoint(out)
    assert found is not None and int(found[0]["step"]) == last
    cmd, env = _cli(["run", "--resume", str(out), "--json"], kib)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=bound(400), env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    _no_dump(res.stderr)
    summary = json.loads(res.stdout)
    assert summary["status"] == "completed" and summary["steps"] == SPECS[plane]["target"]["iterations"]
    restores = [e for e in _events(out) if e.get("kind") == "restore"]
    assert [r["step"] for r in restores] == [last]


def _no_dump(err: str) -> None:
    for dump in ("StackTrace", "Traceback", "mmap failed", "internal error"):
        assert dump not in err, err[-3000:]


def _descendants(pid: int) -> set[Any]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return set()


def test_a_deferred_sigterm_checkpoints_between_steps_then_raises_terminated():
    """In the run loop SIGTERM raises nothing mid-step: the loop's next check checkpoints the last
    committed step (after the plane stopped its members) and raises Terminated."""
    from spotwise.control.terminating import FinalCheckpoint

    calls: list[str] = []

    class Plane:
        def stop(self) -> None:
            calls.append("stop")

        def before_finish(self) -> None:
            calls.append("before_finish")

    class Ckpt:
        last_step = 3

    class Job:
        step, plane, checkpointer = 7, Plane(), Ckpt()

        def checkpoint(self, why: str) -> None:
            calls.append(f"checkpoint {why} {self.step}")
            self.checkpointer.last_step = self.step

    with pytest.raises(Terminated):
        with sigterm_as_interrupt():
            with FinalCheckpoint(Job()) as term:  # type: ignore[arg-type]
                assert not term.requested()
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # a step in flight: not interrupted
                calls.append("step committed")
                term.requested()
    assert calls == ["step committed", "stop", "before_finish", "checkpoint sigterm 7"]
    assert not signals.termination_pending()


def test_a_final_checkpoint_that_takes_too_long_is_given_up_with_exit_143(monkeypatch, capfd):
    monkeypatch.setattr(signals, "FINAL_CHECKPOINT_S", 0.3)
    with pytest.raises(Terminated):
        with sigterm_as_interrupt(), signals.deferred_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(100):  # a loop that never reaches its check
                time.sleep(0.05)
    assert "no final checkpoint within 0.3 s" in capfd.readouterr().err


# ---------------------------------------------------------------------------------- item 6
def test_sigterm_turned_into_a_plain_keyboard_interrupt_still_exits_143(capfd):
    """``ray.get`` re-raises any KeyboardInterrupt as ``KeyboardInterrupt()``: the PS plane's 130."""
    from spotwise.cli import guarded

    @guarded
    def command() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        except Terminated:
            raise KeyboardInterrupt() from None  # what Ray's check_signals / check_status do

    with pytest.raises(typer.Exit) as e:
        command()
    assert e.value.exit_code == 143
    assert "terminated (SIGTERM)" in capfd.readouterr().err

    @guarded
    def ctrl_c() -> None:
        raise KeyboardInterrupt()

    with pytest.raises(typer.Exit) as e:
        ctrl_c()
    assert e.value.exit_code == 130  # a real Ctrl-C stays 130


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_ps_plane_exits_143_on_sigterm_every_time(tmp_path):
    """SIGTERM at another point of a PS run than the item-5 test's (after its 6th step): right after the
    first committed step, while the workers' first pulls and pushes are in flight -- 143 again."""
    spec = {**SPECS["ps"], "target": {"iterations": 2000}}
    proc, out = _start(spec, tmp_path, "early")
    _wait_for_steps(proc, out, 1, timeout=bound(240))
    err = _sigterm(proc, timeout=bound(120))
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err[-2000:]


# ---------------------------------------------------------------------------------- item 7
def _alive(procs: list[Any]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} ppid={p.ppid()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            continue
    return out


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_children_of_a_serverless_run_die_with_a_driver_killed_by_sigkill(tmp_path):
    _need_redis("serverless")
    spec = {**SPECS["serverless"], "target": {"iterations": 5000}}
    proc, out = _start(spec, tmp_path)
    try:
        _wait_for_steps(proc, out, 3)
        started = [e for e in _events(out) if e.get("kind") == "store" and e.get("status") == "started"]
        m = re.search(r"(/(?:[\w.-]+/)*spotwise-redis-\w+)/", json.dumps(started))
        assert m, started
        private = m.group(1)
        time.sleep(1.0)  # the watchdog has seen every function process
        kids = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(" ".join(k.cmdline()) for k in kids)
        assert "redis-server" in names and "lithops" in names, names
        os.kill(proc.pid, signal.SIGKILL)  # the driver only, not its group
        proc.wait(timeout=bound(30))
        end = time.monotonic() + 10
        while (_alive(kids) or os.path.exists(private)) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(kids), _alive(kids)
        assert not os.path.exists(private), f"{private} (the store's password folder) was left behind"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_later_run_cleans_what_a_dead_one_left(tmp_path):
    """The watchdog died with the driver (an OOM kill): the next private store kills the recorded
    children whose driver is gone and removes the dead run's folder; a live driver's is left alone."""
    from spotwise.planes.serverless.reaper import reap_stale
    from spotwise.watchdog import STATE_FILE, start_time

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_start = start_time(dead.pid)
    assert dead_start is not None
    dead.wait()
    child = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        child_start = start_time(child.pid)
        assert child_start is not None
        left = tmp_path / "spotwise-redis-dead"
        left.mkdir(mode=0o700)
        (left / "password").write_text("secret")
        (left / STATE_FILE).write_text(json.dumps({"driver": [dead.pid, dead_start],
                                                   "children": [[child.pid, child_start]]}))
        me = start_time(os.getpid())
        assert me is not None
        live = tmp_path / "spotwise-redis-live"
        live.mkdir(mode=0o700)
        (live / STATE_FILE).write_text(json.dumps({"driver": [os.getpid(), me], "children": []}))
        assert reap_stale([str(tmp_path)]) == [str(left)]
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert not left.exists() and live.exists()
    finally:
        if child.poll() is None:
            child.kill()


def test_the_password_file_for_an_operators_redis_goes_with_a_killed_driver(tmp_path):
    """``--redis-url`` with a password: the functions get a 0600 file holding it, in a folder inside
    the run's watchdog folder -- removed by the watchdog when the driver is killed with SIGKILL."""
    _need_redis("serverless")
    from spotwise.planes.serverless.store import RedisServer

    operator = RedisServer(tcp=True)  # the operator's Redis, not the driver's child
    try:
        url = operator.url
        driver = subprocess.Popen([sys.executable, "-c", (
            "import sys, time\n"
            "from spotwise.planes.serverless.job_store import JobStore\n"
            "from spotwise.planes.serverless.reaper import FolderWatchdog\n"
            "from spotwise.planes.serverless.store import RedisURL\n"
            f"store = JobStore(None, RedisURL('127.0.0.1', {url.port}, {url.password!r}, 0))\n"
            "dog = FolderWatchdog(None)\n"
            "store.secret_parent = dog.path\n"
            "print(store.function_url(True).password_file, flush=True)\n"
            "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True, env=ENV)
        try:
            assert driver.stdout is not None
            path = Path(driver.stdout.readline().strip())
            assert path.is_file() and path.read_text().strip() == url.password
            assert path.stat().st_mode & 0o077 == 0 and path.parent.parent.name.startswith("spotwise-run-")
            time.sleep(1.0)  # the watchdog is up
            os.kill(driver.pid, signal.SIGKILL)
            driver.wait(timeout=bound(30))
            end = time.monotonic() + 10
            while path.parent.exists() and time.monotonic() < end:
                time.sleep(0.1)
            assert not path.parent.exists(), f"{path.parent} (the password's folder) was left behind"
        finally:
            if driver.poll() is None:
                driver.kill()
    finally:
        operator.stop()
