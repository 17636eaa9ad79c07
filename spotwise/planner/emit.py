"""Cluster files for the plan's recommended place (issue 20 item 3): ``spotwise plan SPEC --emit KIND=FILE``.

``spotwise plan`` recommends a place -- cloud, region/zone, instance type, worker count, spot or
on-demand (``extra.recommendation``, :func:`spotwise.planner.plan_place._recommendation`).  This module
turns that recommendation and the spec into the file that brings such a cluster up:

* ``ray-cluster`` -- a Ray cluster-launcher YAML (``ray up``) for AWS or GCP: an on-demand head node
  for the coordinator (``cluster.coordinator_instance``, else a small type of the cloud) and the
  worker node type(s) on spot (AWS ``InstanceMarketOptions``, the plan's bid as ``MaxPrice``; GCP Spot
  VMs, ``provisioningModel: SPOT``), each carrying ``spot`` units -- one per spotwise worker, the
  resource ``spotwise run --ray-address`` places its workers on (:mod:`spotwise.capacity.cluster`) --
  one worker per node, or one per GPU on a multi-GPU type (then also ``GPU: n``); ``min_workers: 0``,
  ``max_workers`` = the nodes the plan's workers need.  The run command carries ``--autoscale``:
  spotwise asks the autoscaler for its worker slots (``request_resources``), so the spot nodes come
  up for the job and lost ones are replaced (:mod:`spotwise.capacity.cluster`).
* ``skypilot`` -- a SkyPilot task YAML (``sky launch``): ``resources`` with the cloud, ``use_spot`` and
  the places the plan ranked (best first, ``ordered``), ``num_nodes``, ``setup`` and a ``run`` that
  starts Ray across the nodes and runs spotwise on rank 0.

Both run ``spotwise run SPEC --ray-address ... --notice-source aws|gcp`` so that every worker watches
its node's metadata service for the preemption notice.  spotwise is not on PyPI: the nodes install it
from what ``--install`` names (a git URL, a wheel file or a source folder, mounted on the nodes),
else the emitted setup stops with a message saying so.

The generators are pure (:func:`emit_target`, :func:`ray_cluster_config`, :func:`skypilot_task`:
recommendation + spec -> dict); :func:`prepare_emits` checks the flags before the plan is made and
:func:`write_emits` writes the files, refusing an existing file (:class:`InputError`, exit 2).
Validated in the tests against Ray's own schema and SkyPilot's own schemas; not launched from here.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.market.catalog_records import InstanceType
from spotwise.outputfiles import check_output_file, write_output_text

EMIT_KINDS = ("ray-cluster", "skypilot")
EMIT_CLOUDS = ("aws", "gcp")
#: where the job lives on the nodes: the spec, the run directory, a mounted wheel or source folder
REMOTE_DIR = "~/spotwise-job"
REMOTE_SPEC = f"{REMOTE_DIR}/spec.yaml"
REMOTE_RUN = f"{REMOTE_DIR}/run"
#: the head (coordinator) when the spec names no ``cluster.coordinator_instance``: on-demand, 4 vCPUs, 15-16 GB
DEFAULT_HEAD = {"aws": ("m5.xlarge", 4), "gcp": ("n1-standard-4", 4)}
RAY_PORT = 6379
#: GCE images (Deep Learning VM families); GPU nodes get the NVIDIA driver from the image's install-nvidia-driver hook
GCP_CPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cpu"
GCP_GPU_IMAGE = "projects/deeplearning-platform-release/global/images/family/common-cu121-debian-11-py310"
GCP_PROJECT_PLACEHOLDER = "REPLACE-WITH-YOUR-GCP-PROJECT-ID"
_GCE_ACCELERATORS = {"K80": "nvidia-tesla-k80", "P4": "nvidia-tesla-p4", "P100": "nvidia-tesla-p100",
                     "V100": "nvidia-tesla-v100", "T4": "nvidia-tesla-t4", "A100": "nvidia-tesla-a100",
                     "L4": "nvidia-l4", "H100": "nvidia-h100-80gb"}
#: GCE machine families: a catalog name that starts with one is a real machine type, used as it is
_GCE_MACHINE = re.compile(r"^(n1|n2|n2d|n4|e2|c2|c2d|c3|c3d|c4|m1|m2|m3|a2|a3|g2|t2a|t2d|h3|z3|custom)-[a-z0-9-]+$")
_GCE_BUILTIN_GPU = ("a2-", "a3-", "g2-")
_N1_SIZES = (1, 2, 4, 8, 16, 32, 64, 96)
_AWS_ZONE = re.compile(r"^([a-z]{2}(?:-gov)?-[a-z]+-\d+)([a-z])?$")
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)(?:-([a-z]))?$")
_INSTALL_MISSING = ("no spotwise install source: rerun spotwise plan with --install (a git URL such as "
                    "git+https://github.com/OWNER/spotwise.git, a wheel file or a source folder), or set SPOTWISE_INSTALL")


# ------------------------------------------------------------------------------------- the place
@dataclass(frozen=True)
class EmitTarget:
    """Where and what to launch, from the plan's recommendation (:func:`emit_target`)."""

    cloud: str
    region: str
    zone: str  # "" when the plan names a region only (AWS)
    instance: InstanceType
    workers: int
    initial_workers: int  # the planned spec's cluster.workers: the slots the job asks for at its start
    slots: int  # spotwise workers per node (one per GPU on a multi-GPU type, else one)
    spot: bool
    bids: tuple[float, ...]
    #: fall-back places, best first, this place first: (region, zone, instance type)
    ranked: tuple[tuple[str, str, InstanceType], ...]
    strategy: str
    notes: tuple[str, ...] = field(default=())

    @property
    def nodes(self) -> int:
        return math.ceil(self.workers / self.slots)

    @property
    def notice_source(self) -> str:
        return self.cloud  # spotwise's notice watchers: aws (spot instance-action) and gcp (preempted)


