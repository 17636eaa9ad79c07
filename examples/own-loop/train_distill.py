"""A second own-loop example: two optimizers (Muon for the hidden matrices, AdamW for the rest), a
frozen input embedding, an EMA "mean teacher" the student distils from (registered with
``job.state``, so it travels with regroups, replicas and checkpoints) and optional ``torch.compile``.

    spotwise run examples/own-loop/distill.yaml --out run        # on the emulated spot market
    python examples/own-loop/train_distill.py --epochs 1          # on its own

The task: classify sequences of 16 tokens by whether most of them come from the upper half of the
vocabulary (the frozen random embedding keeps the tokens apart; the rest is learnt).  The student
learns from the labels and from the teacher's softened predictions (KL, temperature 2); the teacher
is the exponential moving average of the student's weights, updated after every committed step.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

import spotwise.elastic as sw

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=16)
p.add_argument("--epochs", type=float, default=None, help="on its own: how long (under spotwise: the spec's target)")
p.add_argument("--report", action="store_true", help="on its own: print the accuracy of the first and last 20 steps")
p.add_argument("--muon-lr", type=float, default=0.02)
p.add_argument("--adamw-lr", type=float, default=3e-3)
p.add_argument("--ema", type=float, default=0.9)
p.add_argument("--distill", type=float, default=0.5, help="weight of the teacher's term in the loss")
p.add_argument("--compile", default=None, help="torch.compile the wrapped model with this backend (e.g. inductor)")
p.add_argument("--width", type=int, default=64)
args = p.parse_args()

VOCAB, LEN = 32, 16
g = torch.Generator().manual_seed(7)
tokens = torch.randint(VOCAB, (2048, LEN), generator=g)
labels = ((tokens >= VOCAB // 2).sum(dim=1) > LEN // 2).long()
train = torch.utils.data.TensorDataset(tokens, labels)


class Student(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.embed.weight.requires_grad_(False)  # frozen: never reduced, stepped or decayed
        self.pos = nn.Parameter(torch.zeros(LEN, width))
        self.mix = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos
        h = h + self.mix(h)
        return self.head(self.norm(h).mean(dim=1))


torch.manual_seed(0)
job = sw.init()
student = Student(args.width).to(job.device)
teacher = AveragedModel(student, multi_avg_fn=get_ema_multi_avg_fn(args.ema))
job.state("teacher", teacher)
model = job.model(student)
matrices = [q for n, q in student.named_parameters() if q.requires_grad and q.dim() == 2 and n.startswith("mix")]
rest = [q for n, q in student.named_parameters() if q.requires_grad and not (q.dim() == 2 and n.startswith("mix"))]
opt = job.optimizer(torch.optim.Muon(matrices, lr=args.muon_lr, weight_decay=0.0),
                    torch.optim.AdamW(rest, lr=args.adamw_lr, weight_decay=0.01))
forward = torch.compile(model, backend=args.compile) if args.compile else model
accs: list[float] = []

for x, y in job.data(train, batch_size=args.batch, epochs=args.epochs):
    x, y = x.to(job.device), y.to(job.device)
    logits = forward(x)
    with torch.no_grad():
        soft = F.softmax(teacher(x) / 2.0, dim=-1)
    loss = (1 - args.distill) * F.cross_entropy(logits, y) + \
        args.distill * 4.0 * F.kl_div(F.log_softmax(logits / 2.0, dim=-1), soft, reduction="batchmean")
    job.backward(loss)
    if opt.step():  # committed on every member: the teacher follows the student
        teacher.update_parameters(student)
    opt.zero_grad()
    acc = (logits.argmax(-1) == y).float().mean()
    job.log(loss=loss, acc=acc)
    accs.append(float(acc))
if args.report:
    print(f"accuracy: first 20 steps {sum(accs[:20]) / 20:.3f}, last 20 steps {sum(accs[-20:]) / 20:.3f}")
