"""A Hugging Face ``transformers`` Trainer script as people write them (a tiny GPT-2 on generated text),
knowing nothing of spotwise: run it with ``torchrun``; ``--output_dir`` holds its checkpoints and
``--resume`` continues from the newest one (``get_last_checkpoint``)."""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

p = argparse.ArgumentParser()
p.add_argument("--output_dir", required=True)
p.add_argument("--max_steps", type=int, default=1000)
p.add_argument("--save_steps", type=int, default=3)
p.add_argument("--resume", action="store_true")
args = p.parse_args()


class Text(torch.utils.data.Dataset):
    def __init__(self, n: int = 4096, length: int = 16) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 64, (n, length), generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.x[i], "labels": self.x[i]}


model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2))
targs = TrainingArguments(output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=4,
                          learning_rate=1e-3, save_steps=args.save_steps, save_total_limit=2, logging_steps=1,
                          report_to=[], disable_tqdm=True, use_cpu=True, ddp_backend="gloo",
                          dataloader_num_workers=0, seed=0)
trainer = Trainer(model=model, args=targs, train_dataset=Text())
last = get_last_checkpoint(args.output_dir) if args.resume else None
trainer.train(resume_from_checkpoint=last)