def _split_place(cloud: str, place: str) -> tuple[str, str]:
    """(region, zone) of a plan's place; GCP needs a zone, so a bare GCP region gets its ``-b`` zone."""
    if cloud == "aws":
        m = _AWS_ZONE.match(place)
        if m:
            return m.group(1), place if m.group(2) else ""
    else:
        m = _GCP_ZONE.match(place)
        if m:
            return m.group(1), place if m.group(2) else f"{m.group(1)}-b"
    raise InputError(f"the plan's place {place!r} is not an {cloud.upper()} region or zone",
                     f"set cluster.region to an {cloud.upper()} zone (e.g. {'us-east-1b' if cloud == 'aws' else 'us-central1-a'})",
                     "--emit")


def emit_target(rec: Mapping[str, Any] | None, spec: JobSpec, catalog: Catalog | None = None) -> EmitTarget:
    """The place to launch from the plan's recommendation (``plan.extra["recommendation"]``).

    :class:`InputError` (exit 2) when there is nothing to launch: no recommendation, a serverless
    recommendation or spec, no region, or an instance type of a cloud other than AWS and GCP.
    """
    if spec.cluster.kind == "serverless":
        raise InputError("a serverless spec runs on functions: there is no VM cluster to launch",
                         "drop --emit (spotwise run runs a serverless spec as it is), or plan a spec with cluster.kind: vm",
                         "--emit")
    if not rec:
        raise InputError("the plan has no recommended place", "relax the deadline or budget until spotwise plan recommends "
                         "one, then emit again", "--emit")
    strategy = str(rec.get("strategy", ""))
    if strategy == "serverless":
        raise InputError("the plan recommends serverless functions: there is no VM cluster to launch",
                         "drop --emit and run the planned spec (plan --write-spec FILE) with spotwise run: functions need "
                         "no cluster", "--emit")
    if catalog is None:
        from spotwise.market.world import load_catalog

        catalog = load_catalog(spec)
    inst = catalog.instance(str(rec["instance"]), cloud=spec.cluster.cloud)
    if inst.cloud not in EMIT_CLOUDS:
        raise InputError(f"the recommended instance type {inst.name} is on {inst.cloud}; --emit writes AWS and GCP clusters",
                         "plan for an AWS or GCP instance type (cluster.instance_type, or --types with --trace)", "--emit")
    place = str(rec.get("place") or "")
    if not place:
        raise InputError("the plan names no region or zone to launch in",
                         f"set cluster.region in the spec (e.g. {'us-east-1b' if inst.cloud == 'aws' else 'us-central1-a'}), "
                         "or plan with --trace so that spotwise picks the zone", "--emit")
    region, zone = _split_place(inst.cloud, place)
    notes: list[str] = []
    if inst.cloud == "gcp" and not _GCP_ZONE.match(place).group(2):  # type: ignore[union-attr]
        notes.append(f"the plan names the region {region}; zone {zone} was chosen: change availability_zone/zone if it "
                     "lacks the instance type")
    if inst.cloud == "gcp":
        notes += gce_machine(inst)[2]
    workers = int(rec["workers"])
    if workers < 1:
        raise InputError("the plan has no workers", "plan again", "--emit")
    slots = inst.accelerator_count if inst.accelerator_count > 1 else 1
    slots = min(slots, workers)
    if slots > 1:
        notes.append(f"{inst.name} has {inst.accelerator_count} GPUs: one spotwise worker per GPU, {slots} per node "
                     f"(the plan priced one {inst.name} per worker, so this cluster costs less and each worker has one GPU)")
    initial = workers // 2 if strategy == "dynamic" else workers  # apply_plan: the dynamic strategy starts with half
    ranked: list[tuple[str, str, InstanceType]] = [(region, zone, inst)]
    for r in rec.get("ranked_places") or []:
        try:
            other = catalog.instance(str(r["instance"]), cloud=inst.cloud)
            reg, zn = _split_place(inst.cloud, str(r["zone"]))
        except (InputError, KeyError):
            continue  # another cloud's place, or a type the catalog lacks: not a fall-back of this cluster
        if (reg, zn, other.name) not in {(a, b, c.name) for a, b, c in ranked}:
            ranked.append((reg, zn, other))
    return EmitTarget(cloud=inst.cloud, region=region, zone=zone, instance=inst, workers=workers,
                      initial_workers=max(1, initial), slots=slots, spot=strategy != "on-demand",
                      bids=tuple(float(b) for b in rec.get("bids") or ()), ranked=tuple(ranked), strategy=strategy,
                      notes=tuple(notes))


