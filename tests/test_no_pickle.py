"""No code execution from data (issue 38 item 4): CIFAR-10 batches are pickles, and ``pickle.load`` ran
whatever a ``data_batch_1`` named, in ``spotwise plan``, ``simulate`` and ``run --resume DIR``.

* the rule: no module of spotwise unpickles anything (``pickle.load``/``loads``/``Unpickler``,
  ``torch.load`` without ``weights_only=True``, ``np.load(allow_pickle=True)``, ``joblib``/``dill``/
  ``cloudpickle`` loads, ``read_pickle``, ``shelve``) except the one restricted reader,
  ``spotwise/workloads/safe_pickle.py`` -- checked by scanning the package's source, and the scanner
  itself checked on synthetic snippets;
* the reader: a genuine batch (Python 2's protocol-2 format, and what Python 3 writes at protocols 2,
  4 and 5) loads to the very arrays ``pickle.load(f, encoding="bytes")`` gives; payloads calling
  ``os.system``, ``builtins.exec``, ``subprocess`` ... and memory bombs are refused (exit 2, the file
  named, "not a CIFAR-10 batch") and never run;
* the commands: ``plan``, ``simulate`` and ``run --resume DIR`` on a spec whose ``resnet18-cifar`` /
  ``cnn-cifar10`` dataset holds a payload exit 2 and the payload's marker never appears; ``simulate
  --pilot DIR --train-size N`` does not build the workload or open the dataset at all; a dataset that
  only the run directory names is read only with the user's matching spec or ``--trust-code``, and
  before Ray starts.
"""

from __future__ import annotations

import ast
import builtins
import copy
import json
import os
import pickle
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import spotwise
from spotwise.errors import InputError
from spotwise.workloads import safe_pickle
from spotwise.workloads.safe_pickle import NotABatch, loads_cifar_batch, read_cifar_pickle

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spotwise"
#: the only module that may unpickle (a restricted reader of CIFAR-10 batches)
ALLOWED = {"spotwise/workloads/safe_pickle.py"}


