"""Issue 55 items 1, 2, 4: a script written for torchrun runs on spotwise in place.

``examples/torchrun/train_nanogpt.py`` is a nanoGPT-shaped torchrun script (env-based DDP detection,
``init_process_group``, ``master_process = ddp_rank == 0``, random-offset ``get_batch`` with a batch
drawn ahead, weight tying, decay / no-decay groups, bf16 autocast, ``require_backward_grad_sync``
accumulation, warmup + cosine, leader-only eval and ``torch.save``, its own ``init_from='resume'``);
``train_nanogpt_spotwise.py`` is it converted in 5 lines.  ``tests/user_scripts/torchrun_env.py``
writes down what each member sees of torch.distributed.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_own_loop import run, script_spec

from spotwise.events import read_events

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "torchrun"
ENV_SCRIPT = Path(__file__).parent / "user_scripts" / "torchrun_env.py"
#: a small nanoGPT (tens of ms a step here): 2 micro-batches of 4 x 16 bytes over 2 processes
SMALL = ["--n_layer=1", "--n_embd=32", "--block_size=16", "--batch_size=4", "--eval_iters=2", "--log_interval=1"]


def changed_lines(a: list[str], b: list[str]) -> int:
    """Lines changed between two versions of a script: an inserted or deleted line counts one, a
    block of replaced lines counts the longer side (a line edited in place counts one, not two)."""
    n = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            n += max(i2 - i1, j2 - j1)
    return n


def nanogpt_spec(out: Path, *extra: str, samples: int, workers: int = 2, max_iters: int = 1000) -> Any:
    args = [*SMALL, f"--max_iters={max_iters}", f"--out_dir={out}", *extra]
    return script_spec(workload__script=str(EXAMPLE / "train_nanogpt_spotwise.py"), workload__batch_size=4,
                       workload__args=args, target__samples=samples, seed=0, cluster__workers=workers)


def script_log(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def torchrun(script: Path, *args: str, cwd: Path, nproc: int = 2) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
                    str(script), *args], check=True, timeout=240, cwd=cwd, env=env, capture_output=True)


# ---------------------------------------------------------------------------------------------- units
def test_the_torchrun_script_converts_in_5_changed_lines() -> None:
    a = (EXAMPLE / "train_nanogpt.py").read_text().splitlines()
    b = (EXAMPLE / "train_nanogpt_spotwise.py").read_text().splitlines()
    assert changed_lines(a, b) <= 5, [ln for ln in difflib.unified_diff(a, b, lineterm="", n=0)]
    assert changed_lines(["x", "y"], ["x", "z"]) == 1 and changed_lines(["x"], ["x", "y", "z"]) == 2
    for needle in ("init_process_group(backend=backend)", "master_process = ddp_rank == 0", "DDP(model, device_ids",
                   "require_backward_grad_sync", "torch.randint(len(data) - block_size", "weight-tying",
                   "torch.save(checkpoint", "init_from == 'resume'", "destroy_process_group()"):
        assert any(needle in line for line in a), needle  # the torchrun shape, not a pre-shaped script


def test_rank_names_are_computed_again_and_nothing_else_is() -> None:
    from spotwise.elastic.rank_names import RankNames

    src = '''
import os
import torch.distributed as dist
gradient_accumulation_steps = 8
device = "cpu"
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    ddp_rank = int(os.environ["RANK"])
    ddp_world_size = int(os.environ["WORLD_SIZE"])
    device = f"cuda:{ddp_rank}" if torch.cuda.is_available() else "cpu"
    master_process = ddp_rank == 0
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True
    ddp_rank, ddp_world_size = 0, 1
is_main = dist.get_rank() == 0
overridden = ddp_rank == 0
overridden = len(str(overridden)) > 0
tokens = gradient_accumulation_steps * ddp_world_size
'''
    names = RankNames.of_source(src)
    assert names.names >= {"ddp", "ddp_rank", "ddp_world_size", "master_process", "is_main", "tokens"}
    # computed by a call, augmented, or changed by the script later: the script's own
    assert not names.names & {"device", "gradient_accumulation_steps", "overridden"}

    class Dist:
        @staticmethod
        def get_rank() -> int:
            return int(os.environ["RANK"])

    ns = {"os": os, "dist": Dist, "__builtins__": __builtins__, "ddp": True, "ddp_rank": 1, "ddp_world_size": 2,
          "master_process": False, "gradient_accumulation_steps": 4, "device": "cpu", "is_main": False,
          "overridden": True, "tokens": 8}
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    os.environ.update(RANK="0", WORLD_SIZE="1")  # the leader was lost: this member is rank 0 of 1
    try:
        changed = names.refresh(ns)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert ns["master_process"] is True and ns["is_main"] is True and ns["ddp_rank"] == 0
    assert ns["gradient_accumulation_steps"] == 4 and ns["tokens"] == 4, "divided once, at the start"
    assert set(changed) == {"ddp_rank", "ddp_world_size", "master_process", "is_main", "tokens"}


def test_torchruns_environment_and_the_backends_a_member_takes() -> None:
    import torch

    from spotwise.elastic.torchrun import Place, check_backend
    from spotwise.elastic.usage import ScriptError
    from spotwise.planes.collective.plan import rank_order

    p = Place(1, 2, start_world=3, master_port=4321)
    env = p.env(started=False)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("1", "3", "0", "1")
    assert env["SPOTWISE_JOINING"] is None and p.env(started=True)["WORLD_SIZE"] == "2"
    assert p.moved(0, 1).env(started=True)["RANK"] == "0"
    assert Place(0, 1, joining=True).env(True)["SPOTWISE_JOINING"] == "1"
    with pytest.raises(ValueError):
        Place(2, 2)
    cpu = torch.device("cpu")
    assert check_backend(None, cpu) == check_backend("gloo", cpu) == check_backend("cpu:gloo,cuda:nccl", cpu) == "gloo"
    for bad in ("nccl", "mpi", "cuda:nccl"):
        with pytest.raises(ScriptError, match="name gloo there"):
            check_backend(bad, cpu)
    # the leader keeps rank 0 while it lives; when it is lost, the next survivor is rank 0; joiners after
    assert rank_order([2, 0, 1], {2: 5, 0: 5, 1: 5}, {0, 1, 2}) == [2, 0, 1]
    assert rank_order([2, 0, 1], {0: 5, 1: 5}, {0, 1, 2}) == [0, 1, 2]  # slot 2 is a new process: a joiner
    assert rank_order([1, 0], {1: 3}, {0, 1, 3}) == [1, 0, 3]


def test_randint_draws_each_window_once_and_evaluation_draws_from_torch() -> None:
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    job = Job(LocalBackend(seed=4))
    model = job.model(torch.nn.Linear(1, 1))
    opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.0))
    ahead = job.randint(40, (4,))  # the draw before the loop (nanoGPT's first get_batch): counts to no step
    drawn = []
    for it in job.steps(5):
        assert it == job.step
        for _ in range(2):
            ix = job.randint(40, (4,))
            drawn.extend(ix.tolist())
            model(ix.float().view(-1, 1)).sum().backward()
        with torch.no_grad():  # an evaluation: torch's own draw, nothing of the job's data
            g = torch.Generator().manual_seed(7)
            assert torch.equal(job.randint(40, (4,), generator=g), torch.randint(40, (4,), generator=torch.Generator().manual_seed(7)))
        opt.step()
        opt.zero_grad()
    assert job.step == 5 and len(ahead) == 4
    assert sorted(drawn) == list(range(40)), "5 steps of 2 draws of 4: one epoch of the 40 window starts"
    with pytest.raises(ValueError, match="same range and size"):
        job.randint(41, (4,))


def test_randint_needs_the_steps_loop() -> None:
    import torch

    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend

    job = Job(LocalBackend(seed=0))
    model = job.model(torch.nn.Linear(1, 1))
    opt = job.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    model(job.randint(10, (2,)).float().view(-1, 1)).sum().backward()
    with pytest.raises(RuntimeError, match="job.steps"):
        opt.step()


@pytest.mark.parametrize(("mode", "words"), [
    ("nccl", "init_process_group(backend='nccl') cannot run on this member's device (cpu)"),
    ("subgroup", "DistributedDataParallel over a subgroup"),
    ("fsdp", "fully_shard shards the model's state"),
    ("barrier", "a collective on the default process group before the script's first batch"),
])
def test_torchrun_calls_that_cannot_run_in_place_exit_2_before_any_member_starts(tmp_path: Path, mode: str,
                                                                                 words: str) -> None:
    import spotwise.elastic.describe as describe
    from spotwise.errors import InputError

    spec = script_spec(workload__script=str(ENV_SCRIPT), workload__batch_size=8,
                       workload__args=["--record", str(tmp_path), "--mode", mode])
    with pytest.raises(InputError) as e:
        describe.describe_script(spec.workload, 0)
    assert words in str(e.value) and e.value.where == "workload.script", str(e.value)


def test_the_coordinators_probe_is_rank_0_of_1_told_it_does_not_start_the_job(tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    import spotwise.elastic.describe as describe

    before = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "SPOTWISE_JOINING")}
    assert torch.nn.parallel.DistributedDataParallel is torch.nn.parallel.distributed.DistributedDataParallel
    spec = script_spec(workload__script=str(ENV_SCRIPT), workload__batch_size=8,
                       workload__args=["--record", str(tmp_path)])
    wl = describe.describe_script(spec.workload, 0)
    assert len(wl.train) == 1000, "the windows' starts are the training set"
    (rec,) = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert rec["env"]["RANK"] == "0" and rec["env"]["WORLD_SIZE"] == "1" and rec["env"]["SPOTWISE_PROBE"] == "1"
    assert rec["joining"] is True and rec["env"]["SPOTWISE_JOINING"] == "1" and rec["master"] is True
    assert rec["initialized"] and rec["dist_rank"] == 0 and rec["dist_world"] == 1 and rec["is_ddp"]
    assert rec["module_is_raw"]
    # the controller's own process is as it was: environment, no default group, PyTorch's DDP
    assert {k: os.environ.get(k) for k in before} == before
    assert not dist.is_initialized()
    assert torch.nn.parallel.DistributedDataParallel is torch.nn.parallel.distributed.DistributedDataParallel


# ---------------------------------------------------------------------------------------------- jobs
def records(folder: Path) -> dict[str, list[dict[str, Any]]]:
    return {f.stem: [json.loads(line) for line in f.read_text().splitlines()] for f in sorted(folder.glob("*.jsonl"))}


def test_members_see_torchruns_environment_and_the_generations_default_group(ray_session: Any, tmp_path: Path) -> None:
    """Two members of torchrun_env.py; the leader (slot 0) is revoked, then -- back as a joiner, rank 1 now --
    slot 0 again (a member that is not the leader), each comes back (4 actor starts; 3 members took 5)."""
    from spotwise.capacity.faults import ScriptedRevocation, outage

    rec_dir = tmp_path / "rec"
    spec = script_spec(workload__script=str(ENV_SCRIPT), workload__batch_size=8, target__samples=8 * 2 * 16,
                       workload__args=["--record", str(rec_dir)])
    coord, summary = run(spec, tmp_path / "run", revocation=ScriptedRevocation((outage(3, 6, [0]), outage(9, 11, [0]))))
    assert summary.status == "completed" and summary.revocations >= 2
    by_pid = {pid: r for pid, r in records(rec_dir).items() if r[0]["env"]["SPOTWISE_PROBE"] is None}
    starters = [r for r in by_pid.values() if not r[0]["joining"]]
    joiners = [r for r in by_pid.values() if r[0]["joining"]]
    assert len(starters) == 2 and len(joiners) >= 2, "the first generation's members start the job; the others join"
    assert sorted(r[0]["job_rank"] for r in starters) == [0, 1]
    for r in by_pid.values():
        start = r[0]
        # from the script's top: torchrun's environment, the default group, DDP as the job's model
        assert start["env"]["RANK"] == str(start["dist_rank"]) == str(start["job_rank"])
        assert start["env"]["WORLD_SIZE"] == "2" and start["dist_world"] == 2, "the job's planned size at the start"
        assert start["initialized"] and start["is_ddp"] and start["module_is_raw"]
        assert start["env"]["SPOTWISE_JOINING"] == ("1" if start["joining"] else None)
        assert start["env"]["TORCHELASTIC_RUN_ID"] and start["env"]["MASTER_PORT"] != "29500"
        steps = [x for x in r[1:] if x["kind"] == "step"]
        for i, x in enumerate(steps):
            assert x["env_rank"] == str(x["rank"]) == str(x["job_rank"]) and x["env_world"] == str(x["world"])
            # the script's master_process, computed once at its top, follows the rank
            assert x["master"] == (x["rank"] == 0), (start["env"]["RANK"], x)
            retried = i + 1 < len(steps) and steps[i + 1]["it"] == x["it"]
            assert x["allreduce"] == (1.0 if retried else x["world"]), x  # a dropped step's rest runs alone
            assert x["backend"] == "gloo"
    new_leaders = [r for r in starters if r[0]["job_rank"] != 0 and any(x.get("rank") == 0 for x in r[1:])]
    assert new_leaders, "a survivor became rank 0 when the leader was lost"
    regroups = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["regroup"]))
    assert regroups[-1]["members"][0] != 0, "the slot that came back is no leader: the survivor kept rank 0"
    assert any(r["joiners"] == [0] and r["members"] == [1, 0] for r in regroups[1:]), [r["members"] for r in regroups]
    assert coord.counters.samples >= 8 * 2 * 16


def test_the_converted_nanogpt_trains_through_a_revocation_of_its_leader(ray_session: Any, tmp_path: Path) -> None:
    """The leader (slot 0) is revoked at step 3 and comes back at 8: logging, evaluation and
    torch.save go on at the new rank 0 -- once per iteration -- and the slot that comes back joins
    after it (it is not a second master)."""
    from spotwise.capacity.faults import ScriptedRevocation, outage

    out = tmp_path / "script-out"
    spec = nanogpt_spec(out, "--eval_interval=4", samples=16 * 16)
    coord, summary = run(spec, tmp_path / "run", revocation=ScriptedRevocation((outage(3, 8, [0]),)))
    assert summary.status == "completed" and summary.revocations >= 1
    steps = [e for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["step"])]
    assert [e["step"] for e in steps] == list(range(1, len(steps) + 1)) and len(steps) >= 14
    assert {e["active"] for e in steps} >= {1, 2}
    assert all(e["loss"] is not None and math.isfinite(e["loss"]) for e in steps), "loss.backward() is recorded"
    log = script_log(out)
    train = [x["iter"] for x in log if "loss" in x]
    evals = [x["iter"] for x in log if "val/loss" in x]
    assert train == list(range(len(steps))), "one master logs every committed iteration once, through the loss"
    assert evals == list(range(0, len(steps), 4)), evals
    import torch

    ckpt = torch.load(out / "ckpt.pt", weights_only=False)
    assert ckpt["iter_num"] == evals[-1] > 8, "the new leader saved the checkpoints after the revocation"
    regroups = [r["members"] for r in read_events(tmp_path / "run" / "events.jsonl", kinds=["regroup"])]
    assert regroups[0] == [0, 1] and [1] in regroups and regroups[-1] == [1, 0], regroups
    assert steps[-1]["loss"] < steps[0]["loss"]


def test_the_original_under_torchrun_and_the_converted_under_spotwise_agree(ray_session: Any, tmp_path: Path) -> None:
    """No revocations, 2 processes each.  The converted script under spotwise equals itself under
    torchrun *bitwise* -- every logged loss and evaluation: the same windows (rank r draws block r of
    each step in both), the same initial model (rank 0's) and the same all-reduce.  The original
    under torchrun draws its training windows from torch's RNG on each rank, so it trains on other
    samples (equal ones cannot be asked of it): its first evaluation -- the same initial model, and
    the same evaluation windows, the batch drawn ahead of the loop being torch's own draw in both --
    is bitwise the converted one's, and after training the two are as close as two samplings of
    the data."""
    iters = 12
    args = [*SMALL, f"--max_iters={iters}", "--eval_interval=6"]
    spotwise_out = tmp_path / "spotwise"
    spec = nanogpt_spec(spotwise_out, "--eval_interval=6", samples=100 * 16, max_iters=iters)  # the script ends it
    coord, summary = run(spec, tmp_path / "run")
    assert summary.status == "completed"
    # the on-demand comparison counts optimizer steps, as the run does: the script accumulates 2
    # micro-batches per step on each of 2 members (issue 55 item 8: it once counted micro-batches)
    od = summary.extra["on_demand"]
    assert od["micro_batches_per_step"] == 2 and od["steps"] == summary.steps, (od, summary.steps)
    torchrun(EXAMPLE / "train_nanogpt_spotwise.py", *args, "--out_dir=conv", cwd=tmp_path)
    torchrun(EXAMPLE / "train_nanogpt.py", *args, "--out_dir=orig", cwd=tmp_path)
    got, conv, orig = script_log(spotwise_out), script_log(tmp_path / "conv"), script_log(tmp_path / "orig")
    drop = ("ms",)
    assert [{k: v for k, v in x.items() if k not in drop} for x in got] == \
        [{k: v for k, v in x.items() if k not in drop} for x in conv], "bitwise: the same losses and evaluations"
    assert len(conv) == len(orig) and [x["iter"] for x in conv] == [x["iter"] for x in orig]
    assert conv[0]["val/loss"] == orig[0]["val/loss"] and conv[0]["train/loss"] == orig[0]["train/loss"]
    last_conv, last_orig = [x["val/loss"] for x in conv if "val/loss" in x][-1], \
        [x["val/loss"] for x in orig if "val/loss" in x][-1]
    assert last_conv < conv[0]["val/loss"] - 0.3 and last_orig < orig[0]["val/loss"] - 0.3, "both learn"
    assert abs(last_conv - last_orig) < 0.15, (last_conv, last_orig)


def test_a_scripts_own_resume_is_taken_by_the_members_that_start_the_job_only(ray_session: Any,
                                                                             tmp_path: Path) -> None:
    """A spotwise job started from the script's own ckpt.pt (made by the original on its own,
    ``--init_from=resume``): the starting members load it (the first evaluation is the checkpoint's
    model's), a member that joins later does not -- ckpt.pt is gone by then, so one that tried would
    stop the run -- and takes the job's state."""
    from spotwise.capacity.faults import ScriptedRevocation, outage

    out = tmp_path / "out"
    subprocess.run([sys.executable, str(EXAMPLE / "train_nanogpt.py"), *SMALL, "--max_iters=16", "--eval_interval=16",
                    f"--out_dir={out}"], check=True, timeout=240, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
                   capture_output=True)
    saved = [x["val/loss"] for x in script_log(out) if "val/loss" in x][-1]  # at iteration 16, saved
    assert (out / "ckpt.pt").exists()
    (out / "log.jsonl").unlink()
    spec = nanogpt_spec(out, "--init_from=resume", "--eval_interval=1000", "--always_save_checkpoint=False",
                        samples=12 * 16)
    gone = threading.Event()

    def remove_when_training() -> None:  # the starting members have loaded it: take it away
        events = tmp_path / "run" / "events.jsonl"
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            if events.exists() and any(True for _ in read_events(events, kinds=["step"])):
                (out / "ckpt.pt").unlink()
                gone.set()
                return
            time.sleep(0.05)

    remover = threading.Thread(target=remove_when_training, daemon=True)
    remover.start()
    coord, summary = run(spec, tmp_path / "run", revocation=ScriptedRevocation((outage(4, 7, [1]),)))
    remover.join(timeout=5)
    assert gone.is_set() and summary.status == "completed"
    regroups = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["regroup"]))
    assert any(r["joiners"] == [1] for r in regroups[1:]), "slot 1 came back as a joiner"
    first = script_log(out)[0]  # (its evaluation windows are not the saved one's: the RNG is at another place)
    assert first["iter"] == 0 and first["val/loss"] < 5.0 and abs(first["val/loss"] - saved) < 0.3, \
        (first, saved)  # a fresh model's is ~5.55 (bytes): rank 0 started from the checkpoint's model


def test_a_script_that_stops_in_a_member_before_its_first_batch_exits_2(ray_session: Any, tmp_path: Path) -> None:
    from spotwise.errors import InputError

    spec = script_spec(workload__script=str(ENV_SCRIPT), workload__batch_size=8, cluster__workers=1,  # one actor start
                       workload__args=["--record", str(tmp_path / "rec"), "--mode", "raise-in-member"])
    with pytest.raises(InputError) as e:
        run(spec, tmp_path / "run")
    assert "failing on purpose in a member" in str(e.value) and e.value.where == "workload.script", str(e.value)
