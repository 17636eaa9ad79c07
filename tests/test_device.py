"""Issue 20 item 4: workers train on a GPU when they have one (``cluster.device: auto | cpu | cuda``).

This machine has no CUDA device, so what runs here is the CPU side of the same code: the device
resolution (``auto`` -> cpu; ``cuda`` -> InputError, exit 2 through the CLI), the driver's placement
(num_gpus per worker actor from the catalog's GPUs and the Ray cluster's GPU resources), placement
on a Ray session with *fake* GPUs (``ray.init(num_gpus=2)``: Ray assigns them, CUDA is still
absent, so the workers fall back to CPU tensors and the run completes), and the one path through
which every tensor reaches a worker's device (:func:`spotwise.workloads.device.to_device`).
"""

from __future__ import annotations

import math
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from spotwise.capacity.placement import Placement, placement_for
from spotwise.config import ClusterSpec, JobSpec
from spotwise.errors import InputError
from spotwise.spec.load import build, to_plain
from spotwise.workloads import device as device_mod
from spotwise.workloads.device import (
    DeviceDataset,
    collective_backend,
    resolve_device,
    to_device,
    to_host,
)
from _load import bound
from _reads import count_device_reads

REPO = Path(__file__).resolve().parents[1]
NO_CUDA = not torch.cuda.is_available()
needs_no_cuda = pytest.mark.skipif(not NO_CUDA, reason="checks the behaviour of a node without CUDA")


def _spec(instance: str = "p3.2xlarge", device: str = "auto", workers: int = 2, plane: str = "ps", **cluster: Any) -> JobSpec:
    d: dict[str, Any] = {
        "name": "gpu-placement", "seed": 0,
        "workload": {"name": "mlp-digits", "family": "resnet50" if instance.startswith("p") else "mlp", "batch_size": 32,
                     "lr": 0.1, "step_time_s": 1.0, "eval_every": 4},
        "target": {"iterations": 8},
        "cluster": {"instance_type": instance, "workers": workers, "coordinator_instance": "c5.large", "straggler": 0,
                    "device": device, **cluster},
        "market": {"synthetic": {"kind": "constant", "price": 0.9}, "revocation": {"model": "none"}},
        "outputs": {"plots": False, "checkpoint_every": 50},
    }
    if plane == "collective":
        d["cluster"].update(data_plane="collective", sync="ssgd")
    return build(JobSpec, d, "spec")


# ---------------------------------------------------------------------------------------- the spec
def test_spec_device_default_and_values() -> None:
    assert _spec().cluster.device == "auto"
    assert ClusterSpec(instance_type="c5.xlarge").device == "auto"
    for d in ("auto", "cpu", "cuda"):
        assert _spec(device=d).cluster.device == d


def test_spec_device_bad_values_name_the_valid_ones() -> None:
    with pytest.raises(InputError, match="valid values are 'auto', 'cpu', 'cuda'"):
        _spec(device="gpu")
    with pytest.raises(InputError, match="auto .*cpu or cuda"):  # a dataclass built in Python is checked too
        ClusterSpec(instance_type="c5.xlarge", device="gpu")  # type: ignore[arg-type]


def test_serverless_cannot_ask_for_cuda() -> None:
    with pytest.raises(InputError, match="serverless functions have no GPU"):
        ClusterSpec(kind="serverless", device="cuda")
    assert ClusterSpec(kind="serverless", device="auto").device == "auto"  # auto: the CPU, as always
    assert placement_for(build(JobSpec, {**to_plain(_spec()), "cluster": {"kind": "serverless", "workers": 2}}, "spec"),
                         cluster_gpus=8, cuda_available=True) == Placement("cpu", 0, 0, 8)


# ------------------------------------------------------------------------------ device resolution
def test_auto_resolves_to_cuda_only_where_there_is_cuda() -> None:
    # on a GPU node the worker's own device with its index (cuda:0), which NCCL and the default stream use
    auto = resolve_device("auto")
    if torch.cuda.is_available():
        assert auto.type == "cuda" and auto.index == torch.cuda.current_device()
    else:
        assert auto == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InputError, match="unknown device"):
        resolve_device("tpu")


