"""The packed state tree: a replica offer's extra state served from its tensors' own memory."""

from __future__ import annotations

import json
import random
import struct

import pytest
import torch

from spotwise.training import tensor_tree
from spotwise.training.state import decode_extra, encode_extra
from spotwise.training.tensor_tree import MAGIC, UnpackError, decode, encode, pack, unpack


def adamw_state() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    model[0].weight.requires_grad_(False)
    opt = torch.optim.AdamW([{"params": [p for p in model.parameters() if p.requires_grad][:2], "weight_decay": 0.0},
                             {"params": [p for p in model.parameters() if p.requires_grad][2:], "lr": 3e-4}],
                            lr=1e-3, betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    model(torch.randn(8, 6)).square().mean().backward()
    opt.step()
    sched.step()
    return {"int_buffers": {"1.num_batches_tracked": model[1].num_batches_tracked.clone()},
            "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
            "scaler": {"scale": 65536.0, "growth_factor": 2.0, "_growth_tracker": 3, "enabled": True},
            "odd": [float("inf"), float("-inf"), None, "text", (1, 2), 10**30, -0.0],
            "dtypes": [torch.arange(4, dtype=torch.bfloat16), torch.tensor(3.5), torch.empty(0, 3),
                       torch.tensor([True, False]), torch.arange(6, dtype=torch.int32).reshape(2, 3)]}


def assert_same(a, b) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b and repr(a) == repr(b)


def test_an_optimizer_state_round_trips_exactly_and_loads_into_a_fresh_optimizer() -> None:
    state = adamw_state()
    p = pack(state)
    assert p is not None and p.header.startswith(MAGIC)
    back = unpack(p.tobytes())
    assert_same(state, back)
    assert list(back["optimizer"]["state"]) == [0, 1, 2, 3, 4]  # integer keys stay integers
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.95)
    # the tensors read back are writable, independent copies
    t = back["dtypes"][0]
    t += 1
    assert torch.equal(state["dtypes"][0], torch.arange(4, dtype=torch.bfloat16))
    # an optimizer accepts it
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    params = [p for i, p in enumerate(model.parameters()) if i != 0]
    opt = torch.optim.AdamW([{"params": params[:2]}, {"params": params[2:]}], lr=1e-3)
    opt.load_state_dict(back["optimizer"])
    assert opt.param_groups[1]["lr"] == state["optimizer"]["param_groups"][1]["lr"]


def test_read_serves_any_chunking_of_the_same_bytes_without_a_serialised_copy() -> None:
    state = adamw_state()
    p = pack(state)
    whole = p.tobytes()
    assert len(whole) == p.nbytes
    rng = random.Random(3)
    for _ in range(30):
        size = rng.randint(1, 97)
        got = b"".join(p.read(off, size) for off in range(0, p.nbytes, size))
        assert got == whole
    assert p.read(p.nbytes, 10) == b""
    # the tensors are served from their own memory: a change shows in what is read next
    big = torch.zeros(1000)
    q = pack({"m": big})
    big[0] = 7.0
    assert unpack(q.tobytes())["m"][0].item() == 7.0


def test_what_a_packed_tree_cannot_hold_falls_back_to_torch_save_read_without_pickle() -> None:
    sparse = {"s": torch.eye(3).to_sparse(), "n": 1}
    assert pack(sparse) is None
    data = encode(sparse)
    assert not data.startswith(MAGIC)
    back = decode(data)
    assert torch.equal(back["s"].to_dense(), torch.eye(3)) and back["n"] == 1

    class Obj:
        pass

    assert pack({"o": Obj()}) is None
    with pytest.raises(Exception):  # weights_only refuses an arbitrary object
        decode(encode({"o": Obj()}))


def test_the_extra_state_helpers_use_it() -> None:
    state = adamw_state()
    data = encode_extra(state)
    assert data.startswith(MAGIC)
    assert_same(decode_extra(data), state)
    assert decode_extra(b"") == {}
    with pytest.raises(ValueError):
        decode_extra(encode([1, 2]))


def _forge(meta: dict, body: bytes = b"") -> bytes:
    h = json.dumps(meta).encode()
    return MAGIC + struct.pack("<Q", len(h)) + h + body