# ------------------------------------------------------------------------------------- machines
def gce_machine(inst: InstanceType) -> tuple[str, list[dict[str, Any]], list[str]]:
    """(GCE machine type, guest accelerators, notes) for a catalog entry: a real machine type as it is;
    spotwise's GCE servers of paper 002 (``gce-v100``...) as the nearest n1-standard shape plus their GPU."""
    notes: list[str] = []
    if _GCE_MACHINE.match(inst.name):
        machine = inst.name
    else:
        vcpus = next((n for n in _N1_SIZES if n >= max(1, inst.vcpus)), _N1_SIZES[-1])
        machine = f"n1-standard-{vcpus}"
        notes.append(f"{inst.name} ({inst.vcpus} vCPUs, {inst.memory_gb} GB in the catalog) runs as {machine}"
                     + (f" with {inst.accelerator_count} {inst.accelerator}" if inst.accelerator_count else ""))
    acc: list[dict[str, Any]] = []
    if inst.accelerator_count and not machine.startswith(_GCE_BUILTIN_GPU):
        name = _GCE_ACCELERATORS.get(inst.accelerator.upper(), f"nvidia-{inst.accelerator.lower()}")
        acc = [{"acceleratorType": name, "acceleratorCount": int(inst.accelerator_count)}]
    return machine, acc, notes


def _head(spec: JobSpec, t: EmitTarget, catalog: Catalog | None) -> tuple[str, int, InstanceType | None]:
    """(name, vCPUs, catalog entry) of the head node: ``cluster.coordinator_instance`` or the cloud's default."""
    name = spec.cluster.coordinator_instance
    if not name:
        return DEFAULT_HEAD[t.cloud][0], DEFAULT_HEAD[t.cloud][1], None
    if catalog is None:
        from spotwise.market.world import load_catalog

        catalog = load_catalog(spec)
    inst = catalog.instance(name, cloud=t.cloud)
    return inst.name, inst.vcpus, inst


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