@needs_no_cuda
def test_cuda_without_cuda_names_the_fix() -> None:
    with pytest.raises(InputError) as e:
        resolve_device("cuda")
    assert str(e.value) == ("cluster.device is cuda but this node has no CUDA device (torch.cuda.is_available() is False)"
                            " -- use device: auto or cpu, or run on a GPU node")


def test_backend_follows_the_tensors() -> None:
    assert collective_backend(torch.device("cpu")) == "gloo"
    assert collective_backend(torch.device("cuda", 0)) == "nccl"


# ----------------------------------------------------------------------------- driver placement
def test_placement_rules() -> None:
    p3, c5 = "p3.2xlarge", "c5.xlarge"
    # cpu: never a GPU
    assert placement_for(_spec(p3, "cpu"), cluster_gpus=4, cuda_available=True) == Placement("cpu", 0, 0, 4)
    # auto: GPUs only with a GPU instance type and GPU resources in the Ray cluster
    assert placement_for(_spec(c5, "auto"), cluster_gpus=4, cuda_available=True) == Placement("cpu", 0, 0, 4)
    assert placement_for(_spec(p3, "auto"), cluster_gpus=0, cuda_available=False) == Placement("cpu", 0, 1, 0)
    auto = placement_for(_spec(p3, "auto"), cluster_gpus=2, cuda_available=False)
    assert auto == Placement("auto", 1, 1, 2) and auto.actor_options() == {"num_gpus": 1}
    assert Placement("cpu", 0, 0, 0).actor_options() == {}
    # cuda: a GPU instance type; GPU resources, or at least CUDA on this node
    assert placement_for(_spec(p3, "cuda"), cluster_gpus=2, cuda_available=False) == Placement("cuda", 1, 1, 2)
    assert placement_for(_spec(p3, "cuda"), cluster_gpus=0, cuda_available=True) == Placement("cuda", 0, 1, 0)
    with pytest.raises(InputError, match="NCCL needs one GPU per member"):
        placement_for(_spec(p3, "cuda", plane="collective"), cluster_gpus=0, cuda_available=True)
    with pytest.raises(InputError, match=r"no CUDA device \(torch.cuda.is_available\(\) is False\) and the Ray cluster "
                                         r"has no GPU resources -- use device: auto or cpu, or run on a GPU node"):
        placement_for(_spec(p3, "cuda"), cluster_gpus=0, cuda_available=False)
    with pytest.raises(InputError, match="instance type 'c5.xlarge' has no GPU in the catalog"):
        placement_for(_spec(c5, "cuda"), cluster_gpus=2, cuda_available=True)
    # one worker per GPU: more workers than GPUs would wait forever for actors Ray cannot place
    with pytest.raises(InputError, match="take one GPU each but the Ray cluster has 2 GPUs"):
        placement_for(_spec(p3, "auto", workers=3), cluster_gpus=2, cuda_available=False)
    with pytest.raises(InputError, match="lower cluster.workers"):
        placement_for(_spec(p3, "auto", workers=2, max_workers=4), cluster_gpus=2, cuda_available=False)
    # an autoscaling cluster brings its GPUs with the nodes the workers ask for
    assert placement_for(_spec(p3, "auto", workers=3), cluster_gpus=0, cuda_available=False, autoscale=True).num_gpus == 1
    # multi-GPU types: still one GPU per worker (a node with 4 GPUs hosts 4 workers)
    assert placement_for(_spec("p3.8xlarge", "auto", workers=4), cluster_gpus=4, cuda_available=False) == Placement("auto", 1, 4, 4)


def test_standby_actors_only_on_spare_gpus() -> None:
    spec = _spec("p3.2xlarge", "auto", workers=2)
    assert placement_for(spec, cluster_gpus=2, cuda_available=False).standby(spec, 2) == 0
    assert placement_for(spec, cluster_gpus=3, cuda_available=False).standby(spec, 2) == 1
    assert placement_for(spec, cluster_gpus=9, cuda_available=False).standby(spec, 2) == 2
    assert placement_for(spec, cluster_gpus=0, cuda_available=False).standby(spec, 2) == 2  # the CPU: unchanged


