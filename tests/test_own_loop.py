"""Issue 41: the user's own training loop (``spotwise.elastic``) as a spotwise job.

The script ``tests/user_scripts/train_mlp.py`` (AdamW with decay / no-decay parameter groups,
BatchNorm, its own loss and logging) runs in every member of the collective plane; spotwise keeps
the controller, the market, checkpoints and the event log around it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from _load import bound
from _specs import spec_with

from spotwise.assemble import build_controller
from spotwise.events import read_events
from spotwise.market.world import build_market

pytestmark = pytest.mark.timeout(300)

SCRIPTS = Path(__file__).parent / "user_scripts"


def script_spec(**over: Any):  # type: ignore[no-untyped-def]
    base: dict[str, Any] = {
        "name": "own-loop",
        "seed": 2,
        "workload": {"script": str(SCRIPTS / "train_mlp.py"), "batch_size": 8, "args": []},
        "target": {"samples": 480},
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large",
                    "data_plane": "collective", "standby": 0, "replica_every": 5, "group_timeout_s": 5,
                    "replica_budget": None},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 0, "plots": False},
    }
    return spec_with(base, **over)


def run(spec, out: Path, revocation=None, **kw: Any):  # type: ignore[no-untyped-def]
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    coord = build_controller(spec, out, market=market, **kw)
    return coord, coord.run()


def test_a_script_trains_as_a_job(ray_session: Any, tmp_path: Path) -> None:
    spec = script_spec()
    coord, summary = run(spec, tmp_path / "run")
    assert summary.status == "completed", summary
    assert 480 <= coord.counters.samples < 480 + 16  # whole steps of 2 x 8 (docs/spec.md)
    assert summary.extra["target_samples"] == 480 and summary.extra["samples"] == coord.counters.samples
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    assert [e["step"] for e in steps] == list(range(1, len(steps) + 1))
    metrics = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["metrics"]))
    assert metrics and all("loss" in m["values"] for m in metrics)
    assert set(summary.extra["metrics"]) == {"loss", "lr"}
    # what the script logged: in status and, charted over wall time and cost, in the report
    import spotwise
    from spotwise.reports.runs_view import one_run

    state = one_run(tmp_path / "run")
    assert set(state.metrics) == {"loss", "lr"} and state.metrics_step is not None
    spotwise.report(tmp_path / "run")
    assert (tmp_path / "run" / "report" / "script_metrics.png").stat().st_size > 1000
    assert "script_metrics.png" in (tmp_path / "run" / "report" / "index.html").read_text()


def positions_contiguous(out: Path, n: int) -> list[dict[str, Any]]:
    """The committed steps (a rollback takes back the steps after its target) and their data
    positions follow each other with no gap and no overlap, so every sample of every epoch is in
    exactly one committed step; the step events that stand."""
    from test_collective_plane import committed_history

    steps = committed_history(out)
    at = 0
    for e in steps:
        at += int(e["samples"])
        assert int(e["epoch"]) * n + int(e["pos"]) == at, (e["step"], at)
    return steps


def test_through_revocations_and_a_crash_every_sample_is_trained_exactly_once(ray_session: Any, tmp_path: Path) -> None:
    from spotwise.capacity.faults import ScriptedRevocation, outage
    from spotwise.planes.collective.data_plane import CollectivePlane

    # the script's schedule is torch's LambdaLR on the wrapped optimizer, registered with job.scheduler
    # two members, no standby (each joiner is a fresh process either way): 6 actor starts (3 members took 9)
    spec = script_spec(cluster__standby=0, target__samples=480, workload__args=["--sched"])  # 2 epochs of 240
    rev = ScriptedRevocation((outage(3, 9, [0]), outage(14, 16, [0, 1])))
    # member 1's process dies at its step 6, while the outage leaves it alone (the fault is for its first process)
    coord, summary = run(spec, tmp_path / "run", revocation=rev, plane=CollectivePlane(spec, faults={1: {"step": 6, "action": "exit"}}))
    assert summary.status == "completed"
    assert summary.revocations >= 3
    assert any(e["reason"] == "node-lost" for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["revoke"])), \
        "the crash happened"
    steps = positions_contiguous(tmp_path / "run", 240)
    assert 480 <= coord.counters.samples < 480 + 2 * 8
    assert [e["step"] for e in steps] == list(range(1, len(steps) + 1))
    assert {e["active"] for e in steps} >= {1, 2}, "steps ran with the members left"
    assert any(r["survivors"] for r in read_events(tmp_path / "run" / "events.jsonl", kinds=["regroup"]))
    # the scheduler counted committed steps on every member, joiners included (its state travelled with
    # the regroups; a dropped step did not advance it): the rate logged after step s is the schedule's at s
    import math

    def rate(s: int) -> float:
        return 0.01 * ((s + 1) / 4 if s < 4 else 0.5 * (1 + math.cos(math.pi * min(1.0, (s - 4) / 56))))

    logged = {int(e["step"]): e["values"]["lr"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["metrics"])}
    assert len(logged) >= len(steps) // 2, len(logged)
    assert all(abs(lr - rate(s)) < 1e-12 for s, lr in logged.items()), \
        [(s, lr, rate(s)) for s, lr in sorted(logged.items()) if abs(lr - rate(s)) >= 1e-12][:5]


def test_without_revocations_it_equals_a_plain_loop_on_the_same_samples(ray_session: Any, tmp_path: Path) -> None:
    """Two members of 8 samples each (their batches built by DataLoader workers) == the same script
    on its own with batches of 16 (same data order, AdamW with decay groups): max |diff| of the
    parameters < 1e-5."""
    import subprocess
    import sys

    import torch

    args = ["--no-bn", "--batch", "8", "--loader-workers", "2"]  # batches built ahead by DataLoader workers
    spec = script_spec(workload__args=args, target__samples=480)
    coord, summary = run(spec, tmp_path / "run")
    assert summary.status == "completed" and coord.counters.samples == 480
    plain = tmp_path / "plain.pt"
    subprocess.run([sys.executable, str(SCRIPTS / "train_mlp.py"), "--no-bn", "--batch", "16", "--epochs", "2",
                    "--seed", str(spec.seed), "--save", str(plain)], check=True, timeout=120, cwd=tmp_path)
    want = torch.load(plain, weights_only=True)
    got = coord.state.model_state_dict()
    assert got is not None and set(got) == set(want)
    diff = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert diff < 1e-5, diff
    # (the same script under torchrun as two DDP ranks of 8, rank r taking block r of each step as member r
    # does, is equal too: test_own_loop_torchrun's nanoGPT and test_own_loop_gan's GAN compare a job with
    # the script under torchrun; issue 54: one torchrun launch fewer here)


def test_a_stopped_run_resumes_to_the_uninterrupted_result(ray_session: Any, tmp_path: Path) -> None:
    """Checkpoints hold the script's optimizer state (AdamW moments): a run stopped at step 9 and
    resumed ends where the uninterrupted run ends.  One member of 16 (three runs: one actor start each;
    the state a joiner takes over the group is the revocation tests')."""
    import numpy as np

    spec = script_spec(outputs__checkpoint_every=3, target__samples=320, cluster__workers=1,
                       workload__batch_size=16, workload__args=["--batch", "16"])
    out = tmp_path / "run"
    first, s1 = run(spec, out, stop_after_steps=9)
    assert s1.status == "stopped" and s1.steps >= 9
    again, s2 = run(spec, out, resume=True)
    assert s2.status == "completed" and again.counters.samples == 320
    straight, s3 = run(spec, tmp_path / "straight")
    assert s3.steps == s2.steps
    assert np.max(np.abs(again.params - straight.params)) < 1e-5
    positions_contiguous(out, 240)


def test_a_script_that_raises_exits_2_with_its_traceback_and_keeps_the_last_step(ray_session: Any, tmp_path: Path) -> None:
    from spotwise.control.checkpoint import load_latest_checkpoint
    from spotwise.errors import InputError

    spec = script_spec(workload__args=["--fail-at", "6"], cluster__workers=1)  # one actor start shows it
    with pytest.raises(InputError) as e:
        run(spec, tmp_path / "run")
    text = str(e.value)
    assert "raised in step 6" in text and "failing on purpose at step 6" in text and "train_mlp.py" in text, text
    state, _ = load_latest_checkpoint(tmp_path / "run")
    assert int(state["step"]) == 5, "the last committed step is kept"


def bad_spec(mode: str, **over: Any):  # type: ignore[no-untyped-def]
    return script_spec(workload__script=str(SCRIPTS / "bad_loop.py"), workload__batch_size=4,
                       workload__args=["--mode", mode], target__samples=64, **over)


@pytest.mark.parametrize(("mode", "words", "workers"), [
    ("lr-per-rank", "different learning rates", 2),
    ("pulls-per-rank", "different numbers of batches", 2),
    ("around-the-wrapper", "gradients were not all-reduced", 1),  # each member finds it on its own: one shows it
])
def test_members_that_disagree_exit_2_saying_what_to_fix(ray_session: Any, tmp_path: Path, mode: str, words: str,
                                                         workers: int) -> None:
    from spotwise.errors import InputError

    with pytest.raises(InputError) as e:
        run(bad_spec(mode, cluster__workers=workers), tmp_path / "run")
    assert words in str(e.value) and "workload.script" in str(e.value.where), str(e.value)


@pytest.mark.parametrize(("mode", "words"), [
    ("data-twice", "job.data() was called twice"),
    ("no-batch", "failed before its first batch"),
    ("hang", "did not take a batch from job.data() within"),
])
def test_scripts_that_never_train_exit_2_before_any_member_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  mode: str, words: str) -> None:
    """The coordinator runs the script to its first batch when the job is built (no Ray needed)."""
    import spotwise.elastic.describe as describe
    from spotwise.errors import InputError

    monkeypatch.setattr(describe, "DESCRIBE_TIMEOUT_S", 2.0)
    main, argv = sys.modules["__main__"], list(sys.argv)
    with pytest.raises(InputError) as e:
        describe.describe_script(bad_spec(mode).workload, 0)
    assert words in str(e.value), str(e.value)
    # nothing of the script is left running in this process: its thread ended (a hang too), and the
    # process's own __main__ is back -- else every later multiprocessing spawn here runs the script
    assert not [t for t in threading.enumerate() if t.name == "spotwise-script"]
    assert sys.modules["__main__"] is main and sys.argv == argv
    _a_spawned_child_runs_its_own_target()


