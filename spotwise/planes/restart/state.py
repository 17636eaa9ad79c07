"""What the coordinator keeps of a restart-mode job's model: nothing (the script keeps its own state)."""

from __future__ import annotations

import numpy as np

from spotwise.control.state import TrainingState


class RestartState(TrainingState):
    """The coordinator holds nothing of a restart-mode script's model: the script keeps its own state."""

    metric_name = None

    def __init__(self) -> None:
        self.params = np.zeros(1, dtype=np.float32)  # a placeholder (a checkpoint holds one float)
        self.n_train = 1

    @property
    def can_evaluate(self) -> bool:
        return False

    def apply(self, grad: np.ndarray, lr: float, contributions: int) -> None:
        raise RuntimeError("a restart-mode script applies its own steps")

    def evaluate(self) -> dict[str, float]:
        return {}
