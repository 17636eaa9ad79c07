"""Issue 29 item 3: the emitted launch files do what they say, rehearsed on a scratch "node".

``spotwise plan --emit skypilot=... --emit ray-cluster=... --install SRC`` for a small job whose spec
names a file (a user catalog, ``market.catalog``); then, in a scratch home standing in for a node:
every ``file_mounts`` source is copied to its target (``~`` is the scratch home), the emitted setup
runs as written (a fresh venv; the driver check skipped by ``SPOTWISE_REHEARSAL=1``, the only switch),
and the emitted run runs as written with SkyPilot's variables of a one-node job: it starts the job's
Ray head itself, trains on the emulated market and writes the run to ``outputs.uri`` (``file://``
here).  Relaunched, it finds the run completed and does nothing.  The Ray cluster file's run script
(written by its head setup) then runs against a Ray head with ``spot`` slots, as the launcher's would be.

The "image" is this machine's base Python with this test venv's packages on ``PYTHONPATH`` (as an
image's preinstalled packages) -- except spotwise and s3fs, so pip installs spotwise from the mounted
source folder and the setup must install what ``outputs.uri`` needs (issue 42 item 3), and the workload's
own packages (``workload.packages`` and a ``workload.requirements`` file: two hand-built wheels).  The bucket is
``s3://`` on moto's S3 server (127.0.0.1); the "node" is killed (SIGKILL of its whole session, Ray
included) after the run's first checkpoint reached the bucket, and relaunched as SkyPilot would: the
run resumes from the bucket and completes.  Ray processes started by the run script are ended by
their session id (never ``ray stop``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from _load import bound
from _sessions import kill_session

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
IGNORED = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".hypothesis",
                                 "build", "dist", "runs", "out", "spotwise-demo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _image(tmp: Path) -> dict[str, str]:
    """PATH with the base interpreter as ``python3`` and PYTHONPATH with this venv's packages except spotwise."""
    bin_dir, site = tmp / "image-bin", tmp / "image-site"
    bin_dir.mkdir()
    site.mkdir()
    base = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (bin_dir / "python3").symlink_to(base)
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(("spotwise", "__editable__", "_spotwise", "s3fs")) and entry.suffix != ".pth":
            (site / entry.name).symlink_to(entry)
    return {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(site)}


def _mount(file_mounts: dict[str, str], home: Path) -> None:
    for target, source in file_mounts.items():
        dest = Path(target.replace("~", str(home), 1))
        dest.parent.mkdir(parents=True, exist_ok=True)
        if Path(source).is_dir():
            shutil.copytree(source, dest, ignore=IGNORED)
        else:
            shutil.copy2(source, dest)


#: the sessions :func:`_bash` started: the test ends every process left in them (the Ray daemons ``ray start``
#: left behind, which a later step of the test may still use) in its ``finally`` (issue 54 item 7: a Ray head of
#: this module was alive 50 minutes after pytest exited)
_SESSIONS: list[int] = []


def _bash(script: str, env: dict[str, str], log: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in its own session, recorded in :data:`_SESSIONS` (ended by :func:`_end_sessions`)."""
    proc = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    _SESSIONS.append(proc.pid)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    log.write_text(out)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _end_session(sid: int) -> None:
    kill_session(sid, rounds=3)


def _end_sessions() -> None:
    """End every process still in a session :func:`_bash` started."""
    while _SESSIONS:
        kill_session(_SESSIONS.pop(), rounds=20)


def _wheel(folder: Path, name: str) -> Path:
    """A pure-Python wheel of package ``name`` (``VALUE = name``), built by hand (PEP 427): what a user's own
    library or a PyPI package is to the nodes' setup, installable without a network."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-0.1.dist-info"
    files = {f"{name}/__init__.py": f"VALUE = {name!r}\n",
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: spotwise-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, t in files.items():
            z.writestr(p, t)
    return path


def _spec(tmp: Path, uri: str | None, iterations: int = 40, **workload: Any) -> Path:
    (tmp / "catalog.yaml").write_text("instances:\n  - {name: rehearsal-extra, cloud: aws, vcpus: 2, memory_gb: 4, "
                                      "on_demand_per_hour: 0.2, throughput: {mlp: 1.0}, source: rehearsal}\n")
    d: dict[str, Any] = {
        "name": "rehearsal", "seed": 0,
        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000, **workload},
        "target": {"iterations": iterations}, "deadline": "1h",
        "cluster": {"instance_type": "c5.xlarge", "workers": 1, "coordinator_instance": "c5.large", "region": "us-east-1b"},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}, "catalog": ["catalog.yaml"]},
        "outputs": {"checkpoint_every": 10, "plots": False, **({"uri": uri} if uri else {})},
    }
    p = tmp / "job.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.fixture
