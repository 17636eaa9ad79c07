"""``gpt-bytes``: a nanoGPT-style decoder-only transformer language model over raw bytes.

The model is GPT-2's architecture (Radford et al., 2019, "Language Models are Unsupervised
Multitask Learners") as written in Karpathy's nanoGPT: token and learned position embeddings,
``n_layer`` pre-LayerNorm blocks of causal multi-head self-attention
(:func:`torch.nn.functional.scaled_dot_product_attention` with ``is_causal=True``) and a 4x GELU
MLP, a final LayerNorm and a language-model head tied to the token embedding.  Initialisation
follows GPT-2: N(0, 0.02) weights, zero biases, residual projections scaled by
``1/sqrt(2 * n_layer)``.  The vocabulary is the 256 byte values, so any file is a corpus.

Parameters (``workload.params``): ``n_layer`` (6), ``n_head`` (6), ``n_embd`` (384),
``block_size`` (128), ``dropout`` (0.0), ``stride`` (0 = ``block_size``: non-overlapping windows),
``test_fraction`` (0.1), ``max_eval`` (256; 0 = the whole test split), ``data_seed`` (0: the
built-in corpus), ``corpus_bytes`` (400000: the built-in corpus' size).  The defaults are a
~10.8M-parameter model; ``n_layer=8, n_embd=512`` is ~25M.

Data: ``workload.dataset`` names a file read as raw bytes through :class:`numpy.memmap` (a
multi-GB file is not loaded into memory).  Without a dataset, a built-in corpus of English-like
text generated deterministically from ``data_seed`` (a small vocabulary and grammar with
subject-verb agreement, so there is structure to learn at several scales) is built in memory.
The first ``1 - test_fraction`` of the bytes (by position) are the training split, the rest the
test split.  Sample ``i`` of a split is the window of ``block_size + 1`` bytes starting at
``i * stride``: ``x`` is its first ``block_size`` bytes and ``y`` the next-byte targets, both
int64.  The loss is the mean cross-entropy over every position; evaluation reports ``{"loss"}``
(nats per byte) on at most ``max_eval`` evenly spaced test windows, in chunks of 64.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from spotwise.errors import InputError
from spotwise.workloads.base import (
    Batch,
    IndexedDataset,
    Workload,
    as_index_array,
    evaluate_in_chunks,
    positive,
    read_params,
    seeded_factory,
)
from spotwise.workloads.memory import check_memory, gpt_bytes
from spotwise.workloads.vision import require_path

GPT_DEFAULTS: dict[str, Any] = {
    "n_layer": 6,
    "n_head": 6,
    "n_embd": 384,
    "block_size": 128,
    "dropout": 0.0,
    "stride": 0,
    "test_fraction": 0.1,
    "max_eval": 256,
    "data_seed": 0,
    "corpus_bytes": 400_000,
}

VOCAB = 256
#: evaluation chunk (windows per forward pass): bounds evaluation memory
EVAL_CHUNK = 64


# ------------------------------------------------------------------------------------------ model


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention (nanoGPT's ``CausalSelfAttention``) via fused SDPA."""

    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.dropout = dropout
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLPBlock(nn.Module):
    """The transformer's position-wise feed-forward network: ``n_embd -> 4 n_embd -> n_embd``, GELU."""

    def __init__(self, n_embd: int, dropout: float) -> None:
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    """A pre-LayerNorm transformer block: ``x + attn(ln(x))``, then ``x + mlp(ln(x))``."""

    def __init__(self, n_embd: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLPBlock(n_embd, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A decoder-only transformer LM (GPT-2, Radford et al. 2019; nanoGPT's layout), tied head.

    ``forward(idx)`` maps int64 tokens ``B x T`` (``T <= block_size``) to logits ``B x T x vocab``.
    """

    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, n_embd: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (Press & Wolf, 2017), as GPT-2
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.block_size:
            raise ValueError(f"sequence of length {t} is longer than block_size {self.block_size}")
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def lm_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean next-byte cross-entropy over every position of every window; batch is ``(x, y)``."""
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


# ------------------------------------------------------------------------------------------- data

_SUBJECTS_SG = ["the cat", "a dog", "the old man", "my sister", "the teacher", "a small bird", "the farmer", "her friend",
                "the king", "a young girl", "the doctor", "this city", "the river", "our neighbour", "the captain"]
_SUBJECTS_PL = ["the cats", "two dogs", "the old men", "my sisters", "the teachers", "many birds", "the farmers", "her friends",
                "the kings", "young girls", "the doctors", "these cities", "the rivers", "our neighbours", "the sailors"]
_VERBS = [("sees", "see"), ("likes", "like"), ("finds", "find"), ("follows", "follow"), ("remembers", "remember"),
          ("watches", "watch"), ("helps", "help"), ("calls", "call"), ("carries", "carry"), ("visits", "visit"),
          ("paints", "paint"), ("answers", "answer")]
_INTRANS = [("sleeps", "sleep"), ("laughs", "laugh"), ("runs", "run"), ("waits", "wait"), ("sings", "sing"),
            ("works", "work"), ("falls", "fall"), ("listens", "listen")]
_OBJECTS = ["the house", "a letter", "the garden", "an apple", "the bridge", "a green boat", "the market", "the old tower",
            "a long road", "the window", "a quiet song", "the morning train", "the red door", "a warm fire", "the mountain"]
_ADVERBS = ["slowly", "quickly", "again", "every day", "in the morning", "at night", "without a word", "with great care",
            "for a while", "in silence"]
_PLACES = ["near the sea", "in the village", "under the bridge", "by the window", "on the hill", "in the garden",
           "at the market", "behind the house"]
_CONNECT = ["and then", "but", "because", "while", "so", "although"]
_SAYS = [("says", "say"), ("thinks", "think"), ("knows", "know"), ("hopes", "hope")]


def _pick(rng: np.random.Generator, seq: list[str]) -> str:
    return seq[int(rng.integers(len(seq)))]


def _clause(rng: np.random.Generator) -> str:
    plural = bool(rng.integers(2))
    subj = _pick(rng, _SUBJECTS_PL if plural else _SUBJECTS_SG)
    k = int(rng.integers(10))
    if k < 5:
        verb = _VERBS[int(rng.integers(len(_VERBS)))][int(plural)]
        out = f"{subj} {verb} {_pick(rng, _OBJECTS)}"
    elif k < 8:
        verb = _INTRANS[int(rng.integers(len(_INTRANS)))][int(plural)]
        out = f"{subj} {verb}"
    else:
        verb = _SAYS[int(rng.integers(len(_SAYS)))][int(plural)]
        inner = _VERBS[int(rng.integers(len(_VERBS)))][0]
        out = f"{subj} {verb} that {_pick(rng, _SUBJECTS_SG)} {inner} {_pick(rng, _OBJECTS)}"
    if rng.random() < 0.4:
        out += f" {_pick(rng, _ADVERBS)}"
    if rng.random() < 0.3:
        out += f" {_pick(rng, _PLACES)}"
    return out


def _sentence(rng: np.random.Generator) -> str:
    s = _clause(rng)
    if rng.random() < 0.35:
        s += f", {_pick(rng, _CONNECT)} {_clause(rng)}"
    return s[0].upper() + s[1:] + ("." if rng.random() < 0.9 else "!")


@functools.lru_cache(maxsize=4)
def builtin_corpus(data_seed: int = 0, n_bytes: int = 400_000) -> bytes:
    """``n_bytes`` of English-like ASCII text generated deterministically from ``data_seed``.

    Paragraphs of 3-8 sentences from a small grammar (subject-verb agreement, objects, adverbs,
    place phrases, subordinate clauses), so a byte model can learn spelling, words and syntax.
    Cached per process (the default takes a fraction of a second to generate).
    """
    rng = np.random.default_rng([int(data_seed), 7])
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        para = " ".join(_sentence(rng) for _ in range(int(rng.integers(3, 9)))) + "\n\n"
        parts.append(para)
        size += len(para)
    return "".join(parts).encode("ascii")[:n_bytes]


class ByteWindows:
    """An :class:`~spotwise.workloads.base.IndexedDataset` of next-byte windows over a byte array.

    ``data`` is any 1-D uint8 array (a :class:`numpy.memmap` for a file: only the requested
    windows are read); sample ``i`` is ``data[start + i*stride : start + i*stride + block_size + 1]``
    split into ``(x, y)`` int64 tensors of length ``block_size``.  Windows lie in ``[start, end)``.
    """

    def __init__(self, data: np.ndarray, start: int, end: int, block_size: int, stride: int) -> None:
        self.data = data
        self.start = int(start)
        self.end = int(end)
        self.block_size = int(block_size)
        self.stride = int(stride)
        span = self.end - self.start
        self.n = 0 if span < block_size + 1 else (span - block_size - 1) // stride + 1

    def __len__(self) -> int:
        return self.n

    def batch(self, indices: np.ndarray) -> Batch:
        idx = as_index_array(indices, self.n)
        offs = self.start + idx * self.stride
        win = np.asarray(self.data[offs[:, None] + np.arange(self.block_size + 1)[None, :]], dtype=np.int64)
        t = torch.from_numpy(win)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous()


class _Subset:
    """The samples ``sel`` of ``inner`` as an IndexedDataset (used to cap evaluation cost)."""

    def __init__(self, inner: IndexedDataset, sel: np.ndarray) -> None:
        self.inner = inner
        self.sel = sel

    def __len__(self) -> int:
        return int(self.sel.size)

    def batch(self, indices: np.ndarray) -> Batch:
        return self.inner.batch(self.sel[as_index_array(indices, len(self))])


def evenly_spaced(n: int, m: int) -> np.ndarray:
    """At most ``m`` distinct indices of ``range(n)``, evenly spaced, first and last included (all if ``m <= 0``)."""
    if m <= 0 or m >= n:
        return np.arange(n, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, m).round().astype(np.int64))


def make_lm_evaluate(max_eval: int) -> Any:
    """``evaluate(model, dataset) -> {"loss"}``: mean next-byte cross-entropy (nats) over at most
    ``max_eval`` evenly spaced windows of ``dataset``, in chunks of :data:`EVAL_CHUNK`."""

    def per_batch(model: nn.Module, batch: Batch) -> dict[str, float]:
        return {"loss": float(lm_loss(model, batch))}

    def evaluate(model: nn.Module, dataset: IndexedDataset) -> dict[str, float]:
        sel = evenly_spaced(len(dataset), max_eval)
        return evaluate_in_chunks(model, _Subset(dataset, sel), per_batch, chunk=EVAL_CHUNK)

    return evaluate


def _open_corpus(dataset: str, workload: str) -> tuple[np.ndarray, str]:
    path = require_path(dataset, workload, "a text file (read as raw bytes)")
    if not path.is_file():
        raise InputError(f"{str(path)!r} is not a file", "point workload.dataset at one text file (its raw bytes are the corpus)", "workload.dataset")
    if path.stat().st_size == 0:
        raise InputError(f"{str(path)!r} is empty", "point workload.dataset at a non-empty text file", "workload.dataset")
    try:
        data = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read {str(path)!r}: {e}", "check the file's permissions", "workload.dataset") from None
    return data, str(path)


def make_gpt_bytes(spec: Any, seed: int) -> Workload:
    """A nanoGPT-style byte-level GPT (Radford et al., 2019) on a text file or the built-in corpus.

    See the module docstring for parameters and data.  ``info`` holds ``n_train``, ``n_test``
    (windows), ``n_params``, ``n_bytes`` and ``source`` (the file, or ``"builtin"``).
    """
    p = read_params(spec.params, GPT_DEFAULTS, spec.name)
    for key, ex in (("n_layer", 6), ("n_head", 6), ("n_embd", 384), ("block_size", 128), ("corpus_bytes", 400_000)):
        positive(p[key], key, ex)
    if p["n_embd"] % p["n_head"]:
        raise InputError(f"n_embd {p['n_embd']} is not divisible by n_head {p['n_head']}", "use e.g. n_embd 384 with n_head 6", "workload.params.n_embd")
    if not 0.0 <= p["dropout"] < 1.0:
        raise InputError(f"must be in [0, 1), got {p['dropout']!r}", "use e.g. 0.0 or 0.1", "workload.params.dropout")
    if not 0.0 <= p["test_fraction"] < 1.0:
        raise InputError(f"must be in [0, 1), got {p['test_fraction']!r}", "use e.g. 0.1", "workload.params.test_fraction")
    if p["stride"] < 0 or p["max_eval"] < 0:
        key = "stride" if p["stride"] < 0 else "max_eval"
        raise InputError(f"must be >= 0, got {p[key]!r}", "use 0 for the default", f"workload.params.{key}")
    block, stride = int(p["block_size"]), int(p["stride"] or p["block_size"])
    check_memory(gpt_bytes(p, int(getattr(spec, "batch_size", 1) or 1), not spec.dataset), p,
                 ("n_layer", "n_embd", "block_size", "corpus_bytes"), spec.params, spec.name)

    if spec.dataset:
        data, source = _open_corpus(spec.dataset, spec.name)
    else:
        data, source = np.frombuffer(builtin_corpus(int(p["data_seed"]), int(p["corpus_bytes"])), dtype=np.uint8), "builtin"
    n_bytes = int(data.shape[0])
    split = n_bytes - int(round(n_bytes * float(p["test_fraction"])))
    train = ByteWindows(data, 0, split, block, stride)
    test: ByteWindows | None = ByteWindows(data, split, n_bytes, block, stride) if split < n_bytes else None
    if len(train) == 0:
        raise InputError(
            f"the training split has {split} bytes, fewer than block_size + 1 = {block + 1}",
            "use a larger corpus or a smaller block_size",
            "workload.dataset" if spec.dataset else "workload.params.corpus_bytes",
        )
    if test is not None and len(test) == 0:
        raise InputError(
            f"the test split has {n_bytes - split} bytes, fewer than block_size + 1 = {block + 1}",
            "raise test_fraction, use a larger corpus, or set test_fraction to 0",
            "workload.params.test_fraction",
        )

    def make() -> nn.Module:
        return GPT(VOCAB, block, int(p["n_layer"]), int(p["n_head"]), int(p["n_embd"]), float(p["dropout"]))

    with torch.device("meta"):  # count without allocating or touching any RNG
        n_params = sum(t.numel() for t in make().parameters())  # tied head counted once
    return Workload(
        name=spec.name,
        family=spec.family,
        build_model=seeded_factory(make, seed),
        loss=lm_loss,
        train=train,
        test=test,
        metric_name="loss",
        evaluate=make_lm_evaluate(int(p["max_eval"])),
        info={
            "n_train": len(train),
            "n_test": len(test) if test is not None else 0,
            "n_params": int(n_params),
            "n_bytes": n_bytes,
            "source": source,
            "block_size": block,
            "tokens_per_sample": block,  # next-byte targets a window trains on (target.tokens)
            "stride": stride,
        },
    )
