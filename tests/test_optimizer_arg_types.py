"""Issue 54 item 9: an optimizer argument of the wrong type (``foreach: "yes"``) planned with exit 0 --
torch.optim takes any truthy value as true -- and ``betas: [0.9]`` escaped as an IndexError.  Every
argument is checked at load against the type the class's signature declares
(:mod:`spotwise.training.optim_args`), in the single and the list form."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from spotwise.config import spec_from_dict
from spotwise.errors import InputError

BASE: dict[str, Any] = {
    "name": "opt-types", "workload": {"name": "mlp-digits"}, "target": {"iterations": 5},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "bids": 0.17},
    "market": {"synthetic": {"kind": "uniform", "low": 0.03, "high": 0.15, "interval_s": 30, "duration_s": "1d"},
               "revocation": {"model": "bid"}},
}

BAD = [  # (optimizer, key, value): bool options, numbers, whole numbers, tuples, names
    ("AdamW", "foreach", "yes"), ("AdamW", "foreach", 1), ("AdamW", "amsgrad", "true"), ("SGD", "nesterov", 1),
    ("Adam", "maximize", 0.0), ("AdamW", "fused", "no"), ("Adagrad", "differentiable", [True]),
    ("Adam", "eps", "1e-8"), ("AdamW", "weight_decay", True), ("SGD", "momentum", float("nan")),
    ("SGD", "momentum", float("inf")), ("Adam", "eps", None), ("RMSprop", "alpha", [0.9]),
    ("Muon", "ns_steps", 2.5), ("Muon", "ns_steps", True), ("Muon", "adjust_lr_fn", 3),
    ("Muon", "ns_coefficients", [3.4, -4.7]), ("Muon", "nesterov", "false"),
    ("Adam", "betas", [0.9]), ("Adam", "betas", [0.9, 0.99, 0.999]), ("AdamW", "betas", ["a", 0.9]),
    ("AdamW", "betas", 0.9), ("Rprop", "etas", [0.5, True]), ("Rprop", "step_sizes", [1e-6, float("nan")]),
]


def _load(optimizer: Any) -> Any:
    d = copy.deepcopy(BASE)
    d["workload"]["optimizer"] = optimizer
    return spec_from_dict(d, "spec")


@pytest.mark.parametrize("form", ["single", "list"])
@pytest.mark.parametrize("name, key, value", BAD)
def test_an_optimizer_argument_of_the_wrong_type_exits_2_naming_it(name: str, key: str, value: Any, form: str) -> None:
    entry = {"name": name, key: value}
    optimizer = entry if form == "single" else [{"name": "AdamW", "params": "vectors"}, {**entry, "params": "rest"}]
    with pytest.raises(InputError) as e:
        _load(optimizer)
    where = "workload.optimizer" + ("[1]" if form == "list" else "") + f".{key}"
    assert where in str(e.value.where) and e.value.fix, (e.value.where, e.value)


@pytest.mark.parametrize("name, kwargs", [
    ("AdamW", {"foreach": True, "amsgrad": False, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0}),
    ("AdamW", {"foreach": None, "fused": None}), ("SGD", {"momentum": 0.9, "nesterov": True, "dampening": 0}),
    ("Muon", {"ns_steps": 3, "adjust_lr_fn": None, "ns_coefficients": [3.4445, -4.775, 2.0315], "nesterov": False}),
    ("Rprop", {"etas": [0.4, 1.1], "step_sizes": [1e-6, 10]}), ("Adagrad", {"lr_decay": 0.01}),
])
def test_arguments_of_the_declared_types_load(name: str, kwargs: dict[str, Any]) -> None:
    spec = _load({"name": name, **kwargs})
    assert spec.workload.optimizer["name"] == name


def test_the_plan_of_foreach_yes_exits_2(cli: Any, tmp_path: Any) -> None:
    import yaml

    d = copy.deepcopy(BASE)
    d["workload"]["optimizer"] = {"name": "AdamW", "foreach": "yes"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(d))
    code, _, err = cli("plan", str(tmp_path / "job.yaml"))
    assert code == 2 and "foreach" in err and "Traceback" not in err, err