def _a_spawned_child_runs_its_own_target() -> None:
    import multiprocessing as mp

    q = mp.get_context("spawn").Queue()
    p = mp.get_context("spawn").Process(target=_child, args=(q,), daemon=True)
    p.start()
    try:
        assert q.get(timeout=bound(120)) == "child ran", "the spawned child did not reach its target"
    finally:
        p.kill()
        p.join(10)


def _child(q: Any) -> None:
    q.put("child ran")


def test_a_described_script_leaves_nothing_running(tmp_path: Path) -> None:
    """A script described to its first batch (the probe's normal case) ends there: no thread of it
    stays in the coordinator's process holding ``__main__``, ``sys.argv`` and ``sys.path``."""
    import spotwise.elastic.describe as describe

    main, argv, path = sys.modules["__main__"], list(sys.argv), list(sys.path)
    spec = script_spec(target__samples=64).workload
    describe._CACHE.clear()
    wl = describe.describe_script(spec, 0)
    assert wl.build_model() is not None
    assert not [t for t in threading.enumerate() if t.name == "spotwise-script"]
    assert sys.modules["__main__"] is main and sys.argv == argv and sys.path == path


def test_the_nanogpt_style_script_converts_in_10_lines_and_trains_through_revocations(ray_session: Any,
                                                                                      tmp_path: Path) -> None:
    """examples/own-loop: the converted script differs from the user's in at most 10 lines (diff), and
    as a job it trains every sample of its epochs exactly once through revocations."""
    import difflib
    import math

    from spotwise.capacity.faults import ScriptedRevocation, outage

    ex = Path(__file__).resolve().parent.parent / "examples" / "own-loop"
    a = (ex / "train_gpt.py").read_text().splitlines()
    b = (ex / "train_gpt_spotwise.py").read_text().splitlines()
    changed = [ln for ln in difflib.unified_diff(a, b, lineterm="", n=0) if ln.startswith("+") and not ln.startswith("+++")]
    assert 0 < len(changed) <= 10, changed
    spec = script_spec(workload__script=str(ex / "train_gpt_spotwise.py"), workload__batch_size=8,
                       # fp16 with its GradScaler (as on V100s): the scale travels to the members that join
                       workload__args=["--n-layer", "1", "--n-embd", "32", "--eval-interval", "1000", "--grad-accum", "2",
                                       "--dtype", "float16", "--out-dir", str(tmp_path / "gpt-out")],
                       target__samples=640, cluster__standby=0)
    # two members, the follower then the leader revoked, each back as a joiner: 4 actor starts (3 and a spare: ~8)
    rev = ScriptedRevocation((outage(4, 9, [1]), outage(12, 14, [0])))
    coord, summary = run(spec, tmp_path / "run", revocation=rev)
    assert summary.status == "completed" and summary.revocations >= 2
    n = (60_000 * 9 // 10 - 1) // 32  # the script's training windows
    steps = positions_contiguous(tmp_path / "run", n)
    assert 640 <= coord.counters.samples
    assert all(e["samples"] == 2 * 8 * e["contributions"] or e.get("unreported") for e in steps), "2 micro-batches a member"
    losses = [e["loss"] for e in steps if e["loss"] is not None and math.isfinite(e["loss"])]
    assert losses[-1] < losses[0], "it learns"
    assert max(losses) < 10.0, "the recorded losses are unscaled (the GradScaler's scale is 65536)"


def test_a_run_directory_naming_a_script_is_not_resumed_without_the_users_word(tmp_path: Path) -> None:
    """A run directory is untrusted: its spec.json naming a script (someone else's code) is run on
    resume only when the user's own spec names the same script and arguments, or with --trust-code."""
    import json as _json

    from spotwise.control.rundir_io import load_resume_spec
    from spotwise.errors import InputError

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spec = script_spec()
    recorded = spec.to_dict()
    recorded["workload"]["script"] = str(tmp_path / "evil.py")
    (run_dir / "spec.json").write_text(_json.dumps(recorded))
    with pytest.raises(InputError, match="workload.script"):
        load_resume_spec(run_dir, None, False)
    with pytest.raises(InputError, match="workload.script"):
        load_resume_spec(run_dir, spec, False)
    assert load_resume_spec(run_dir, None, True).workload.script == str(tmp_path / "evil.py")


def test_two_optimizers_a_frozen_embedding_an_ema_teacher_and_torch_compile(ray_session: Any, tmp_path: Path) -> None:
    """examples/own-loop/train_distill.py (Muon + AdamW, a frozen embedding, an EMA teacher registered
    with job.state, torch.compile on the wrapped model) through a revocation of the leader: the
    teacher travels with the state (its update count is the committed steps'), the frozen weights
    never move, and the run learns."""
    import torch

    from spotwise.capacity.faults import ScriptedRevocation, outage
    from spotwise.control.checkpoint import load_latest_checkpoint

    ex = Path(__file__).resolve().parent.parent / "examples" / "own-loop"
    spec = script_spec(workload__script=str(ex / "train_distill.py"), workload__batch_size=16,
                       workload__args=["--compile", "aot_eager", "--width", "32"], target__samples=1600,  # >= 50 steps
                       outputs__checkpoint_every=10)
    coord, summary = run(spec, tmp_path / "run", revocation=ScriptedRevocation((outage(8, 14, [0]),)))
    assert summary.status == "completed" and summary.revocations >= 1
    positions_contiguous(tmp_path / "run", 2048)
    state, _ = load_latest_checkpoint(tmp_path / "run")
    teacher = state["train_extra"]["states"]["teacher"]
    assert int(teacher["n_averaged"]) == int(state["step"]), "the EMA teacher was updated once per committed step"
    assert len(state["train_extra"]["optimizers"]) == 2 and state["train_extra"]["optimizers"][0]["state"], "Muon's state"
    torch.manual_seed(0)
    frozen = torch.nn.Embedding(32, 32).weight.detach()
    got = coord.state.model_state_dict()
    assert got is not None and torch.equal(got["embed.weight"], frozen), "the frozen embedding never moved"
    acc = [e["values"]["acc"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["metrics"])]
    assert len(acc) >= 40 and sum(acc[-15:]) / 15 > sum(acc[:15]) / 15 + 0.1, acc  # it learns the task


class Stream(__import__("torch").utils.data.IterableDataset):
    """A resumable stream of 50 numbered samples: ``iter_from(position)``."""

    def __len__(self) -> int:
        return 50

    def __iter__(self):  # type: ignore[no-untyped-def]
        return self.iter_from(0)

    def iter_from(self, position: int):  # type: ignore[no-untyped-def]
        import torch

        return iter([torch.tensor([float(i)]) for i in range(position, 50)])


@pytest.mark.parametrize("workers", [0, 2])
def test_on_its_own_a_map_dataset_and_a_stream_come_in_the_runs_order(workers: int) -> None:
    """The same batches, in the same order, with or without DataLoader workers; a stream in order."""
    import numpy as np
    import torch

    from spotwise.control.permutation import epoch_permutation
    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    feeds = []

    def taken(dataset, **kw):  # type: ignore[no-untyped-def]
        backend = LocalBackend(seed=4)
        job = Job(backend)
        model = job.model(torch.nn.Linear(1, 1))
        opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.0))
        out = []
        for x in job.data(dataset, batch_size=5, epochs=2, **kw):
            x = x[0] if isinstance(x, (list, tuple)) else x
            job.backward(model(x.float().view(-1, 1)).sum())
            opt.step()
            out += x.view(-1).long().tolist()
        feeds.append(backend._feed)
        return out

    ids = torch.utils.data.TensorDataset(torch.arange(50))
    got = taken(ids, num_workers=workers)
    want = np.concatenate([np.asarray(epoch_permutation(50, 4, e)[0:50]) for e in (0, 1)]).tolist()
    assert got == want, "two epochs of the seeded orders, each sample once per epoch"
    assert taken(Stream(), num_workers=workers) == list(range(50)) * 2, "a stream is read in order"
    if workers:
        assert feeds[0].loader.stats["prefetched"] >= 15, feeds[0].loader.stats  # built ahead by the workers


def test_a_script_job_is_planned_on_an_assumed_loss_curve_saying_how_to_measure_it(tmp_path: Path) -> None:
    """Issue 42 item 1 for scripts: spotwise never runs the user's loop in process to fit its loss curve; the plan
    is made on the stated assumed error model and says how to measure the real one (a short run, --pilot)."""
    import spotwise

    plan = spotwise.plan(script_spec(), pilot_steps=10)
    assert plan.workers >= 1 and plan.expected_time_s and plan.expected_time_s > 0
    said = [a for a in plan.assumed if a.startswith("no pilot: the job trains your own script")]
    assert said and "--pilot" in said[0] and "assumed error model" in said[0]


def test_the_summary_table_says_why_the_samples_pass_the_target() -> None:
    from spotwise.cli_tables import _samples_cell

    assert _samples_cell({"samples": 1610, "target_samples": 1600}) == "1,610 (target 1,600: the last step is whole)"
    assert _samples_cell({"samples": 1600, "target_samples": 1600}) == "1,600"
    assert _samples_cell({"samples": 90, "target_samples": None}) == "90" and _samples_cell({}) == "-"
