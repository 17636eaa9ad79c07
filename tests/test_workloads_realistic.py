"""The realistic built-in workloads (issue 28 item 5): ``resnet18-cifar`` and ``gpt-bytes``.

Tiny widths and layer counts keep every test fast; the full-size models are only built (to
count their parameters), never trained.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spotwise.config import BUILTIN_WORKLOADS, WorkloadSpec
from spotwise.errors import InputError
from spotwise.spec.load import build
from spotwise.workloads import IndexedDataset, Workload, flat_params, make_workload, num_params, workload_names
from spotwise.workloads.gpt import builtin_corpus, evenly_spaced
from spotwise.workloads.resnet import SyntheticCifar


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models gain nothing from intra-op threads, and lose a lot on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def wspec(name: str, dataset: str | None = None, **params: Any) -> WorkloadSpec:
    data: dict[str, Any] = {"name": name, "params": params}
    if dataset is not None:
        data["dataset"] = dataset
    return build(WorkloadSpec, data, "workload")


TINY_RESNET: dict[str, Any] = {"width": 8, "blocks": [1, 1, 1, 1], "n_train": 512, "n_test": 128}
TINY_GPT: dict[str, Any] = {"n_layer": 2, "n_head": 4, "n_embd": 64, "block_size": 64, "max_eval": 64}


def test_registered_and_configured() -> None:
    for name in ("resnet18-cifar", "gpt-bytes"):
        assert name in BUILTIN_WORKLOADS and name in workload_names()


# ----------------------------------------------------------------------------------- ResNet-18


def test_resnet_shapes_info_and_batchnorm() -> None:
    wl = make_workload(wspec("resnet18-cifar", **TINY_RESNET), 0)
    assert isinstance(wl.train, IndexedDataset) and isinstance(wl.test, IndexedDataset)
    assert (len(wl.train), len(wl.test)) == (512, 128)
    assert wl.metric_name == "accuracy"
    x, y = wl.train.batch(np.arange(10))
    assert x.shape == (10, 3, 32, 32) and x.dtype == torch.float32
    assert y.shape == (10,) and y.dtype == torch.int64 and 0 <= int(y.min()) and int(y.max()) < 10
    model = wl.build_model()
    assert wl.info["n_params"] == num_params(model)
    assert wl.info["source"] == "synthetic" and wl.info["n_train"] == 512 and wl.info["n_test"] == 128
    buffers = dict(model.named_buffers())
    assert any(k.endswith("running_mean") for k in buffers) and any(k.endswith("running_var") for k in buffers)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    loss = wl.loss(model, (x, y))
    assert loss.dim() == 0 and torch.isfinite(loss)
    res = wl.evaluate(model, wl.test)
    assert set(res) >= {"loss", "accuracy"} and all(np.isfinite(v) for v in res.values())
    assert model.training


def test_resnet_is_deterministic_and_pure() -> None:
    spec = wspec("resnet18-cifar", **TINY_RESNET)
    a, b = make_workload(spec, 3), make_workload(spec, 3)
    state = torch.random.get_rng_state()
    pa = flat_params(a.build_model())
    assert torch.equal(torch.random.get_rng_state(), state)  # building leaves the global RNG alone
    assert torch.equal(pa, flat_params(a.build_model())) and torch.equal(pa, flat_params(b.build_model()))
    assert not torch.equal(pa, flat_params(make_workload(spec, 4).build_model()))
    idx = np.array([7, 3, 3, 0, 511])
    xa, ya = a.train.batch(idx)
    xb, yb = b.train.batch(idx)
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert torch.equal(xa[1], xa[2])  # repeats are the same sample
    # a sample does not depend on the batch it is in, nor on the dataset size (lazy, per index)
    x7, _ = a.train.batch(np.array([7]))
    assert torch.equal(x7[0], xa[0])
    big = make_workload(wspec("resnet18-cifar", **{**TINY_RESNET, "n_train": 1_000_000}), 3)
    assert len(big.train) == 1_000_000
    assert torch.equal(big.train.batch(idx)[0], xa)
    assert big.train.batch(np.array([999_999]))[0].shape == (1, 3, 32, 32)
    # train and test are different streams; data_seed changes the data
    assert not torch.equal(a.test.batch(idx[:3])[0], xa[:3])
    other = make_workload(wspec("resnet18-cifar", **{**TINY_RESNET, "data_seed": 1}), 3)
    assert not torch.equal(other.train.batch(idx)[0], xa)
    with pytest.raises(IndexError):
        a.train.batch(np.array([512]))


def test_synthetic_cifar_holds_no_per_sample_state() -> None:
    wl = make_workload(wspec("resnet18-cifar", **{**TINY_RESNET, "n_train": 10_000_000}), 0)
    assert isinstance(wl.train, SyntheticCifar)
    assert len(pickle.dumps(wl.train)) < 200_000  # the ten templates, nothing per sample
    _, y = wl.train.batch(np.arange(2000))
    counts = np.bincount(y.numpy(), minlength=10)
    assert counts.min() > 120  # labels roughly balanced


def test_synthetic_cifar_is_learnable() -> None:
    wl = make_workload(wspec("resnet18-cifar", **{**TINY_RESNET, "noise": 0.5}), 0)
    model = wl.build_model()
    before = wl.evaluate(model, wl.train)
    x_all, y_all = wl.train.batch(np.arange(len(wl.train)))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    rng = np.random.default_rng(1)
    for _ in range(30):
        idx = torch.from_numpy(rng.integers(0, len(wl.train), 32))
        opt.zero_grad()
        wl.loss(model, (x_all[idx], y_all[idx])).backward()
        opt.step()
    # After only 30 steps BatchNorm's running statistics (momentum 0.1) still lag the weights, so
    # recompute them exactly over the training set first ("precise BN"), then evaluate in eval mode.
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # cumulative average
    with torch.no_grad():
        for chunk in torch.arange(len(wl.train)).split(128):
            model(x_all[chunk])
    after = wl.evaluate(model, wl.train)
    assert after["accuracy"] > 0.3, (before, after)  # chance is 0.10 (measured: 0.51)
    assert after["loss"] < before["loss"]


def test_resnet18_full_width_parameter_count() -> None:
    wl = make_workload(wspec("resnet18-cifar"), 0)
    assert wl.info["n_train"] == 50_000 and wl.info["n_test"] == 10_000
    n = wl.info["n_params"]
    assert 10_000_000 < n < 12_000_000 and n == 11_173_962  # the standard CIFAR ResNet-18
    assert num_params(wl.build_model()) == n


def _write_cifar(folder: Path, n: int = 20) -> None:
    rng = np.random.default_rng(0)
    for name in ("data_batch_1", "test_batch"):
        d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": rng.integers(0, 10, n).tolist()}
        with open(folder / name, "wb") as f:
            pickle.dump(d, f)


def test_resnet_reads_real_cifar_batches(tmp_path: Path) -> None:
    _write_cifar(tmp_path)
    wl = make_workload(wspec("resnet18-cifar", dataset=str(tmp_path), width=8, n_test=5), 0)
    assert (len(wl.train), len(wl.test)) == (20, 5) and wl.info["source"] == str(tmp_path)
    x, y = wl.train.batch(np.arange(4))
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.dtype == torch.int64
    with pytest.raises(InputError):
        make_workload(wspec("resnet18-cifar", dataset=str(tmp_path / "missing")), 0)


@pytest.mark.parametrize("params", [{"width": 0}, {"blocks": []}, {"blocks": [2, 0]}, {"n_train": 0}, {"noise": -1.0}, {"depth": 3}])
def test_resnet_bad_params(params: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        make_workload(wspec("resnet18-cifar", **params), 0)


# ------------------------------------------------------------------------------------- GPT bytes


@pytest.fixture(scope="module")
def gpt() -> Workload:
    return make_workload(wspec("gpt-bytes", **TINY_GPT), 0)


def test_builtin_corpus_is_deterministic_english_like() -> None:
    a = builtin_corpus(0, 50_000)
    assert a == builtin_corpus(0, 50_000) and len(a) == 50_000
    assert a != builtin_corpus(1, 50_000)
    text = a.decode("ascii")
    assert text.count(" the ") > 500 and "." in text and "\n\n" in text


def test_gpt_shapes_and_windows(gpt: Workload) -> None:
    assert gpt.metric_name == "loss" and gpt.info["source"] == "builtin"
    n_bytes, block = gpt.info["n_bytes"], 64
    split = n_bytes - round(n_bytes * 0.1)
    assert len(gpt.train) == (split - block - 1) // block + 1
    assert len(gpt.test) == (n_bytes - split - block - 1) // block + 1
    x, y = gpt.train.batch(np.array([0, 2, 2]))
    assert x.shape == y.shape == (3, 64) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one byte
    corpus = np.frombuffer(builtin_corpus(0, 400_000), dtype=np.uint8)
    assert np.array_equal(x[1].numpy(), corpus[128:192]) and np.array_equal(y[1].numpy(), corpus[129:193])
    tx, _ = gpt.test.batch(np.array([0]))
    assert np.array_equal(tx[0].numpy(), corpus[split:split + 64])  # the test split is the corpus' tail
    model = gpt.build_model()
    assert gpt.info["n_params"] == num_params(model)
    assert model.lm_head.weight is model.wte.weight  # tied head
    assert model(x).shape == (3, 64, 256)


def test_gpt_is_deterministic(gpt: Workload) -> None:
    state = torch.random.get_rng_state()
    p = flat_params(gpt.build_model())
    assert torch.equal(torch.random.get_rng_state(), state)
    again = make_workload(wspec("gpt-bytes", **TINY_GPT), 0)
    assert torch.equal(p, flat_params(again.build_model()))
    idx = np.array([5, 1, 5, len(gpt.train) - 1])
    for a, b in zip(gpt.train.batch(idx), again.train.batch(idx)):
        assert torch.equal(a, b)


def test_gpt_loss_starts_near_uniform_and_drops(gpt: Workload) -> None:
    model = gpt.build_model()
    init = gpt.evaluate(model, gpt.test)
    assert set(init) == {"loss"} and abs(init["loss"] - math.log(256)) < 0.1
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(25):
        opt.zero_grad()
        gpt.loss(model, gpt.train.batch(rng.integers(0, len(gpt.train), 16))).backward()
        opt.step()
    after = gpt.evaluate(model, gpt.test)
    assert after["loss"] < init["loss"] - 1.5, (init, after)  # byte unigram statistics alone are worth ~2.5 nats
    assert model.training


def test_gpt_evaluation_is_capped_and_evenly_spaced() -> None:
    assert list(evenly_spaced(10, 0)) == list(range(10))
    assert list(evenly_spaced(10, 20)) == list(range(10))
    sel = evenly_spaced(1000, 5)
    assert list(sel) == [0, 250, 500, 749, 999]

    class Counting:
        def __init__(self, inner: IndexedDataset) -> None:
            self.inner, self.seen = inner, 0

        def __len__(self) -> int:
            return len(self.inner)

        def batch(self, indices: np.ndarray) -> tuple[torch.Tensor, ...]:
            self.seen += len(indices)
            assert len(indices) <= 64  # evaluation chunks stay small
            return self.inner.batch(indices)

    wl = make_workload(wspec("gpt-bytes", **{**TINY_GPT, "max_eval": 100}), 0)
    counted = Counting(wl.test)
    wl.evaluate(wl.build_model(), counted)
    assert counted.seen == 100


def test_gpt_reads_a_memmapped_file(tmp_path: Path) -> None:
    text = ("hello spot instances, " * 400).encode()
    path = tmp_path / "corpus.txt"
    path.write_bytes(text)
    wl = make_workload(wspec("gpt-bytes", dataset=str(path), **{**TINY_GPT, "block_size": 32, "stride": 16, "test_fraction": 0.25}), 0)
    assert wl.info["source"] == str(path) and wl.info["n_bytes"] == len(text)
    assert isinstance(wl.train.data, np.memmap)  # type: ignore[attr-defined]
    split = len(text) - round(len(text) * 0.25)
    assert len(wl.train) == (split - 33) // 16 + 1
    x, y = wl.train.batch(np.array([3]))
    assert bytes(x[0].numpy().astype(np.uint8)) == text[48:80] and bytes(y[0].numpy().astype(np.uint8)) == text[49:81]
    res = wl.evaluate(wl.build_model(), wl.test)
    assert np.isfinite(res["loss"])


def test_gpt_dataset_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="workload.dataset"):
        make_workload(wspec("gpt-bytes", dataset=str(tmp_path / "nope.txt"), **TINY_GPT), 0)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        make_workload(wspec("gpt-bytes", dataset=str(empty), **TINY_GPT), 0)
    with pytest.raises(InputError, match="not a file"):
        make_workload(wspec("gpt-bytes", dataset=str(tmp_path), **TINY_GPT), 0)
    short = tmp_path / "short.txt"
    short.write_bytes(b"x" * 100)
    with pytest.raises(InputError, match="block_size"):
        make_workload(wspec("gpt-bytes", dataset=str(short), **TINY_GPT), 0)


@pytest.mark.parametrize(
    "params",
    [{"n_embd": 65}, {"n_layer": 0}, {"dropout": 1.0}, {"test_fraction": 1.0}, {"stride": -1}, {"vocab": 100}],
)
def test_gpt_bad_params(params: dict[str, Any]) -> None:
    with pytest.raises(InputError):
        make_workload(wspec("gpt-bytes", **{**TINY_GPT, **params}), 0)


def test_gpt_sizes() -> None:
    default = make_workload(wspec("gpt-bytes"), 0)
    assert 10_000_000 < default.info["n_params"] < 11_500_000  # 6 x 384: ~10.8M
    big = make_workload(wspec("gpt-bytes", n_layer=8, n_head=8, n_embd=512), 0)
    assert 24_000_000 < big.info["n_params"] < 27_000_000  # 8 x 512: ~25.4M (counted, not allocated)
