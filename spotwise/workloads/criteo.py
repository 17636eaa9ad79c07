"""``sparse-logreg``: sparse logistic regression on Criteo-style click data (papers/004, §5).

Features follow MLLess (``papers/004_9dc2adb66dc8d26e.txt``, "Datasets"): 13 integer features and
26 categorical features per sample; categoricals are mapped by the hashing trick into
``hash_buckets`` (default 10^5) buckets, numerics are log-transformed
(``sign(x) * log(1 + |x|)``, missing -> 0) and then standardised with the training split's mean
and standard deviation.

Model: ``p(click) = sigmoid(b + w_num . x_num + sum_f w_cat[h(f, v_f)])`` with ``w_cat`` an
``nn.EmbeddingBag(hash_buckets, 1, mode="sum", sparse=True)`` (its gradient is a sparse tensor
touching only the buckets in the batch) and the dense part an ``nn.Linear(13, 1)``.  Loss: mean
binary cross-entropy (log loss).  ``evaluate`` reports ``loss``, ``accuracy`` (threshold 0.5) and
``auc``.

Data: without ``workload.dataset``, a seeded generator (``n_samples``, default 20,000) draws
Criteo-like samples -- per-field cardinalities from 10 to 10^4 with Zipf-like value popularity,
log-normal counts with missing values -- and labels from a hidden sparse logistic model over the
same hashed features, so the task is learnable.  With ``workload.dataset`` = a Criteo TSV file
(``label<TAB>I1..I13<TAB>C1..C26``; integers and categoricals may be empty, categoricals are
hex strings; ``.gz`` accepted; a folder means its ``train.txt``) the rows are loaded (at most
``max_rows`` if > 0) and split with a seeded permutation (``test_fraction``, default 0.2).

Hashing is a fixed 64-bit mix of (field, value) -- not Python's salted ``hash`` -- so every
process maps a feature to the same bucket.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from spotwise.errors import InputError
from spotwise.workloads.base import (
    Batch,
    IndexedDataset,
    TensorIndexedDataset,
    Workload,
    iter_chunks,
    positive,
    read_params,
    seeded_factory,
    seeded_split,
)
from spotwise.workloads.device import to_host
from spotwise.workloads.memory import check_memory, sparse_logreg_bytes

N_NUM = 13
N_CAT = 26
DEFAULTS: dict[str, Any] = {
    "n_samples": 20000,
    "hash_buckets": 100_000,
    "test_fraction": 0.2,
    "data_seed": 0,
    "max_rows": 0,
    "density": 0.3,  # generator: fraction of buckets with a non-zero hidden weight
    "init_std": 0.01,
}

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


def hash_features(values: np.ndarray, buckets: int) -> np.ndarray:
    """Bucket of each categorical value: ``values`` is int64 N x 26 (-1 = missing).

    A splitmix64 finaliser of ``value * phi + field``, reduced mod ``buckets``; each field's
    missing value has a bucket of its own (as in common Criteo pipelines).
    """
    v = np.asarray(values, dtype=np.int64)
    fields = np.arange(v.shape[1], dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        x = v.astype(np.uint64) * _M1 + (fields + np.uint64(1)) * _M3
        x ^= x >> np.uint64(30)
        x *= _M2
        x ^= x >> np.uint64(27)
        x *= _M3
        x ^= x >> np.uint64(31)
    return (x % np.uint64(buckets)).astype(np.int64)


def log_transform(counts: np.ndarray) -> np.ndarray:
    """``sign(x) log(1 + |x|)`` with NaN (missing) -> 0, as float32."""
    c = np.nan_to_num(np.asarray(counts, dtype=np.float64), nan=0.0)
    return (np.sign(c) * np.log1p(np.abs(c))).astype(np.float32)


def generate_criteo_like(n: int, buckets: int, seed: int, density: float = 0.3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Synthetic Criteo-like samples: (raw integer counts N x 13 with NaN missing, categorical ids N x 26 with -1 missing, labels N).

    Labels are Bernoulli draws from a hidden sparse logistic model over the log-transformed,
    standardised numerics and the hashed categoricals.
    """
    rng = np.random.default_rng(seed)
    # numerics: log-normal counts, 20 % missing
    mu = rng.uniform(0.0, 4.0, N_NUM)
    sig = rng.uniform(0.5, 1.5, N_NUM)
    counts = np.floor(np.exp(rng.normal(mu, sig, (n, N_NUM))))
    counts[rng.random((n, N_NUM)) < 0.2] = np.nan
    # categoricals: Zipf-like popularity over per-field vocabularies, 5 % missing
    cats = np.empty((n, N_CAT), dtype=np.int64)
    for f in range(N_CAT):
        card = int(round(10 ** rng.uniform(1, 4)))
        p = 1.0 / np.arange(1, card + 1) ** 1.1
        ids = rng.permutation(card * 97)[:card]  # arbitrary, sparse-looking ids like Criteo's hex values
        cats[:, f] = ids[rng.choice(card, size=n, p=p / p.sum())]
    cats[rng.random((n, N_CAT)) < 0.05] = -1
    # hidden sparse logistic model
    w_cat = rng.normal(0.0, 1.0, buckets) * (rng.random(buckets) < density)
    w_num = rng.normal(0.0, 0.5, N_NUM)
    x = log_transform(counts)
    x = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1.0)
    logit = -1.0 + x @ w_num + w_cat[hash_features(cats, buckets)].sum(axis=1)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    return counts, cats, y


