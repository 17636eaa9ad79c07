"""Each component and each data plane is given a port, not the controller (issue 32 item 1).

A component's module defines the protocol of what it reads and calls of the job; these tests hold
both sides to it:

* **used <= declared**: every attribute a module reads or writes on the job it holds (``job.x`` or
  ``self.job.x``) is a member of that module's port -- a line cannot reach past its port without
  this test failing (the port then has to grow, visibly, beside the component);
* **declared <= used**: a port names nothing its module does not use (it is the *narrow* view);
* **the controller fits every port**: a real controller has every member of every port.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from _specs import spec_with

ROOT = Path(__file__).resolve().parents[1] / "spotwise"

#: module -> (the module defining its port, the port's class name)
PORTS: dict[str, tuple[str, str]] = {
    "control/accounting.py": ("control/accounting.py", "AccountedJob"),
    "control/checkpointing.py": ("control/checkpointing.py", "CheckpointedJob"),
    "control/market_actions.py": ("control/market_actions.py", "MarketHost"),
    "control/observation.py": ("control/observation.py", "ObservedJob"),
    "control/outage.py": ("control/outage.py", "OutageHost"),
    "control/speeds.py": ("control/speeds.py", "SpeedsHost"),
    "control/summary.py": ("control/summary.py", "SummarisedJob"),
    "control/terminating.py": ("control/terminating.py", "TerminatingJob"),
    "planes/serverless/function_billing.py": ("planes/serverless/function_billing.py", "BilledJob"),
    "planes/ps/plane.py": ("control/dataplane.py", "PlaneHost"),
    "planes/collective/data_plane.py": ("control/dataplane.py", "PlaneHost"),
    "planes/collective/state_copy.py": ("control/dataplane.py", "PlaneHost"),
    "planes/serverless/plane.py": ("control/dataplane.py", "PlaneHost"),
    "planes/restart/plane.py": ("control/dataplane.py", "PlaneHost"),
}


def _is_job(node: ast.expr) -> bool:
    """``job``, ``self.job``, ``self._job()`` -- the job a component or plane holds."""
    if isinstance(node, ast.Name):
        return node.id == "job"
    if isinstance(node, ast.Attribute):
        return node.attr == "job" and isinstance(node.value, ast.Name) and node.value.id == "self"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "_job" and not node.args
    return False


def used(source: str) -> set[str]:
    """The attributes ``source`` touches on the job it holds."""
    return {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute) and _is_job(n.value)}


def declared(source: str, cls: str) -> set[str]:
    """The members of protocol ``cls`` in ``source`` (annotated attributes, methods, properties)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            out: set[str] = set()
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    out.add(item.target.id)
                elif isinstance(item, ast.FunctionDef):
                    out.add(item.name)
            return out
    raise AssertionError(f"no class {cls}")


def test_the_checker_reads_uses_and_members() -> None:
    src = ("from typing import Protocol\nclass P(Protocol):\n    a: int\n    @property\n    def T(self) -> float: ...\n"
           "    def f(self) -> None: ...\n"
           "class C:\n    def g(self):\n        job = self.job\n        job.a = self.job.T\n        self._job().f()\n")
    assert used(src) == {"a", "T", "f"}
    assert declared(src, "P") == {"a", "T", "f"}


@pytest.mark.parametrize("module", sorted(PORTS))
def test_a_module_touches_only_its_port(module: str) -> None:
    port_file, cls = PORTS[module]
    touched = used((ROOT / module).read_text())
    members = declared((ROOT / port_file).read_text(), cls)
    assert touched, f"{module} holds no job?"
    assert touched <= members, f"{module} reaches past {cls}: {sorted(touched - members)}"


@pytest.mark.parametrize("port", sorted({v for v in PORTS.values()}))
def test_a_port_names_only_what_its_modules_use(port: tuple[str, str]) -> None:
    port_file, cls = port
    users = [m for m, p in PORTS.items() if p == port]
    touched = set().union(*(used((ROOT / m).read_text()) for m in users))
    # the components a port hands on to another port (a checkpointer's FinalCheckpoint, the
    # plane's accounting) use what that one declares: count their uses too
    handed = {"CheckpointedJob": ["control/terminating.py"]}.get(cls, [])
    touched |= set().union(*(used((ROOT / m).read_text()) for m in handed)) if handed else set()
    members = declared((ROOT / port_file).read_text(), cls)
    assert members <= touched, f"{cls} names what no user touches: {sorted(members - touched)}"


def test_a_real_controller_fits_every_port(tmp_path: Path) -> None:
    from spotwise.assemble import build_controller
    from spotwise.market.world import build_market
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    spec = spec_with({"name": "ports", "seed": 1, "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1},
                      "target": {"iterations": 2},
                      "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                      "market": {"synthetic": {"kind": "constant", "price": 0.07}},
                      "outputs": {"checkpoint_every": 0, "plots": False}})
    job: Any = build_controller(spec, tmp_path / "run", market=build_market(spec, horizon_s=24 * 3600.0),
                                compute=LocalCompute(worker_args_for(spec)))
    for port_file, cls in sorted(set(PORTS.values())):
        missing = {m for m in declared((ROOT / port_file).read_text(), cls) if not hasattr(job, m)}
        assert not missing, f"the controller lacks {cls}'s {sorted(missing)}"
    assert job.run().status == "completed"  # in-process members: nothing is left running
