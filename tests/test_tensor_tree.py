"""The packed state tree: a replica offer's extra state served from its tensors' own memory."""

from __future__ import annotations

import json
import math
import random
import struct
import zlib

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
    # the tensors are served from their own memory: a change shows in what is read next (a copy would
    # still decode), and as bytes that no longer match the checksum taken at pack(): an error, not a value
    big = torch.zeros(1000)
    q = pack({"m": big})
    before = q.tobytes()
    big[0] = 7.0
    assert q.tobytes() != before
    with pytest.raises(UnpackError, match="checksum"):
        unpack(q.tobytes())


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


def _forge(meta: dict, body: bytes = b"", *, raw_header: bytes | None = None) -> bytes:
    """A packed tree of the header ``meta`` (its ``crc`` that of ``body`` unless given) and the tensor
    bytes ``body``, with valid checksums: what is wrong in it is only what the test put there."""
    if raw_header is None:
        meta = {"crc": zlib.crc32(body), **meta} if isinstance(meta, dict) else meta
        raw_header = json.dumps(meta).encode()
    return MAGIC + struct.pack("<QI", len(raw_header), zlib.crc32(raw_header)) + raw_header + body


@pytest.mark.parametrize("data", [
    MAGIC,                                                                   # no header length
    MAGIC + struct.pack("<Q", 10**12),                                       # a header longer than the data
    _forge({}, raw_header=b"{x}"),                                            # not JSON
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
    # issue 54 item 9: what escaped as another exception or decoded to another value
    _forge({}, raw_header=b"[" * 200_000 + b"]" * 200_000),                  # a JSON depth bomb
    _forge({}, raw_header=b'{"tree": {"v": 1}, "tree": {"v": 2}, "sizes": [], "crc": 0}'),  # a header key twice
    _forge({}, raw_header=b'{"tree": {"v": 1, "v": 2}, "sizes": [], "crc": 0}'),            # a node key twice
    _forge({"tree": {"d": [[{"v": "a"}, {"v": 1}], [{"v": "a"}, {"v": 2}]]}, "sizes": []}),  # a mapping key twice
    _forge({"tree": {"d": [[{"u": [{"l": []}]}, {"v": 1}]]}, "sizes": []}),  # a tuple key holding a list
    _forge({"tree": {"d": [[{"u": [{"t": [0, "uint8", [1]]}]}, {"v": 1}]]}, "sizes": [1]}, b"\0"),  # a tensor in a key
    _forge({"tree": {"d": [[{"t": [0, "uint8", [1]]}, {"v": 1}]]}, "sizes": [1]}, b"\0"),  # a tensor key
    _forge({"tree": {"v": 1}, "sizes": [], "other": 1}),                     # a header key pack never writes
    _forge({"tree": {"t": [0, "uint8", [0, 2**62, 2**62]]}, "sizes": [0]}),   # a zero-size tensor too big to stride
    _forge({"tree": {"t": [0, "uint8", [1] * 65]}, "sizes": [1]}, b"\0"),    # too many dimensions
    _forge({"tree": {"t": [0, "float32", [2**62]]}, "sizes": [2**64]}),      # a huge size, no bytes
    _forge({"tree": {"l": [{"t": [0, "uint8", [1]]}, {"t": [1, "uint8", [1]]}]},
            "sizes": [2**63, 2 - 2**63]}, b"\0\0"),                           # sizes that overflow int64 to fit
    _forge({"tree": {"t": [0, "float32", [1]]}, "sizes": [5]}, b"\0" * 5),   # shape x itemsize != length
    _forge({"tree": {"t": [0, "uint8", [1.0]]}, "sizes": [1]}, b"\0"),       # a float dimension
    _forge({"tree": {"t": [0, "uint8", [True]]}, "sizes": [1]}, b"\0"),      # a bool dimension
    _forge({"tree": {"t": [True, "uint8", [1]]}, "sizes": [1]}, b"\0"),      # a bool index
    _forge({"tree": {"t": [0, ["uint8"], [1]]}, "sizes": [1]}, b"\0"),       # a dtype that is not a name
    _forge({}, raw_header=b'{"tree": {"v": 1}, "sizes": [NaN], "crc": 0}'),  # NaN in the header's numbers
    _forge({}, raw_header=b'{"tree": {"t": [0, "uint8", [NaN]]}, "sizes": [1], "crc": 1}'),
    _forge({}, raw_header=b'{"tree": {"v": 1}, "sizes": [], "crc": Infinity}'),
    _forge({}, raw_header=b'{"tree": {"v": 1}, "sizes": [1' + b"0" * 5000 + b'], "crc": 0}'),  # 5000 digits
    _forge({"tree": {"i": "1_000"}, "sizes": []}),                           # an integer pack never writes
    _forge({"tree": {"i": " 7"}, "sizes": []}),
    _forge({"tree": {"f": "1e999"}, "sizes": []}),                           # inf written another way
    _forge({"tree": {"f": "-nan"}, "sizes": []}),
    _forge({"tree": {"v": 1}, "sizes": []}, b"\0"),                          # bytes past the tensors
    _forge({"tree": {"t": [0, "uint8", [1]]}, "sizes": [1], "crc": 0}, b"\1"),  # tensor bytes not the checksum's
    _forge({"tree": {"v": 1}, "sizes": []})[:-1],                            # truncated
    b"SWTT1\n" + struct.pack("<Q", 2) + b"{}",                                # the old framing
])
def test_a_malformed_packed_tree_is_refused_not_guessed(data: bytes) -> None:
    with pytest.raises(UnpackError):
        unpack(data)
    with pytest.raises(UnpackError):
        decode(data)


