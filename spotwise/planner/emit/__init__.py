"""Cluster files for the plan's recommended place (issue 20 item 3, issue 29 item 3): ``spotwise plan SPEC
--emit KIND=FILE``.

``spotwise plan`` recommends a place -- cloud, region/zone, instance type, worker count, spot or
on-demand (``extra.recommendation``).  ``--emit`` turns it and the spec into files that bring such a
cluster up and run the job on it:

* ``ray-cluster`` -- a Ray cluster-launcher YAML (``ray up``, :mod:`spotwise.planner.emit.ray`): the
  coordinator on an on-demand CPU head (the instance plan and simulate bill,
  :func:`spotwise.market.coordinator.coordinator_for`), spot GPU workers;
* ``skypilot`` -- a SkyPilot managed job (``sky jobs launch``, :mod:`spotwise.planner.emit.sky`),
  recovered by SkyPilot after a preemption and resuming from ``outputs.uri`` (required).

Both name an image with the NVIDIA driver and Python >= 3.10 (and say why), set up a venv with this
spotwise (``--install``: a git URL, a wheel or a source folder, mounted) and Ray, check the GPU
driver, mount the spec and every file it names and the workload's module
(:mod:`spotwise.planner.emit.files`), and run ``spotwise run ... --ray-address ... --notice-source
aws|gcp``, resuming the run it finds (:mod:`spotwise.planner.emit.scripts`).  The spec on the nodes
is written beside each file (``FILE.node-spec.yaml``): the job with its input paths pointing at the
mounted copies.

:func:`prepare_emits` checks the flags and the files before the plan is made, :func:`write_emits`
writes the files, refusing an existing file or a symbolic link (dangling or not) at any of them -- the
named file and its siblings (:class:`InputError`, exit 2) -- and writing each through a temp file renamed
into place (:func:`spotwise.outputfiles.write_output_text`), never through a link.  Everything in the
files is built by the YAML library (comments with :func:`~spotwise.outputfiles.yaml_comment`) and the
node's shell by :mod:`~spotwise.planner.emit.scripts`, which quotes every user value (issue 38).  Validated in the tests
against Ray's schema and SkyPilot's schemas, and rehearsed in a scratch folder standing in for the
node (tests/test_emit_rehearsal.py); not launched from here.

This package decides no number of the plan and implements no paper's section: it writes down the place,
workers and bids :mod:`spotwise.planner.plan` chose (the node files in :mod:`~spotwise.planner.emit.files`,
the place and head node in :mod:`~spotwise.planner.emit.place`, a pool mix in
:mod:`~spotwise.planner.emit.pools`, the launchers' files in :mod:`~spotwise.planner.emit.ray` and
:mod:`~spotwise.planner.emit.sky`, the node's shell in :mod:`~spotwise.planner.emit.scripts`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from spotwise.config import JobSpec, load_spec
from spotwise.errors import InputError
from spotwise.outputfiles import check_output_file, write_output_text, yaml_comment
from spotwise.planner.emit.files import (
    REMOTE_DIR,
    REMOTE_RUN,
    REMOTE_SPEC,
    Install,
    NodeFiles,
    node_files,
    node_spec_dict,
    parse_install,
)
from spotwise.planner.emit.place import (
    EMIT_CLOUDS,
    EMIT_KINDS,
    GCP_PROJECT_PLACEHOLDER,
    RAY_PORT,
    EmitTarget,
    cluster_name,
    emit_target,
    gce_machine,
    head_instance,
)
from spotwise.planner.emit.ray import RUN_SCRIPT, ray_cluster_config
from spotwise.planner.emit.scripts import AWS_CPU_IMAGE_SSM, AWS_GPU_IMAGE_SSM
from spotwise.planner.emit.sky import job_uri, skypilot_task

__all__ = ["EMIT_CLOUDS", "EMIT_KINDS", "GCP_PROJECT_PLACEHOLDER", "RAY_PORT", "REMOTE_DIR", "REMOTE_RUN", "REMOTE_SPEC",
           "EmitPlan", "EmitRequest", "EmitTarget", "Install", "NodeFiles", "check_emit_file", "cluster_name",
           "emit_outputs", "emit_paths", "emit_target", "gce_machine", "head_instance", "node_files", "parse_emit",
           "parse_install", "prepare_emits", "ray_cluster_config", "render", "run_command", "skypilot_task",
           "spec_inputs", "write_emits"]


def run_command(t: EmitTarget, address: str, autoscale: bool = False) -> str:
    """The bare ``spotwise run`` of the job on a cluster (the emitted run scripts wrap it in resume-or-start)."""
    return (f"spotwise run {REMOTE_SPEC} --out {REMOTE_RUN} --ray-address {address} "
            f"--notice-source {t.notice_source}" + (" --autoscale" if autoscale else ""))


GENERATORS = {"ray-cluster": ray_cluster_config, "skypilot": skypilot_task}

# ------------------------------------------------------------------------------------- files
def _header(kind: str, t: EmitTarget, spec: JobSpec, rec: Mapping[str, Any], file: Path, spec_file: str,
            install: Install, head: str, uri: str | None) -> list[str]:
    cost = rec.get("expected_cost")
    name = cluster_name(spec)
    q = shlex.quote  # the commands below are for the user to copy: every file name and URI in them quoted
    fname, cfgname = q(file.name), q(f"{file.stem}.sky-config.yaml")
    gpu = t.instance.accelerator_count > 0
    lines = [f"{spec.name}: written by `spotwise plan --emit {kind}={file.name}` -- the plan's recommendation:",
             f"  {t.strategy}, {t.workers} worker(s) on {t.instance.name} ({'spot' if t.spot else 'on-demand'}) in "
             f"{t.zone or t.region} ({t.cloud})" + (f", expected cost ${float(cost):.4g}" if cost is not None else ""),
             f"The job's spec on the nodes: {REMOTE_SPEC} (from {spec_file}: the job with its input files pointing at "
             f"their mounted copies); its run directory: {REMOTE_RUN}" + (f", mirrored to {uri}." if uri else ".")]
    if kind == "ray-cluster":
        lines.append(f"The coordinator runs on the head, {head} on demand (the machine plan and simulate bill); the "
                     f"workers on {t.instance.name} {'spot' if t.spot else 'on-demand'} nodes.")
        if t.cloud == "aws":
            lines += ["Images (ImageId: resolve:ssm:NAME, an AMI named by AWS's public SSM parameter, resolved by EC2 at launch):",
                      f"  workers: {AWS_GPU_IMAGE_SSM if gpu else 'Canonical Ubuntu 22.04'}" + (
                          " -- the Deep Learning Base OSS NVIDIA Driver GPU AMI (Ubuntu 22.04): NVIDIA driver and CUDA, "
                          "Python 3.10, what torch's CUDA wheels need" if gpu else ""),
                      f"  head: {AWS_CPU_IMAGE_SSM} -- Canonical Ubuntu 22.04 (Python 3.10), no GPU needed",
                      "  Ray's default AMI (Ubuntu 18.04, Python 3.7/glibc 2.27) cannot install spotwise. To pin the AMI: "
                      f"aws ssm get-parameter --region {t.region} --name NAME --query Parameter.Value --output text"]
        else:
            lines.append("Images: Deep Learning VM families (deeplearning-platform-release): NVIDIA driver (installed at "
                         "boot) and Python 3.10 on the GPU workers, the CPU family on the head.")
        lines += ["Run it (README, 'Running on AWS or GCP spot'):",
                  f"  ray up {fname}",
                  f"  ray exec {fname} --tmux 'bash {RUN_SCRIPT}'   # resumes the run if it has a checkpoint",
                  f"  ray attach {fname} --tmux          # watch it; Ctrl-b d detaches",
                  "Results: " + (f"{uri} (and " if uri else "") + f"ray rsync-down {fname} '{REMOTE_RUN}/' ./spotwise-run "
                  "&& spotwise report ./spotwise-run" + (")" if uri else ""),
                  f"  ray down {fname}"]
        if t.cloud == "gcp":
            lines.append(f"Set provider.project_id (now {GCP_PROJECT_PLACEHOLDER}) to your GCP project first.")
        if t.cloud == "aws" and t.spot and t.bids:
            lines.append("MaxPrice is the plan's bid: AWS launches no spot node while the spot price is above it "
                         "(remove SpotOptions to pay the going price, at most on-demand).")
    else:
        lines += ["A SkyPilot managed job: SkyPilot relaunches it after a preemption (resources.job_recovery) and the run "
                  f"resumes from the last checkpoint in {uri}; every node is spot, rank 0 runs the coordinator.",
                  f"The one on-demand machine is SkyPilot's jobs controller: {file.stem}.sky-config.yaml pins it to the {head} "
                  "that spotwise plan bills as the coordinator (SKYPILOT_CONFIG=... below; a controller already up keeps "
                  "its type and is shared by your managed jobs).",
                  "Image: SkyPilot's default (image_id left out): it has the NVIDIA driver, CUDA and a Python 3.10 conda.",
                  "Run it (README, 'Running on AWS or GCP spot'):",
                  f"  SKYPILOT_CONFIG={cfgname} sky jobs launch -n {name} {fname}"
                  + ("" if install.pip_arg else " --env SPOTWISE_INSTALL=git+https://github.com/OWNER/spotwise.git"),
                  f"  sky jobs queue; sky jobs logs -n {name}",
                  f"Results: {uri} (summary.json, events.jsonl, checkpoints/); spotwise run --resume {q(str(uri))} continues it "
                  "anywhere.",
                  "The nodes write there with the cloud credentials SkyPilot gives them (an IAM role/service account "
                  "that can write the bucket)."]
        if t.cloud == "gcp" or t.bids:
            lines.append("SkyPilot takes no bid: spot nodes cost the going spot price.")
    if not install.pip_arg:
        lines.append("spotwise is not on PyPI: the setup stops until SPOTWISE_INSTALL (or --install) names a git URL or wheel.")
    lines += list(t.notes)
    lines.append("Checked against the launcher's schema by spotwise's tests and rehearsed on a scratch 'node'; not "
                 "launched by spotwise (no cloud account there).")
    return lines


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (SkyPilot's setup and run scripts) as ``|`` blocks, as one writes them by hand; a string
    with another line break or a control character (a file name may hold one) double-quoted, where YAML escapes it
    (PyYAML's plain and single-quoted styles fold U+0085, U+2028 and U+2029 into other text)."""


