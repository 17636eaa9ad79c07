"""Replica offers off the training thread's critical path (issue 40 item 3).

An offer copies the state between two steps (a device-side then side-stream copy on a GPU; a memcpy
on the CPU), serialises the copies on a background thread while training goes on, announces itself
only once its bytes are ready, and its periodic schedule keeps its measured cost within 2 % of
the training time (``replica_every`` the most often).
"""

from __future__ import annotations

import json
import threading

import pytest
import torch
import torch.distributed as dist

from spotwise.planes.collective.offers import BUDGET, OfferSchedule, ReplicaOffers
from spotwise.training.state import decode_extra
from spotwise.workloads.device import HostCopier


def _adamw_state() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(4, 6)).sum().backward()
        opt.step()
    return model, opt


def _fetch(offers: ReplicaOffers, head: dict, chunk: int = 7) -> bytes:
    out, off = b"", 0
    total = head["vec_bytes"] + head["extra_bytes"]
    while off < total:
        part = offers.take(head["token"], off, chunk)
        assert part is not None
        out += part.tobytes()
        off += len(part)
    return out


def test_an_offer_holds_the_state_of_its_step_though_training_goes_on_at_once() -> None:
    model, opt = _adamw_state()
    vec = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    want_vec = vec.clone()
    want_state = {k: {n: t.clone() for n, t in v.items()} for k, v in opt.state_dict()["state"].items()}
    store = dist.HashStore()
    offers = ReplicaOffers(torch.device("cpu"), lambda: store)
    offers.offer({"step": 7, "why": "periodic"}, vec, {"optimizer": opt.state_dict()})
    vec.add_(1.0)  # the next step changes everything right away
    opt.zero_grad()
    model(torch.randn(4, 6)).sum().backward()
    opt.step()
    offers.settle()
    head = json.loads(store.queue_pop("replicas"))
    assert head["step"] == 7 and head["token"] == 1
    raw = _fetch(offers, head)
    got_vec = torch.frombuffer(bytearray(raw[:head["vec_bytes"]]), dtype=torch.float32)
    assert torch.equal(got_vec, want_vec)
    extra = decode_extra(raw[head["vec_bytes"]:])
    for k, v in want_state.items():
        for n, t in v.items():
            assert torch.equal(extra["optimizer"]["state"][k][n], t), (k, n)
    assert offers.take(head["token"], 0, 8) is None  # the last chunk dropped the offer


def test_only_the_newest_offer_is_served_and_the_final_one_is_ready_on_return() -> None:
    store = dist.HashStore()
    offers = ReplicaOffers(torch.device("cpu"), lambda: store)
    offers.offer({"step": 1}, torch.ones(5), None)
    offers.offer({"step": 2}, torch.full((5,), 2.0), None, wait=True)  # final: serialised and announced
    heads = [json.loads(store.queue_pop("replicas")) for _ in range(store.queue_len("replicas"))]
    assert [h["step"] for h in heads] == [1, 2] and heads[1]["extra_bytes"] == 0
    assert offers.take(heads[0]["token"], 0, 100) is None
    assert torch.equal(torch.frombuffer(bytearray(offers.take(heads[1]["token"], 0, 100)), dtype=torch.float32),
                       torch.full((5,), 2.0))