def test_without_ray_the_machine_stands_for_the_cluster(ray_unimportable: None) -> None:
    """Outside Ray (in-process workers, ``spotwise run`` before it starts its local Ray) the placement
    reads this machine's CUDA devices and never imports Ray."""
    p = placement_for(_spec("p3.2xlarge", "auto", workers=1))
    assert p.cluster_gpus == float(torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert p.num_gpus == (1 if torch.cuda.is_available() else 0)


@needs_no_cuda
def test_run_with_cuda_exits_2_before_ray(tmp_path: Path, ray_unimportable: None) -> None:
    """``spotwise run`` of a ``device: cuda`` spec on this machine: exit 2 with the message, before
    Ray starts (Ray is unimportable here: starting it would be exit 1)."""
    from typer.testing import CliRunner

    from spotwise.cli import app

    spec = tmp_path / "gpu.yaml"
    spec.write_text(yaml.safe_dump(to_plain(_spec("p3.2xlarge", "cuda", workers=1))), encoding="utf-8")
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.stderr
    msg = " ".join(res.stderr.split())
    assert "cluster.device is cuda but this node has no CUDA device (torch.cuda.is_available() is False)" in msg
    assert "use device: auto or cpu, or run on a GPU node" in msg
    assert "Traceback" not in res.stderr


# ------------------------------------------------------------------------- the workers' tensors
def _workload() -> dict[str, Any]:
    return to_plain(_spec().workload)


def test_ps_worker_keeps_its_tensors_on_its_device() -> None:
    from spotwise.planes.ps.worker import GradientWorker, worker_args_for

    args = worker_args_for(_spec(device="auto"))
    assert args[4] == "auto"  # the spec's device unless the driver's placement says otherwise
    assert worker_args_for(_spec(device="auto"), device="cpu")[4] == "cpu"
    w = GradientWorker(*args)
    where = resolve_device("auto")
    assert w.device == where
    assert all(p.device == where for p in w.model.parameters())
    info = w.placement()
    assert info["device"] == info["model"] == info["batch"] == str(where)
    assert w.ready()["device"] == str(where)
    params = to_host(torch.cat([p.detach().reshape(-1) for p in w.model.parameters()]))
    grad, loss, n, _, _, busy = w.compute(params, np.arange(32))
    assert busy is None or w.device.type == "cuda"  # the GPU busy share: only a GPU worker samples it
    assert isinstance(grad, np.ndarray) and grad.dtype == np.float32 and grad.shape == params.shape  # host numpy: the wire
    assert n == 32 and np.isfinite(loss)


def test_collective_member_keeps_its_flat_buffers_on_its_device() -> None:
    from spotwise.planes.collective.member import CollectiveMember

    m = CollectiveMember(_workload(), seed=0, device="auto")
    rep, where = m.replica, resolve_device("auto")
    assert rep.device == where and rep.flat.device == where and rep.buf.device == where
    assert all(p.device == where for p in rep.model.parameters())
    assert rep.zeros(3).device == where and rep.tensor([1.0]).device == where
    loss, n = rep.gradient(np.arange(16))
    assert n == 16 and np.isfinite(loss) and rep.buf.device == where
    # every gradient is a view into the one flat buffer (the all-reduce's), on the device
    assert all(p.grad.device == where for p in rep.model.parameters())
    host = rep.host_params()
    assert isinstance(host, np.ndarray) and host.shape == (rep.P,)
    assert m.ready()["device"] == str(where)


def test_sparse_gradients_leave_the_device_as_host_arrays() -> None:
    from spotwise.planes.ps.worker import GradientWorker

    spec = build(JobSpec, {**to_plain(_spec()), "workload": {"name": "pmf", "family": "pmf", "batch_size": 64}}, "spec")
    w = GradientWorker(to_plain(spec.workload), 0, 1, None, "auto")
    params = to_host(torch.cat([p.detach().reshape(-1) for p in w.model.parameters()]))
    grad, *_ = w.compute(params, np.arange(64))
    arrays = [grad] if isinstance(grad, np.ndarray) else [grad.indices, grad.values]
    assert all(isinstance(a, np.ndarray) for a in arrays)


def test_one_path_moves_tensors_to_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every tensor that reaches a worker's device goes through :func:`to_device` with the worker's
    device: the model, the parameters of each step and each batch -- the same call a GPU worker makes
    (with ``cuda`` instead of ``cpu``)."""
    from spotwise.planes.collective import replica as replica_mod
    from spotwise.planes.ps import worker as worker_mod

    calls: list[tuple[str, torch.device]] = []
    real = device_mod.to_device

    def spy(x: Any, device: torch.device) -> Any:
        calls.append((type(x).__name__, torch.device(device)))
        return real(x, device)

    for mod in (device_mod, worker_mod, replica_mod):  # DeviceDataset reads the module's own name
        monkeypatch.setattr(mod, "to_device", spy)
    w = worker_mod.GradientWorker(_workload(), 0, 1, None, "cpu")
    kinds = [k for k, _ in calls]
    assert any(k not in ("Tensor", "tuple") for k in kinds)  # the model (its class)
    calls.clear()
    params = to_host(torch.cat([p.detach().reshape(-1) for p in w.model.parameters()]))
    w.compute(params, np.arange(8))
    assert [k for k, _ in calls][:2] == ["Tensor", "tuple"]  # the step's parameters, then its batch (element-wise)
    assert {d for _, d in calls} == {torch.device("cpu")}
    calls.clear()
    rep = replica_mod.Replica(w.workload, torch.device("cpu"))
    calls.clear()
    rep.gradient(np.arange(8))
    assert [k for k, _ in calls][:1] == ["tuple"] and {d for _, d in calls} == {torch.device("cpu")}  # the batch
    assert isinstance(w.train, DeviceDataset) and isinstance(rep.train, DeviceDataset)


def test_no_device_branches_outside_the_device_module() -> None:
    """``.to(device)``, ``.cuda()`` and ``torch.cuda`` appear in spotwise only in the device module
    (and the driver's placement, which asks whether this node has CUDA): no ``if cuda:`` scattered."""
    allowed = {"spotwise/workloads/device.py", "spotwise/capacity/placement.py"}
    pat = re.compile(r"\.cuda\(|torch\.cuda\.|\.to\((self\.)?device\b|\.to\(\s*['\"]cuda")
    hits = []
    for path in sorted((REPO / "spotwise").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel in allowed:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pat.search(line):
                hits.append(f"{rel}:{i}: {line.strip()}")
    assert not hits, "device code outside spotwise/workloads/device.py:\n" + "\n".join(hits)


def test_to_device_and_dataset_wrapper() -> None:
    cpu = torch.device("cpu")
    t = torch.ones(3)
    assert to_device(t, cpu) is t  # already there: no copy
    out = to_device((t, [t, 1], None), cpu)
    assert out[0] is t and out[1][0] is t and out[1][1] == 1 and out[2] is None
    from spotwise.workloads.base import TensorIndexedDataset

    ds = DeviceDataset(TensorIndexedDataset(torch.arange(10.0), torch.arange(10)), cpu)
    assert len(ds) == 10 and ds.tensors[0].shape == (10,)  # other attributes pass through
    x, y = ds.batch(np.array([3, 1]))
    assert x.tolist() == [3.0, 1.0] and y.device == cpu


# ----------------------------------------------------------------- a Ray session with fake GPUs
PAYLOAD = textwrap.dedent(r'''
    import json, logging, os, sys, tempfile
    os.environ["RAY_AUTH_MODE"] = "disabled"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    sys.path.insert(0, os.environ["SW_TESTS"])
    from test_device import _spec
    from spotwise.capacity.placement import placement_for
    from spotwise.control.runner import run_job
    from spotwise.errors import InputError
    from spotwise.planes.collective.plane import CollectiveCompute
    from spotwise.planes.ps.compute import RayCompute

    tmp = tempfile.mkdtemp(prefix="sw-gpu-", dir="/tmp")
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
             _temp_dir=tmp)
    out = {"resources": ray.cluster_resources().get("GPU")}
    # what every actor the runs start was created with
    started = []
    for cls in (RayCompute, CollectiveCompute):
        def wrap(orig, name=cls.__name__):
            def start(self, low=False):
                started.append([name, dict(self.actor_options), list(self.worker_args[4:5])])
                return orig(self, low)
            return start
        cls._start_actor = wrap(cls.__dict__["_start_actor"])
    spec = _spec("p3.2xlarge", "auto", workers=2)
    p = placement_for(spec)
    out["placement"] = [p.device, p.num_gpus, p.standby(spec, 2)]
    # where the PS run's initial workers train, asked as they are started (no fleet of its own: issue 54)
    def warm_up(self, n, orig=RayCompute.warm_up):
        workers = orig(self, n)
        if "workers" not in out:
            out["workers"] = ray.get([w.placement.remote() for w in workers])
        return workers
    RayCompute.warm_up = warm_up
    for plane in ("ps", "collective"):
        summary = run_job(_spec("p3.2xlarge", "auto", workers=2, plane=plane), os.path.join(tmp, plane),
                          progress=False, plots=False)
        out[plane] = {"status": summary.status, "steps": summary.steps, "started": list(started)}
        started.clear()
    try:  # Ray has GPUs, so the driver lets cuda through; the worker finds no CUDA and says so
        run_job(_spec("p3.2xlarge", "cuda", workers=1), os.path.join(tmp, "cuda"), progress=False, plots=False)
        out["cuda"] = None
    except InputError as e:
        out["cuda"] = str(e)
    ray.shutdown()
    print("RESULT " + json.dumps(out))
''')


@pytest.fixture(scope="module")
def fake_gpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One Ray session with two fake GPUs, in its own process (the test session's Ray has none and
    stays untouched): placement, a run of each plane, and ``device: cuda``; their results."""
    if not NO_CUDA:
        pytest.skip("this machine has CUDA: the fake GPUs would be real")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "SW_TESTS": str(Path(__file__).parent)}
    res = subprocess.run([sys.executable, "-c", PAYLOAD], capture_output=True, text=True, timeout=bound(540), env=env, check=False,
                         cwd=str(tmp_path_factory.mktemp("gpu")))
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert res.returncode == 0 and lines, f"rc {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def test_fake_gpus_each_worker_gets_one(fake_gpus: dict[str, Any]) -> None:
    assert fake_gpus["resources"] == 2.0
    assert fake_gpus["placement"] == ["auto", 1, 0]  # one GPU per worker, no spare GPU for standby actors
    ws = fake_gpus["workers"]
    assert sorted(w["cuda_visible_devices"] for w in ws) == ["0", "1"]  # Ray gave each its own GPU
    for w in ws:  # ... which CUDA does not see here: CPU tensors, the same code
        assert w["device"] == w["model"] == w["batch"] == "cpu"


@pytest.mark.parametrize("plane", ["ps", "collective"])
def test_fake_gpus_run_completes_on_cpu_tensors(fake_gpus: dict[str, Any], plane: str) -> None:
    run = fake_gpus[plane]
    assert run["status"] == "completed" and run["steps"] == 8
    assert run["started"], "no worker actor was started"
    for _, options, device in run["started"]:
        assert options.get("num_gpus") == 1 and device == ["auto"]


def test_fake_gpus_cuda_without_cuda_is_an_input_error(fake_gpus: dict[str, Any]) -> None:
    assert fake_gpus["cuda"] is not None
    assert "cluster.device is cuda but this node has no CUDA device" in fake_gpus["cuda"]
    assert "use device: auto or cpu, or run on a GPU node" in fake_gpus["cuda"]


def test_a_ps_worker_step_reads_the_loss_with_the_gradient_in_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 40 item 2: no read of the loss between the forward and the backward pass (on a GPU it
    stalls the kernel queue); the loss comes to the host in the gradient's own copy."""
    from spotwise.planes.ps.worker import GradientWorker

    w = GradientWorker({"name": "mlp-digits", "batch_size": 16}, 0, 1, None, "cpu")
    params = to_host(torch.cat([p.detach().reshape(-1) for p in w.model.parameters()]))
    reads = count_device_reads(monkeypatch)
    grad, loss, n, _, _, _ = w.compute(params, np.arange(16))
    monkeypatch.undo()
    assert reads["n"] == 0 and n == 16 and isinstance(loss, float) and math.isfinite(loss)
    assert isinstance(grad, np.ndarray) and grad.shape == params.shape
    # the same numbers as the loss and gradient computed directly
    w.fm.set_flat(torch.as_tensor(params))
    w.model.zero_grad()
    ref = w.workload.loss(w.model, w.train.batch(np.arange(16)))
    ref.backward()
    assert abs(loss - float(ref)) < 1e-6
    assert np.allclose(grad, to_host(torch.cat([p.grad.reshape(-1) for p in w.model.parameters()])), atol=1e-7)