# ------------------------------------------------------------------------------------- commands
@dataclass(frozen=True)
class Install:
    """How the nodes get spotwise: a pip argument, and a local wheel or folder to mount first."""

    pip_arg: str | None  # None: not given (the setup stops with a message)
    local: Path | None = None
    remote: str | None = None

    @property
    def mounts(self) -> dict[str, str]:
        return {self.remote: str(self.local)} if self.local is not None and self.remote else {}


def parse_install(value: str | None) -> Install:
    """``--install``: a URL / requirement (used as it is), or an existing wheel file or source folder (mounted)."""
    if value is None or not value.strip():
        return Install(None)
    v = value.strip()
    if "://" in v or v.startswith("git+"):
        return Install(v)
    p = Path(v).expanduser()
    if p.is_file() and p.suffix == ".whl":
        remote = f"{REMOTE_DIR}/{p.name}"
        return Install(remote, p.resolve(), remote)
    if p.is_dir() and ((p / "pyproject.toml").is_file() or (p / "setup.py").is_file()):
        return Install(f"{REMOTE_DIR}/src", p.resolve(), f"{REMOTE_DIR}/src")
    if p.exists() or v.endswith(".whl") or "/" in v or v in (".", ".."):
        raise InputError(f"{v!r} is neither a wheel file nor a folder with pyproject.toml",
                         "give --install a spotwise wheel (.whl), the source folder, or a git URL "
                         "(git+https://github.com/OWNER/spotwise.git)", "--install")
    return Install(v)  # a requirement pip resolves on the nodes (e.g. an index of your own)


def _install_line(inst: Install) -> str:
    if inst.pip_arg is None:
        return f'pip install -q "${{SPOTWISE_INSTALL:?{_INSTALL_MISSING}}}"'
    return f"pip install -q {shlex.quote(inst.pip_arg) if not inst.pip_arg.startswith('~/') else inst.pip_arg}"


def _ray_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:  # pragma: no cover - ray is a dependency
        return ""


def run_command(t: EmitTarget, address: str, autoscale: bool = False) -> str:
    """The ``spotwise run`` of the job on the cluster: the mounted spec, its run directory, the cloud's
    notices; ``autoscale``: the cluster's autoscaler provides the spot nodes (Ray's launcher)."""
    return (f"spotwise run {REMOTE_SPEC} --out {REMOTE_RUN} --ray-address {address} "
            f"--notice-source {t.notice_source}" + (" --autoscale" if autoscale else ""))


def cluster_name(spec: JobSpec) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", spec.name.lower()).strip("-") or "job"
    return f"spotwise-{base}"[:40].rstrip("-")


# ------------------------------------------------------------------------------------- generators
def ray_cluster_config(rec: Mapping[str, Any] | None, spec: JobSpec, *, spec_file: str | Path = "spec.yaml",
                       install: Install | None = None, catalog: Catalog | None = None) -> dict[str, Any]:
    """The Ray cluster-launcher config (``ray up``) of the recommended place; see the module docstring."""
    t = emit_target(rec, spec, catalog)
    install = install or Install(None)
    head_name, head_vcpus, head_inst = _head(spec, t, catalog)
    inst = t.instance
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
        node_types["head"] = {"resources": _resources(head_vcpus, 0), "node_config": _aws_node(head_name, False, None)}
    else:
        head_nc, _ = _gcp_node(head_inst, head_name, False)
        node_types["head"] = {"resources": _resources(head_vcpus, 0), "node_config": head_nc}
    for bid, count in groups.items():
        key = label if len(groups) == 1 else f"{label}-bid-{bid:g}"
        nc = _aws_node(inst.name, t.spot, bid) if t.cloud == "aws" else _gcp_node(inst, inst.name, t.spot)[0]
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
    ray_v = _ray_version()
    return {
        "cluster_name": cluster_name(spec),
        "max_workers": nodes,
        "upscaling_speed": float(max(1, nodes)),
        "idle_timeout_minutes": 5,
        "provider": provider,
        "auth": {"ssh_user": "ubuntu"},
        "available_node_types": node_types,
        "head_node_type": "head",
        "file_mounts": {REMOTE_SPEC: str(spec_file), **install.mounts},
        "setup_commands": [
            "python3 -c 'import sys; assert sys.version_info >= (3, 10), \"spotwise needs Python 3.10 or newer\"'",
            f'pip install -q "ray[default]=={ray_v}"' if ray_v else 'pip install -q "ray[default]"',
            _install_line(install),
        ],
        "head_setup_commands": ['pip install -q "boto3>=1.4.8"' if t.cloud == "aws" else "pip install -q google-api-python-client"],
        "worker_setup_commands": [],
        "head_start_ray_commands": [
            "ray stop",
            f"ulimit -n 65536; ray start --head --port={RAY_PORT} --object-manager-port=8076 "
            "--autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=127.0.0.1 --disable-usage-stats",
        ],
        "worker_start_ray_commands": [
            "ray stop",
            f"ulimit -n 65536; ray start --address=$RAY_HEAD_IP:{RAY_PORT} --object-manager-port=8076 --disable-usage-stats",
        ],
    }