def test_the_final_offer_serves_the_live_state_and_no_offer_holds_a_serialised_copy() -> None:
    """Memory (issue 40: a member's peak 1.5x a DDP rank's): an offer's extra state is served from the
    tensors it was copied into (a packed tree), and the final offer -- nothing trains after it --
    from the state itself, without a copy."""
    model, opt = _adamw_state()
    vec = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    store = dist.HashStore()
    offers = ReplicaOffers(torch.device("cpu"), lambda: store)
    state = opt.state_dict()
    offers.offer({"step": 9}, vec, {"optimizer": state}, wait=True)
    head = json.loads(store.queue_pop("replicas"))
    _, served_vec, extra, _ = offers._outbox[head["token"]]
    assert served_vec.ctypes.data == vec.data_ptr(), "the final offer's vector is the live one"
    moments = [t for v in state["state"].values() for t in v.values() if t.dim() > 0]
    served = {t.data_ptr() for t in extra.tensors}
    assert moments and all(t.data_ptr() in served for t in moments), "served from the state's own tensors"
    assert extra.nbytes < sum(t.numel() * t.element_size() for t in extra.tensors) + 4096  # no second copy
    got = decode_extra(_fetch(offers, head)[head["vec_bytes"]:])
    assert torch.equal(got["optimizer"]["state"][0]["exp_avg"], state["state"][0]["exp_avg"])
    # a periodic offer copies (training goes on), and serves the copies, not the live tensors
    offers.offer({"step": 10}, vec, {"optimizer": state})
    offers.settle()
    head = json.loads(store.queue_pop("replicas"))
    _, served_vec, extra, _ = offers._outbox[head["token"]]
    assert served_vec.ctypes.data != vec.data_ptr()
    assert not {t.data_ptr() for t in extra.tensors} & {t.data_ptr() for t in moments}


def test_a_failure_in_the_background_is_raised_on_the_training_thread() -> None:
    class Unsavable:
        def __reduce__(self) -> None:  # type: ignore[override]
            raise RuntimeError("cannot pickle this")

    offers = ReplicaOffers(torch.device("cpu"), lambda: dist.HashStore())
    offers.offer({"step": 3}, torch.ones(3), {"thing": Unsavable()})
    with pytest.raises(RuntimeError, match="cannot pickle"):
        offers.settle()
    offers.settle()  # raised once


def test_the_schedule_keeps_offers_within_the_budget_and_replica_every_is_the_most_often() -> None:
    s = OfferSchedule(every=20)
    assert s.interval() == 20 and not s.due(19) and s.due(20)
    for _ in range(50):
        s.observe_step(0.030)  # 30 ms steps
    s.observe_offer(0.001)  # a cheap offer: 1 ms < 2 % of 20 steps
    assert s.interval() == 20
    s.observe_offer(0.5)
    s.observe_offer(0.5)  # an expensive one (e.g. an 85M model's optimizer state): spaced out
    n = s.interval()
    assert s.offer_s is not None and s.step_s is not None
    assert n > 20 and s.offer_s / (n * s.step_s) <= BUDGET + 1e-9
    s.offered(100)
    assert not s.due(100 + n - 1) and s.due(100 + n)
    assert OfferSchedule(every=0).interval() == 0 and not OfferSchedule(every=0).due(10**6)
    with pytest.raises(ValueError):
        OfferSchedule(every=5, budget=1.0)