def s3() -> Any:
    """moto's S3 server on 127.0.0.1 with the bucket ``rehearsal``; the AWS variables that reach it."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from _s3 import moto_s3

    with moto_s3("rehearsal") as env:
        yield env


def test_emitted_files_set_up_and_run_the_job_on_a_scratch_node(cli: Any, tmp_path: Path, s3: dict[str, str]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    uri = "s3://rehearsal/job"
    # the workload's own packages (issue 42 item 3): one named in the spec, one in a requirements file beside it
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (tmp_path / "requirements.txt").write_text(f"swr_from_file @ {_wheel(wheels, 'swr_from_file').as_uri()}\n")
    spec = _spec(tmp_path, uri, iterations=200, requirements="requirements.txt",
                 packages=[f"swr_named @ {_wheel(wheels, 'swr_named').as_uri()}"])
    task_file, cluster_file = tmp_path / "task.yaml", tmp_path / "cluster.yaml"
    code, _, err = cli("plan", str(spec), "--pilot-steps", "10", "--write-spec", str(tmp_path / "planned.yaml"),
                       "--emit", f"skypilot={task_file}", "--emit", f"ray-cluster={cluster_file}", "--install", str(REPO))
    assert code == 0, err
    task = yaml.safe_load(task_file.read_text())
    assert task["resources"]["job_recovery"]["strategy"] in ("FAILOVER", "EAGER_NEXT_REGION")
    # the spec, the catalog file it names and spotwise's source are mounted; the nodes' spec points at the copy
    mounts = task["file_mounts"]
    assert any(t.startswith("~/spotwise-job/inputs/") and s == str((tmp_path / "catalog.yaml").resolve())
               for t, s in mounts.items())
    node_spec = yaml.safe_load(Path(mounts["~/spotwise-job/spec.yaml"]).read_text())
    assert node_spec["market"]["catalog"][0].startswith("inputs/") and node_spec["outputs"]["uri"] == uri

    home = tmp_path / "node"
    home.mkdir()
    _mount(mounts, home)
    port = _free_port()
    ray_tmp = tempfile.mkdtemp(prefix="swr-", dir="/tmp")
    env = {**_image(tmp_path), "HOME": str(home), "SPOTWISE_REHEARSAL": "1", "RAY_TMPDIR": ray_tmp,
           "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "LANG": "C.UTF-8",
           # what SkyPilot sets on the one node of this job, and the task's envs (the port moved off 6379)
           "SKYPILOT_NODE_IPS": "127.0.0.1", "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": "1",
           **{k: str(v) for k, v in task["envs"].items()}, "SPOTWISE_RAY_PORT": str(port),
           **s3, "SPOTWISE_LEASE_TTL_S": "5"}  # the node's cloud credentials; a killed node's lease goes stale in 5 s
    assert "s3fs" in task["setup"]
    setup = _bash(task["setup"], env, tmp_path / "setup.log", 600)
    assert setup.returncode == 0, setup.stdout[-4000:]
    assert (home / "spotwise-venv" / "bin" / "spotwise").exists()
    assert list((home / "spotwise-venv").glob("lib/python*/site-packages/s3fs")), "the setup installed s3fs itself"
    got = subprocess.run([str(home / "spotwise-venv" / "bin" / "python"), "-c",
                          "import swr_named, swr_from_file; print(swr_named.VALUE, swr_from_file.VALUE)"],
                         env=env, capture_output=True, text=True)
    assert got.stdout.split() == ["swr_named", "swr_from_file"], got.stderr[-2000:]

    run = subprocess.Popen(["bash", "-c", task["run"]], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    try:
        # the node is lost once its first checkpoint is in the bucket: SIGKILL of the whole session
        deadline = time.monotonic() + bound(300)
        while not fs.exists("rehearsal/job/checkpoints/manifest.json"):
            assert run.poll() is None, (run.stdout.read() if run.stdout else "")[-4000:]
            assert time.monotonic() < deadline, "no checkpoint reached the bucket"
            time.sleep(0.2)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        _end_session(run.pid)
        killed_at = json.loads(fs.cat_file("rehearsal/job/checkpoints/manifest.json"))["checkpoints"][-1]["step"]
        assert not fs.exists("rehearsal/job/summary.json") or \
            json.loads(fs.cat_file("rehearsal/job/summary.json"))["status"] != "completed", "killed before the end"
        # relaunched as SkyPilot's recovery would: a fresh node (its venv kept by the image), the run resumed
        relaunch = _bash(task["run"], env, tmp_path / "relaunch.log", bound(400))
        assert relaunch.returncode == 0, relaunch.stdout[-4000:]
        summary = json.loads(fs.cat_file("rehearsal/job/summary.json"))
        assert summary["status"] == "completed" and summary["steps"] == 200, summary.get("status")
        events = [json.loads(line) for line in fs.cat_file("rehearsal/job/events.jsonl").decode().splitlines()]
        restores = [e for e in events if e["kind"] == "restore"]
        assert restores and restores[-1]["step"] >= killed_at >= 10, (restores, killed_at)
        steps = {e["step"] for e in events if e["kind"] == "step"}
        assert steps >= set(range(1, 201)), "every step committed, none lost"
        # relaunched (SkyPilot's recovery after the job ended): the completed run is left alone
        again = _bash(task["run"], env, tmp_path / "again.log", bound(200))
        assert again.returncode == 0 and "has completed; nothing to do" in again.stdout, again.stdout

        # the Ray cluster file: its head setup writes run.sh; run it on a Ray cluster with spot slots (this head)
        cfg = yaml.safe_load(cluster_file.read_text())
        assert cfg["available_node_types"]["head"]["node_config"]["InstanceType"] == "c5.large"
        home2 = tmp_path / "head"
        home2.mkdir()
        _mount(cfg["file_mounts"], home2)
        (home2 / "spotwise-venv").symlink_to(home / "spotwise-venv")  # the setup above, as ray up would run it
        env2 = {**env, "HOME": str(home2), "RAY_ADDRESS": f"127.0.0.1:{port}"}
        ray_spec = yaml.safe_load((home2 / "spotwise-job" / "spec.yaml").read_text())
        bucket2 = tmp_path / "bucket2"
        ray_spec["outputs"]["uri"] = f"file://{bucket2}"  # a run of its own (the first one has completed)
        ray_spec["target"]["iterations"] = 40  # what is rehearsed here is the file's run script, not training
        (home2 / "spotwise-job" / "spec.yaml").write_text(yaml.safe_dump(ray_spec))
        wrote = _bash(cfg["head_setup_commands"][-1], env2, tmp_path / "head-setup.log", 60)
        assert wrote.returncode == 0, wrote.stdout
        script = (home2 / "spotwise-job" / "run.sh").read_text().replace(uri, f"file://{bucket2}")
        ray_run = _bash(script, env2, tmp_path / "ray-run.log", 400)
        assert ray_run.returncode == 0, ray_run.stdout[-4000:]
        assert json.loads((bucket2 / "summary.json").read_text())["status"] == "completed"
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        _end_session(run.pid)
        _end_sessions()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_setup_stops_without_a_gpu_driver_and_says_why(tmp_path: Path) -> None:
    """The driver check of a GPU instance: a failing nvidia-smi fails the setup with the reason;
    SPOTWISE_REHEARSAL=1 skips it (and nothing else)."""
    from spotwise.planner.emit.scripts import driver_check

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\nexit 9\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    res = subprocess.run(["bash", "-c", driver_check("p3.2xlarge", 1, "V100")], env=env, capture_output=True, text=True)
    assert res.returncode == 1 and "nvidia-smi failed" in res.stderr and "p3.2xlarge" in res.stderr
    res = subprocess.run(["bash", "-c", driver_check("p3.2xlarge", 1, "V100")], env={**env, "SPOTWISE_REHEARSAL": "1"},
                         capture_output=True, text=True)
    assert res.returncode == 0 and "skipped" in res.stdout


@pytest.mark.parametrize("change, says", [
    ({"market": {"synthetic": {"kind": "constant", "price": 0.07}, "catalog": ["missing-catalog.yaml"]}},
     "missing-catalog.yaml' does not exist"),  # spotwise's own check of the spec's files comes first, at load
    ({"outputs": {"checkpoint_every": 10}}, "outputs.uri"),
])
def test_plan_emit_refuses_what_cannot_run_on_the_nodes(cli: Any, tmp_path: Path, change: dict[str, Any], says: str) -> None:
    spec = _spec(tmp_path, "s3://bucket/job")
    d = yaml.safe_load(spec.read_text())
    d.update(change)
    spec.write_text(yaml.safe_dump(d))
    code, _, err = cli("plan", str(spec), "--pilot-steps", "10", "--emit", f"skypilot={tmp_path / 't.yaml'}",
                       "--install", str(REPO))
    assert code == 2 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "t.yaml").exists()


def test_a_file_the_spec_names_must_exist_to_be_mounted(tmp_path: Path) -> None:
    from spotwise.config import spec_from_dict
    from spotwise.errors import InputError
    from spotwise.planner.emit.files import node_files

    d = yaml.safe_load(_spec(tmp_path, None).read_text())
    d["market"]["revocation"] = {"model": "lifetime", "lifetimes": "gone.csv"}
    with pytest.raises(InputError, match="does not exist here") as e:
        node_files(spec_from_dict(d), tmp_path)
    assert e.value.where == "market.revocation.lifetimes"
    files = node_files(spec_from_dict(yaml.safe_load(_spec(tmp_path, None).read_text())), tmp_path)
    assert files.mounts == {"~/spotwise-job/inputs/0-catalog.yaml": str((tmp_path / "catalog.yaml").resolve())}


def test_unknown_emit_kind_exits_2(cli: Any, tmp_path: Path) -> None:
    code, _, err = cli("plan", str(_spec(tmp_path, None)), "--emit", f"kubernetes={tmp_path / 'k.yaml'}")
    assert code == 2 and "ray-cluster, skypilot" in err
