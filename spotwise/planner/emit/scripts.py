"""The shell the emitted cluster files run on a node (issue 29 item 3): the setup (a checked NVIDIA
driver, Python >= 3.10, a virtual environment with this spotwise and Ray) and the run (Ray up, then
``spotwise run`` that resumes the run it finds -- in ``outputs.uri`` or the run directory -- or
starts it).  The same text serves Ray's cluster launcher and SkyPilot, and
``tests/test_emit_rehearsal.py`` runs it as written in a scratch folder standing in for the node.

``SPOTWISE_REHEARSAL=1`` skips the driver check and nothing else (a rehearsal on a CPU machine).

The shell is built, never pasted (issue 38): every value that comes from a spec, a catalog, a flag or a
file name is :func:`sh_quote`d (a ``~/`` path as ``"$HOME"/'rest'``, so the home still expands) or reaches
the script through the environment (``SPOTWISE_INSTALL``) and is expanded inside double quotes; nothing the
user wrote is ever inside double quotes, where ``$( )``, backticks and ``$VAR`` would run.
"""

from __future__ import annotations

import shlex
from typing import Any

from spotwise.capacity.raystart import ray_system_config_json
from spotwise.planner.emit.files import (
    INSTALL_MISSING,
    REMOTE_DIR,
    REMOTE_RUN,
    REMOTE_SPEC,
    Install,
    NodeFiles,
)

#: the images, each with the reason it is chosen (a YAML comment in the emitted file)
AWS_GPU_IMAGE_SSM = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
AWS_CPU_IMAGE_SSM = "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
#: EC2 resolves ``resolve:ssm:NAME`` in RunInstances' ImageId to the AMI the public SSM parameter names
AWS_GPU_IMAGE = f"resolve:ssm:{AWS_GPU_IMAGE_SSM}"
AWS_CPU_IMAGE = f"resolve:ssm:{AWS_CPU_IMAGE_SSM}"


def _home(path: str) -> str:
    """A ``~/...`` path as the shell should see it inside double quotes -- for spotwise's own constant paths
    only (:data:`~spotwise.planner.emit.files.REMOTE_DIR` ...); a user's value goes through :func:`sh_quote`."""
    return "$HOME" + path[1:] if path.startswith("~") else path


def sh_quote(value: str) -> str:
    """``value`` as one shell word that expands to nothing else: :func:`shlex.quote`, except that a leading ``~/``
    (or a bare ``~``) becomes ``"$HOME"/`` outside the quotes, so that the node's home still expands."""
    value = str(value)
    if value == "~":
        return '"$HOME"'
    if value.startswith("~/"):
        rest = value[2:]
        return '"$HOME"/' + (shlex.quote(rest) if rest else "")
    return shlex.quote(value)


VENV = "$HOME/spotwise-venv"


def _pip_arg(install: Install, from_env: bool) -> str:
    if from_env or install.pip_arg is None:  # SkyPilot's envs (sky jobs launch --env SPOTWISE_INSTALL=... overrides it)
        return '"${SPOTWISE_INSTALL/#\\~/$HOME}"'
    return sh_quote(install.pip_arg)


def driver_check(instance: str, gpus: int, accelerator: str) -> str:
    """Fail the setup, saying why, when a GPU instance has no working NVIDIA driver."""
    why = (f"spotwise setup: nvidia-smi failed: this {instance} has {int(gpus)} {accelerator} GPU(s) but no working "
           "NVIDIA driver; launch it from an image that has one (the one named in this file)")
    return "\n".join([
        'if [ "${SPOTWISE_REHEARSAL:-0}" = 1 ]; then',
        '  echo "spotwise setup: SPOTWISE_REHEARSAL=1: NVIDIA driver check skipped (a rehearsal without GPU)"',
        "elif ! nvidia-smi > /dev/null 2>&1; then",
        f"  printf '%s\\n' {shlex.quote(why)} >&2",  # the catalog's names as one quoted word, never run
        "  exit 1",
        "fi",
    ])


#: the packages an ``outputs.uri`` scheme needs on every node (spotwise's ``cloud`` extra, by scheme)
URI_PACKAGES: dict[str, tuple[str, ...]] = {"s3": ("s3fs>=2024.6",), "gs": ("gcsfs>=2024.6",), "gcs": ("gcsfs>=2024.6",)}


