"""Shared test fixtures: where the real traces live, and a helper to run the CLI in-process."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Bytecode caches, as pytest and Python keep them by default: a machine that sets PYTHONDONTWRITEBYTECODE
# (this project's CI machines do) otherwise compiles every module again in every process -- each xdist
# worker's assertion rewriting of the ~150 test modules (~12 CPU-s each), and spotwise's own modules in
# every Ray actor and CLI subprocess the suite starts (issue 54: the suite's time).  Set before any worker,
# actor or subprocess starts, so all of them inherit it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "data" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """../shared/data/traces, or a visible skip when this checkout has no shared/ beside it."""
    if not TRACES.is_dir():
        pytest.skip(f"real traces not found at {TRACES} (clone the project next to shared/ to run these)")
    return TRACES


@pytest.fixture()
def cli():
    """Run the spotwise CLI in-process; returns (exit_code, stdout, stderr)."""
    from typer.testing import CliRunner

    from spotwise.cli import app

    runner = CliRunner()

    def invoke(*args: str) -> tuple[int, str, str]:
        res = runner.invoke(app, list(args), catch_exceptions=False)
        return res.exit_code, res.stdout, res.stderr

    return invoke


@pytest.fixture(autouse=True)
def _torch_names_put_back():
    """No test leaves PyTorch's names patched (``DistributedDataParallel``, ``init_process_group``...):
    a script host that ran in the test process gave them back (:mod:`spotwise.elastic.patches`)."""
    import sys

    main, argv = sys.modules.get("__main__"), list(sys.argv)
    yield
    if sys.modules.get("__main__") is not main or sys.argv != argv:
        # a user script's thread left running holds this process's __main__ (runpy): every later
        # multiprocessing spawn here would run that script instead of its target
        sys.modules["__main__"], sys.argv[:] = main, argv
        pytest.fail("the test left a script running that holds this process's __main__ / sys.argv: end it "
                    "(ScriptHost.abandon() or stop())")
    patches = sys.modules.get("spotwise.elastic.patches")
    if patches is not None and patches._COUNT[0]:
        held = patches._COUNT[0]
        while patches._COUNT[0]:
            patches.release()  # the next test starts with PyTorch's own names
        pytest.fail(f"the test left torch.distributed's names patched ({held} holds): stop() or leave() its "
                    "ScriptHost")


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory: pytest.TempPathFactory):
    """One local Ray for the whole test session: no dashboard, auth disabled, its own temp dir."""
    import os

    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import logging

    import ray

    if not ray.is_initialized():
        # a short temp dir: Ray's unix socket paths must stay under 107 characters
        import tempfile

        tmp = tempfile.mkdtemp(prefix="sw-ray-", dir="/tmp")
        from spotwise.capacity.raystart import RAY_SYSTEM_CONFIG  # the settings of every Ray spotwise starts

        from _leftovers import descendants

        for attempt in range(3):
            before = set(descendants(os.getpid()))  # a module's server started earlier (moto, redis) stays
            try:
                ray.init(num_cpus=2, resources={"spot": 8}, include_dashboard=False, logging_level=logging.ERROR,
                         log_to_driver=False, _temp_dir=tmp, _system_config=dict(RAY_SYSTEM_CONFIG))
                break
            except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception for this
                # Ray gives its raylet a fixed 30 s to register (ray/_private/node.py), which a loaded 2-core
                # machine can exceed; one slow start would error every Ray test of this worker: start again
                if "timed out during startup" not in str(e) or attempt == 2:
                    raise
                ray.shutdown()
                import signal

                for pid in set(descendants(os.getpid())) - before:  # what the failed start left (gcs_server...)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                tmp = tempfile.mkdtemp(prefix="sw-ray-", dir="/tmp")
    yield ray
    ray.shutdown()


@pytest.fixture()
def ray_unimportable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import ray`` raises ImportError for the duration of a test (for Ray-free code paths)."""
    import sys

    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)


# ------------------------------------------------------------------ scheduling over pytest-xdist workers
#: modules that start multi-node Ray clusters (their own raylets): one worker runs them one after the
#: other, so two clusters never start at once on one machine (Ray waits a fixed 30 s for a raylet)
MULTINODE = ("test_cluster.py", "test_cluster_collective.py", "test_cluster_autoscale.py")
#: measured seconds per scope (tests/durations.json, written by tests/_durations.py from a run's
#: junit XML): the longest scopes are handed out first, so no worker is left with a long one at the end
_DURATIONS = Path(__file__).with_name("durations.json")


#: modules that share a machine-wide resource (lithops' localhost folder, a Redis per test): one worker
SHARED = {"test_serverless.py": "serverless", "test_serverless_hygiene.py": "serverless", "test_serverless_resume.py": "serverless"}


