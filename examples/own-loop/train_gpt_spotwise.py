"""A nanoGPT-style training script: a byte-level GPT, AdamW with decay / no-decay groups, bf16
autocast, gradient accumulation, a warmup + cosine schedule, an eval loop, wandb-style logging and
checkpoints.  This is the script as a user brings it; ``train_gpt_spotwise.py`` beside it is the
same script converted to spotwise.elastic (``diff train_gpt.py train_gpt_spotwise.py``: 10 lines),
which ``spotwise run examples/own-loop/gpt.yaml`` trains on spot capacity.

Run on its own: ``python examples/own-loop/train_gpt.py --max-iters 50``.
"""

import argparse
import json
import math
import os
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
import spotwise.elastic as sw

# ----------------------------------------------------------------------------- config
p = argparse.ArgumentParser()
p.add_argument("--n-layer", type=int, default=2)
p.add_argument("--n-head", type=int, default=2)
p.add_argument("--n-embd", type=int, default=64)
p.add_argument("--block-size", type=int, default=32)
p.add_argument("--batch-size", type=int, default=8)
p.add_argument("--grad-accum", type=int, default=2)
p.add_argument("--lr", type=float, default=3e-3)
p.add_argument("--min-lr", type=float, default=3e-4)
p.add_argument("--warmup-iters", type=int, default=10)
p.add_argument("--max-iters", type=int, default=200)
p.add_argument("--weight-decay", type=float, default=0.1)
p.add_argument("--grad-clip", type=float, default=1.0)
p.add_argument("--eval-interval", type=int, default=25)
p.add_argument("--eval-iters", type=int, default=4)
p.add_argument("--log-interval", type=int, default=5)
p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
p.add_argument("--compile", action="store_true")
p.add_argument("--out-dir", default="out-gpt")
p.add_argument("--seed", type=int, default=1337)
p.add_argument("--log-file", default=None, help="wandb-style metrics as JSON lines (default: out-dir/log.jsonl)")
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
ctx = torch.autocast(device_type=device_type, dtype=ptdtype) if args.dtype != "float32" else torch.autocast(
    device_type=device_type, enabled=False)
torch.manual_seed(args.seed)
master_process = True
job = sw.init()


# ----------------------------------------------------------------------------- data
def make_corpus(n_bytes: int = 60_000, seed: int = 0) -> torch.Tensor:
    """A deterministic byte corpus: sentences drawn from a small grammar (stands in for a text file)."""
    g = torch.Generator().manual_seed(seed)
    subjects = ["the model", "a worker", "the market", "spot capacity", "the planner", "every member"]
    verbs = ["trains", "commits", "revokes", "prices", "averages", "resumes"]
    objects = ["the step", "a gradient", "the replica", "its samples", "the deadline", "the budget"]
    out = []
    size = 0
    while size < n_bytes:
        s = " ".join(w[int(torch.randint(len(w), (1,), generator=g))] for w in (subjects, verbs, objects)) + ". "
        out.append(s)
        size += len(s)
    return torch.tensor(list("".join(out).encode()[:n_bytes]), dtype=torch.long)


class Windows(Dataset):
    """Non-overlapping windows of ``block_size + 1`` bytes: (input, next-byte targets)."""

    def __init__(self, data: torch.Tensor, block_size: int) -> None:
        self.data, self.block = data, block_size

    def __len__(self) -> int:
        return (len(self.data) - 1) // self.block

    def __getitem__(self, i: int):
        chunk = self.data[i * self.block: i * self.block + self.block + 1]
        return chunk[:-1], chunk[1:]


corpus = make_corpus()
split = int(0.9 * len(corpus))
train_ds, val_ds = Windows(corpus[:split], args.block_size), Windows(corpus[split:], args.block_size)


# ----------------------------------------------------------------------------- model
@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int = 256
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)
        self.n_head, self.dropout = c.n_head, c.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(c.n_embd), CausalSelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.n_embd)
        self.mlp = nn.Sequential(nn.Linear(c.n_embd, 4 * c.n_embd), nn.GELU(), nn.Linear(4 * c.n_embd, c.n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.config = c
        self.wte, self.wpe = nn.Embedding(c.vocab_size, c.n_embd), nn.Embedding(c.block_size, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)

    def _init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def configure_optimizers(self, weight_decay: float, lr: float, betas: tuple[float, float]):
        params = [q for q in self.parameters() if q.requires_grad]
        decay = [q for q in params if q.dim() >= 2]  # matrices and embeddings decay
        no_decay = [q for q in params if q.dim() < 2]  # biases and norms do not
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=lr, betas=betas)


def get_lr(it: int) -> float:
    """Linear warmup, then cosine decay to min_lr at max_iters."""
    if it < args.warmup_iters:
        return args.lr * (it + 1) / (args.warmup_iters + 1)
    if it > args.max_iters:
        return args.min_lr
    ratio = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.lr - args.min_lr)


def log(metrics: dict) -> None:
    """wandb.log-style: one JSON line per call."""
    job.log(metrics)


config = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd)
model = GPT(config)
model = job.model(model.to(device))
scaler = torch.amp.GradScaler(device_type, enabled=(args.dtype == "float16"))
optimizer = job.optimizer(model.configure_optimizers(args.weight_decay, args.lr, (0.9, 0.95)), scaler=scaler)
if args.compile:
    model = torch.compile(model)
os.makedirs(args.out_dir, exist_ok=True)


@torch.no_grad()
def estimate_loss() -> dict:
    out = {}
    model.eval()
    for name, ds in (("train", train_ds), ("val", val_ds)):
        loader = DataLoader(ds, batch_size=args.batch_size, shuffle=False)
        losses = []
        for k, (X, Y) in enumerate(loader):
            if k >= args.eval_iters:
                break
            with ctx:
                _, loss = model(X.to(device), Y.to(device))
            losses.append(loss.item())
        out[name] = sum(losses) / len(losses)
    model.train()
    return out


# ----------------------------------------------------------------------------- training loop
train_loader = job.data(train_ds, batch_size=args.batch_size)


def batches():
    while True:
        yield from train_loader


train_iter = iter(train_loader)
iter_num, best_val_loss, t0 = 0, 1e9, time.time()
while iter_num < args.max_iters:
    lr = get_lr(iter_num := job.step)
    for group in optimizer.param_groups:
        group["lr"] = lr
    if iter_num % args.eval_interval == 0 and job.is_leader:
        losses = estimate_loss()
        log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": lr})
        if losses["val"] < best_val_loss:
            best_val_loss = losses["val"]
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "iter_num": iter_num},
                       os.path.join(args.out_dir, "ckpt.pt"))
    for micro_step in range(args.grad_accum):
        X, Y = next(train_iter)
        with ctx:
            logits, loss = model(X.to(device), Y.to(device))
            loss = loss / args.grad_accum
        job.backward(scaler.scale(loss))
    if args.grad_clip:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % args.log_interval == 0 and master_process:
        dt, t0 = time.time() - t0, time.time()
        log({"iter": iter_num, "loss": loss.item() * args.grad_accum, "lr": lr, "ms": dt * 1000})
    iter_num += 1
