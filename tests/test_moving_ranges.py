"""Issue 41 item 3: what of a model moves between processes -- the parameters that require a gradient
and the float buffers (:attr:`FlatModel.moving`); frozen ones are every process's own."""

from __future__ import annotations

import torch
from torch import nn

from spotwise.training.state import FlatModel, moving_ranges


def lora_like() -> nn.Module:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.Linear(3, 3), nn.Linear(3, 2))
    m[0].requires_grad_(False)  # a frozen "backbone" first, a frozen middle layer, then trainable heads
    m[2].weight.requires_grad_(False)
    return m


def test_the_moving_ranges_skip_frozen_parameters_and_keep_the_buffers() -> None:
    fm = FlatModel(lora_like())
    # parameters: L0.w 12, L0.b 3 (frozen) | BN.w 3, BN.b 3 | L2.w 9 (frozen) | L2.b 3, L3.w 6, L3.b 2 | buffers 6
    assert fm.P == 41 and fm.B == 6
    assert fm.moving == ((15, 21), (30, 47))
    assert fm.M == 6 + 17
    assert moving_ranges(list(nn.Linear(2, 2).parameters()), 0) == ((0, 6),)
    whole = FlatModel(nn.Linear(2, 2))
    assert whole.M == whole.flat.numel() and whole.pack_moving().data_ptr() == whole.flat.data_ptr(), "no copy"


def test_pack_unpack_round_trip_and_the_frozen_fingerprint() -> None:
    a, b = FlatModel(lora_like()), FlatModel(lora_like())
    with torch.no_grad():
        a.flat.add_(torch.arange(a.flat.numel(), dtype=torch.float32))  # a differs everywhere
    assert not torch.equal(a.frozen_fingerprint(), b.frozen_fingerprint())
    frozen_b = b.flat.clone()
    b.unpack_moving(a.pack_moving())
    for lo, hi in a.moving:
        assert torch.equal(b.flat[lo:hi], a.flat[lo:hi])
    assert torch.equal(b.flat[:15], frozen_b[:15]) and torch.equal(b.flat[21:30], frozen_b[21:30]), "frozen kept"
    b.unpack_moving(a.flat.clone())  # the whole vector is taken whole
    assert torch.equal(b.flat, a.flat) and torch.equal(a.frozen_fingerprint(), b.frozen_fingerprint())
    try:
        b.unpack_moving(torch.zeros(5))
    except ValueError as e:
        assert "23 entries cannot take 5" in str(e)
    else:
        raise AssertionError("a vector of another size is refused")
