"""Several optimizers over parts of one model, from the spec (issue 41 item 3).

``workload.optimizer`` may be a list, each entry an optimizer of its own (any ``torch.optim`` class or
``module:Class``, its own ``lr`` and arguments) over the parameters its ``params`` selects::

    optimizer:
      - {name: Muon, params: matrices, lr: 0.02, momentum: 0.95}
      - {name: AdamW, params: rest, lr: 3.0e-4, weight_decay: 0.0}

``params`` (each trainable parameter goes to the first entry that selects it; frozen parameters to
none): ``matrices`` (weights of two or more dimensions that are not an ``nn.Embedding``'s),
``embeddings``, ``vectors`` (biases, norms: fewer than two dimensions), ``rest`` (everything no
earlier entry took), or a glob over parameter names (``"lm_head.*"``, ``"*.bias"``).  The same class
twice gives decay / no-decay groups (``{name: AdamW, params: matrices, weight_decay: 0.1}``, then
``{name: AdamW, params: rest, weight_decay: 0.0}``: AdamW's update is per parameter, so two
instances are one optimizer with two groups).

Each entry's ``lr`` (default ``workload.lr``) is its own base rate; the schedule multiplies every
group's base by the same factor (:class:`~spotwise.training.state.Updater`), so per-group rates keep
their ratios.  :class:`MultiOptimizer` steps them together and is what the runtime, the grad scaler
and checkpoints see (``state_dict``: ``{"optimizers": [...]}``).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from spotwise.errors import InputError
from spotwise.training.recipe import OptimizerSpec

#: the named selectors ``params`` takes (anything else is a glob over parameter names)
SELECTORS = ("matrices", "embeddings", "vectors", "rest")


@dataclass(frozen=True)
class OptimizerSet:
    """``workload.optimizer`` as a list (module docstring): the same interface as :class:`OptimizerSpec`."""

    parts: tuple[OptimizerSpec, ...]
    params: tuple[str, ...]

    @classmethod
    def parse(cls, data: list[Any], check: bool = True) -> "OptimizerSet":
        if not data:
            raise InputError("is an empty list", "give one optimizer, or a list of {name, params, ...}", "optimizer")
        parts, sels = [], []
        for i, entry in enumerate(data):
            if not isinstance(entry, dict):
                raise InputError(f"entry {i} is not a mapping ({entry!r})", "write e.g. {name: Muon, params: matrices}",
                                 f"optimizer[{i}]")
            d = dict(entry)
            sel = d.pop("params", None)
            if not isinstance(sel, str) or not sel.strip():
                raise InputError(f"entry {i} ({d.get('name')}) says no params", "add params: matrices | embeddings | "
                                 "vectors | rest | a glob over parameter names (e.g. 'lm_head.*')", f"optimizer[{i}].params")
            try:
                parts.append(OptimizerSpec.parse(d, check=check))
            except InputError as e:
                e.where = f"optimizer[{i}]" + (e.where[len("optimizer"):] if e.where and e.where.startswith("optimizer") else "")
                raise
            sels.append(sel.strip())
        if "rest" in sels[:-1]:
            raise InputError("params: rest takes every parameter no earlier entry took, so it must be the last entry",
                             "move the rest entry to the end of workload.optimizer", "optimizer")
        return cls(tuple(parts), tuple(sels))

    @property
    def name(self) -> str:
        return "+".join(p.name for p in self.parts)

    @property
    def lr(self) -> float | None:
        return None  # each entry has its own; workload.lr is the schedule's base

    @property
    def kwargs(self) -> dict[str, Any]:
        return {}

    def check(self) -> None:
        for p in self.parts:
            p.check()

    def first_step(self, device: Any = "cpu") -> None:
        for p in self.parts:
            p.first_step(device)

    def to_plain(self) -> list[dict[str, Any]]:
        return [{**p.to_plain(), "params": s} for p, s in zip(self.parts, self.params)]

    def build(self, params: Any, lr: float, model: Any = None) -> "MultiOptimizer":
        """The optimizers over ``model``'s trainable parameters, split by ``params`` (module docstring)."""
        if model is None:
            raise ValueError("several optimizers need the model to select their parameters")
        groups = split_parameters(model, self.params, self.parts)
        return MultiOptimizer([spec.build(ps, spec.lr if spec.lr is not None else lr)
                               for spec, ps in zip(self.parts, groups)], self.name)


def split_parameters(model: Any, selectors: tuple[str, ...], parts: tuple[OptimizerSpec, ...]) -> list[list[Any]]:
    """The trainable parameters of ``model`` for each selector, in order; each to the first that takes it."""
    import torch

    embedded = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    taken: set[int] = set()
    out: list[list[Any]] = []
    for i, sel in enumerate(selectors):
        mine = []
        for n, p in named:
            if id(p) in taken:
                continue
            if sel == "rest" or (sel == "matrices" and p.dim() >= 2 and id(p) not in embedded) or \
                    (sel == "embeddings" and id(p) in embedded) or (sel == "vectors" and p.dim() < 2) or \
                    (sel not in SELECTORS and fnmatch.fnmatchcase(n, sel)):
                mine.append(p)
                taken.add(id(p))
        if not mine:
            raise InputError(f"optimizer entry {i} ({parts[i].name}, params: {sel}) selects no trainable parameter of "
                             "this model", "change its params (matrices, embeddings, vectors, rest or a glob over "
                             f"names such as {named[0][0] if named else 'weight'!r}) or remove the entry",
                             f"workload.optimizer[{i}].params")
        out.append(mine)
    left = [n for n, p in named if id(p) not in taken]
    if left:
        raise InputError(f"{len(left)} trainable parameter(s) are in no optimizer's params (e.g. {', '.join(left[:3])})",
                         "add a last entry with params: rest", "workload.optimizer")
    return out


class MultiOptimizer:
    """Several ``torch.optim`` optimizers stepped as one (what the runtime and the grad scaler see)."""

    def __init__(self, optimizers: list[Any], name: str = "") -> None:
        self.optimizers = list(optimizers)
        self.name = name

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for o in self.optimizers for g in o.param_groups]

    @property
    def state(self) -> dict[Any, Any]:
        merged: dict[Any, Any] = {}
        for o in self.optimizers:
            merged.update(o.state)
        return merged

    def step(self, closure: Any = None) -> None:
        for o in self.optimizers:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.optimizers:
            o.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [o.state_dict() for o in self.optimizers]}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        sds = sd.get("optimizers") if isinstance(sd, dict) else None
        if not isinstance(sds, list) or len(sds) != len(self.optimizers):
            raise ValueError(f"the state holds {len(sds) if isinstance(sds, list) else 'no'} optimizers' state, "
                             f"this job has {len(self.optimizers)}")
        for o, s in zip(self.optimizers, sds):
            o.load_state_dict(s)


def parse_optimizer(data: Any) -> OptimizerSpec | OptimizerSet:
    """``workload.optimizer``: one optimizer (a name or a mapping) or a list of them."""
    if isinstance(data, list):
        return OptimizerSet.parse(data)
    return OptimizerSpec.parse(data)