# ============================================================================ the rule: a source scan
_PICKLE_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "joblib", "shelve", "pickle5"}
_LOAD_ATTRS = {"load", "loads", "Unpickler", "_Unpickler", "load_session", "read_pickle"}


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def unsafe_loads(source: str, filename: str = "<src>") -> list[str]:
    """Every place in ``source`` that unpickles data (see the module docstring), as ``file:line: what``."""
    tree = ast.parse(source, filename)
    alias: dict[str, str] = {}  # local name -> the module it is
    found: list[str] = []

    def hit(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                alias[a.asname or top] = a.name if a.asname else top
                if top in {"dill", "cloudpickle", "joblib", "shelve", "pickle5"}:
                    hit(node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            for a in node.names:
                alias[a.asname or a.name] = f"{node.module}.{a.name}"
                if top in _PICKLE_MODULES and (a.name in _LOAD_ATTRS or a.name == "*" or top != "pickle"):
                    hit(node, f"from {node.module} import {a.name}")
                if (top, a.name) in {("torch", "load"), ("numpy", "load"), ("pandas", "read_pickle")}:
                    hit(node, f"from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name is None:
                continue
            head, _, rest = name.partition(".")
            full = f"{alias.get(head, head)}.{rest}" if rest else alias.get(head, head)
            mod, _, attr = full.rpartition(".")
            if mod.split(".")[0] in _PICKLE_MODULES and attr in _LOAD_ATTRS | {"open"}:
                hit(node, full)
            elif attr == "read_pickle":
                hit(node, full)
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is None:
                continue
            head, _, rest = name.partition(".")
            full = f"{alias.get(head, head)}.{rest}" if rest else alias.get(head, head)
            if full in {"torch.load", "torch.serialization.load"}:
                wo = _kw(node, "weights_only")
                if not (isinstance(wo, ast.Constant) and wo.value is True):
                    hit(node, "torch.load without weights_only=True")
            elif full in {"numpy.load", "np.load"}:
                ap = _kw(node, "allow_pickle")
                if ap is not None and not (isinstance(ap, ast.Constant) and ap.value is False):
                    hit(node, "np.load with allow_pickle")
            elif full in {"__import__", "importlib.import_module"} and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in _PICKLE_MODULES - {"pickle"}:
                    hit(node, f"{full}({arg.value!r})")
    return found


def _package_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_but_the_safe_reader_unpickles_anything() -> None:
    found: list[str] = []
    for path in _package_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        found += unsafe_loads(path.read_text(encoding="utf-8"), rel)
    assert not found, ("unpickling outside spotwise/workloads/safe_pickle.py (read data with the safe reader, "
                       "torch.load(..., weights_only=True), np.load without allow_pickle):\n" + "\n".join(found))


def test_the_allowed_reader_is_the_one_that_unpickles() -> None:
    """The exemption is not stale: the safe reader is where the Unpickler is, and it is the only exemption."""
    src = (ROOT / "spotwise/workloads/safe_pickle.py").read_text(encoding="utf-8")
    assert any("pickle.Unpickler" in f for f in unsafe_loads(src)), "the scanner no longer sees the reader's Unpickler"
    assert len(ALLOWED) == 1


@pytest.mark.parametrize("snippet", [
    "import pickle\nx = pickle.load(f)",
    "import pickle\nx = pickle.loads(b)",
    "import pickle as pk\nx = pk.loads(b)",
    "import pickle\nclass U(pickle.Unpickler): pass",
    "from pickle import loads\nx = loads(b)",
    "from pickle import Unpickler as U",
    "import _pickle\n_pickle.loads(b)",
    "import torch\ntorch.load(p)",
    "import torch\ntorch.load(p, weights_only=False)",
    "import torch\ntorch.load(p, map_location='cpu', weights_only=flag)",
    "from torch import load",
    "import numpy as np\nnp.load(p, allow_pickle=True)",
    "import numpy\nnumpy.load(p, allow_pickle=yes)",
    "import joblib\njoblib.load(p)",
    "import dill\ndill.loads(b)",
    "import cloudpickle\ncloudpickle.loads(b)",
    "import pandas as pd\npd.read_pickle(p)",
    "import shelve\nshelve.open(p)",
    "m = __import__('dill')",
    "def f():\n    import pickle\n    return pickle.load(open(p, 'rb'), encoding='bytes')",
])
def test_the_scan_catches_each_way_to_unpickle(snippet: str) -> None:
    """The rule's self-check: each of these added to spotwise would fail the scan above."""
    assert unsafe_loads(snippet), snippet


@pytest.mark.parametrize("snippet", [
    "import pickle\ns = pickle.dumps(x)",
    "import torch\ntorch.load(p, weights_only=True, map_location='cpu')",
    "import numpy as np\nnp.load(p)",
    "import numpy as np\nnp.load(p, allow_pickle=False)",
    "import json\njson.loads(s)",
    "import yaml\nyaml.safe_load(s)",
])
def test_the_scan_lets_safe_calls_be(snippet: str) -> None:
    assert not unsafe_loads(snippet), snippet


# ============================================================================ the reader
def _s(b: bytes) -> bytes:  # a Python 2 str: SHORT_BINSTRING / BINSTRING
    return (b"U" + bytes([len(b)]) + b) if len(b) < 256 else (b"T" + struct.pack("<i", len(b)) + b)


def _i(n: int) -> bytes:
    return (b"K" + bytes([n])) if 0 <= n < 256 else (b"J" + struct.pack("<i", n))


def py2_batch(data: np.ndarray, labels: list[int], filenames: list[bytes], label: bytes = b"training batch 1 of 5") -> bytes:
    """A batch as Python 2's cPickle (protocol 2) with numpy wrote CIFAR-10: ``numpy.core.multiarray``,
    str (not bytes) strings, ``dtype('u1', 0, 1)``."""
    arr = (b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + _i(0) + b"\x85" + _s(b"b") + b"\x87R"
           + b"(" + _i(1) + _i(data.shape[0]) + _i(data.shape[1]) + b"\x86"
           + b"cnumpy\ndtype\n" + _s(b"u1") + _i(0) + _i(1) + b"\x87R"
           + b"(" + _i(3) + _s(b"|") + b"NNN" + _i(-1) + _i(-1) + _i(0) + b"tb"
           + b"\x89" + _s(data.tobytes()) + b"tb")
    lab = b"](" + b"".join(_i(v) for v in labels) + b"e"
    fn = b"](" + b"".join(_s(f) for f in filenames) + b"e"
    return (b"\x80\x02}(" + _s(b"data") + arr + _s(b"labels") + lab + _s(b"batch_label") + _s(label)
            + _s(b"filenames") + fn + b"u.")


def _batch(n: int = 12, seed: int = 0) -> dict[bytes, Any]:
    rng = np.random.default_rng(seed)
    return {b"batch_label": b"training batch 1 of 5", b"labels": [int(v) for v in rng.integers(0, 10, n)],
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"img_%d.png" % i for i in range(n)]}


def _same(a: dict[Any, Any], b: dict[Any, Any]) -> None:
    assert list(a) == list(b)
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert isinstance(b[k], np.ndarray) and a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
            assert np.array_equal(a[k], b[k]) and b[k].flags.writeable
        else:
            assert a[k] == b[k]


def test_a_genuine_python2_batch_loads_to_the_same_arrays_as_pickle() -> None:
    d = _batch()
    raw = py2_batch(d[b"data"], d[b"labels"], d[b"filenames"])
    reference = pickle.loads(raw, encoding="bytes")  # what spotwise read before: the format is right
    assert np.array_equal(reference[b"data"], d[b"data"])
    _same(reference, loads_cifar_batch(raw))


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_a_python3_batch_loads_to_the_same_arrays_as_pickle(protocol: int) -> None:
    d = _batch(seed=protocol)
    d[b"labels_array"] = np.arange(12, dtype=">i8")  # a multi-byte dtype keeps its byte order
    raw = pickle.dumps(d, protocol=protocol)
    _same(pickle.loads(raw, encoding="bytes"), loads_cifar_batch(raw))


def test_the_workloads_read_genuine_batches(tmp_path: Path) -> None:
    from spotwise.workloads.registry import make_workload

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    parts = [_batch(10, seed=i) for i in range(3)]
    for name, d in zip(("data_batch_1", "data_batch_2", "test_batch"), parts):
        (folder / name).write_bytes(py2_batch(d[b"data"], d[b"labels"], d[b"filenames"]))
    wl = make_workload(_wspec("cnn-cifar10", str(folder)), 0)
    assert (len(wl.train), len(wl.test)) == (20, 10)
    x = wl.train.tensors[0] if hasattr(wl.train, "tensors") else None
    if x is not None:
        assert np.array_equal(x.numpy().reshape(20, 3072), np.concatenate([parts[0][b"data"], parts[1][b"data"]]))
    wl = make_workload(_wspec("resnet18-cifar", str(folder), width=4, blocks=[1, 1, 1, 1], n_train=15, n_test=5), 0)
    assert (len(wl.train), len(wl.test)) == (15, 5)


class _Payload:
    """Unpickles as ``fn(*args)``: what a hostile batch holds."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.fn, self.args


def _payloads(marker: Path) -> dict[str, bytes]:
    m = str(marker)
    touch = f"open({m!r}, 'w').write('ran')"
    return {
        "os.system": pickle.dumps(_Payload(os.system, f"touch {m}"), protocol=2),
        "builtins.exec": pickle.dumps(_Payload(builtins.exec, touch), protocol=2),
        "builtins.eval": pickle.dumps(_Payload(builtins.eval, touch), protocol=4),
        "subprocess.Popen": pickle.dumps(_Payload(subprocess.Popen, ["touch", m]), protocol=2),
        "subprocess.call": pickle.dumps(_Payload(subprocess.call, ["touch", m]), protocol=5),
        # a CIFAR-looking dict with the payload inside
        "inside a batch": pickle.dumps({b"labels": [1], b"data": _Payload(os.system, f"touch {m}")}, protocol=2),
        # the text protocol (Python 2's default) naming posix.system
        "protocol 0": b"cposix\nsystem\n(S'touch " + m.encode() + b"'\ntR.",
        # an allowed name used as a gadget: numpy.dtype / _reconstruct with something else
        "dtype gadget": b"\x80\x02cnumpy\ndtype\nX\x01\x00\x00\x00O\x89\x88\x87R.",
        "reconstruct gadget": (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncposix\nsystem\nK\x00\x85U\x01b\x87R."),
        "ndarray called": b"\x80\x02cnumpy\nndarray\nJ\x00\x00\x00\x40\x85R.",
    }


@pytest.mark.parametrize("kind", list(_payloads(Path("/m"))))
def test_a_payload_is_refused_and_never_runs(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "PWNED"
    raw = _payloads(marker)[kind]
    with pytest.raises(NotABatch):
        loads_cifar_batch(raw)
    f = tmp_path / "data_batch_1"
    f.write_bytes(raw)
    with pytest.raises(InputError, match="not a CIFAR-10 batch") as ei:
        read_cifar_pickle(f)
    assert ei.value.where == str(f)
    assert not marker.exists(), f"the {kind} payload ran"


def test_memory_bombs_are_refused_before_the_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a memo index of 4e9 (the C unpickler would size its memo to it)
    with pytest.raises(NotABatch, match="memo index"):
        loads_cifar_batch(b"\x80\x02]r\x00\x00\x00\xf0.")
    # a shape far larger than the bytes behind it
    genuine = py2_batch(np.zeros((2, 3072), np.uint8), [0, 1], [b"a", b"b"])
    big = genuine.replace(b"K\x02J\x00\x0c\x00\x00", b"J\xff\xff\xff\x7fJ\xff\xff\xff\x7f")
    assert big != genuine
    with pytest.raises(NotABatch, match="needs"):
        loads_cifar_batch(big)
    # object arrays, floats, records
    for arr in (np.array([1, "a"], dtype=object), np.zeros(3, np.float32), np.zeros(2, dtype=[("a", "u1")])):
        with pytest.raises(NotABatch):
            loads_cifar_batch(pickle.dumps({b"data": arr}, protocol=2))
    # too many opcodes: a list of a million empty lists
    monkeypatch.setattr(safe_pickle, "MAX_OPCODES", 1000)
    with pytest.raises(NotABatch, match="more than 1000"):
        loads_cifar_batch(pickle.dumps([[] for _ in range(2000)], protocol=2))
    # a file over the input cap
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "0.01")
    f = tmp_path / "data_batch_1"
    f.write_bytes(pickle.dumps(_batch(10), protocol=2))
    with pytest.raises(InputError, match="MiB|larger|size"):
        read_cifar_pickle(f)


def test_not_a_dict_of_data_is_refused() -> None:
    for obj in ([1, 2], {b"labels": [[1], [2]]}, {1: b"x"}, {b"labels": ({b"x": 1},)}):
        with pytest.raises(NotABatch):
            loads_cifar_batch(pickle.dumps(obj, protocol=2))


# ============================================================================ the commands
def _wspec(name: str, dataset: str, **params: Any) -> Any:
    from spotwise.config import WorkloadSpec

    return WorkloadSpec(name=name, dataset=dataset, params=params, batch_size=4)


SPEC: dict[str, Any] = {
    "name": "hostile-dataset",
    "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 10},
    "deadline": "2h",
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 5, "plots": False},
}
TINY_RESNET = {"width": 4, "blocks": [1, 1, 1, 1], "n_train": 20, "n_test": 0}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A modelled run of SPEC (no Ray): a pilot for simulate and a run directory to resume (copies)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    spotwise.simulate(copy.deepcopy(SPEC), out, plots=False, pilot_steps=30)
    return out


@pytest.fixture()
def hostile(tmp_path: Path) -> tuple[Path, Path]:
    """A cifar-10-batches-py folder whose data_batch_1 runs ``touch MARKER`` when unpickled; (folder, marker)."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    marker = tmp_path / "PWNED"
    (folder / "data_batch_1").write_bytes(pickle.dumps(_Payload(os.system, f"touch {marker}"), protocol=2))
    return folder, marker


def _hostile_spec(folder: Path, name: str = "resnet18-cifar") -> dict[str, Any]:
    d = copy.deepcopy(SPEC)
    d["workload"].update({"name": name, "dataset": str(folder), "batch_size": 4,
                          "params": TINY_RESNET if name == "resnet18-cifar" else {}})
    return d


def _spec_file(tmp_path: Path, data: dict[str, Any], name: str = "spec.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


@pytest.fixture()
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray must not start: the refusal comes first."""
    import spotwise.control.runner as runner

    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError("Ray started before the dataset was checked")

    monkeypatch.setattr(runner, "ensure_ray", refuse)


@pytest.mark.parametrize("name", ["resnet18-cifar", "cnn-cifar10"])
def test_plan_and_simulate_exit_2_and_run_nothing(tmp_path: Path, hostile: tuple[Path, Path], cli: Any, name: str) -> None:
    folder, marker = hostile
    spec = _spec_file(tmp_path, _hostile_spec(folder, name))
    for args in (("plan", str(spec)), ("simulate", str(spec), "--out", str(tmp_path / "sim"), "--pilot-steps", "10"),
                 ("simulate", str(spec))):
        code, _, err = cli(*args)
        assert code == 2, (args, code, err)
        assert "not a CIFAR-10 batch" in err and "data_batch_1" in err and "Traceback" not in err, err
        assert not marker.exists(), f"{args[0]} ran the payload"
    assert not (tmp_path / "sim").exists(), "simulate refused before making its run directory"
    for call in (lambda: spotwise.plan(_hostile_spec(folder, name)),
                 lambda: spotwise.simulate(_hostile_spec(folder, name), tmp_path / "sim2"),
                 lambda: spotwise.check_spec(_hostile_spec(folder, name))):
        with pytest.raises(InputError, match="not a CIFAR-10 batch"):
            call()
    assert not marker.exists()


def test_simulate_with_a_pilot_and_a_train_size_never_reads_the_dataset(tmp_path: Path, hostile: tuple[Path, Path],
                                                                        finished: Path, cli: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import spotwise.workloads.registry as registry

    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError("simulate built the workload")

    import spotwise.workloads.resnet as resnet
    import spotwise.workloads.vision as vision

    monkeypatch.setattr(registry, "make_workload", refuse)
    for mod, fn in ((safe_pickle, "read_cifar_pickle"), (vision, "read_cifar_pickle"), (vision, "load_cifar10"),
                    (resnet, "load_cifar10")):
        monkeypatch.setattr(mod, fn, refuse)
    folder, marker = hostile
    spec = _spec_file(tmp_path, _hostile_spec(folder))
    code, out, err = cli("simulate", str(spec), "--out", str(tmp_path / "sim"), "--pilot", str(finished),
                         "--train-size", "20", "--json")
    assert code == 0, err
    assert json.loads(out)["steps"] == 10
    summary = spotwise.simulate(_hostile_spec(folder), pilot=finished, train_size=20)
    assert summary.steps == 10 and not marker.exists()


def _resumable(finished: Path, tmp_path: Path, workload: dict[str, Any]) -> Path:
    """A copy of the finished run whose spec.json a hostile writer rewrote."""
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    (run / ".spotwise.lock").unlink(missing_ok=True)
    data = json.loads((run / "spec.json").read_text())
    data["workload"].update(workload)
    (run / "spec.json").write_text(json.dumps(data))
    return run


def test_resume_of_a_run_naming_a_dataset_needs_the_users_say_so(tmp_path: Path, hostile: tuple[Path, Path],
                                                                  finished: Path, cli: Any, no_ray: None) -> None:
    folder, marker = hostile
    w = _hostile_spec(folder)["workload"]
    run = _resumable(finished, tmp_path, w)
    code, _, err = cli("run", "--resume", str(run), "--json")
    assert code == 2 and "names the dataset" in err and str(folder) in err and "--trust-code" in err, err
    with pytest.raises(InputError, match="names the dataset"):
        spotwise.run(None, run, resume=True)
    # a spec naming another dataset does not vouch for this one
    (tmp_path / "mine").mkdir()  # it exists (a spec's files are checked at load)
    other = _hostile_spec(tmp_path / "mine")
    code, _, err = cli("run", str(_spec_file(tmp_path, other, "other.json")), "--resume", str(run))
    assert code == 2 and "does not match" in err and "workload.dataset" in err, err
    assert not marker.exists()


@pytest.mark.parametrize("how", ["trust-code", "own spec"])
def test_a_vouched_for_resume_reads_the_dataset_safely_before_ray(tmp_path: Path, hostile: tuple[Path, Path],
                                                                  finished: Path, cli: Any, no_ray: None, how: str) -> None:
    folder, marker = hostile
    doc = _hostile_spec(folder)
    run = _resumable(finished, tmp_path, doc["workload"])
    extra = ("--trust-code",) if how == "trust-code" else (str(_spec_file(tmp_path, doc)),)
    code, _, err = cli("run", "--resume", str(run), *extra) if how == "trust-code" else cli("run", *extra, "--resume", str(run))
    assert code == 2 and "not a CIFAR-10 batch" in err and "data_batch_1" in err and "Traceback" not in err, err
    with pytest.raises(InputError, match="not a CIFAR-10 batch"):
        spotwise.run(None if how == "trust-code" else doc, run, resume=True, trust_code=how == "trust-code")
    assert not marker.exists(), "the resume ran the payload"


def test_the_resume_rule_unit(tmp_path: Path, finished: Path) -> None:
    from spotwise.control.rundir_io import load_resume_spec

    (tmp_path / "data").mkdir()  # it exists (a spec's files are checked at load)
    data = _hostile_spec(tmp_path / "data")
    run = _resumable(finished, tmp_path, data["workload"])
    with pytest.raises(InputError, match="resuming would read it"):
        load_resume_spec(run)
    assert load_resume_spec(run, None, trust_code=True).workload.dataset == str(tmp_path / "data")
    assert load_resume_spec(run, spotwise.load_spec(data)).workload.name == "resnet18-cifar"
    assert load_resume_spec(finished).workload.name == "mlp-digits", "no dataset, built in: nothing to vouch for"
