"""The parameter-server coordinator's optimizer on its device (issue 40 item 4; spotwise.control.state.TorchState).

On a GPU the coordinator keeps parameters, buffers and optimizer state on the device and a host mirror of the
flat vector (what workers are sent and checkpoints store).  The mirrored path runs here on the CPU (``mirrored=True``)
and must give exactly what the plain CPU path gives; on a machine with CUDA the same checks run on the GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from spotwise.capacity.placement import coordinator_device
from spotwise.config import spec_from_dict
from spotwise.control.state import NonFiniteStep, TorchState
from spotwise.training.recipe import recipe_of
from spotwise.training.state import decode_extra, encode_extra
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.timeout(120)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _spec(workload: dict[str, Any], **cluster: Any) -> Any:
    return spec_from_dict({"name": "c", "workload": {"batch_size": 8, **workload}, "target": {"iterations": 40},
                           "cluster": {"instance_type": "c5.xlarge", "workers": 2, **cluster}})


WORKLOADS = {
    "plain-sgd": {"name": "mlp-digits"},  # the papers' update, no buffers
    "adamw-schedule-clip": {"name": "mlp-digits", "optimizer": {"name": "AdamW", "lr": 3e-3, "weight_decay": 0.05},
                            "schedule": {"decay": "cosine", "warmup": 8}, "grad_clip_norm": 0.5},
    "batchnorm-sgd-momentum": {"name": "resnet18-cifar", "params": {"width": 4, "blocks": [1, 1], "n_train": 64,
                                                                     "n_test": 16}},
}


def _pair(wl: dict[str, Any], device: str) -> tuple[TorchState, TorchState]:
    spec = _spec(wl)
    recipe = recipe_of(spec.workload, spec.planned_samples())
    states = [TorchState(make_workload(spec.workload, 0), recipe, float(spec.workload.lr), device=d, mirrored=m)
              for d, m in (("cpu", False), (device, True))]
    return states[0], states[1]


def _grads(state: TorchState, steps: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    P, B = state.fm.P, state.fm.B
    out = []
    for _ in range(steps):
        g = rng.standard_normal(P + B).astype(np.float32) * 0.1
        g[P:] = np.abs(g[P:]) + 0.5  # buffers: running means and (positive) variances
        out.append(g)
    return out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_the_mirrored_optimizer_steps_exactly_as_the_cpu_path(name: str, device: str) -> None:
    plain, mirrored = _pair(WORKLOADS[name], device)
    assert mirrored._host is not None and plain._host is None
    assert mirrored.params is not plain.params and np.array_equal(mirrored.params, plain.params)
    grads = _grads(plain, 6, 1)
    for k, g in enumerate(grads[:4]):
        lr = plain.recipe.lr_at(0.05, 16 * k)
        plain.apply(g.copy(), lr, 2)  # (clipping scales the gradient it is given in place)
        mirrored.apply(g.copy(), lr, 2)
        # the host mirror is what the workers are sent next: equal to the device's values after every step
        assert np.array_equal(mirrored.params, plain.params), f"step {k}"
        assert torch.equal(mirrored.fm.flat.cpu(), torch.from_numpy(plain.params))
    # checkpoint round trip: the extra state comes out on the host and goes back onto the device
    extra = mirrored.extra_state()
    assert all(t.device.type == "cpu" for t in _tensors(extra))
    assert all(t.device.type == "cpu" for t in mirrored.model_state_dict().values())
    again = _pair(WORKLOADS[name], device)[1]
    again.params = mirrored.params.copy()
    again.load_extra_state(decode_extra(encode_extra(extra)))
    assert torch.equal(again.fm.flat.cpu(), torch.from_numpy(mirrored.params)), "the setter reaches the device"
    for g in grads[4:]:
        for s in (plain, mirrored, again):
            s.apply(g.copy(), 0.01, 2)
    assert np.array_equal(mirrored.params, plain.params) and np.array_equal(again.params, plain.params)
    if plain.can_evaluate:
        assert mirrored.evaluate() == plain.evaluate()


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


@pytest.mark.parametrize("device", DEVICES)
def test_a_non_finite_gradient_changes_nothing_on_the_mirrored_path(device: str) -> None:
    _, mirrored = _pair(WORKLOADS["adamw-schedule-clip"], device)
    before = mirrored.params.copy()
    g = _grads(mirrored, 1, 2)[0]
    g[3] = np.nan
    with pytest.raises(NonFiniteStep):
        mirrored.apply(g, 1e-3, 2)
    assert np.array_equal(mirrored.params, before) and torch.equal(mirrored.fm.flat.cpu(), torch.from_numpy(before))


def test_the_coordinator_steps_on_a_gpu_only_for_a_gpu_parameter_server_job_that_has_one() -> None:
    gpu_ps = _spec({"name": "mlp-digits"}, instance_type="p3.2xlarge", data_plane="ps")
    assert coordinator_device(gpu_ps, cuda_available=True) == "cuda"  # device auto on a GPU type
    assert coordinator_device(gpu_ps, cuda_available=False) == "cpu"  # no GPU here: the CPU, not an error
    assert coordinator_device(_spec({"name": "mlp-digits"}, instance_type="p3.2xlarge", data_plane="ps", device="cpu"),
                              cuda_available=True) == "cpu"
    assert coordinator_device(_spec({"name": "mlp-digits"}, data_plane="ps"), cuda_available=True) == "cpu"  # c5: no GPU
    # the collective plane's coordinator applies nothing: its members step
    assert coordinator_device(_spec({"name": "mlp-digits"}, instance_type="p3.2xlarge", data_plane="collective"),
                              cuda_available=True) == "cpu"


def test_the_ps_plane_averages_its_contributing_workers_gpu_busy_shares() -> None:
    """A worker's result carries its GPU's busy share (None on the CPU); a commit's phases hold the mean of its
    contributions' shares, beside their milliseconds (spotwise.control.phases)."""
    import time
    from types import SimpleNamespace

    from spotwise.control.records import Contribution
    from spotwise.planes.ps.plane import ParameterServerPlane

    def contrib(busy: float | None) -> Contribution:
        return Contribution(0, None, np.zeros(1, np.float32), 1.0, 8, 0, 0.004, busy)  # type: ignore[arg-type]

    fake = SimpleNamespace(_last_commit_wall=time.perf_counter() - 0.01)
    ph = ParameterServerPlane._phases(fake, [contrib(0.5), contrib(0.9), contrib(None)], 0.001)  # type: ignore[arg-type]
    assert ph is not None and ph["gpu_busy_share"] == 0.7 and ph["compute"] > 0
    fake._last_commit_wall = time.perf_counter() - 0.01
    ph = ParameterServerPlane._phases(fake, [contrib(None)], 0.001)  # type: ignore[arg-type]
    assert ph is not None and "gpu_busy_share" not in ph
