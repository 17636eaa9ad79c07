"""Metrics sinks: the run's events where users look besides ``events.jsonl`` (issue 41 item 6).

``outputs.sinks: [tensorboard]`` writes TensorBoard event files into ``OUT/tensorboard/`` as the
run goes (PyTorch's own ``torch.utils.tensorboard.SummaryWriter``; ``pip install tensorboard``):
per committed step the loss, learning rate, active workers, samples per step and the run's cost so
far, the held-out evaluation, every value a training script logged with ``job.log`` (under
``script/``), and the revocations and joins as running counts; the step is the x axis (TensorBoard
also shows wall time).  A sink is handed each event as it is written (:meth:`EventLog.add_sink`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


class TensorBoardSink:
    """Events as TensorBoard scalars (module docstring)."""

    def __init__(self, out_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = Path(out_dir) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self.step = 0
        self.revocations = 0
        self.joins = 0

    def write(self, e: dict[str, Any]) -> None:
        kind, w = e.get("kind"), self.writer
        if kind == "step" and _num(e.get("step")):
            self.step = int(e["step"])
            for key, tag in (("loss", "train/loss"), ("lr", "train/lr"), ("active", "workers/active"),
                             ("samples", "train/samples_per_step"), ("cost", "cost/usd"), ("t", "time/virtual_s")):
                if _num(e.get(key)):
                    w.add_scalar(tag, float(e[key]), self.step)
        elif kind == "metrics" and isinstance(e.get("values"), dict) and _num(e.get("step")):
            for k, v in e["values"].items():
                if _num(v):
                    w.add_scalar(f"script/{k}", float(v), int(e["step"]))
        elif kind == "eval" and _num(e.get("step")):
            for key in ("loss", "metric"):
                if _num(e.get(key)):
                    w.add_scalar(f"eval/{e.get('metric_name') or 'metric'}" if key == "metric" else "eval/loss",
                                 float(e[key]), int(e["step"]))
        elif kind == "revoke":
            self.revocations += 1
            w.add_scalar("workers/revocations", self.revocations, self.step)
        elif kind == "join":
            self.joins += 1
            w.add_scalar("workers/joins", self.joins, self.step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


def make_sinks(names: list[str], out_dir: str | Path) -> list[Any]:
    return [TensorBoardSink(out_dir) for n in names if n == "tensorboard"]