@pytest.mark.parametrize("data", [
    MAGIC,                                                                   # no header length
    MAGIC + struct.pack("<Q", 10**12),                                       # a header longer than the data
    MAGIC + struct.pack("<Q", 3) + b"{x}",                                   # not JSON
    _forge({"tree": {"v": 1}}),                                              # no sizes
    _forge({"tree": {"t": [0, "float32", [2]]}, "sizes": [8]}, b"\0" * 4),   # fewer bytes than the sizes
    _forge({"tree": {"t": [0, "float32", [3]]}, "sizes": [8]}, b"\0" * 8),   # shape disagrees with the size
    _forge({"tree": {"t": [0, "object", [1]]}, "sizes": [8]}, b"\0" * 8),    # a dtype not allowed
    _forge({"tree": {"l": [{"t": [0, "uint8", [1]]}, {"t": [0, "uint8", [1]]}]}, "sizes": [1]}, b"\0"),  # used twice
    _forge({"tree": {"v": 1}, "sizes": [1]}, b"\0"),                         # a tensor nobody names
    _forge({"tree": {"t": [1, "uint8", [1]]}, "sizes": [1]}, b"\0"),         # an index out of range
    _forge({"tree": {"t": [0, "uint8", [-1]]}, "sizes": [1]}, b"\0"),        # a negative dimension
    _forge({"tree": {"x": 1}, "sizes": []}),                                 # an unknown node
    _forge({"tree": {"d": [[{"l": []}, {"v": 1}]]}, "sizes": []}),           # an unhashable key
    _forge({"tree": {"i": "1" * 500}, "sizes": []}),                         # an over-long integer
    _forge({"tree": {"sizes": [-1]}, "sizes": [-1]}),                        # a negative size
    _forge({"tree": json.loads("[" * 40 + "]" * 40), "sizes": []}),          # not a node
])
def test_a_malformed_packed_tree_is_refused_not_guessed(data: bytes) -> None:
    with pytest.raises(UnpackError):
        unpack(data)


def test_a_deep_tree_is_refused_on_both_sides() -> None:
    deep: list = []
    cur = deep
    for _ in range(tensor_tree.MAX_DEPTH + 5):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    assert pack(deep) is None  # encoded by torch.save instead
    node: dict = {"v": None}
    for _ in range(tensor_tree.MAX_DEPTH + 5):
        node = {"l": [node]}
    with pytest.raises(UnpackError):
        unpack(_forge({"tree": node, "sizes": []}))


def test_packed_decode_never_unpickles(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(adamw_state())

    def refuse(*a, **k):
        raise AssertionError("torch.load called for a packed tree")

    monkeypatch.setattr(torch, "load", refuse)
    decode(data)


def test_clone_tree_into_reuses_the_memory_of_a_same_shaped_snapshot_and_clones_otherwise() -> None:
    import torch

    from spotwise.training.tensor_tree import clone_tree_into

    live = {"state": {0: {"exp_avg": torch.ones(3), "step": torch.tensor(1.0)}}, "param_groups": [{"lr": 0.1}]}
    first = clone_tree_into(live)
    assert torch.equal(first["state"][0]["exp_avg"], live["state"][0]["exp_avg"])
    assert first["state"][0]["exp_avg"] is not live["state"][0]["exp_avg"]
    live["state"][0]["exp_avg"].mul_(2)
    live["param_groups"][0]["lr"] = 0.05
    again = clone_tree_into(live, first)
    assert again["state"][0]["exp_avg"] is first["state"][0]["exp_avg"], "the same memory, copied into"
    assert torch.equal(again["state"][0]["exp_avg"], torch.full((3,), 2.0)) and again["param_groups"][0]["lr"] == 0.05
    live["state"][1] = {"exp_avg": torch.zeros(2)}  # a new entry (an optimizer's first step for a parameter)
    grown = clone_tree_into(live, again)
    assert grown["state"][0]["exp_avg"] is not again["state"][0]["exp_avg"] and set(grown["state"]) == {0, 1}
    assert clone_tree_into([torch.ones(2)], [torch.ones(3)])[0].shape == (2,)  # another shape: cloned