@pytest.mark.parametrize("data", [b"", b"PK", b"PK\x03\x04" + b"\0" * 40, b"garbage", b"\x80\x04K\x01.",
                                  encode({"s": torch.eye(2).to_sparse()})[:-7]])
def test_bytes_that_are_no_packed_tree_nor_a_torch_save_file_raise_unpack_error(data: bytes) -> None:
    """decode() is total: the torch.save fallback's own failures (zip, unpickler) are UnpackError too."""
    with pytest.raises(UnpackError):
        decode(data)


def _same_tree(a, b) -> bool:
    """``a`` and ``b`` equal in structure, types and every value (tensors bit for bit, NaN equal NaN)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            a.contiguous().view(-1).view(torch.uint8).tolist() == b.contiguous().view(-1).view(torch.uint8).tolist() \
            if a.numel() else isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(type(k) is type(j) for k, j in zip(a, b)) and all(_same_tree(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_tree(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


FUZZ_TREE = {"int_buffers": {"n": torch.tensor(3)}, "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
             "e": torch.empty(0, 4), "flags": [True, None, "adamw"], "step": 12, "big": -(10**30),
             "lr": 3e-4, "nan": float("nan"), "neg0": -0.0, "inf": float("inf"), (1, "k"): (2.5, [torch.ones(2, dtype=torch.bool)]),
             7: {"h": torch.tensor([1, 2], dtype=torch.int16)}}


def test_the_fuzz_tree_round_trips() -> None:
    assert _same_tree(decode(encode(FUZZ_TREE)), FUZZ_TREE)


def _mutations():
    from hypothesis import strategies as st

    base = encode(FUZZ_TREE)
    head = len(MAGIC) + 12
    flip = st.tuples(st.just("flip"), st.integers(0, len(base) - 1), st.integers(0, 7))
    cut = st.tuples(st.just("cut"), st.integers(0, len(base) - 1), st.just(0))
    # the length fields: the header's length and checksum, and a size or a dimension inside the header
    length = st.tuples(st.just("len"), st.integers(len(MAGIC), head - 1), st.integers(0, 255))
    digit = st.tuples(st.just("digit"), st.integers(head, head + int.from_bytes(base[len(MAGIC):len(MAGIC) + 8], "little") - 1),
                      st.sampled_from(b"0123456789-.e,]}"))
    return base, st.lists(st.one_of(flip, cut, length, digit), min_size=1, max_size=4)


def test_a_mutated_encoding_decodes_to_the_original_or_raises_unpack_error() -> None:
    """Bit flips, truncations and edits of the length fields and the header's numbers: decode() returns the
    exact original tree or raises UnpackError -- no other exception, no other value."""
    from hypothesis import HealthCheck, given, settings

    base, strategy = _mutations()

    @settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def check(edits) -> None:
        data = bytearray(base)
        for kind, at, arg in edits:
            if at >= len(data):
                continue
            if kind == "flip":
                data[at] ^= 1 << arg
            elif kind == "cut":
                del data[at:]
            else:
                data[at] = arg
        try:
            out = decode(bytes(data))
        except UnpackError:
            return
        assert bytes(data) == base or _same_tree(out, FUZZ_TREE), edits

    check()


def test_without_the_checksums_a_changed_byte_would_be_another_value() -> None:
    """What the checksums are for: an edited string, integer or tensor byte in a well-formed tree decodes,
    to another value, unless the bytes are checked against the checksums taken when it was packed."""
    for change in ({"tree": {"v": "adamx"}, "sizes": []}, {"tree": {"i": "13"}, "sizes": []}):
        forged = _forge(change)
        assert decode(forged) in ("adamx", 13)  # a header with its own valid checksum is read as written
        good = bytearray(_forge({"tree": {"v": "adamw"} if "v" in change["tree"] else {"i": "12"}, "sizes": []}))
        i = good.index(b"adamw") + 4 if "v" in change["tree"] else good.index(b'"12"') + 2
        good[i] = forged[i]
        with pytest.raises(UnpackError, match="checksum"):
            decode(bytes(good))


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
