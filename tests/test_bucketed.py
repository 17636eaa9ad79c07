"""Issue 40 item 1: a collective member's S-SGD step on PyTorch's own DDP machinery.

Two members (threads of this process, each with its own replica, over a real gloo generation of
:class:`~spotwise.planes.collective.group.ElasticGroup`) take blocks of different sizes; after the
bucketed step every trainable parameter's gradient is the sample-weighted mean over both blocks --
what one process computes on their union -- a frozen parameter has none and does not move, a
parameter the forward pass never uses is found by the probe and DDP copes with it step after step,
and the step's optimizer applies the same update a plain loop would.  End to end (members as Ray
actors, revocations, resumes) the bucketed step is what every S-SGD run of test_collective_plane.py,
test_collective_recipe.py and test_ddp_parity.py takes.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

import numpy as np
import pytest
import torch

from spotwise.config import WorkloadSpec
from spotwise.planes.collective.bucketed import BucketedReducer, comm_failure
from spotwise.planes.collective.group import ElasticGroup, GroupCoordinator
from spotwise.planes.collective.replica import DataCursor, Replica
from spotwise.spec.load import build
from spotwise.training.recipe import Recipe
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.timeout(120)

BLOCKS = (np.arange(0, 8), np.arange(8, 13))  # 8 and 5 samples: unequal shares


class WithSpare(torch.nn.Module):
    """The workload's model and a layer its forward pass never uses."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.spare = torch.nn.Linear(3, 3)
        with torch.no_grad():  # the same on every replica
            self.spare.weight.fill_(0.5)
            self.spare.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _workload(spare: bool = False) -> Any:
    wl = make_workload(build(WorkloadSpec, {"name": "mlp-digits", "batch_size": 8, "lr": 0.1}, "workload"), 3)
    if spare:
        inner = wl.build_model
        wl = dataclasses.replace(wl, build_model=lambda: WithSpare(inner()))
    return wl


def _members(body: Callable[[int, ElasticGroup], None], k: int = 2) -> None:
    """``body(member, group)`` for ``k`` members in threads of their own, over generation 0."""
    coord = GroupCoordinator()
    coord.announce(0, list(range(k)))
    errors: list[BaseException] = []

    def run(m: int) -> None:
        try:
            g = ElasticGroup(coord.address, member=m, timeout_s=30.0)
            g.form(0)
            try:
                body(m, g)
            finally:
                g.close()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(m,)) for m in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a member hung"
    assert not errors, errors


def _reference_grads(wl: Any, frozen: int | None = None) -> dict[str, torch.Tensor]:
    """One process, the union of the blocks: the gradient of the mean loss over all 13 samples."""
    model = wl.build_model()
    if frozen is not None:
        list(model.parameters())[frozen].requires_grad_(False)
    idx = np.concatenate(BLOCKS)
    wl.loss(model, wl.train.batch(idx)).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _bucketed_steps(reps: list[Replica], start: DataCursor, steps: int, lr: float) -> Callable[[int, ElasticGroup], None]:
    """A member's body: probe, bind, then ``steps`` bucketed steps of 8 samples a member from ``start``."""
    def body(m: int, g: ElasticGroup) -> None:
        rep, cur = reps[m], start.copy()
        rep.unused_params = rep.probe_unused(cur.block(m, 8))
        rep.bind(g)
        for _ in range(steps):
            sizes = cur.block_sizes(2, 8)
            rep.reduced_gradient(cur.block(m, 8), sizes[m] / sum(sizes))
            g.allreduce(rep.tail)
            rep.apply_reduced(lr, float(rep.tail[-1]))
            cur.advance(2, 8)
    return body


def _assert_plain_sgd(wl: Any, model: torch.nn.Module, start: DataCursor, steps: int, reps: list[Replica],
                      atol: float) -> None:
    """``steps`` plain SGD steps (lr 0.1) of one process on the union of both members' blocks from
    ``start`` end where both replicas ended."""
    cur = start.copy()
    for _ in range(steps):
        idx = np.concatenate([cur.block(0, 8), cur.block(1, 8)])
        model.zero_grad()
        wl.loss(model, wl.train.batch(idx)).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        cur.advance(2, 8)
    for p, q in zip(reps[0].model.parameters(), model.parameters()):
        assert torch.allclose(p.detach(), q.detach(), atol=atol), float((p - q).abs().max())
    assert torch.equal(reps[0].flat, reps[1].flat)