_ODD = re.compile("[^\n\x20-\x7E\xA0-\u2027\u202A-\uD7FF\uE000-\uFEFE\uFF00-\uFFFD\U00010000-\U0010FFFF]")


def _str_style(v: str) -> str | None:
    return '"' if _ODD.search(v) else "|" if "\n" in v else None


_Dumper.add_representer(str, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style=_str_style(v)))


def render(config: Mapping[str, Any], header: Sequence[str]) -> str:
    """YAML with the header as comments (:func:`~spotwise.outputfiles.yaml_comment`: a name with a line break in it
    stays inside its comment)."""
    return yaml_comment(list(header)) + yaml.dump(dict(config), Dumper=_Dumper, sort_keys=False,
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
    """The file ``--emit`` writes: refused when it exists, is a symbolic link (even a dangling one), or its folder is
    missing or unwritable."""
    if path.is_symlink():
        return check_output_file(path, "--emit")  # refused: spotwise never writes through a link
    if path.exists() and not path.is_dir():
        raise InputError("already exists", "remove it or choose another file name (--emit never overwrites)", f"--emit {path}")
    return check_output_file(path, "--emit")


def node_spec_path(path: Path) -> Path:
    """The spec the nodes of ``path`` read, written beside it: ``task.yaml`` -> ``task.node-spec.yaml``."""
    return path.with_name(f"{path.stem}.node-spec.yaml")


def sky_config_path(path: Path) -> Path:
    """The SkyPilot config beside a managed-job file: ``task.yaml`` -> ``task.sky-config.yaml``."""
    return path.with_name(f"{path.stem}.sky-config.yaml")


def emit_paths(r: EmitRequest) -> list[Path]:
    """Every file ``--emit`` writes for ``r``: the named file first, then its siblings."""
    return [r.path, node_spec_path(r.path), *([sky_config_path(r.path)] if r.kind == "skypilot" else [])]


def emit_outputs(values: Sequence[str]) -> list[tuple[Path, str]]:
    """``(path, "--emit")`` of every file the ``--emit`` values write (for :func:`spotwise.outputfiles.refuse_inputs`)."""
    return [(p, "--emit") for v in values for p in emit_paths(parse_emit(v))]


def spec_inputs(spec: JobSpec) -> list[str]:
    """Every input file ``spec`` names (traces, catalogs, fit_to, lifetimes, the dataset, the pools' files)."""
    from spotwise.spec.input_paths import spec_paths

    return [str(box[key]) for _, box, key in spec_paths(spec.to_dict())]


def sky_controller_config(cloud: str, head: str) -> dict[str, Any]:
    """SkyPilot's config pinning the managed-jobs controller to the coordinator the plan bills (issue 29 item 1):
    in a managed job the controller is the one on-demand machine, where a Ray cluster has its head."""
    return {"jobs": {"controller": {"resources": {"cloud": cloud, "instance_type": head}}}}


def prepare_emits(values: Sequence[str], spec: JobSpec, *, install: str | None, spec_file: str | Path,
                  planned_spec: str | Path | None = None, traces: Sequence[str] = (),
                  types: Sequence[str] | None = None) -> EmitPlan | None:
    """Check ``--emit`` and ``--install`` before the plan is made: KIND=FILE, the files free and writable, a VM
    spec with a place to launch in (a region, or traces to pick the zone from), an AWS or GCP instance type,
    every file it names present here (to be mounted), and ``outputs.uri`` for a SkyPilot managed job.
    The nodes get ``planned_spec`` (``--write-spec``) when given, else ``spec_file``, with paths rewritten."""
    if not values:
        if install is not None:
            raise InputError("--install applies to --emit", "add --emit ray-cluster=FILE or --emit skypilot=FILE, or drop "
                             "--install", "--install")
        return None
    reqs = tuple(parse_emit(v) for v in values)
    taken = {Path(planned_spec).resolve()} if planned_spec is not None else set()
    for r in reqs:
        for path in emit_paths(r):
            if path.resolve() in taken:
                raise InputError("the same file is named twice", "give each --emit (and --write-spec) its own file "
                                 f"(--emit {r.path} also writes {', '.join(p.name for p in emit_paths(r)[1:])})",
                                 f"--emit {r.path}")
            taken.add(path.resolve())
            check_emit_file(path)
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
    if any(r.kind == "skypilot" for r in reqs):
        job_uri(spec)  # a managed job keeps its run on object storage
    node_files(spec, Path(spec_file).resolve().parent)  # every file the spec names exists here, to be mounted
    return EmitPlan(reqs, parse_install(install), Path(planned_spec or spec_file), planned_spec is not None)


#: seconds a SkyPilot managed job takes to come back after a preemption: new nodes, setup, Ray, the restore
#: (an assumption, as the trace sweeps' default --restart; a cold GPU node's provisioning alone is minutes)
SKY_RELAUNCH_S = 300.0


def skypilot_restart_note(spec: JobSpec, plan: Any, nodes: int) -> str:
    """What a preemption costs a SkyPilot managed job: every node is spot, the coordinator too, so SkyPilot
    relaunches the whole job from its last checkpoint (not spotwise's in-place recovery)."""
    from spotwise.reports.units import human_duration

    time_s, cost = getattr(plan, "expected_time_s", None), getattr(plan, "expected_cost", None)
    step_s = float(time_s) / max(1, int(getattr(plan, "iterations", 1) or 1)) if time_s else 0.0
    every = int(spec.outputs.checkpoint_every or 0)
    lost_s = step_s * every / 2.0  # on average half a checkpoint interval of steps is redone
    rate = float(cost) / float(time_s) if time_s and cost else 0.0
    each = SKY_RELAUNCH_S + lost_s
    return (f"note: on SkyPilot every node is spot, the coordinator (rank 0) too: a preemption of any of the {nodes} "
            "node(s) relaunches the whole job from its last checkpoint (SkyPilot's managed-job recovery), not spotwise's "
            f"in-place recovery. Each costs about {human_duration(each)} (~{human_duration(SKY_RELAUNCH_S)} to relaunch, "
            f"assumed, and {human_duration(lost_s)} of steps redone: half of checkpoint_every = {every} steps) and "
            f"~${each * rate:,.2f} at the plan's rate; the plan's cost and P(deadline) assume in-place recovery. For that, "
            "emit ray-cluster (an on-demand head runs the coordinator).")


def write_emits(ep: EmitPlan | None, spec: JobSpec, plan: Any) -> list[str]:
    """Write every requested file for ``plan`` (a :class:`~spotwise.planner.plan.records.Plan`); one message per file
    and per note.  ``ep.spec_file`` is the spec mounted on the nodes (the ``--write-spec`` file when given)."""
    if ep is None:
        return []
    rec = plan.extra.get("recommendation")
    out: list[str] = []
    if spec.cluster.pools:  # a pool mix: the one pool it uses (planner/emit/pools.py)
        from spotwise.planner.emit.pools import pool_emit_view

        rec, spec = pool_emit_view(rec, spec, plan.extra)
    t = emit_target(rec, spec)
    if not ep.planned and t.initial_workers != spec.cluster.workers:
        out.append(f"note: {ep.spec_file} asks for {spec.cluster.workers} workers, the plan for {t.workers}: add "
                   "--write-spec FILE to run the planned spec on the cluster")
    base = ep.spec_file.resolve().parent
    node_job = load_spec(ep.spec_file) if ep.spec_file.is_file() else spec  # the planned spec when written
    files = node_files(node_job, base)
    node_text = (yaml_comment(f"{node_job.name}: the spec the nodes read (from {ep.spec_file}), its input files at their "
                              "mounted copies") + yaml.safe_dump(node_spec_dict(node_job, files, base), sort_keys=False))
    head = head_instance(spec, t).name
    uri = getattr(node_job.outputs, "uri", None)
    for r in ep.requests:
        node_path = node_spec_path(r.path)
        cfg = GENERATORS[r.kind](rec, spec, spec_file=node_path.resolve(), install=ep.install, files=files)
        for path in emit_paths(r):  # again just before writing: nothing appeared there while the plan was made
            check_emit_file(path)
        write_output_text(node_path, node_text, "--emit")
        write_output_text(r.path, render(cfg, _header(r.kind, t, spec, rec, r.path, str(ep.spec_file), ep.install, head,
                                                      uri)), "--emit")
        where = f"{t.nodes} {t.instance.name} node(s) in {t.zone or t.region} ({'spot' if t.spot else 'on-demand'})"
        if r.kind == "skypilot":
            cfg_path = sky_config_path(r.path)
            write_output_text(cfg_path, yaml_comment([
                f"SkyPilot config for {r.path.name}: its managed-jobs controller is the on-demand {head} that spotwise "
                "plan bills as the coordinator",
                f"use: SKYPILOT_CONFIG={shlex.quote(cfg_path.name)} sky jobs launch {shlex.quote(r.path.name)}"])
                + yaml.safe_dump(sky_controller_config(t.cloud, head), sort_keys=False), "--emit")
            out.append(f"{r.kind} file written to {r.path} (the nodes' spec: {node_path.name}; SkyPilot config: "
                       f"{cfg_path.name}, its jobs controller {head} on demand): {where}; see its header for the commands")
        else:
            out.append(f"{r.kind} file written to {r.path} (the nodes' spec: {node_path.name}): head {head} on demand, "
                       f"{where}; see its header for the commands")
    if any(r.kind == "skypilot" for r in ep.requests) and t.spot:
        out.insert(0, skypilot_restart_note(spec, plan, t.nodes))
    if not ep.install.pip_arg:
        out.append("note: no --install given: the nodes' setup stops until SPOTWISE_INSTALL names spotwise's git URL or "
                   "wheel (spotwise is not on PyPI)")
    out += [f"note: {n}" for n in (*t.notes, *files.notes)]
    return out