def _module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    return any(defs and defs[-1].scope == "module" for defs in (info.name2fixturedefs.values() if info else ()))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The xdist group of each test, and the order scopes are handed out in.

    A module holding a costly module-scoped fixture (e.g. a finished run several tests read) runs on
    one worker, so the fixture is built once; the multi-node cluster modules share one group, as do
    the modules that share a machine-wide resource; every other test is handed out on its own.
    """
    import json

    known: dict[str, float] = json.loads(_DURATIONS.read_text()) if _DURATIONS.is_file() else {}
    whole = {it.path.name for it in items if _module_fixture(it)}
    scope: dict[str, str] = {}
    weight: dict[str, float] = {}
    for item in items:
        name = item.path.name
        group = "multinode" if name in MULTINODE else SHARED.get(name) or (name if name in whole else None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        key = scope[item.nodeid] = group or item.nodeid
        weight[key] = weight.get(key, 0.0) + known.get(item.nodeid, 0.0)
    # longest first (a stable sort: the collection order otherwise); xdist hands out scopes in this
    # order when started with --no-loadscope-reorder (see pyproject.toml)
    items.sort(key=lambda it: -weight[scope[it.nodeid]])
    _scale_hang_guards(config, items)
    if config.getvalue("dist") == "loadgroup" or getattr(config.option, "loadgroup", False):
        for item in items:
            _name_group(item)


def _name_group(item: pytest.Item) -> None:
    """The ``@group`` suffix xdist's ``loadgroup`` schedules by, on the node id itself.

    pytest-xdist (3.8) writes it to ``item._nodeid``; pytest 9.2 reads a node's id from ``item._id``
    (a :class:`_pytest.nodeid.NodeId`), so xdist's write is lost and every xdist_group is split over
    the workers (two multi-node clusters at once, a module fixture built on both workers, the
    serverless modules sharing one machine-wide folder at once).  Written here for such a pytest
    (xdist's later write to ``_nodeid`` is then unused); an older pytest is left to xdist.
    """
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if not names or item.nodeid.endswith("@" + "_".join(names)) or not hasattr(item, "_id"):
        return  # no group, already named, or a pytest whose id xdist's own write reaches
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


def _scale_hang_guards(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test's pytest-timeout bound (its mark, else the configured default) times the machine's
    slowdown now (tests/_load.py): a hang guard, never a speed assertion (issue 39 item 3)."""
    from _load import SLOW

    if SLOW <= 1.0:
        return
    default = float(config.getini("timeout") or 0)
    for item in items:
        mark = item.get_closest_marker("timeout")
        base = float(mark.args[0]) if mark is not None and mark.args else float(
            mark.kwargs.get("timeout", default) if mark is not None else default)
        if base > 0:
            item.add_marker(pytest.mark.timeout(base * SLOW), append=False)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most 4 (the Ray-heavy tests start several processes each)."""
    import os

    return max(1, min(4, len(os.sched_getaffinity(0))))


# ------------------------------------------------------------------ no process outlives the suite (issue 54 item 7)
#: what the xdist workers reported left behind (controller side), and their pids
_WORKER_LEFTOVERS: list[str] = []
_WORKER_PIDS: set[int] = set()
#: whether a process left behind fails the run (it is killed and listed either way).  On: the last one found,
#: lithops' cleaner (``lithops.scripts.cleaner``, started by test_serverless.py's runs and alive after the grace
#: period), is no longer started -- the serverless plane deletes its jobs' data itself (planes/serverless/backend.py)
FAIL_ON_LEFTOVERS = True


def pytest_configure(config: pytest.Config) -> None:
    """Every pytest process is the subreaper of what its tests start (tests/_leftovers.py)."""
    from _leftovers import become_subreaper

    become_subreaper()
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller leaves its processes to it
        import os

        config.workeroutput["spotwise_pid"] = os.getpid()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # noqa: ANN001 (xdist's hook)
    out = getattr(node, "workeroutput", None) or {}
    _WORKER_LEFTOVERS.extend(out.get("spotwise_leftovers", []))
    if out.get("spotwise_pid"):
        _WORKER_PIDS.add(int(out["spotwise_pid"]))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A process a test left behind is listed and killed after a grace period (and fails the run with
    :data:`FAIL_ON_LEFTOVERS`)."""
    from _leftovers import descendants, leftovers
    from _load import bound

    import sys

    config = session.config
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # a Ray an in-process `spotwise run` started here: ended at exit
        ray.shutdown()  # anyway (Ray's atexit), so ended now, before its processes are looked for
    wandb = sys.modules.get("wandb")
    if wandb is not None and hasattr(wandb, "teardown"):  # W&B's service process (wandb-core) of an in-process
        wandb.teardown()  # W&B sink: it lives as long as the process that used it, ended at exit the same way
    ignore = set(_WORKER_PIDS)
    tracker = getattr(sys.modules.get("multiprocessing.resource_tracker"), "_resource_tracker", None)
    if getattr(tracker, "_pid", None):  # multiprocessing's tracker of this pytest process (a test used `spawn`):
        ignore.add(int(tracker._pid))  # it is this process's own and ends with it (EOF on its pipe)
    for pid in list(_WORKER_PIDS):  # a worker still exiting: its own check covered what it started
        ignore |= set(descendants(pid))
    found = leftovers(bound(10.0), ignore)
    if hasattr(config, "workeroutput"):
        config.workeroutput["spotwise_leftovers"] = found
        return
    found = _WORKER_LEFTOVERS + found
    if found:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        lines = [f"{len(found)} process(es) outlived the tests that started them (killed now):", *found]
        if tr is not None:
            tr.ensure_newline()
            tr.write_sep("=", "processes left behind", red=True)
            for line in lines:
                tr.write_line(line)
        else:
            print("\n".join(lines), file=sys.stderr)
        if FAIL_ON_LEFTOVERS and session.exitstatus == 0:
            session.exitstatus = 1