def test_the_bucketed_gradient_is_the_sample_weighted_mean_and_a_frozen_parameter_gets_none() -> None:
    wl = _workload()
    reps = [Replica(wl, "cpu") for _ in range(2)]
    for rep in reps:
        list(rep.model.parameters())[0].requires_grad_(False)  # the first layer's weight: frozen
    assert torch.equal(reps[0].flat, reps[1].flat)
    got: dict[int, dict[str, Any]] = {}
    total = sum(len(b) for b in BLOCKS)

    def body(m: int, g: ElasticGroup) -> None:
        rep = reps[m]
        rep.unused_params = rep.probe_unused(BLOCKS[m])
        red = rep.bind(g)
        assert isinstance(red, BucketedReducer) and rep.bound_to(0)
        gsq = rep.reduced_gradient(BLOCKS[m], len(BLOCKS[m]) / total)
        g.allreduce(rep.tail)
        got[m] = {"grads": {n: (None if p.grad is None else p.grad.clone()) for n, p in rep.model.named_parameters()},
                  "gsq": float(gsq), "tail": rep.tail.clone(), "unused": rep.unused_params}

    _members(body)
    ref = _reference_grads(wl, frozen=0)
    frozen_name = next(iter(dict(reps[0].model.named_parameters())))
    for m in (0, 1):
        grads = got[m]["grads"]
        assert grads[frozen_name] is None, "a frozen parameter is neither given a gradient nor reduced"
        assert set(n for n, v in grads.items() if v is not None) == set(ref) - {frozen_name}
        for n, v in grads.items():
            if v is not None:
                assert torch.allclose(v, ref[n], atol=1e-6), (n, float((v - ref[n]).abs().max()))
        assert got[m]["gsq"] == pytest.approx(sum(float(v.square().sum()) for n, v in ref.items() if n != frozen_name),
                                               rel=1e-5)
        assert got[m]["unused"] is False
        assert float(got[m]["tail"][-1]) == total  # the sample count, summed


def test_a_parameter_the_forward_pass_never_uses_is_probed_and_steps_go_on() -> None:
    """DDP without ``find_unused_parameters`` would wait for the unused parameter's bucket forever
    (or fail at the next step); the probe finds it, every member agrees, three steps complete."""
    wl = _workload(spare=True)
    reps = [Replica(wl, "cpu", Recipe(), base_lr=0.1) for _ in range(2)]
    before = [r.flat.clone() for r in reps]
    spare_before = reps[0].model.spare.weight.detach().clone()

    def body(m: int, g: ElasticGroup) -> None:
        rep = reps[m]
        assert rep.probe_unused(BLOCKS[m]) is True
        assert torch.equal(rep.flat, before[m]), "the probe changes nothing"
        rep.unused_params = True
        rep.bind(g)
        for _ in range(3):
            rep.reduced_gradient(BLOCKS[m], len(BLOCKS[m]) / 13)
            g.allreduce(rep.tail)
            rep.apply_reduced(0.1, float(rep.tail[-1]))

    _members(body)
    assert torch.equal(reps[0].flat, reps[1].flat), "both replicas took the same steps"
    assert not torch.equal(reps[0].flat, before[0])
    assert torch.equal(reps[0].model.spare.weight.detach(), spare_before), "an unused parameter does not move"


