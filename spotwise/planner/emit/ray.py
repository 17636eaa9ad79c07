"""The Ray cluster-launcher file of ``spotwise plan --emit ray-cluster=FILE`` (``ray up``; issue 20 item 3,
issue 29 item 3).

An on-demand CPU head -- the coordinator plan and simulate bill
(:func:`~spotwise.planner.emit.place.head_instance`) -- and spot worker node types (AWS
``InstanceMarketOptions`` with the plan's bid as ``MaxPrice``; GCP Spot VMs), each carrying ``spot``
units, the resource ``spotwise run --ray-address`` places its workers on.  Images: on AWS the Deep
Learning Base OSS NVIDIA Driver GPU AMI (Ubuntu 22.04: NVIDIA driver, Python 3.10) for GPU workers
and Canonical's Ubuntu 22.04 for the head, both named by their public SSM parameters (EC2 resolves
``resolve:ssm:...``; Ray's own default is an Ubuntu 18.04 DLAMI whose Python and glibc cannot install
spotwise's torch); on GCP the Deep Learning VM image families.  The setup
(:mod:`spotwise.planner.emit.scripts`) checks the GPU driver on the workers, creates a venv with
Python >= 3.10, Ray and this spotwise; the head's setup writes ``~/spotwise-job/run.sh``, the job's
run (resume or start), which the header's ``ray exec`` runs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from spotwise.capacity.raystart import ray_system_config_json
from spotwise.config import JobSpec
from spotwise.market.catalog import Catalog
from spotwise.market.catalog_records import InstanceType
from spotwise.planner.emit.files import (
    REMOTE_DIR,
    REMOTE_SPEC,
    Install,
    NodeFiles,
    node_files,
)
from spotwise.planner.emit.place import (
    _GCE_BUILTIN_GPU,
    GCP_CPU_IMAGE,
    GCP_GPU_IMAGE,
    GCP_PROJECT_PLACEHOLDER,
    RAY_PORT,
    cluster_name,
    emit_target,
    gce_machine,
    head_instance,
)
from spotwise.planner.emit.scripts import (
    GPU_PACKAGES,
    AWS_CPU_IMAGE,
    AWS_GPU_IMAGE,
    VENV,
    driver_check,
    run_script,
    setup_script,
    uri_packages,
    workload_installs,
)

RUN_SCRIPT = f"{REMOTE_DIR}/run.sh"


def ray_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:  # pragma: no cover - ray is a dependency
        return ""


def _resources(vcpus: int, gpus: int, spot_units: int = 0) -> dict[str, int]:
    res: dict[str, int] = {}
    if spot_units:
        res["spot"] = spot_units
    if vcpus:
        res["CPU"] = int(vcpus)
    if gpus:
        res["GPU"] = int(gpus)
    return res


def _aws_node(name: str, spot: bool, bid: float | None) -> dict[str, Any]:
    nc: dict[str, Any] = {"InstanceType": name,
                          "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 150, "VolumeType": "gp3"}}]}
    if spot:
        nc["InstanceMarketOptions"] = {"MarketType": "spot", **({"SpotOptions": {"MaxPrice": f"{bid:.4f}"}} if bid else {})}
    return nc


def _gcp_node(inst: InstanceType | None, machine: str, spot: bool) -> tuple[dict[str, Any], list[str]]:
    acc: list[dict[str, Any]] = []
    notes: list[str] = []
    if inst is not None:
        machine, acc, notes = gce_machine(inst)
    gpu = bool(acc) or machine.startswith(_GCE_BUILTIN_GPU)
    nc: dict[str, Any] = {"machineType": machine, "disks": [{
        "boot": True, "autoDelete": True, "type": "PERSISTENT",
        "initializeParams": {"diskSizeGb": 100, "sourceImage": GCP_GPU_IMAGE if gpu else GCP_CPU_IMAGE}}]}
    if acc:
        nc["guestAccelerators"] = acc
    if gpu:
        nc["metadata"] = {"items": [{"key": "install-nvidia-driver", "value": "True"}]}
    if spot:  # a dict, as the GCE API wants it (Ray's own examples write a list: ray-project/ray#46248)
        nc["scheduling"] = {"provisioningModel": "SPOT", "instanceTerminationAction": "DELETE",
                            "onHostMaintenance": "TERMINATE", "automaticRestart": False}
    elif gpu:
        nc["scheduling"] = {"onHostMaintenance": "TERMINATE"}
    return nc, notes


def _aws_image(nc: dict[str, Any], gpu: bool) -> dict[str, Any]:
    return {"ImageId": AWS_GPU_IMAGE if gpu else AWS_CPU_IMAGE, **nc}


def ray_run_script(notice_source: str, uri: str | None) -> str:
    """The job's run on the head (``~/spotwise-job/run.sh``): spotwise on the cluster the launcher started."""
    return run_script(address="auto", notice_source=notice_source, autoscale=True, uri=uri)