def skypilot_task(rec: Mapping[str, Any] | None, spec: JobSpec, *, spec_file: str | Path = "spec.yaml",
                  install: Install | None = None, catalog: Catalog | None = None) -> dict[str, Any]:
    """The SkyPilot task (``sky launch``) of the recommended place; see the module docstring."""
    t = emit_target(rec, spec, catalog)
    install = install or Install(None)
    places = []
    for region, zone, inst in t.ranked:
        entry: dict[str, Any] = {"region": region}
        if zone:
            entry["zone"] = zone
        if t.cloud == "aws":
            entry["instance_type"] = inst.name
        else:
            machine, acc, _ = gce_machine(inst)
            entry["instance_type"] = machine
            if acc:
                entry["accelerators"] = f"{inst.accelerator.upper()}:{inst.accelerator_count}"
        places.append(entry)
    resources: dict[str, Any] = {"cloud": t.cloud, "use_spot": t.spot}
    if len(places) == 1:
        resources.update(places[0])
    else:
        resources["ordered"] = places
    start = f"ray start --disable-usage-stats --resources='{{\"spot\": {t.slots}}}'"
    # SkyPilot runs a Ray of its own on port 6380; the job's Ray listens on RAY_PORT (SkyPilot's distributed-Ray recipe)
    run = "\n".join([
        'export HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        'if [ "$SKYPILOT_NODE_RANK" = "0" ]; then',
        f"  ps aux | grep ray | grep {RAY_PORT} > /dev/null || {start} --head --port={RAY_PORT} --dashboard-host=127.0.0.1",
        "  python - <<'PY'",
        "import os, time, ray  # wait until every node's spot slots have joined",
        f"ray.init(address=os.environ['HEAD_IP'] + ':{RAY_PORT}')",
        f"while ray.cluster_resources().get('spot', 0) < {t.nodes * t.slots}:",
        "    time.sleep(5)",
        "PY",
        f"  {run_command(t, f'$HEAD_IP:{RAY_PORT}')}",
        "else",
        "  sleep 10",
        f"  ps aux | grep ray | grep {RAY_PORT} > /dev/null || {start} --address=$HEAD_IP:{RAY_PORT}",
        "fi",
    ]) + "\n"
    ray_v = _ray_version()
    setup = "\n".join([
        "set -e",
        "python3 -c 'import sys; assert sys.version_info >= (3, 10), \"spotwise needs Python 3.10 or newer\"'",
        f'pip install -q "ray[default]=={ray_v}"' if ray_v else 'pip install -q "ray[default]"',
        f': "${{SPOTWISE_INSTALL:?{_INSTALL_MISSING}}}"',
        'pip install -q "${SPOTWISE_INSTALL/#\\~/$HOME}"',
    ]) + "\n"
    return {
        "name": cluster_name(spec),
        "resources": resources,
        "num_nodes": t.nodes,
        "envs": {"SPOTWISE_INSTALL": install.pip_arg or ""},
        "file_mounts": {REMOTE_SPEC: str(spec_file), **install.mounts},
        "setup": setup,
        "run": run,
    }


GENERATORS = {"ray-cluster": ray_cluster_config, "skypilot": skypilot_task}


