"""Streaming sources (issue 28 item 4): an IterableDataset with ``iter_from(position)`` and ``__len__``
trains in stream order, every position of a pass once, and resumes at the checkpointed position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _specs import spec_with

from spotwise.config import WorkloadSpec
from spotwise.assemble import build_controller
from spotwise.control.permutation import epoch_permutation
from spotwise.control.sampler import EpochSampler
from spotwise.errors import InputError
from spotwise.market.world import build_market
from spotwise.planes.collective.replica import DataCursor
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for
from spotwise.spec.load import build
from spotwise.workloads.base import is_ordered
from spotwise.workloads.registry import make_workload
from spotwise.workloads.user import StreamDataset

pytestmark = pytest.mark.timeout(180)

USER_DIR = Path(__file__).with_name("user_workloads")
N, B = 96, 8  # a pass of 96 positions; 2 workers of 8: 6 steps per pass

BASE: dict[str, Any] = {
    "name": "stream",
    "seed": 3,
    "workload": {"name": "streams:stream", "batch_size": B, "lr": 0.05, "eval_every": 1000},
    "target": {"iterations": 15},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


@pytest.fixture()
def user_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_DIR))


@pytest.fixture()
def commits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, np.ndarray]]:
    """Every block any EpochSampler commits: (its epoch, its indices), in commit order."""
    seen: list[tuple[int, np.ndarray]] = []
    original = EpochSampler.commit

    def commit(self: EpochSampler, block: Any) -> None:
        seen.append((block.epoch, np.asarray(block.indices).copy()))
        original(self, block)

    monkeypatch.setattr(EpochSampler, "commit", commit)
    return seen


def run_local(spec, out: Path, **kw: Any):
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    job = build_controller(spec, out, market=market, compute=LocalCompute(worker_args_for(spec)), **kw)
    return job, job.run()


def steps_of(commits: list[tuple[int, np.ndarray]], k: int = 2) -> list[tuple[int, np.ndarray]]:
    """The committed steps (k blocks each: a constant market, every worker contributes): the epoch
    and the step's positions in order."""
    assert len(commits) % k == 0
    out = []
    for i in range(0, len(commits), k):
        part = commits[i:i + k]
        assert len({e for e, _ in part}) == 1
        out.append((part[0][0], np.sort(np.concatenate([x for _, x in part]))))
    return out


# ---------------------------------------------------------------- the ordered samplers
def test_the_ordered_flag_gives_the_identity_and_survives_the_sampler_state() -> None:
    p = epoch_permutation(50, seed=9, epoch=4, ordered=True)
    assert np.array_equal(p[10:20], np.arange(10, 20)) and int(p[7]) == 7 and np.array_equal(p[[3, 1]], [3, 1])
    # the default is untouched: numpy's permutation, and no new key in the sampler state
    assert np.array_equal(epoch_permutation(50, 9, 4)[:], np.random.default_rng([9, 4]).permutation(50))
    assert "ordered" not in EpochSampler(50, 9).state()
    s = EpochSampler(20, seed=9, ordered=True)
    a, b = s.reserve(8), s.reserve(8)
    assert np.array_equal(a.indices, np.arange(8)) and np.array_equal(b.indices, np.arange(8, 16))
    s.commit(a)
    state = s.state()  # b in flight: it counts as pending
    assert state["ordered"] is True
    again = EpochSampler.from_state(state)
    assert again.ordered
    assert np.array_equal(again.reserve(8).indices, np.arange(8, 16))
    assert np.array_equal(again.reserve(8).indices, np.arange(16, 20))  # the pass's end: short
    # the collective cursor: member r of k reads positions [pos + r*b, pos + (r+1)*b)
    cur = DataCursor(20, 9, ordered=True)
    cur.advance(1, 6)
    assert np.array_equal(cur.block(2, 4), np.arange(14, 18))
    assert cur.sampler_state()["ordered"] is True and EpochSampler.from_state(cur.sampler_state()).ordered
    assert cur.copy().ordered and cur.copy().pos == 6