#: the longest line of a Criteo TSV read (real ones are a few hundred characters)
MAX_LINE = 64 * 1024


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def load_criteo_tsv(path: str | Path, max_rows: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a Criteo display-ads TSV: returns (counts N x 13 float with NaN missing, categorical ids N x 26 int64 with -1 missing, labels N float32).

    Raises :class:`InputError` naming the file and line for a malformed row (wrong column count,
    a label other than 0/1, a non-integer count, a non-hex categorical).
    """
    path = Path(path)
    if path.is_dir():
        if not (path / "train.txt").is_file():
            raise InputError(f"folder {str(path)!r} has no train.txt", "point workload.dataset at the Criteo TSV file itself", "workload.dataset")
        path = path / "train.txt"
    labels: list[float] = []
    nums: list[list[float]] = []
    cats: list[list[int]] = []
    nan = float("nan")
    try:
        with _open_text(path) as fh:
            # bounded lines: a file without newlines (10 GB of NUL bytes) is refused, not read into one string
            for lineno, line in enumerate(iter(lambda: fh.readline(MAX_LINE + 1), ""), 1):
                if len(line) > MAX_LINE:
                    raise InputError(f"line longer than {MAX_LINE // 1024} KiB: not a Criteo TSV (binary, or a file of "
                                     "NUL bytes)", "use the Criteo display-ads TSV format (train.txt)", f"{path}:{lineno}")
                line = line.rstrip("\r\n")
                if not line:
                    continue
                cols = line.split("\t")
                where = f"{path}:{lineno}"
                if len(cols) != 1 + N_NUM + N_CAT:
                    raise InputError(
                        f"expected {1 + N_NUM + N_CAT} tab-separated columns (label, 13 integers, 26 categoricals), found {len(cols)}",
                        "use the Criteo display-ads TSV format (train.txt)",
                        where,
                    )
                if cols[0] not in ("0", "1"):
                    raise InputError(f"label must be 0 or 1, got {cols[0]!r}", "use the Criteo display-ads TSV format", where)
                try:
                    nums.append([float(int(c)) if c else nan for c in cols[1 : 1 + N_NUM]])
                except ValueError:
                    raise InputError("integer feature columns 2-14 must be integers or empty", "use the Criteo display-ads TSV format", where) from None
                try:
                    cats.append([int(c, 16) if c else -1 for c in cols[1 + N_NUM :]])
                except ValueError:
                    raise InputError("categorical columns 15-40 must be hex strings or empty", "use the Criteo display-ads TSV format", where) from None
                labels.append(float(cols[0]))
                if max_rows and len(labels) >= max_rows:
                    break
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise InputError(f"cannot read Criteo file: {e}", "check workload.dataset points at a readable Criteo TSV", str(path)) from None
    if not labels:
        raise InputError("no samples in the file", "check workload.dataset points at a non-empty Criteo TSV", str(path))
    return np.asarray(nums, dtype=np.float64), np.asarray(cats, dtype=np.int64), np.asarray(labels, dtype=np.float32)


class SparseLogReg(nn.Module):
    """``logit = linear(x_num) + sum over the 26 hashed buckets of w_cat[bucket]``."""

    def __init__(self, buckets: int, n_num: int = N_NUM, init_std: float = 0.01) -> None:
        super().__init__()
        self.cat = nn.EmbeddingBag(buckets, 1, mode="sum", sparse=True)
        nn.init.normal_(self.cat.weight, 0.0, init_std)
        self.num = nn.Linear(n_num, 1)

    def forward(self, x_num: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        return (self.num(x_num) + self.cat(buckets)).squeeze(-1)


def logreg_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean binary cross-entropy; ``batch = (x_num float N x 13, buckets int64 N x 26, y float N)``."""
    x, b, y = batch
    return nn.functional.binary_cross_entropy_with_logits(model(x, b), y)


def auc_score(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC via the Mann-Whitney rank statistic (ties get average ranks); NaN if one class is absent."""
    from scipy.stats import rankdata

    pos = labels > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def logreg_evaluate(model: nn.Module, dataset: IndexedDataset) -> dict[str, float]:
    """``loss`` (log loss), ``accuracy`` at threshold 0.5 and ``auc`` over the whole dataset."""
    n = len(dataset)
    if n == 0:
        raise InputError("cannot evaluate on an empty dataset", "provide a dataset with at least one sample")
    was = model.training
    model.eval()
    logits, ys = [], []
    try:
        with torch.no_grad():
            for idx in iter_chunks(n, 8192):
                x, b, y = dataset.batch(idx)
                logits.append(model(x, b))
                ys.append(y)
    finally:
        model.train(was)
    z, y = torch.cat(logits), torch.cat(ys)
    return {
        "loss": float(nn.functional.binary_cross_entropy_with_logits(z, y)),
        "accuracy": float(((z > 0).float() == y).float().mean()),
        "auc": auc_score(to_host(z), to_host(y)),
    }


def make_sparse_logreg(spec: Any, seed: int) -> Workload:
    """Build the ``sparse-logreg`` workload (see the module docstring)."""
    p = read_params(spec.params, DEFAULTS, spec.name)
    for key, ex in (("n_samples", 20000), ("hash_buckets", 100_000), ("init_std", 0.01)):
        positive(p[key], key, ex)
    if not 0.0 < p["density"] <= 1.0:
        raise InputError(f"must be in (0, 1], got {p['density']!r}", "use e.g. 0.3", "workload.params.density")
    buckets = p["hash_buckets"]
    check_memory(sparse_logreg_bytes(p, not spec.dataset), p, ("n_samples", "hash_buckets"), spec.params, spec.name)
    if spec.dataset:
        from spotwise.workloads.vision import require_path

        path = require_path(spec.dataset, spec.name, "a Criteo TSV file (label, 13 integers, 26 hex categoricals)")
        counts, cats, y = load_criteo_tsv(path, p["max_rows"])
        source = str(path)
    else:
        counts, cats, y = generate_criteo_like(p["n_samples"], buckets, p["data_seed"], p["density"])
        source = "generated (Criteo-like)"
    tr, te = seeded_split(len(y), p["test_fraction"], p["data_seed"])
    x = log_transform(counts)
    mean = x[tr].mean(0)
    std = x[tr].std(0)
    std[std == 0] = 1.0
    x = ((x - mean) / std).astype(np.float32)
    full = TensorIndexedDataset(torch.from_numpy(x), torch.from_numpy(hash_features(cats, buckets)), torch.from_numpy(y))
    init_std = p["init_std"]
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(lambda: SparseLogReg(buckets, N_NUM, init_std), seed),
        loss=logreg_loss,
        train=full.subset(tr),
        test=full.subset(te) if len(te) else None,
        metric_name="accuracy",
        evaluate=logreg_evaluate,
        sparse_grads=True,
        info={"n_train": len(tr), "n_test": len(te), "hash_buckets": buckets, "positive_rate": float(y.mean()), "source": source},
    )
