"""Test helpers shared by the hostile-run-directory tests (``test_hardening_rundirs.py``,
``test_hardening_trust.py``): a tiny modelled run to plant things in, copies of it, spec files, and a user
module whose import leaves a mark (proof that a resume imported code it should not have)."""

from __future__ import annotations

import copy
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest


def tiny_spec(name: str) -> dict[str, Any]:
    """A 10-step modelled job named ``name`` with checkpoints at steps 5 and 10."""
    return {
        "name": name,
        "seed": 5,
        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
        "target": {"iterations": 10},
        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
        "outputs": {"checkpoint_every": 5, "plots": False},
    }


def simulated_run(tmp_path_factory: pytest.TempPathFactory, spec: dict[str, Any]) -> Path:
    """One modelled run of ``spec`` (no Ray): spec.json, events.jsonl, summary.json, checkpoints."""
    import spotwise

    out = tmp_path_factory.mktemp("finished") / "run"
    spotwise.simulate(copy.deepcopy(spec), out, plots=False)
    return out


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of the run directory ``src`` at ``dst`` (links kept as links), unlocked."""
    shutil.copytree(src, dst, symlinks=True)
    (dst / ".spotwise.lock").unlink(missing_ok=True)
    return dst


def spec_file(folder: Path, data: dict[str, Any], name: str = "mine.yaml") -> Path:
    """``data`` written as the YAML spec ``folder/name``."""
    import yaml

    p = folder / name
    p.write_text(yaml.safe_dump(data))
    return p


def marking_module(folder: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, env: str) -> Path:
    """``module`` importable from ``folder`` with ``source`` (which writes the file named by ``$env`` when
    imported or run); returns that file, which exists only once the module was imported."""
    folder.mkdir(exist_ok=True)
    (folder / f"{module}.py").write_text(source)
    mark = folder.parent / "IMPORTED"
    monkeypatch.setenv(env, str(mark))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return mark
