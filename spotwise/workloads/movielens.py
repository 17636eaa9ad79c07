"""``pmf``: probabilistic matrix factorisation on MovieLens-style ratings (papers/004, Table 1).

Model (Salakhutdinov & Mnih, PMF, cited as [32] in ``papers/004_9dc2adb66dc8d26e.txt``; rank
``r = 20`` as in MLLess Table 1), with user / item biases and a fixed global mean ``mu`` (the
training mean, a buffer, not trained)::

    r_hat(u, i) = mu + b_u + b_i + p_u . q_i

The PMF MAP objective with Gaussian priors, written per sample so that a mini-batch touches only
its own rows (its gradient stays sparse)::

    loss = mean_batch[(r_hat - r)^2] + l2 * mean_batch[|p_u|^2 + |q_i|^2 + b_u^2 + b_i^2]

Factors and biases are ``nn.Embedding(..., sparse=True)``, so their gradients are sparse tensors.
``evaluate`` reports ``loss`` (the objective) and ``rmse`` of predictions clipped to [1, 5].

Data: without ``workload.dataset`` a seeded generator draws ``n_ratings`` distinct (user, item)
pairs with Zipf (power-law) user activity and item popularity, ratings from a hidden rank
``true_rank`` model plus Gaussian noise, clipped to [1, 5].  With ``workload.dataset`` it reads
MovieLens ``ratings.csv`` (``userId,movieId,rating,timestamp`` with that header; ML-latest,
ML-20M) or ``u.data`` (tab-separated ``user item rating timestamp``, no header; ML-100K), or a
folder holding one of them; raw ids are remapped to dense indices ``0..n-1``.  Ratings are split
into train/test by a seeded permutation (``test_fraction``, default 0.2).

SGD step size: the loss is a batch mean, so one row's gradient is about ``(count in batch /
batch size)`` of its per-sample gradient, and plain SGD needs a large ``lr``: about ``B / 50``
for batch size ``B`` (``lr = 5`` for ``B = 256`` on the default generator; ``lr = 50`` diverges).
"""

from __future__ import annotations

import warnings
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
    evaluate_in_chunks,
    positive,
    read_params,
    seeded_factory,
    seeded_split,
)
from spotwise.workloads.memory import check_memory, pmf_bytes

DEFAULTS: dict[str, Any] = {
    "n_users": 1000,
    "n_items": 1700,
    "n_ratings": 100_000,
    "rank": 20,
    "true_rank": 0,  # 0 = same as rank
    "noise": 0.5,
    "zipf": 0.8,  # exponent of the power-law popularity / activity
    "l2": 0.01,
    "init_std": 0.1,
    "test_fraction": 0.2,
    "data_seed": 0,
}


def generate_movielens_like(
    n_users: int, n_items: int, n_ratings: int, rank: int, seed: int, noise: float = 0.5, zipf: float = 0.8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user int64, item int64, rating float32) triples, pairs distinct, ratings in [1, 5].

    User activity and item popularity follow ``p(k) ~ 1 / k^zipf`` over a random ranking;
    ratings are ``3.5 + b_u + b_i + u . v + noise`` with factor entries scaled so ``u . v`` has
    standard deviation ~0.7.  At most ``n_users * n_items`` pairs exist; fewer may be returned
    when the popularity skew makes distinct pairs scarce.
    """
    rng = np.random.default_rng(seed)
    n_ratings = min(n_ratings, n_users * n_items)

    def powerlaw(n: int) -> np.ndarray:
        w = 1.0 / np.arange(1, n + 1) ** zipf
        return (w / w.sum())[rng.permutation(n)]

    pu, pi = powerlaw(n_users), powerlaw(n_items)
    keys = np.empty(0, dtype=np.int64)
    for _ in range(20):
        need = n_ratings - keys.size
        if need <= 0:
            break
        u = rng.choice(n_users, size=2 * need, p=pu)
        i = rng.choice(n_items, size=2 * need, p=pi)
        new = np.unique(u.astype(np.int64) * n_items + i)
        new = new[~np.isin(new, keys)]
        keys = np.concatenate([keys, rng.permutation(new)[:need]])
    keys = rng.permutation(keys)
    users, items = keys // n_items, keys % n_items
    s = (0.49 / rank) ** 0.25
    U = rng.normal(0.0, s, (n_users, rank))
    V = rng.normal(0.0, s, (n_items, rank))
    bu = rng.normal(0.0, 0.3, n_users)
    bi = rng.normal(0.0, 0.4, n_items)
    r = 3.5 + bu[users] + bi[items] + np.einsum("nk,nk->n", U[users], V[items]) + rng.normal(0.0, noise, users.size)
    return users, items, np.clip(r, 1.0, 5.0).astype(np.float32)


#: the longest first line a ratings file may have (a real one has tens of bytes; a 10 GB file of NUL bytes has no newline)
MAX_FIRST_LINE = 64 * 1024


def _first_line(path: Path) -> str:
    """The file's first line (at most :data:`MAX_FIRST_LINE` bytes read); InputError when it is longer."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(MAX_FIRST_LINE + 1)
    except OSError as e:
        raise InputError(f"cannot read ratings file: {e}", "check workload.dataset", str(path)) from None
    line, nl, _ = head.partition(b"\n")
    if not nl and len(head) > MAX_FIRST_LINE:
        raise InputError(f"the first line is longer than {MAX_FIRST_LINE // 1024} KiB: not a ratings file (binary, or a "
                         "file of NUL bytes)", "point workload.dataset at MovieLens ratings.csv or u.data", str(path))
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("the first line is not UTF-8 text: not a ratings file", "point workload.dataset at MovieLens "
                         "ratings.csv or u.data", str(path)) from None