def test_three_bucketed_steps_with_adamw_equal_one_process_on_the_union() -> None:
    """The whole step -- reduced gradient, the recipe's optimizer on the model's own parameters --
    equals one process stepping AdamW on the union of the blocks (fp32, 1e-6)."""
    from spotwise.training.recipe import OptimizerSpec

    wl = _workload()
    opt = OptimizerSpec("AdamW", None, {"weight_decay": 0.01})
    recipe = Recipe(opt, None, 1.0, 1, "fp32")
    reps = [Replica(wl, "cpu", recipe, base_lr=0.01) for _ in range(2)]
    cursor = DataCursor(len(wl.train), 3)

    _members(_bucketed_steps(reps, cursor, 3, lr=0.01))
    model = wl.build_model()
    optim = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    cur = cursor.copy()
    for _ in range(3):
        idx = np.concatenate([cur.block(0, 8), cur.block(1, 8)])
        optim.zero_grad()
        wl.loss(model, wl.train.batch(idx)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        cur.advance(2, 8)
    for p, q in zip(reps[0].model.parameters(), model.parameters()):
        assert torch.allclose(p.detach(), q.detach(), atol=1e-6), float((p - q).abs().max())
    assert torch.equal(reps[0].flat, reps[1].flat)


def test_block_sizes_follow_the_cursor_to_the_epochs_end() -> None:
    cur = DataCursor(20, 0, pos=14)
    assert cur.block_sizes(3, 4) == [4, 2, 0]
    assert [len(cur.block(i, 4)) for i in range(3)] == cur.block_sizes(3, 4)


def test_only_a_failed_collective_is_a_comm_failure() -> None:
    assert comm_failure(RuntimeError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1234"))
    assert comm_failure(RuntimeError("Timed out waiting 30000ms for recv operation to complete"))
    assert not comm_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x64 and 32x10)"))
    assert not comm_failure(ValueError("connection"))


def test_an_epochs_short_last_step_goes_flat_and_the_next_one_bucketed_again() -> None:
    """A step where a member's block is empty (the epoch's end split over more members than it has
    samples left) cannot go through DDP (that member has no forward pass): every member takes the
    flat all-reduce for it -- they all see the same block sizes -- and the next step is bucketed
    again; the three steps equal plain SGD in one process on the union of the blocks."""
    wl = _workload()
    n = len(wl.train)
    reps = [Replica(wl, "cpu", Recipe(), base_lr=0.1) for _ in range(2)]
    start = DataCursor(n, 3, pos=n - 22)
    paths: dict[int, list[str]] = {0: [], 1: []}

    def body(m: int, g: ElasticGroup) -> None:
        rep, cur = reps[m], start.copy()
        for _ in range(3):
            sizes = cur.block_sizes(2, 8)
            if min(sizes) > 0:
                if not rep.bound_to(g.gen):
                    rep.unused_params = False
                    rep.bind(g)
                rep.reduced_gradient(cur.block(m, 8), sizes[m] / sum(sizes))
                g.allreduce(rep.tail)
                rep.apply_reduced(0.1, float(rep.tail[-1]))
                paths[m].append("bucketed")
            else:
                rep.gradient(cur.block(m, 8))
                g.allreduce(rep.buf)
                assert rep.sgd(rep.buf[: rep.N], float(rep.buf[rep.N + 1]), 0.1)
                paths[m].append("flat")
            cur.advance(2, 8)

    _members(body)
    assert paths[0] == paths[1] == ["bucketed", "flat", "bucketed"]
    _assert_plain_sgd(wl, wl.build_model(), start, 3, reps, atol=1e-6)
    assert reps[0]._buf is None, "the flat buffer is freed again while the buckets hold the gradients"


def test_a_compiled_model_steps_the_same_through_the_buckets() -> None:
    """A workload whose model is ``torch.compile``d (TorchDynamo, the ``aot_eager`` backend: no C
    compiler needed) trains through DDP's wrapper like the eager one: two bucketed steps equal one
    eager process on the union of the blocks."""
    pytest.importorskip("torch._dynamo")
    wl = _workload()
    eager = wl.build_model
    compiled = dataclasses.replace(wl, build_model=lambda: torch.compile(eager(), backend="aot_eager"))
    reps = [Replica(compiled, "cpu", Recipe(), base_lr=0.1) for _ in range(2)]
    cursor = DataCursor(len(wl.train), 3)

    _members(_bucketed_steps(reps, cursor, 2, lr=0.1))
    _assert_plain_sgd(wl, eager(), cursor, 2, reps, atol=1e-5)


def test_the_wrapper_answers_the_models_own_attributes() -> None:
    """A workload's ``loss(model, batch)`` may read its model's attributes: through the wrapper too."""
    wl = _workload()
    reps = [Replica(wl, "cpu") for _ in range(2)]
    for rep in reps:
        rep.model.vocab = 7  # what a user's loss might read

    def body(m: int, g: ElasticGroup) -> None:
        rep = reps[m]
        rep.unused_params = False
        ddp = rep.bind(g).ddp
        assert ddp.vocab == 7 and ddp.module is rep.model
        with pytest.raises(AttributeError):
            ddp.no_such_attribute

    _members(body)


def test_the_phase_clock_adds_up_by_phase_and_refuses_an_unknown_one() -> None:
    from spotwise.control.phases import PhaseClock, PhaseTotals

    clock = PhaseClock()
    clock.add("compute", 0.010)
    clock.add("compute", 0.005)
    with clock.timed("optimizer"):
        pass
    clock.add("data", 0.0)
    got = clock.take()
    assert got["compute"] == 15.0 and "data" not in got and got.get("optimizer", 0.0) >= 0.0
    assert clock.take() == {}
    with pytest.raises(ValueError, match="unknown step phase"):
        clock.add("gpu", 1.0)
    totals = PhaseTotals()
    totals.add({"compute": 30.0, "reduce": 10.0}, samples=16)
    totals.add({"compute": 10.0, "reduce": 10.0}, samples=16)
    totals.add(None)
    s = totals.summary()
    assert s == {"steps": 2, "ms_per_step": {"compute": 20.0, "reduce": 10.0},
                 "share": {"compute": 0.6667, "reduce": 0.3333}, "samples_per_s": 533.333}
    assert PhaseTotals().summary() is None


def test_status_reads_the_phases_of_a_log_and_ignores_what_is_not_a_phase() -> None:
    """An event log is untrusted input: unknown names, non-numbers, negative or non-finite values
    and a generation's first step (it carries ``timing``) are left out."""
    from spotwise.control.phases import phase_line, totals_of

    events = [
        {"kind": "step", "step": 1, "samples": 32, "timing": {"plan": 1.0}, "phases": {"compute": 900.0}},
        {"kind": "step", "step": 2, "samples": 32, "phases": {"compute": 8.0, "reduce": 2.0, "evil": 1e9}},
        {"kind": "step", "step": 3, "samples": 32, "phases": {"compute": 6.0, "reduce": float("nan"), "sync": -4,
                                                              "optimizer": True, "data": "x"}},
        {"kind": "step", "step": 4, "samples": "many", "phases": ["compute"]},
        {"kind": "eval", "phases": {"compute": 1.0}},
    ]
    s = totals_of(events).summary()
    assert s is not None and s["steps"] == 2 and s["ms_per_step"] == {"compute": 7.0, "reduce": 1.0}
    line = phase_line(s)
    assert line is not None and line.startswith("compute 88% · reduce 12%") and "mean step 8.0 ms" in line
    assert phase_line(None) is None and totals_of([]).summary() is None


def test_the_gpu_busy_share_is_sampled_per_step_and_averaged_where_nvml_answers() -> None:
    """Issue 40 item 5: a member's clock samples how busy its GPU was once per step (NVML's utilization
    through ``torch.cuda.utilization``; a fake reader here), the totals average it over the timed steps
    and status shows it; on the CPU, or where NVML fails, nothing is sampled and nothing is reported."""
    import itertools

    from spotwise.control.phases import PhaseClock, PhaseTotals, phase_line, totals_of
    from spotwise.workloads.device import GpuBusy

    assert GpuBusy("cpu").sample() is None
    readings = itertools.cycle([80.0, 100.0, 140.0])  # percent; a reading above 100 is clamped
    clock = PhaseClock(busy=GpuBusy("cpu", read=lambda: next(readings)))
    steps = []
    for _ in range(3):
        clock.add("compute", 0.010)
        steps.append({"kind": "step", "samples": 8, "phases": clock.take()})
    assert [s["phases"]["gpu_busy_share"] for s in steps] == [0.8, 1.0, 1.0]
    totals = PhaseTotals()
    for s in steps:
        totals.add(s["phases"], 8)
    summary = totals.summary()
    assert summary is not None and summary["gpu_busy_share"] == pytest.approx(0.9333, abs=1e-4)
    assert summary["ms_per_step"] == {"compute": 10.0} and summary["share"] == {"compute": 1.0}  # not a phase's time
    assert totals_of(steps).summary() == summary  # the report and status read the same from the log
    line = phase_line(summary)
    assert line is not None and line.endswith("GPU busy 93%)")
    # an untrusted log's share outside [0, 1] is ignored; NVML failing stops sampling, training goes on
    assert "gpu_busy_share" not in (totals_of([{"kind": "step", "samples": 8, "phases": {"compute": 1.0,
                                                                                          "gpu_busy_share": 7.0}}]).summary() or {})

    def broken() -> float:
        raise ModuleNotFoundError("pynvml")

    failing = GpuBusy("cpu", read=broken)
    assert failing.sample() is None and failing.sample() is None and not failing._ok