#: what GPU nodes install besides: NVML's Python bindings, for the GPU busy share in step timing (the ``gpu`` extra)
GPU_PACKAGES: tuple[str, ...] = ("nvidia-ml-py>=12",)


def uri_packages(uri: str | None) -> tuple[str, ...]:
    """What a node must install to read and write ``uri`` (``s3://``: s3fs; ``gs://``: gcsfs; a path or
    ``file://``: nothing) -- issue 42 item 3: without it the run script failed at once on every node."""
    scheme = str(uri or "").split("://", 1)[0].lower() if "://" in str(uri or "") else ""
    return URI_PACKAGES.get(scheme, ())


def workload_installs(spec: Any, files: NodeFiles) -> tuple[tuple[str, ...], str | None]:
    """What the workload itself needs on the nodes (issue 42 item 3, :mod:`spotwise.spec.packages`): its
    ``workload.packages`` and the place of its mounted ``workload.requirements`` file (relative to
    :data:`~spotwise.planner.emit.files.REMOTE_DIR`; ``None`` without one)."""
    w = spec.workload
    req = files.remote(str(w.requirements)) if w.requirements else None
    if w.requirements and req is None:  # node_files mounts every path the spec names
        raise AssertionError(f"workload.requirements {w.requirements!r} was not mounted")
    return tuple(w.packages), req


def setup_script(install: Install, *, ray_version: str, gpu_check: str = "", from_env: bool = False,
                 ray_extra: str = "", packages: tuple[str, ...] = (), workload_packages: tuple[str, ...] = (),
                 requirements: str | None = None) -> str:
    """Python >= 3.10, the venv :data:`VENV`, Ray (``ray[ray_extra]``, the version that wrote the file),
    this spotwise and ``packages`` (what ``outputs.uri`` needs: :func:`uri_packages`) in it, then the
    workload's own (``workload_packages``, each one quoted word, and the mounted ``requirements`` file,
    relative to the job's folder on the node: :func:`workload_installs`), the venv on PATH for later
    commands."""
    own = []
    if workload_packages:
        own += ['echo "spotwise setup: installing workload.packages"',
                f'"{VENV}/bin/python" -m pip install -q ' + " ".join(shlex.quote(p) for p in workload_packages)]
    if requirements:
        own += ['echo "spotwise setup: installing workload.requirements"',
                f'"{VENV}/bin/python" -m pip install -q -r "{_home(REMOTE_DIR)}"/{shlex.quote(requirements)}']
    ray_name = f"ray[{ray_extra}]" if ray_extra else "ray"
    ray_req = shlex.quote(f"{ray_name}=={ray_version}" if ray_version else ray_name)
    return "\n".join([
        "set -e",
        *([gpu_check] if gpu_check else []),
        'PY=""',
        "for p in python3.12 python3.11 python3.10 python3; do",
        "  if command -v \"$p\" > /dev/null 2>&1 && \"$p\" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then",
        '    PY=$(command -v "$p"); break',
        "  fi",
        "done",
        'if [ -z "$PY" ]; then',
        '  echo "spotwise setup: no Python >= 3.10 on this image (spotwise needs 3.10 or newer); use the image named in '
        'this file" >&2',
        "  exit 1",
        "fi",
        f'if [ ! -x "{VENV}/bin/pip" ]; then  # Ubuntu ships venv support as a package of its own',
        f'  "$PY" -m venv "{VENV}" || {{ sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install '
        f'-y -qq "python3.$("$PY" -c \'import sys; print(sys.version_info[1])\')-venv" && "$PY" -m venv "{VENV}"; }}',
        "fi",
        f'"{VENV}/bin/python" -m pip install -q {ray_req}',
        *([f': "${{SPOTWISE_INSTALL:?{INSTALL_MISSING}}}"'] if from_env or install.pip_arg is None else []),
        f'"{VENV}/bin/python" -m pip install -q {_pip_arg(install, from_env)}',
        *([f'"{VENV}/bin/python" -m pip install -q ' + " ".join(shlex.quote(p) for p in packages)] if packages else []),
        *own,
        f'"{VENV}/bin/spotwise" --help > /dev/null',
        f"grep -qs spotwise-venv ~/.bashrc || echo 'export PATH=\"{VENV}/bin:$PATH\"' >> ~/.bashrc",
    ]) + "\n"