def _loadtxt(path: Path, delimiter: str | None, skiprows: int, fix: str) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": reported below
            arr = np.loadtxt(path, delimiter=delimiter, skiprows=skiprows, usecols=(0, 1, 2), dtype=np.float64, ndmin=2)
    except (ValueError, IndexError) as e:
        raise InputError(f"malformed ratings file: {e}", fix, str(path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read ratings file: {e}", "check workload.dataset points at a readable file", str(path)) from None
    return arr


def load_movielens(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Read MovieLens ratings (``ratings.csv`` or ``u.data``, or a folder holding one).

    Returns ``(user_idx, item_idx, rating float32, info)`` where the indices are dense
    (``np.unique`` order of the raw ids) and ``info`` holds ``n_users``, ``n_items`` and the raw
    id arrays ``user_ids`` / ``item_ids`` (``raw = user_ids[idx]``).
    """
    path = Path(path)
    if path.is_dir():
        for name in ("ratings.csv", "u.data"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise InputError(f"folder {str(path)!r} holds neither ratings.csv nor u.data", "point workload.dataset at a MovieLens ratings file", "workload.dataset")
    first = _first_line(path)  # bounded: a file without newlines is refused before np.loadtxt reads it whole
    if path.suffix == ".csv":
        header = first.strip().lower().replace(" ", "")
        if not header.startswith("userid,movieid,rating"):
            raise InputError(
                f"first line must be the header 'userId,movieId,rating,timestamp', found {header[:60]!r}",
                "use MovieLens ratings.csv as distributed",
                str(path),
            )
        arr = _loadtxt(path, ",", 1, "each row must be 'userId,movieId,rating,timestamp' (MovieLens ratings.csv)")
    else:
        arr = _loadtxt(path, "\t", 0, "each row must be 'user<TAB>item<TAB>rating<TAB>timestamp' (MovieLens u.data)")
    if arr.shape[0] == 0:
        raise InputError("no ratings in the file", "check workload.dataset points at a non-empty ratings file", str(path))
    if not np.all(np.isfinite(arr)) or np.any(arr[:, :2] != np.round(arr[:, :2])):
        raise InputError("user and item ids must be integers and ratings finite numbers", "check the file is MovieLens ratings", str(path))
    user_ids, users = np.unique(arr[:, 0].astype(np.int64), return_inverse=True)
    item_ids, items = np.unique(arr[:, 1].astype(np.int64), return_inverse=True)
    info = {"n_users": len(user_ids), "n_items": len(item_ids), "user_ids": user_ids, "item_ids": item_ids, "source": str(path)}
    return users.astype(np.int64), items.astype(np.int64), arr[:, 2].astype(np.float32), info


class PMF(nn.Module):
    """Biased matrix factorisation with sparse embeddings; ``forward(u, i)`` predicts ratings."""

    def __init__(self, n_users: int, n_items: int, rank: int, mu: float, init_std: float = 0.1) -> None:
        super().__init__()
        self.user = nn.Embedding(n_users, rank, sparse=True)
        self.item = nn.Embedding(n_items, rank, sparse=True)
        self.user_bias = nn.Embedding(n_users, 1, sparse=True)
        self.item_bias = nn.Embedding(n_items, 1, sparse=True)
        nn.init.normal_(self.user.weight, 0.0, init_std)
        nn.init.normal_(self.item.weight, 0.0, init_std)
        nn.init.zeros_(self.user_bias.weight)
        nn.init.zeros_(self.item_bias.weight)
        self.register_buffer("mu", torch.tensor(float(mu)))

    def parts(self, u: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.user(u), self.item(i), self.user_bias(u).squeeze(-1), self.item_bias(i).squeeze(-1)

    def forward(self, u: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        p, q, bu, bi = self.parts(u, i)
        return self.mu + bu + bi + (p * q).sum(-1)


def make_pmf_loss(l2: float):
    """The per-sample PMF MAP objective (module docstring) as ``loss(model, (u, i, r))``."""

    def pmf_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
        u, i, r = batch
        p, q, bu, bi = model.parts(u, i)
        pred = model.mu + bu + bi + (p * q).sum(-1)
        reg = (p * p).sum(-1) + (q * q).sum(-1) + bu * bu + bi * bi
        return ((pred - r) ** 2).mean() + l2 * reg.mean()

    return pmf_loss


def make_pmf_evaluate(l2: float):
    loss_fn = make_pmf_loss(l2)

    def pmf_evaluate(model: nn.Module, dataset: IndexedDataset) -> dict[str, float]:
        """``loss`` (the objective) and ``rmse`` of predictions clipped to [1, 5]."""

        def per_batch(m: nn.Module, b: Batch) -> dict[str, float]:
            u, i, r = b
            err = m(u, i).clamp(1.0, 5.0) - r
            return {"loss": float(loss_fn(m, b)), "rmse_sse": float((err * err).sum())}

        return evaluate_in_chunks(model, dataset, per_batch, chunk=65536)

    return pmf_evaluate


def make_pmf(spec: Any, seed: int) -> Workload:
    """Build the ``pmf`` workload (see the module docstring)."""
    p = read_params(spec.params, DEFAULTS, spec.name)
    for key, ex in (("n_users", 1000), ("n_items", 1700), ("n_ratings", 100_000), ("rank", 20), ("init_std", 0.1), ("zipf", 0.8)):
        positive(p[key], key, ex)
    if p["l2"] < 0 or p["noise"] < 0:
        raise InputError("l2 and noise must be >= 0", "use e.g. l2: 0.01, noise: 0.5", "workload.params")
    if not spec.dataset:  # before allocating: n_users 1e8 is an exit 2 with the figure, not a MemoryError
        check_memory(pmf_bytes(p), p, ("n_users", "n_items", "n_ratings", "rank", "true_rank"), spec.params, spec.name)
    if spec.dataset:
        from spotwise.workloads.vision import require_path

        path = require_path(spec.dataset, spec.name, "a MovieLens ratings.csv or u.data file")
        users, items, ratings, info = load_movielens(path)
        n_users, n_items = info["n_users"], info["n_items"]
        info = {k: v for k, v in info.items() if k not in ("user_ids", "item_ids")}
    else:
        n_users, n_items = p["n_users"], p["n_items"]
        users, items, ratings = generate_movielens_like(
            n_users, n_items, p["n_ratings"], p["true_rank"] or p["rank"], p["data_seed"], p["noise"], p["zipf"]
        )
        info = {"n_users": n_users, "n_items": n_items, "source": "generated (MovieLens-like)"}
    tr, te = seeded_split(len(ratings), p["test_fraction"], p["data_seed"])
    mu = float(ratings[tr].mean()) if len(tr) else 3.5
    full = TensorIndexedDataset(torch.from_numpy(users), torch.from_numpy(items), torch.from_numpy(ratings))
    rank, init_std, l2 = p["rank"], p["init_std"], p["l2"]
    info.update({"n_train": len(tr), "n_test": len(te), "rank": rank, "mu": mu})
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(lambda: PMF(n_users, n_items, rank, mu, init_std), seed),
        loss=make_pmf_loss(l2),
        train=full.subset(tr),
        test=full.subset(te) if len(te) else None,
        metric_name="rmse",
        evaluate=make_pmf_evaluate(l2),
        sparse_grads=True,
        info=info,
    )