def test_a_stream_dataset_reads_contiguous_runs_from_a_live_iterator(user_path: None) -> None:
    import streams

    raw = streams.CountingStream(30)
    ds = StreamDataset(raw)
    streams.SEEKS.clear()
    x, y = ds.batch(np.arange(0, 5))
    assert torch.equal(x, raw.x[:5]) and torch.equal(y, raw.y[:5])
    ds.batch(np.arange(5, 10))  # continues the live iterator: no new seek
    assert streams.SEEKS == [0]
    x, _ = ds.batch(np.array([20, 21, 2, 3]))  # two runs: two seeks
    assert torch.equal(x, raw.x[[20, 21, 2, 3]]) and streams.SEEKS == [0, 20, 2]
    with pytest.raises(IndexError):
        ds.batch(np.array([30]))


# ---------------------------------------------------------------- users
def test_an_iterable_dataset_without_a_position_exits_2_saying_what_to_add(user_path: None) -> None:
    with pytest.raises(InputError) as e:
        make_workload(build(WorkloadSpec, {"name": "streams:no_position"}, "workload"), 0)
    msg = str(e.value)
    assert "iter_from(position)" in msg and "IterableDataset" in msg
    assert "__len__" in e.value.fix and "resumable position" in e.value.fix and "workers come and go" in e.value.fix


def test_a_stream_workload_is_ordered(user_path: None) -> None:
    wl = make_workload(build(WorkloadSpec, {"name": "streams:stream"}, "workload"), 0)
    assert is_ordered(wl) and wl.info["ordered"] is True and len(wl.train) == N
    assert not is_ordered(make_workload(build(WorkloadSpec, {"name": "mlp-digits"}, "workload"), 0))


# ---------------------------------------------------------------- training on the PS plane
def test_two_workers_read_every_position_of_a_pass_once_in_stream_order(tmp_path: Path, user_path: None,
                                                                        commits: list) -> None:
    spec = spec_with(BASE)
    job, summary = run_local(spec, tmp_path / "run")
    assert summary.steps == 15 and job.sampler.ordered
    steps = steps_of(commits)
    assert len(steps) == 15
    # each step holds the next 2 * B positions of the pass: stream order, sharded by worker
    for t, (epoch, pos) in enumerate(steps):
        lo = (t * 2 * B) % N
        assert epoch == t * 2 * B // N and np.array_equal(pos, np.arange(lo, lo + 2 * B)), f"step {t + 1}"
    for epoch in (0, 1):
        got = np.sort(np.concatenate([p for e, p in steps if e == epoch]))
        assert np.array_equal(got, np.arange(N)), f"pass {epoch}: every position exactly once"
    # each worker's block of a step is one contiguous run: [pos + r*B, pos + (r+1)*B)
    assert all(np.array_equal(x, np.arange(x[0], x[0] + B)) for _, x in commits)
    assert np.all(np.isfinite(job.params))


def test_a_resumed_stream_continues_at_the_checkpointed_position(tmp_path: Path, user_path: None,
                                                                 commits: list) -> None:
    spec = spec_with(BASE, outputs__checkpoint_every=4)
    out = tmp_path / "run"
    _, s1 = run_local(spec, out, stop_after_steps=7)
    assert s1.status == "stopped"
    first = steps_of(commits)
    commits.clear()
    again, s2 = run_local(spec, out, resume=True)
    assert s2.steps == 15
    resumed = steps_of(commits)
    start = 15 - len(resumed)  # the checkpointed step the run resumed from
    assert start in (4, 7) and start <= len(first)
    lo = (start * 2 * B) % N
    assert np.array_equal(resumed[0][1], np.arange(lo, lo + 2 * B)), "the first step after the resume"
    commits.clear()
    straight, _ = run_local(spec, tmp_path / "straight")
    assert [p.tolist() for _, p in steps_of(commits)[start:]] == [p.tolist() for _, p in resumed]
    assert np.max(np.abs(again.params - straight.params)) < 1e-6