#: prints what to do with the run directory (or ``outputs.uri``) in argv[1]: completed, resume, restart or start
_STATE = r'''
import json, os, sys
target = sys.argv[1].rstrip("/")
if "://" in target:  # outputs.uri: read through fsspec, as spotwise writes it
    import fsspec
    fs, root = fsspec.core.url_to_fs(target)
    exists, read = fs.exists, fs.cat_file
else:
    root, exists, read = target, os.path.exists, lambda p: open(p, "rb").read()
def has(name):
    try:
        return exists(f"{root}/{name}")
    except Exception:
        return False
try:
    done = has("summary.json") and json.loads(read(f"{root}/summary.json")).get("status") == "completed"
except Exception:
    done = False
print("completed" if done else "resume" if has("checkpoints/manifest.json") else "restart" if has("spec.json") else "start")
'''.strip("\n")


def run_script(*, address: str, notice_source: str, autoscale: bool, uri: str | None, ray_up: str = "") -> str:
    """Bring Ray up (``ray_up``, SkyPilot) and run the job: resume the run found in ``uri`` (else the run
    directory), start it when there is none, do nothing when it has completed.  A relaunch after a
    preemption (SkyPilot's managed-job recovery) therefore continues from the last checkpoint."""
    if notice_source not in ("aws", "gcp", "none"):  # spotwise's own words, never the catalog's
        raise ValueError(f"notice_source must be aws, gcp or none, got {notice_source!r}")
    flags = f"--ray-address {address} --notice-source {notice_source}" + (" --autoscale" if autoscale else "")
    # the URI (checked at load: no quote, $, backtick or space can be in it) is quoted all the same
    target = sh_quote(uri or REMOTE_RUN)
    spec, run = sh_quote(REMOTE_SPEC), sh_quote(REMOTE_RUN)
    staging = f" --out {run}" if uri else ""  # a run resumed from its URI is staged in the run directory
    return "\n".join([
        *([ray_up] if ray_up else []),
        f'cd "{_home(REMOTE_DIR)}"',
        f'export PYTHONPATH="{_home(REMOTE_DIR)}/code${{PYTHONPATH:+:$PYTHONPATH}}"  # the workload\'s mounted module',
        f'STATE=$("{VENV}/bin/python" - {target} <<\'PY\'',
        _STATE,
        "PY",
        ")",
        'case "$STATE" in',
        f"  completed) printf 'spotwise: the run in %s has completed; nothing to do\\n' {target};;",
        # the job's own spec: the resume checks the run's recorded user code against it (issue 30 item 1)
        f'  resume) "{VENV}/bin/spotwise" run --resume {target} {spec}{staging} {flags};;',
        f'  restart) "{VENV}/bin/spotwise" run {spec} --out {run} --overwrite {flags};;',
        f'  *) "{VENV}/bin/spotwise" run {spec} --out {run} {flags};;',
        "esac",
    ]) + "\n"


def sky_ray_up(slots: int, nodes: int, port: int) -> str:
    """SkyPilot's distributed-Ray recipe: rank 0 starts the job's Ray head (SkyPilot's own Ray uses 6380) and
    waits for every node's ``spot`` slots; the other ranks join it and are done."""
    slots, nodes, port = int(slots), int(nodes), int(port)  # numbers only in the shell below
    start = (f'"{VENV}/bin/python" -m ray.scripts.scripts start --disable-usage-stats --include-dashboard=false '
             f"--resources='{{\"spot\": {slots}}}'")
    return "\n".join([
        "set -e",
        'HEAD_IP=$(echo "$SKYPILOT_NODE_IPS" | head -n1)',
        f'PORT="${{SPOTWISE_RAY_PORT:-{port}}}"',
        'if [ "${SKYPILOT_NODE_RANK:-0}" != "0" ]; then',
        "  sleep 10",
        f'  (: < "/dev/tcp/127.0.0.1/$PORT") 2> /dev/null || {start} --address="$HEAD_IP:$PORT"',
        "  exit 0",
        "fi",
        f'(: < "/dev/tcp/$HEAD_IP/$PORT") 2> /dev/null || {start} --head --node-ip-address="$HEAD_IP" --port="$PORT" '
        f"--system-config='{ray_system_config_json()}'",
        f'"{VENV}/bin/python" - "$HEAD_IP:$PORT" <<\'PY\'',
        "import sys, time, ray  # wait until every node's spot slots have joined",
        "ray.init(address=sys.argv[1], logging_level='ERROR')",
        f"while ray.cluster_resources().get('spot', 0) < {nodes * slots}:",
        "    time.sleep(5)",
        "PY",
    ])