# ------------------------------------------------------------------------------------- files
def _header(kind: str, t: EmitTarget, spec: JobSpec, rec: Mapping[str, Any], file: Path, spec_file: str,
            install: Install) -> list[str]:
    cost = rec.get("expected_cost")
    lines = [f"{spec.name}: written by `spotwise plan --emit {kind}={file.name}` -- the plan's recommendation:",
             f"  {t.strategy}, {t.workers} worker(s) on {t.instance.name} ({'spot' if t.spot else 'on-demand'}) in "
             f"{t.zone or t.region} ({t.cloud})" + (f", expected cost ${float(cost):.4g}" if cost is not None else ""),
             f"The job's spec on the nodes: {REMOTE_SPEC} (from {spec_file}); its run directory: {REMOTE_RUN}."]
    if kind == "ray-cluster":
        lines += ["Run it (README, 'Running on AWS or GCP spot'):",
                  f"  ray up {file.name}",
                  f"  ray exec {file.name} --tmux '{run_command(t, 'auto', autoscale=True)}'",
                  f"  ray attach {file.name} --tmux          # watch it; Ctrl-b d detaches",
                  f"  ray rsync-down {file.name} '{REMOTE_RUN}/' ./spotwise-run && spotwise report ./spotwise-run",
                  f"  ray down {file.name}"]
        if t.cloud == "gcp":
            lines.append(f"Set provider.project_id (now {GCP_PROJECT_PLACEHOLDER}) to your GCP project first.")
        if t.cloud == "aws" and t.spot and t.bids:
            lines.append("MaxPrice is the plan's bid: AWS launches no spot node while the spot price is above it "
                         "(remove SpotOptions to pay the going price, at most on-demand).")
    else:
        lines += ["Run it (README, 'Running on AWS or GCP spot'):",
                  f"  sky launch -c {cluster_name(spec)} {file.name}"
                  + ("" if install.pip_arg else " --env SPOTWISE_INSTALL=git+https://github.com/OWNER/spotwise.git"),
                  f"  rsync -Pavz {cluster_name(spec)}:{REMOTE_RUN}/ ./spotwise-run && spotwise report ./spotwise-run",
                  f"  sky down {cluster_name(spec)}"]
        if t.spot:
            lines.append("SkyPilot gives every node the same resources: rank 0 (the coordinator and Ray head) is a spot "
                         "node too, and the job stops if it is revoked; the Ray cluster file keeps the coordinator on demand.")
        if t.cloud == "gcp" or t.bids:
            lines.append("SkyPilot takes no bid: spot nodes cost the going spot price.")
    if not install.pip_arg:
        lines.append("spotwise is not on PyPI: the setup stops until SPOTWISE_INSTALL (or --install) names a git URL or wheel.")
    lines += list(t.notes)
    lines.append("Files the spec names (market.traces, market.catalog, lifetimes, datasets) must be on the nodes too: add them "
                 "to file_mounts with the spec's paths.")
    lines.append("Checked against the launcher's schema by spotwise's tests; not launched by spotwise (no cloud account there).")
    return lines


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (SkyPilot's setup and run scripts) as ``|`` blocks, as one writes them by hand."""


_Dumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None))


def render(config: Mapping[str, Any], header: Sequence[str]) -> str:
    """YAML with the header as comments."""
    return "".join(f"# {line}\n" for line in header) + yaml.dump(dict(config), Dumper=_Dumper, sort_keys=False,
                                                                 width=10_000, allow_unicode=True)


@dataclass(frozen=True)
class EmitRequest:
    kind: str
    path: Path


@dataclass(frozen=True)
class EmitPlan:
    """What ``--emit`` asked for, checked before the plan is made (:func:`prepare_emits`)."""

    requests: tuple[EmitRequest, ...]
    install: Install
    spec_file: Path
    planned: bool  # spec_file is the planned spec (--write-spec)


def parse_emit(value: str) -> EmitRequest:
    """``KIND=FILE`` -> EmitRequest; InputError on another form or kind."""
    kind, sep, file = value.partition("=")
    kind = kind.strip()
    if not sep or not file.strip() or kind not in EMIT_KINDS:
        raise InputError(f"--emit takes KIND=FILE with KIND one of {', '.join(EMIT_KINDS)}, got {value!r}",
                         "write e.g. --emit ray-cluster=cluster.yaml or --emit skypilot=task.yaml", "--emit")
    return EmitRequest(kind, Path(file.strip()).expanduser())