def test_the_host_copier_copies_now_into_memory_the_caller_may_drop() -> None:
    c = HostCopier(torch.device("cpu"))
    a, b = torch.arange(4.0), torch.ones(2, 3, dtype=torch.float64)
    got, wait = c.copy([a, b])
    wait()
    a.add_(10)
    assert torch.equal(got[0], torch.arange(4.0)) and torch.equal(got[1], torch.ones(2, 3, dtype=torch.float64))
    again, _ = c.copy([a, b])
    # on the CPU a copy is fresh memory (dropped once serialised: no second state kept between offers)
    assert again[0].data_ptr() != got[0].data_ptr() and torch.equal(again[0], a) and torch.equal(got[0], torch.arange(4.0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the side-stream copy runs on GPU machines only")
def test_the_gpu_copy_runs_on_a_side_stream_and_holds_the_values_of_its_call() -> None:  # pragma: no cover - GPU
    dev = torch.device("cuda")
    c = HostCopier(dev)
    x = torch.arange(1 << 20, dtype=torch.float32, device=dev)
    got, wait = c.copy([x])
    x.mul_(-1)  # the next step, on the training stream
    wait()
    assert got[0].is_pinned() and torch.equal(got[0], torch.arange(1 << 20, dtype=torch.float32))
    again, wait = c.copy([x])
    wait()
    assert again[0].data_ptr() == got[0].data_ptr()  # pinned buffers are kept and reused


def test_offers_from_two_threads_never_serve_a_half_written_buffer() -> None:
    """The coordinator fetches (an actor thread) while the leader offers again: a fetch gets the old
    offer whole or ``None``, never bytes of two steps."""
    store = dist.HashStore()
    offers = ReplicaOffers(torch.device("cpu"), lambda: store)
    bad: list[str] = []
    stop = threading.Event()

    def fetcher() -> None:
        while not stop.is_set():
            n = store.queue_len("replicas")
            for _ in range(n):
                head = json.loads(store.queue_pop("replicas"))
                raw, off = b"", 0
                while off < head["vec_bytes"]:
                    part = offers.take(head["token"], off, 4096)
                    if part is None:
                        break
                    raw += part.tobytes()
                    off += len(part)
                else:
                    v = torch.frombuffer(bytearray(raw), dtype=torch.float32)
                    if not torch.all(v == float(head["step"])):
                        bad.append(f"step {head['step']}: {sorted(set(v.tolist()))[:4]}")

    t = threading.Thread(target=fetcher)
    t.start()
    try:
        for step in range(1, 60):
            offers.offer({"step": step}, torch.full((20_000,), float(step)), None)
        offers.settle()
    finally:
        stop.set()
        t.join()
    assert not bad, bad


def test_a_fixed_schedule_offers_exactly_every_replica_every_steps_whatever_they_cost() -> None:
    s = OfferSchedule(every=5, budget=0.0)  # cluster.replica_budget: null
    for _ in range(10):
        s.observe_step(0.001)
    s.observe_offer(10.0)
    assert s.interval() == 5 and s.due(10) and not s.due(11)


@pytest.mark.parametrize("budget, ok", [(None, True), (0.02, True), (0.5, True), (0, False), (1, False), (-0.1, False),
                                        (float("nan"), False)])
def test_replica_budget_is_checked_when_the_spec_loads(budget: object, ok: bool) -> None:
    from spotwise.config import spec_from_dict
    from spotwise.errors import InputError

    d = {"name": "b", "workload": {"name": "mlp-digits"}, "target": {"iterations": 4},
         "cluster": {"instance_type": "c5.xlarge", "data_plane": "collective", "replica_budget": budget}}
    if ok:
        assert spec_from_dict(d).cluster.replica_budget == budget
    else:
        with pytest.raises(InputError, match="replica_budget"):
            spec_from_dict(d)


def test_chunks_of_a_buffer_the_next_offer_reuses_are_copies_taken_under_the_lock() -> None:
    """A GPU's pinned host buffers are reused by the next offer: a chunk of such an offer must not be a
    view Ray serialises after the lock is released (a torn replica); stable buffers are served as views."""
    store = dist.HashStore()
    offers = ReplicaOffers(torch.device("cpu"), lambda: store)
    vec = torch.arange(16, dtype=torch.float32)
    offers.offer({"step": 1}, vec, {"m": torch.ones(4)}, wait=True)
    head = json.loads(store.queue_pop("replicas"))
    h, v, extra, _ = offers._outbox[head["token"]]
    view = offers.take(head["token"], 0, 16)
    assert view.base is not None  # stable: a view of the state
    offers._outbox[head["token"]] = (h, v, extra, False)  # as a GPU's periodic offer is
    chunk = offers.take(head["token"], 16, 16)
    vec.fill_(-1.0)  # the next offer overwrites the buffer
    assert chunk.base is None and torch.equal(torch.frombuffer(bytearray(chunk), dtype=torch.float32),
                                              torch.arange(4, 8, dtype=torch.float32))
