"""SIGTERM stops a real `spotwise run` as cleanly as Ctrl-C, on every data plane (issue 18 item 3).

Each test starts `python -m spotwise.cli run` as a subprocess, waits for its first checkpoint,
sends it a real SIGTERM (to the process only, as Kubernetes does to a container's main process),
and then checks: exit status 143 with a one-line message and no traceback; no process the run
started (its Ray processes, its private redis-server, its Lithops function processes -- every
descendant seen during the run) still alive, re-parented or not; the private
``/tmp/spotwise-redis-*`` folder removed; and ``spotwise run --resume DIR`` completing the run.
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
import yaml

psutil = pytest.importorskip("psutil")

PMF = {"name": "pmf", "family": "pmf", "batch_size": 256, "lr": 5.0, "eval_every": 1000,
       "params": {"n_users": 300, "n_items": 400, "n_ratings": 20000, "rank": 8}}
DIGITS = {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000}
VM_CLUSTER = {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0}

SPECS: dict[str, dict[str, Any]] = {
    "serverless": {"name": "term-sl", "workload": PMF, "target": {"iterations": 400},
                   "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
                   "outputs": {"checkpoint_every": 5, "plots": False}},
    "ps": {"name": "term-ps", "seed": 5, "workload": DIGITS, "target": {"iterations": 150}, "cluster": VM_CLUSTER,
           "market": {"synthetic": {"kind": "constant", "price": 0.07}}, "outputs": {"checkpoint_every": 5, "plots": False}},
    "collective": {"name": "term-coll", "seed": 5, "workload": DIGITS, "target": {"iterations": 150},
                   "cluster": {**VM_CLUSTER, "data_plane": "collective", "group_timeout_s": 2, "replica_every": 5},
                   "market": {"synthetic": {"kind": "constant", "price": 0.07}}, "outputs": {"checkpoint_every": 5, "plots": False}},
}


def _descendants(pid: int) -> set[Any]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return set()


def _alive(procs: set[Any]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} ppid={p.ppid()} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            continue
    return out


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


@pytest.mark.timeout(400)
@pytest.mark.parametrize("plane", ["serverless", "ps", "collective"])
def test_sigterm_stops_a_run_cleanly_and_it_resumes(tmp_path, plane):
    if plane == "serverless" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (README command 2 installs it with apt)")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPECS[plane]))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "spotwise.cli", "run", str(spec), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    seen: set[Any] = set()
    deadline = time.monotonic() + 180
    try:
        while not any(e.get("kind") == "checkpoint" for e in _events(out)):
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint within 180 s"
            seen |= _descendants(proc.pid)
            time.sleep(0.1)
        seen |= _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    err_text = err.decode(errors="replace")
    assert proc.returncode == 143, (proc.returncode, err_text[-2000:])
    assert "terminated (SIGTERM)" in err_text and "Traceback" not in err_text, err_text[-2000:]
    assert seen, "the run started no process (the check would prove nothing)"
    header = next(e for e in _events(out) if e.get("kind") == "header")
    private = None
    if plane == "serverless":  # the private store's folder: named when it started (the store event)
        started = [e for e in _events(out) if e.get("kind") == "store" and e.get("status") == "started"]
        m = re.search(r"(/(?:[\w.-]+/)*spotwise-redis-\w+)/", json.dumps([header, *started]))
        assert m, (header, started)
        private = m.group(1)
    end = time.monotonic() + 20
    while (_alive(seen) or (private and _holding(private))) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _alive(seen), _alive(seen)
    if private:
        assert not _holding(private), _holding(private)
        assert not os.path.exists(private), f"{private} was left behind"
    assert not (out / "summary.json").exists()  # it really stopped mid-run
    res = subprocess.run([sys.executable, "-m", "spotwise.cli", "run", "--resume", str(out), "--json"], capture_output=True,
                         text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["status"] == "completed" and summary["steps"] == SPECS[plane]["target"]["iterations"]
    assert any(e.get("kind") == "restore" for e in _events(out))


def test_sigterm_raises_terminated_once_and_the_previous_handler_comes_back():
    """In the CLI's scope SIGTERM is a KeyboardInterrupt (so Ctrl-C's cleanup runs); a second
    SIGTERM during that cleanup does not cut it short; afterwards the old handler is back."""
    from spotwise.signals import Terminated, sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(KeyboardInterrupt) as e:
        with sigterm_as_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # a second one, while cleaning up: ignored
                time.sleep(0.05)
                cleaned.append(True)
    assert isinstance(e.value, Terminated) and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) == before


def test_ray_init_does_not_take_sigterm_over():
    """ensure_ray puts the CLI's handler back after ray.init replaced it (with sys.exit(15))."""
    from spotwise.signals import _handler, reinstall, sigterm_as_interrupt

    with sigterm_as_interrupt():
        signal.signal(signal.SIGTERM, lambda s, f: sys.exit(s))  # what ray.init does in a driver
        reinstall()
        assert signal.getsignal(signal.SIGTERM) is _handler
    assert signal.getsignal(signal.SIGTERM) is not _handler