def check_emit_file(path: Path) -> Path:
    """The file ``--emit`` writes: refused when it exists, or its folder is missing or unwritable."""
    if path.exists() and not path.is_dir():
        raise InputError("already exists", "remove it or choose another file name (--emit never overwrites)", f"--emit {path}")
    return check_output_file(path, "--emit")


def prepare_emits(values: Sequence[str], spec: JobSpec, *, install: str | None, spec_file: str | Path,
                  planned_spec: str | Path | None = None, traces: Sequence[str] = (),
                  types: Sequence[str] | None = None) -> EmitPlan | None:
    """Check ``--emit`` and ``--install`` before the plan is made: KIND=FILE, the files free and writable, a VM
    spec with a place to launch in (a region, or traces to pick the zone from), an AWS or GCP instance type.
    The nodes get ``planned_spec`` (``--write-spec``) when given, else ``spec_file``."""
    if not values:
        if install is not None:
            raise InputError("--install applies to --emit", "add --emit ray-cluster=FILE or --emit skypilot=FILE, or drop "
                             "--install", "--install")
        return None
    reqs = tuple(parse_emit(v) for v in values)
    for i, r in enumerate(reqs):
        if any(r.path.resolve() == o.path.resolve() for o in reqs[:i]) or (
                planned_spec is not None and r.path.resolve() == Path(planned_spec).resolve()):
            raise InputError("the same file is named twice", "give each --emit (and --write-spec) its own file",
                             f"--emit {r.path}")
        check_emit_file(r.path)
    if spec.cluster.kind == "serverless":
        emit_target({}, spec)  # raises with the serverless message
    if not spec.cluster.region and not traces and not spec.market.traces:
        raise InputError("the plan will name no region or zone to launch in",
                         "set cluster.region in the spec (e.g. us-east-1b or us-central1-a), or plan with --trace so "
                         "that spotwise picks the zone", "--emit")
    if not types:
        from spotwise.market.world import load_catalog

        cloud = load_catalog(spec).instance(spec.cluster.instance_type, cloud=spec.cluster.cloud).cloud
        if cloud not in EMIT_CLOUDS:
            raise InputError(f"cluster.instance_type {spec.cluster.instance_type} is on {cloud}; --emit writes AWS and GCP "
                             "clusters", "plan for an AWS or GCP instance type", "--emit")
    return EmitPlan(reqs, parse_install(install), Path(planned_spec or spec_file), planned_spec is not None)


def write_emits(ep: EmitPlan | None, spec: JobSpec, plan: Any) -> list[str]:
    """Write every requested file for ``plan`` (a :class:`~spotwise.planner.plan_types.Plan`); one message per file
    and per note.  ``ep.spec_file`` is the spec mounted on the nodes (the ``--write-spec`` file when given)."""
    if ep is None:
        return []
    rec = plan.extra.get("recommendation")
    out: list[str] = []
    if spec.cluster.pools:  # a pool mix: the one pool it uses (planner/emit_pools.py)
        from spotwise.planner.emit_pools import pool_emit_view

        rec, spec = pool_emit_view(rec, spec, plan.extra)
    t = emit_target(rec, spec)
    if not ep.planned and t.initial_workers != spec.cluster.workers:
        out.append(f"note: {ep.spec_file} asks for {spec.cluster.workers} workers, the plan for {t.workers}: add "
                   "--write-spec FILE to run the planned spec on the cluster")
    for r in ep.requests:
        cfg = GENERATORS[r.kind](rec, spec, spec_file=ep.spec_file.resolve(), install=ep.install)
        check_emit_file(r.path)
        write_output_text(r.path, render(cfg, _header(r.kind, t, spec, rec, r.path, str(ep.spec_file), ep.install)), "--emit")
        out.append(f"{r.kind} file written to {r.path}: {t.nodes} {t.instance.name} node(s) in {t.zone or t.region}"
                   f" ({'spot' if t.spot else 'on-demand'}); see its header for the commands")
    if not ep.install.pip_arg:
        out.append("note: no --install given: the nodes' setup stops until SPOTWISE_INSTALL names spotwise's git URL or "
                   "wheel (spotwise is not on PyPI)")
    out += [f"note: {n}" for n in t.notes]
    return out
