"""The run directory on object storage (issue 29 item 4): ``outputs.uri``, ``run --resume URI``.

Tested against a real S3-compatible server started here (moto's server mode on 127.0.0.1, a
free port; ``AWS_ENDPOINT_URL`` points s3fs at it, as it would at MinIO).  A run mirrors its
events, checkpoints and summary to ``s3://bucket/prefix`` as it goes; a whole "node" killed with
SIGKILL mid-run is resumed by a fresh process with an empty local disk from the bucket and no
committed step is lost; ``file://`` works the same; bad URIs exit 2 before training starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from _load import bound
from _s3 import free_port as _free_port, moto_s3

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

BUCKET = "spotwise-test"
DIGITS = {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000}
CLUSTER = {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0}


def _spec(uri: str, iterations: int = 40, every: int = 10, key: str = "outputs") -> dict[str, Any]:
    return {"name": "uri-run", "seed": 5, "workload": DIGITS, "target": {"iterations": iterations}, "cluster": CLUSTER,
            "market": {"synthetic": {"kind": "constant", "price": 0.07}},
            key: {"checkpoint_every": every, "plots": False, "uri": uri}}


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """A local S3 server with the bucket ``spotwise-test``; the AWS variables that reach it."""
    with moto_s3(BUCKET) as env:
        yield env


def _fs() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def _manifest_steps(fs: Any, root: str) -> list[int]:
    try:
        data = json.loads(fs.cat_file(f"{root}/checkpoints/manifest.json"))
    except FileNotFoundError:
        return []
    return [e["step"] for e in data["checkpoints"]]


def _samples(spec: dict[str, Any]) -> int:
    return spec["target"]["iterations"] * spec["cluster"]["workers"] * spec["workload"]["batch_size"]


def test_a_run_writes_events_checkpoints_and_summary_to_s3(s3: dict[str, str], ray_session: Any, tmp_path: Path,
                                                          cli: Any) -> None:
    import spotwise

    spec = _spec(f"s3://{BUCKET}/runs/a")
    summary = spotwise.run(spec, tmp_path / "stage")
    assert summary.status == "completed" and summary.steps == 40
    fs = _fs()
    root = f"{BUCKET}/runs/a"
    names = {p.split(f"{root}/", 1)[1] for p in fs.find(root)}
    assert {"spec.json", "events.jsonl", "summary.json", "model.pt", ".spotwise-run", "checkpoints/manifest.json"} <= names
    assert not any(".tmp-" in n or ".spotwise-probe-" in n or n.endswith(".lock") for n in names), names
    steps = _manifest_steps(fs, root)
    assert steps[-1] == 40 and {f"checkpoints/step-{s:08d}.pt" for s in steps} <= names
    remote_summary = json.loads(fs.cat_file(f"{root}/summary.json"))
    assert remote_summary["steps"] == 40 and remote_summary["extra"]["samples"] == _samples(spec)
    kinds = [json.loads(line)["kind"] for line in fs.cat_file(f"{root}/events.jsonl").decode().splitlines()]
    assert kinds[0] == "header" and "checkpoint" in kinds and kinds[-1] == "end"
    # the URI now holds a run: a second new run there is refused (exit 2 via InputError) before anything starts
    with pytest.raises(spotwise.InputError, match="already holds a run"):
        spotwise.run(spec, tmp_path / "other")
    assert not (tmp_path / "other").exists()
    # issue 42 item 6: the run followed from its URI, as a folder is
    code, out, err = cli("status", f"s3://{BUCKET}/runs/a", "--json")
    assert code == 0, err
    st = json.loads(out)
    assert st["status"] == "completed" and st["steps"] == 40 and st["dir"] == f"s3://{BUCKET}/runs/a"
    # issue 54 item 9: the last event's age is the bucket object's (LastModified), not the epoch minus a since-start wall
    assert st["updated_age_s"] is not None and 0 <= st["updated_age_s"] < bound(600), st["updated_age_s"]
    code, out, err = cli("runs", f"s3://{BUCKET}/runs", "--json")
    assert code == 0, err
    listed = json.loads(out)["runs"]
    assert [(r["name"], r["status"], r["steps"]) for r in listed] == [("a", "completed", 40)]
    code, _, err = cli("status", f"s3://{BUCKET}/runs/none")
    assert code == 2 and "no spotwise run at this URI" in err


def test_status_of_a_uri_says_running_while_its_lease_beats(tmp_path: Path, cli: Any) -> None:
    """A run in progress on another machine: its mirrored events and a fresh lease at the URI."""
    import time

    from spotwise.remote.lease import RemoteLease
    from spotwise.remote.uri import connect

    remote_dir = tmp_path / "bucket" / "run"
    remote_dir.mkdir(parents=True)
    (remote_dir / "spec.json").write_text(json.dumps(_spec(f"file://{remote_dir}")))
    # an event's wall counts from the run's start; the age of the last one is the bucket object's (issue 54 item 9)
    events = [{"t": 0.0, "wall": 0.01, "kind": "header", "schema": 1},
              {"t": 5.0, "wall": 10.0, "kind": "step", "step": 1, "loss": 2.0, "active": 2, "lr": 0.1,
               "sync": "full", "samples": 16, "cost": 0.001}]
    (remote_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    written = time.time() - 20
    os.utime(remote_dir / "events.jsonl", (written, written))
    lease = RemoteLease(connect(f"file://{remote_dir}"))
    lease.acquire()
    try:
        code, out, err = cli("status", f"file://{remote_dir}", "--json")
    finally:
        lease.release()
    assert code == 0, err
    st = json.loads(out)
    assert st["status"] == "running" and st["steps"] == 1, st
    assert any("the URI's lease" in n for n in st["notes"]) and 15 <= st["updated_age_s"] <= 300
    code, out, err = cli("status", f"file://{remote_dir}", "--json")  # the lease gone: nobody runs it
    assert json.loads(out)["status"] != "running"


def test_file_uri_and_the_output_alias(ray_session: Any, tmp_path: Path) -> None:
    import spotwise
    from spotwise.remote.uri import default_staging_dir

    remote = tmp_path / "bucket" / "job"
    spec = _spec(f"file://{remote}", iterations=10, key="output")  # ``output:`` is another name of ``outputs:``
    summary = spotwise.run(spec, tmp_path / "stage")
    assert summary.steps == 10
    assert json.loads((remote / "summary.json").read_text())["steps"] == 10
    assert (remote / "checkpoints" / "step-00000010.pt").is_file() and (remote / "events.jsonl").is_file()
    # resumed on "another machine": an empty staging folder derived from the URI
    os.environ["SPOTWISE_STAGING_DIR"] = str(tmp_path / "cache")
    try:
        again = spotwise.run(None, f"file://{remote}", resume=True)
        staged = default_staging_dir(f"file://{remote}")
    finally:
        os.environ.pop("SPOTWISE_STAGING_DIR")
    assert again.steps == 10 and staged.is_relative_to(tmp_path / "cache") and (staged / "spec.json").is_file()
    restore = [e for e in map(json.loads, (remote / "events.jsonl").read_text().splitlines()) if e["kind"] == "restore"]
    assert restore and restore[-1]["step"] == 10


def _run_cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "spotwise.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the waits below are event waits or derived from this run's measured pace
def test_a_node_killed_mid_run_is_resumed_from_the_bucket_by_a_fresh_process(s3: dict[str, str], tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")
    # 150 steps, a checkpoint every 5, the kill after the one at step 10 (was 300 / 10 / 20: most of the run's
    # time was its steps, the resume's included; 140 steps still run after the kill lands)
    spec = _spec(f"s3://{BUCKET}/runs/kill", iterations=150, every=5)
    spec["workload"] = {**DIGITS, "batch_size": 2}  # 150 steps x 2 workers x 2 < one epoch: every block is whole
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    # a lease that goes stale 5 s after its holder dies (default 90 s): the fresh process waits that long at most
    env = {**os.environ, **s3, "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled", "SPOTWISE_LEASE_TTL_S": "5"}
    fs, root = _fs(), f"{BUCKET}/runs/kill"
    node1 = tmp_path / "node1"
    proc = subprocess.Popen([sys.executable, "-m", "spotwise.cli", "run", str(spec_file), "--out", str(node1), "--json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    seen: set[Any] = set()
    t0 = time.monotonic()
    deadline = t0 + bound(300)  # an event wait: the bound only ends a hang
    try:
        while not any(s >= 10 for s in _manifest_steps(fs, root)):
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            assert time.monotonic() < deadline, "no checkpoint in the bucket within bound(300) s"
            seen |= set(psutil.Process(proc.pid).children(recursive=True))
            time.sleep(0.2)
        seen |= set(psutil.Process(proc.pid).children(recursive=True))
        to_10 = time.monotonic() - t0  # start-up and 10 steps on this machine now
        os.killpg(proc.pid, signal.SIGKILL)  # the whole node: the driver and everything it started
        for p in seen:
            try:
                p.kill()
            except psutil.Error:
                pass
        proc.wait(timeout=bound(30))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    fs.invalidate_cache()
    assert fs.exists(f"{root}/lease.json")  # the dead node still "holds" the URI until its lease goes stale
    committed = max(_manifest_steps(fs, root))
    assert 10 <= committed < 150, committed
    # a fresh "machine": another, empty local folder; only the URI is given
    env2 = {**env, "SPOTWISE_STAGING_DIR": str(tmp_path / "node2-cache")}
    # the resume's start-up and its <= 140 steps: 20x the measured start-up and 10 steps, at least 240 s
    res = _run_cli(["run", "--resume", f"s3://{BUCKET}/runs/kill", "--json"], env2, timeout=max(240.0, 20 * to_10))
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["status"] == "completed" and summary["steps"] == 150
    assert summary["extra"]["samples"] == _samples(spec)  # an uninterrupted run's target, no sample twice or lost
    events = [json.loads(line) for line in fs.cat_file(f"{root}/events.jsonl").decode().splitlines()]
    restores = [e for e in events if e["kind"] == "restore"]
    assert restores and restores[0]["step"] >= committed  # nothing the bucket had committed was lost
    assert json.loads(fs.cat_file(f"{root}/summary.json"))["steps"] == 150
    assert max(_manifest_steps(fs, root)) == 150
    assert not (tmp_path / "node1" / "summary.json").exists()
    fs.invalidate_cache()
    assert not fs.exists(f"{root}/lease.json")  # released at the end


@pytest.mark.parametrize("uri, words", [
    ("ftp://host/runs", "unsupported URI scheme"),
    ("s3://", "not a bucket name"),
    ("file://relative/path", "not an absolute file:// URI"),
    ("s3://bucket/../up", "'..'"),
])
def test_a_bad_uri_exits_2_when_the_spec_is_loaded(cli: Any, tmp_path: Path, uri: str, words: str) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(uri)))
    code, _, err = cli("run", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and words in err and "Traceback" not in err, err
    if uri.startswith("ftp"):  # says which schemes are supported
        assert all(s in err for s in ("s3://bucket/prefix", "gs://bucket/prefix", "file:///absolute/path")), err
    assert not (tmp_path / "o").exists()


def test_output_and_outputs_together_exit_2(cli: Any, tmp_path: Path) -> None:
    d = _spec("s3://bucket-x/p")
    d["output"] = {"plots": False}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(d))
    code, _, err = cli("run", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and "both output: and outputs:" in err


def test_a_missing_bucket_or_unreachable_endpoint_exits_2_before_training(
        s3: dict[str, str], cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec("s3://no-such-bucket-here/run")))
    t0 = time.monotonic()
    code, _, err = cli("run", str(spec), "--out", str(tmp_path / "o"))
    base = time.monotonic() - t0  # the same command answered at once: this machine's speed now
    assert code == 2 and "does not exist" in err and "no-such-bucket-here" in err, err
    assert not (tmp_path / "o").exists()  # refused before the run directory (and Ray) was touched
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")  # nothing listens there
    spec.write_text(yaml.safe_dump(_spec(f"s3://{BUCKET}/unreachable")))
    t0 = time.monotonic()
    code, _, err = cli("run", str(spec), "--out", str(tmp_path / "o"))
    took = time.monotonic() - t0
    assert code == 2 and "cannot write to" in err and "AWS_ENDPOINT_URL" in err, err
    # fails fast, not after minutes of retries: about as long as the answered case, 10x allowed (at least
    # 10 s: its few retries sleep ~2 s however fast the machine)
    assert took < 10 * max(base, 1.0), f"took {took:.1f} s; the answered case {base:.1f} s"


def test_missing_s3fs_says_how_to_install_it(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)  # ``import s3fs`` raises ImportError
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec("s3://bucket-x/p")))
    code, _, err = cli("run", str(spec), "--out", str(tmp_path / "o"))
    assert code == 2 and "pip install 'spotwise[cloud]'" in err, err


def test_resume_from_a_uri_without_a_run_exits_2(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, _, err = cli("run", "--resume", f"file://{tmp_path / 'empty'}", "--out", str(tmp_path / "stage"))
    assert code == 2 and "no spotwise run at this URI" in err, err


def test_a_hostile_manifest_at_the_uri_never_leads_out_of_the_staging_folder(cli: Any, tmp_path: Path) -> None:
    """A manifest naming ``../`` paths: nothing outside the URI's checkpoints is read, nothing outside
    the staging folder written, and the resume exits 2 naming the bad entry."""
    remote = tmp_path / "remote"
    (remote / "checkpoints").mkdir(parents=True)
    from spotwise.config import spec_from_dict

    (remote / "spec.json").write_text(json.dumps(spec_from_dict(_spec(f"file://{remote}")).to_dict()))
    secret = tmp_path / "secret.pt"
    secret.write_bytes(b"not yours")
    (remote / "checkpoints" / "manifest.json").write_text(json.dumps(
        {"checkpoints": [{"file": "../../secret.pt", "step": 1, "sha256": "x"}]}))
    stage = tmp_path / "stage"
    code, _, err = cli("run", "--resume", f"file://{remote}", "--out", str(stage))
    assert code == 2 and "../../secret.pt" in err, err
    written = {p.relative_to(stage).as_posix() for p in stage.rglob("*")}
    assert written <= {".spotwise-run", ".spotwise.lock", "spec.json", "checkpoints", "checkpoints/manifest.json"}, written
