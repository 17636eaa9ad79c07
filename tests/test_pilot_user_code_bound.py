"""Issue 54 item 9: a ``module:function`` workload whose code blocks (a stream's ``iter_from``, the
function itself) hung ``spotwise plan``'s in-process pilot.  Every phase of the user's code in the
pilot is bounded by the bound of a script's first batch (``DESCRIBE_TIMEOUT_S``, shrunk here):
exit 2 naming the function and the fix."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from _load import bound

SPEC: dict[str, Any] = {
    "name": "blocking", "seed": 0,
    "workload": {"name": "blocking:waits", "batch_size": 4, "lr": 0.05, "eval_every": 1000},
    "target": {"iterations": 20},
    "cluster": {"instance_type": "c5.xlarge", "workers": 1, "bids": 0.17},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
}


USER_DIR = Path(__file__).with_name("user_workloads")


@pytest.fixture(autouse=True)
def _user_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_DIR))
    monkeypatch.setenv("PYTHONPATH", f"{USER_DIR}:{__import__('os').environ.get('PYTHONPATH', '')}")


@pytest.fixture()
def release():
    import blocking

    blocking.RELEASE.clear()
    yield
    blocking.RELEASE.set()  # the blocked pilot thread returns: nothing left running


@pytest.mark.parametrize("fn", ["waits", "sleeps", "never_returns"])
def test_a_workload_that_blocks_in_the_pilot_exits_2_naming_it(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              release: None, fn: str) -> None:
    from spotwise.elastic import describe

    monkeypatch.setattr(describe, "DESCRIBE_TIMEOUT_S", 1.0)
    d = {**SPEC, "workload": {**SPEC["workload"], "name": f"blocking:{fn}"}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(d))
    box: list[Any] = []
    t = threading.Thread(target=lambda: box.append(cli("plan", str(tmp_path / "job.yaml"), "--pilot-steps", "10")),
                         daemon=True)
    t.start()
    t.join(bound(120))
    assert not t.is_alive(), "plan hung on the workload's blocking code"
    code, _, err = box[0]
    assert code == 2 and f"blocking:{fn}" in err and "SPOTWISE_SCRIPT_DESCRIBE_TIMEOUT_S" in err, err
    assert "did not return from" in err and "Traceback" not in err, err


def test_a_workload_that_returns_trains_its_pilot_as_before(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.planner.estimate.pilot import run_pilot
    from spotwise.config import spec_from_dict

    spec = spec_from_dict({**SPEC, "workload": {**SPEC["workload"], "name": "streams:stream"}}, "spec")
    a, _ = run_pilot(spec, steps=10)
    b, _ = run_pilot(spec, steps=10)
    assert a.n_points == 10 and (a.beta, a.A, a.F) == (b.beta, b.A, b.F)