def ray_cluster_config(rec: Mapping[str, Any] | None, spec: JobSpec, *, spec_file: str | Path = "spec.yaml",
                       install: Install | None = None, catalog: Catalog | None = None,
                       files: NodeFiles | None = None) -> dict[str, Any]:
    """The Ray cluster-launcher config (``ray up``) of the recommended place; see the module docstring.
    ``files``: what the nodes get besides the spec (default: :func:`node_files` of ``spec``)."""
    t = emit_target(rec, spec, catalog)
    install = install or Install(None)
    files = files if files is not None else node_files(spec)
    head: InstanceType = head_instance(spec, t, catalog)
    inst = t.instance
    gpu = inst.accelerator_count > 0
    groups: dict[float | None, int] = {}
    if t.spot and t.cloud == "aws" and t.bids:
        for b in t.bids[: t.workers]:
            groups[round(b, 4)] = groups.get(round(b, 4), 0) + 1
        groups[round(t.bids[-1], 4)] = groups.get(round(t.bids[-1], 4), 0) + max(0, t.workers - len(t.bids))
    else:
        groups[None] = t.workers
    label = "spot-workers" if t.spot else "workers"
    node_types: dict[str, Any] = {}
    if t.cloud == "aws":
        node_types["head"] = {"resources": _resources(head.vcpus, 0),
                              "node_config": _aws_image(_aws_node(head.name, False, None), False)}
    else:
        head_nc, _ = _gcp_node(head, head.name, False)
        node_types["head"] = {"resources": _resources(head.vcpus, 0), "node_config": head_nc}
    for bid, count in groups.items():
        key = label if len(groups) == 1 else f"{label}-bid-{bid:g}"
        nc = _aws_image(_aws_node(inst.name, t.spot, bid), gpu) if t.cloud == "aws" else _gcp_node(inst, inst.name, t.spot)[0]
        node_types[key] = {"min_workers": 0, "max_workers": math.ceil(count / t.slots),
                           "resources": _resources(inst.vcpus, inst.accelerator_count, t.slots), "node_config": nc}
    nodes = sum(v.get("max_workers", 0) for v in node_types.values())
    provider: dict[str, Any] = {"type": t.cloud, "region": t.region}
    if t.cloud == "aws":
        zones = [z for r, z, i in t.ranked if r == t.region and z and i.name == inst.name]
        if zones:
            provider["availability_zone"] = ",".join(dict.fromkeys(zones))
        provider["cache_stopped_nodes"] = False  # a revoked spot node is terminated, not kept stopped
    else:
        provider["availability_zone"] = t.zone
        provider["project_id"] = GCP_PROJECT_PLACEHOLDER
    uri = getattr(spec.outputs, "uri", None)
    own, req = workload_installs(spec, files)
    run = ray_run_script(t.notice_source, uri)
    cfg: dict[str, Any] = {
        "cluster_name": cluster_name(spec),
        "max_workers": nodes,
        "upscaling_speed": float(max(1, nodes)),
        "idle_timeout_minutes": 5,
        "provider": provider,
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": node_types,
        "head_node_type": "head",
        "file_mounts": {REMOTE_SPEC: str(spec_file), **install.mounts, **files.mounts},
    }
    if install.is_folder:  # a source folder: what git ignores (.venv, builds) stays here
        cfg["rsync_exclude"] = ["**/.git", "**/.git/**"]
        cfg["rsync_filter"] = [".gitignore"]
    end = "SPOTWISE_RUN"  # the here-document's end: a word no line of the script is (the script is built, not pasted)
    while end in run.splitlines():
        end += "_"
    cfg.update({
        "setup_commands": [setup_script(install, ray_version=ray_version(), ray_extra="default",
                                        packages=uri_packages(uri) + (GPU_PACKAGES if gpu else ()), workload_packages=own,
                                        requirements=req)],
        "head_setup_commands": [
            f'"{VENV}/bin/python" -m pip install -q ' + ('"boto3>=1.4.8"' if t.cloud == "aws" else "google-api-python-client"),
            # the trailing newline ends the here-document even inside the launcher's "(...)" wrapping
            f"mkdir -p {REMOTE_DIR} && cat > {RUN_SCRIPT} <<'{end}'\n{run}{end}\n",
        ],
        "worker_setup_commands": [driver_check(inst.name, inst.accelerator_count, inst.accelerator)] if gpu else [],
        "head_start_ray_commands": [
            f'"{VENV}/bin/ray" stop',
            f'ulimit -n 65536; "{VENV}/bin/ray" start --head --port={RAY_PORT} --object-manager-port=8076 '
            "--autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=127.0.0.1 --disable-usage-stats "
            f"--system-config='{ray_system_config_json()}'",
        ],
        "worker_start_ray_commands": [
            f'"{VENV}/bin/ray" stop',
            f'ulimit -n 65536; "{VENV}/bin/ray" start --address=$RAY_HEAD_IP:{RAY_PORT} --object-manager-port=8076 '
            "--disable-usage-stats",
        ],
    })
    return cfg
