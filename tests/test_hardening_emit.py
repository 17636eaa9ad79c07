"""Issue 38 items 1, 2, 3, 5, 6: the files ``spotwise plan --emit`` and ``--write-spec`` write are built, never
pasted, and never written through a link.

For a table of hostile values -- ``$( )``, backticks, ``;``, ``|``, ``&&``, quotes, ``$HOME``, line breaks
(``\\n``, ``\\r``, U+0085, U+2028, U+2029), other control characters, 4,000-character strings -- put into the
spec's ``name``, ``outputs.uri``, ``cluster.region``, a user catalog's instance, accelerator and region
names, ``--install`` (pip argument, wheel file name) and the file names themselves, each is either refused
(:class:`InputError`, exit 2, naming the field) or the files are generated and then:

* every file loads with ``yaml.safe_load`` and has exactly the expected top-level keys; Ray's validator
  (``prepare_config`` + ``validate_config``) and SkyPilot's schemas accept them;
* every generated shell script (Ray: setup, head setup, worker setup, the head's ``run.sh``, the start
  commands; SkyPilot: setup and run) passes ``bash -n`` and, run in a scratch ``HOME`` with stub
  executables (python, pip, spotwise, ray, nvidia-smi, ... that only log their argv), runs no command of
  the hostile value: no ``PWNED`` file appears, the ``pwned`` stub is never called, and where the value
  reaches a command it arrives as ONE literal argument.

No Ray cluster, no plan for the table (the recommendation is given, as ``plan`` makes it); one CLI plan
end to end.  A few seconds in all.
"""

from __future__ import annotations

import copy
import functools
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from spotwise.config import load_spec, spec_from_dict
from spotwise.errors import InputError
from spotwise.planner import emit
from spotwise.planner.emit import scripts
from _load import bound

#: values that hold no control character: accepted in names, and must never run
HOSTILE = [
    "x$(touch PWNED)",
    "x`touch PWNED`",
    "x;touch PWNED;",
    "x|touch PWNED",
    "x && pwned",
    "x'$(pwned)'",
    'x"$(touch PWNED)"',
    "$HOME/x$(pwned)",
    "~/x$(pwned)",
    "A" * 4000 + "$(pwned)",
]
#: values that hold a line break or another control character: refused in names and URIs
CONTROL = [
    "x\ninitialization_commands: ['touch PWNED']\n#",
    "x\rtouch PWNED",
    "x\u2028touch PWNED",
    "x\u2029y",
    "x\x85touch PWNED",
    "x\ty",
    "x\x1b[2Jy",
    "x\x00y",
    "B" * 4000 + "\n$(pwned)",
]
RAY_KEYS = {"cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes", "provider", "auth",
            "available_node_types", "head_node_type", "file_mounts", "setup_commands", "head_setup_commands",
            "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands"}
SKY_KEYS = {"name", "resources", "num_nodes", "envs", "file_mounts", "setup", "run"}
SPEC_KEYS = {"name", "workload", "target", "cluster", "market", "policies", "outputs", "deadline", "budget_usd", "seed"}
STUB_NAMES = ("python3.12", "python3.11", "python3.10", "python3", "python", "pip", "spotwise", "ray", "nvidia-smi",
              "sudo", "apt-get", "pwned")


def _ids(values: list[str]) -> list[str]:
    return [ascii(v[:24]) + (f"+{len(v)}" if len(v) > 24 else "") for v in values]


# ------------------------------------------------------------------------------------- stubs
STUB = r"""#!/bin/bash
# logs its name and argv (NUL-separated, the record ended by \036) and does what the setup expects of it
{ printf '%s\0' "${0##*/}" "$@"; printf '\036\0'; } >> "$STUB_LOG"
case "${0##*/}" in
  python*)
    case "$1" in
      -c) exit 0;;
      -) cat > /dev/null; echo "${STUB_STATE:-start}"; exit 0;;
      -m) if [ "$2" = venv ]; then mkdir -p "$3/bin"; for n in python pip spotwise ray; do ln -sf "$STUB" "$3/bin/$n"; done; fi
          exit 0;;
    esac;;
  nvidia-smi) exit "${STUB_NVIDIA_RC:-0}";;
esac
exit 0
"""


class Node:
    """A scratch node: HOME, stubs first on PATH, a log of every stub call."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        (self.home / "spotwise-job").mkdir(parents=True)
        bin_dir = root / "stubs"
        bin_dir.mkdir()
        self.stub = bin_dir / "stub"
        self.stub.write_text(STUB)
        self.stub.chmod(0o755)
        for n in STUB_NAMES:
            (bin_dir / n).symlink_to(self.stub)
        venv = self.home / "spotwise-venv" / "bin"  # the venv as the setup leaves it (its creation is constant text)
        venv.mkdir(parents=True)
        for n in ("python", "pip", "spotwise", "ray"):
            (venv / n).symlink_to(self.stub)
        self.log = root / "stub.log"
        self.env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(self.home), "STUB": str(self.stub),
                    "STUB_LOG": str(self.log), "LANG": "C.UTF-8", "SKYPILOT_NODE_IPS": "127.0.0.1",
                    "SKYPILOT_NODE_RANK": "0", "SPOTWISE_RAY_PORT": "9"}  # port 9: closed, the ray-up probe fails fast

    def bash(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        syntax = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
        assert syntax.returncode == 0, (syntax.stderr, script[-2000:])
        res = subprocess.run(["bash", "-c", script], cwd=self.root, env={**self.env, **env}, capture_output=True,
                             timeout=bound(30))  # bytes: text mode would turn a \r into \n
        return subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode("utf-8", "surrogateescape"),
                                           res.stderr.decode("utf-8", "surrogateescape"))

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        out: list[list[str]] = []
        cur: list[str] = []
        for part in self.log.read_bytes().split(b"\0")[:-1]:
            if part == b"\036":
                out.append(cur)
                cur = []
            else:
                cur.append(part.decode("utf-8", "surrogateescape"))
        return out

    def assert_nothing_ran(self) -> None:
        assert not any(c[0] == "pwned" for c in self.calls()), [c for c in self.calls() if c[0] == "pwned"]
        assert not list(self.root.parent.rglob("PWNED*")), f"PWNED under {self.root.parent}"
        assert not list(Path.cwd().glob("PWNED*"))


def _home_expanded(value: str, home: Path) -> str:
    return str(home) + value[1:] if value.startswith("~/") else value


# ------------------------------------------------------------------------------------- the files
def _catalog(inst: str = "gpu.box", acc: str = "V100", region: str = "", cloud: str = "aws") -> dict[str, Any]:
    """One GPU type ``inst`` (any region), and one more entry in ``region`` (a region-specific entry)."""
    entry = {"name": inst, "cloud": cloud, "region": "", "accelerator": acc, "accelerator_count": 1, "vcpus": 8,
             "memory_gb": 60, "on_demand_per_hour": 3.0, "throughput": {"mlp": 1.0}, "source": "test"}
    return {"instances": [entry, {**entry, "name": "other.box", "region": region or "us-east-1"}]}


def _spec_dict(name: str = "job", inst: str = "gpu.box", uri: str = "s3://bucket/job", region: str = "us-east-1b",
               cloud: str = "aws") -> dict[str, Any]:
    return {"name": name, "seed": 0,
            "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
            "target": {"iterations": 40}, "deadline": "1h",
            "cluster": {"instance_type": inst, "cloud": cloud, "workers": 2, "region": region,
                        **({"coordinator_instance": "c5.large"} if cloud == "aws" else {})},
            "market": {"synthetic": {"kind": "constant", "price": 0.9}, "catalog": ["catalog.yaml"]},
            "outputs": {"checkpoint_every": 10, "plots": False, "uri": uri}}


def _write(folder: Path, spec: dict[str, Any], catalog: dict[str, Any], spec_name: str = "job.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "catalog.yaml").write_text(yaml.safe_dump(catalog))
    p = folder / spec_name
    p.write_text(yaml.safe_dump(spec))
    return p


def _emit(spec_path: Path, out: Path, install: str | None, place: str = "us-east-1b",
          stem: str = "c") -> tuple[Path, Path]:
    """Both files for the given recommendation, through prepare_emits and write_emits as ``plan`` calls them."""
    job = load_spec(spec_path)
    ray_file, sky_file = out / f"ray-{stem}.yaml", out / f"sky-{stem}.yaml"
    ep = emit.prepare_emits([f"ray-cluster={ray_file}", f"skypilot={sky_file}"], job, install=install,
                            spec_file=spec_path)
    rec = {"strategy": "one-bid", "place": place, "instance": job.cluster.instance_type, "workers": 2,
           "bids": [0.95, 0.95], "expected_cost": 1.0, "ranked_places": []}
    emit.write_emits(ep, job, SimpleNamespace(extra={"recommendation": rec}))
    return ray_file, sky_file


def _ray_validate(cfg: dict[str, Any]) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(copy.deepcopy(cfg)))


def _sky_validate(task: dict[str, Any], sky_cfg: dict[str, Any]) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    from sky.utils import common_utils, schemas

    common_utils.validate_schema(copy.deepcopy(task), schemas.get_task_schema(), "Invalid task YAML: ")
    common_utils.validate_schema(copy.deepcopy(task["resources"]), schemas.get_resources_schema(), "Invalid resources: ")
    common_utils.validate_schema(sky_cfg, schemas.get_config_schema(), "Invalid config YAML: ")


@functools.lru_cache(maxsize=None)
def _default_catalog() -> Any:
    from spotwise.market.catalog import DEFAULT_CATALOG_PATH, Catalog

    return Catalog.from_file(DEFAULT_CATALOG_PATH)


@pytest.fixture(autouse=True)
def _parse_the_packaged_catalog_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged catalog (immutable) read once for this file, not at each of emit's look-ups: keeps it fast."""
    from spotwise.market.catalog import Catalog

    monkeypatch.setattr(Catalog, "default", classmethod(lambda cls: _default_catalog()))


@pytest.fixture(autouse=True)
def _keep_tracebacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot's errors set ``sys.tracebacklimit = 0`` for the whole process; undo it after each test."""
    import sys

    monkeypatch.setattr(sys, "tracebacklimit", getattr(sys, "tracebacklimit", None), raising=False)
    if getattr(sys, "tracebacklimit", None) is None:
        monkeypatch.delattr(sys, "tracebacklimit", raising=False)


def _spotwise_installs(node: Any, any_python: bool = False) -> list[list[str]]:
    """The node's ``pip install`` calls but those of what ``outputs.uri`` needs (s3fs / gcsfs, issue 42)."""
    return [c for c in node.calls() if (any_python or c[0] == "python") and c[1:4] == ["-m", "pip", "install"]
            and not any(a.startswith(("s3fs", "gcsfs")) for a in c[4:])]


def _check_files(ray_file: Path, sky_file: Path, node: Node, *, name: str, inst: str, acc: str,
                 pip_arg: str | None, run: bool = True) -> None:
    """Load, validate and (``run``) run every file and script written for one hostile case."""
    files = [ray_file, sky_file, emit.node_spec_path(ray_file), emit.node_spec_path(sky_file),
             emit.sky_config_path(sky_file)]
    loaded = [yaml.safe_load(f.read_text(encoding="utf-8")) for f in files]
    cfg, task, ray_spec, sky_spec, sky_cfg = loaded
    assert set(cfg) == RAY_KEYS and set(task) == SKY_KEYS and set(sky_cfg) == {"jobs"}
    for s in (ray_spec, sky_spec):
        assert set(s) == SPEC_KEYS and s["name"] == name
        assert spec_from_dict(s).name == name  # the nodes' spec loads back
    assert cfg["available_node_types"]["spot-workers"]["node_config"]["InstanceType"] == inst
    assert (task["resources"].get("instance_type") or task["resources"]["ordered"][0]["instance_type"]) == inst
    _ray_validate(cfg)
    _sky_validate(task, sky_cfg)
    if not run:  # the scripts parse
        for script in (task["setup"], task["run"], *cfg["setup_commands"], *cfg["head_setup_commands"],
                       *cfg["worker_setup_commands"], *cfg["head_start_ray_commands"], *cfg["worker_start_ray_commands"]):
            syntax = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
            assert syntax.returncode == 0, syntax.stderr
        return

    why = f"this {inst} has 1 {acc} GPU(s)"  # the driver check's message holds the names literally
    for check in (cfg["worker_setup_commands"][0], task["setup"]):
        res = node.bash(check, STUB_NVIDIA_RC="1")
        assert res.returncode == 1 and why in res.stderr, res.stderr[-500:]
    # SkyPilot: setup (the install from the task's envs) then run, as SkyPilot runs them
    envs = {**{k: str(v) for k, v in task["envs"].items()}, "SPOTWISE_RAY_PORT": "9"}  # 9: closed, no Ray to find
    res = node.bash(task["setup"], **envs)
    assert res.returncode == 0, res.stderr[-2000:]
    pips = _spotwise_installs(node)
    if pip_arg is not None:
        assert pips[-1][5:] == [_home_expanded(pip_arg, node.home)], pips[-1][:6]
    for state in ("start", "resume", "completed"):
        res = node.bash(task["run"], STUB_STATE=state, **envs)
        assert res.returncode == 0, res.stderr[-2000:]
    # Ray: the setup, the head's (which writes run.sh), the workers', the start commands, then run.sh
    for cmd in (*cfg["setup_commands"], *cfg["head_setup_commands"], *cfg["worker_setup_commands"],
                *cfg["head_start_ray_commands"], *cfg["worker_start_ray_commands"]):
        res = node.bash(cmd, RAY_HEAD_IP="127.0.0.1")
        assert res.returncode == 0, (res.stderr[-2000:], cmd[-500:])
    run_sh = (node.home / "spotwise-job" / "run.sh").read_text()
    assert run_sh == emit.ray.ray_run_script("aws", "s3://bucket/job")
    res = node.bash(run_sh, STUB_STATE="resume")
    assert res.returncode == 0, res.stderr[-2000:]
    if pip_arg is not None:  # Ray's setup installs --install as one argument too
        pips = _spotwise_installs(node)
        assert [_home_expanded(pip_arg, node.home)] in [p[5:] for p in pips]
    node.assert_nothing_ran()


# ------------------------------------------------------------------------------------- refused at load
@pytest.mark.parametrize("value", CONTROL, ids=_ids(CONTROL))
def test_names_with_control_characters_are_refused_naming_the_field(tmp_path: Path, value: str) -> None:
    with pytest.raises(InputError) as e:
        spec_from_dict(_spec_dict(name=value))
    assert e.value.where and e.value.where.endswith("name"), e.value.where
    with pytest.raises(InputError) as e:
        spec_from_dict(_spec_dict(region=value))
    assert "region" in str(e.value.where)
    from spotwise.market.catalog import Catalog

    for field, cat in (("name", _catalog(inst=value)), ("accelerator", _catalog(acc=value)),
                       ("region", _catalog(region=value))):
        if value.strip() != value and field == "name":
            continue  # the catalog strips the ends of a name: what is left is checked
        with pytest.raises(InputError) as e:
            Catalog.from_mapping(cat, "user.yaml")
        assert field in str(e.value.where) and "user.yaml" in str(e.value.where), e.value.where
    with pytest.raises(InputError) as e:
        emit.parse_install(value)
    assert e.value.where == "--install"


@pytest.mark.parametrize("value", HOSTILE + CONTROL, ids=_ids(HOSTILE + CONTROL))
def test_an_output_uri_holds_only_plain_characters(value: str) -> None:
    for uri in (f"s3://bucket/{value}", f"gs://bucket/run/{value}", f"file:///tmp/{value}"):
        with pytest.raises(InputError) as e:
            spec_from_dict(_spec_dict(uri=uri))
        assert str(e.value.where).endswith("uri"), e.value.where
    assert spec_from_dict(_spec_dict(uri="s3://bucket/runs/job-1_a.b=c+d@e,f")).outputs.uri


def test_the_issues_examples_exit_2_through_the_cli(cli: Any, tmp_path: Path) -> None:
    spec = _write(tmp_path, _spec_dict(uri="s3://bucket/x$(touch PWNED)"), _catalog())
    args = ["--emit", f"ray-cluster={tmp_path / 'r.yaml'}", "--emit", f"skypilot={tmp_path / 't.yaml'}",
            "--install", "git+https://x/y.git"]
    code, _, err = cli("plan", str(spec), *args)
    assert code == 2 and "outputs.uri" in err and "Traceback" not in err, err
    spec.write_text(yaml.safe_dump(_spec_dict(name="x\ninitialization_commands: ['touch PWNED']\n#")))
    code, _, err = cli("plan", str(spec), *args)
    assert code == 2 and ": name:" in err and "control character" in err, err
    spec.write_text(yaml.safe_dump(_spec_dict()))
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(_catalog(acc="V100\u2028x")))
    code, _, err = cli("plan", str(spec), *args)
    assert code == 2 and "accelerator" in err and "catalog.yaml" in err, err
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(_catalog()))
    wheel = tmp_path / "sw$(touch PWNED).whl"
    wheel.write_bytes(b"")
    code, _, err = cli("plan", str(spec), *args[:-1], str(wheel))
    assert code == 2 and "--install" in err and "wheel" in err, err
    assert not (tmp_path / "r.yaml").exists() and not (tmp_path / "t.yaml").exists()
    assert not list(tmp_path.rglob("PWNED*"))


def test_a_region_that_is_no_region_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    for value in HOSTILE:
        d = _spec_dict(region=value, inst="p3.2xlarge")
        del d["market"]["catalog"]
        job = spec_from_dict(d, resolve=False)
        with pytest.raises(InputError, match="not an AWS region or zone"):
            emit.emit_target({"strategy": "one-bid", "place": value, "instance": "p3.2xlarge", "workers": 1}, job)


# ------------------------------------------------------------------------------------- generated and run
@pytest.mark.parametrize("value", HOSTILE, ids=_ids(HOSTILE))
def test_hostile_names_are_generated_as_data_and_never_run(tmp_path: Path, value: str) -> None:
    """The value as the job's name, the catalog's instance, accelerator and region names, the pip argument and
    (where a file name can hold it) the spec's and the emitted files' names -- all at once."""
    folder = tmp_path / "w"
    file_ok = "/" not in value and len(value) < 200
    spec_path = _write(folder, _spec_dict(name=value, inst=value), _catalog(inst=value, acc=value, region=value),
                       spec_name=f"s{value}.yaml" if file_ok else "job.yaml")
    pip_arg = f"git+https://example.org/s.git#egg={value}"
    ray_file, sky_file = _emit(spec_path, folder, pip_arg, stem=value if file_ok else "c")
    node = Node(tmp_path / "node")
    _check_files(ray_file, sky_file, node, name=value, inst=value, acc=value, pip_arg=pip_arg)


@pytest.mark.parametrize("value", CONTROL, ids=_ids(CONTROL))
def test_control_characters_in_file_names_stay_inside_their_comments(tmp_path: Path, value: str) -> None:
    """File names may hold any character but '/' and NUL: in the header comments they are escaped, in the YAML
    values quoted by the YAML library, and the files keep exactly their keys.  (No file name reaches the scripts:
    they are the plain case's, run in the test above.)"""
    if "\x00" in value or len(value) > 200:
        pytest.skip("not a file name")
    folder = tmp_path / "w"
    spec_path = _write(folder, _spec_dict(), _catalog(), spec_name=f"s{value}.yaml")
    ray_file, sky_file = _emit(spec_path, folder, "git+https://example.org/s.git", stem=value)
    node = Node(tmp_path / "node")
    _check_files(ray_file, sky_file, node, name="job", inst="gpu.box", acc="V100", pip_arg="git+https://example.org/s.git",
                 run=False)
    plain = _emit(_write(tmp_path / "p", _spec_dict(), _catalog()), tmp_path / "p", "git+https://example.org/s.git")
    for mine, theirs in zip((ray_file, sky_file), plain):
        a, b = yaml.safe_load(mine.read_text()), yaml.safe_load(theirs.read_text())
        for key in ("setup_commands", "head_setup_commands", "worker_setup_commands", "setup", "run"):
            assert a.get(key) == b.get(key)
    assert yaml.safe_load(ray_file.read_text())["file_mounts"][emit.REMOTE_SPEC] == str(emit.node_spec_path(ray_file).resolve())


def test_a_gcp_accelerator_name_is_data_too(tmp_path: Path) -> None:
    value = "v100$(pwned)"
    spec_path = _write(tmp_path / "w", _spec_dict(inst="gce-box", cloud="gcp", region="us-central1-a"),
                       _catalog(inst="gce-box", acc=value, cloud="gcp"))
    job = load_spec(spec_path)
    rec = {"strategy": "one-bid", "place": "us-central1-a", "instance": "gce-box", "workers": 1, "bids": []}
    cfg = emit.ray_cluster_config(rec, job)
    task = emit.skypilot_task(rec, job)
    _ray_validate(yaml.safe_load(emit.render(cfg, [f"gcp {value}"])))
    node = Node(tmp_path / "node")
    for script in (cfg["worker_setup_commands"][0], task["setup"]):
        res = node.bash(script, STUB_NVIDIA_RC="1")
        assert res.returncode == 1 and value in res.stderr
    node.assert_nothing_ran()


# ------------------------------------------------------------------------------------- the scripts themselves
@pytest.mark.parametrize("value", HOSTILE + CONTROL, ids=_ids(HOSTILE + CONTROL))
def test_the_scripts_quote_what_they_are_given(tmp_path: Path, value: str) -> None:
    """Below the load-time checks: a URI, pip argument or catalog name handed to the script builders as it is
    reaches the commands as one literal argument (NUL aside: no argument can hold it)."""
    if "\x00" in value:
        pytest.skip("no shell word holds NUL")
    node = Node(tmp_path)
    run = scripts.run_script(address="auto", notice_source="aws", autoscale=True, uri=value)
    res = node.bash(run, STUB_STATE="resume")
    assert res.returncode == 0, res.stderr
    calls = node.calls()
    assert ["python", "-", _home_expanded(value, node.home)] in calls
    spot = next(c for c in calls if c[0] == "spotwise")
    assert spot[1:4] == ["run", "--resume", _home_expanded(value, node.home)], spot[:4]
    res = node.bash(run, STUB_STATE="completed")
    assert f"the run in {_home_expanded(value, node.home)} has completed" in res.stdout
    for install, env in ((emit.Install(value), {}), (emit.Install(None), {"SPOTWISE_INSTALL": value})):
        setup = scripts.setup_script(install, ray_version="2.0", from_env=bool(env),
                                     gpu_check=scripts.driver_check(value, 1, value))
        res = node.bash(setup, **env)
        assert res.returncode == 0, res.stderr
        pip = [c for c in _spotwise_installs(node, any_python=True)][-1]
        assert pip[5:] == [_home_expanded(value, node.home)], pip
        res = node.bash(setup, STUB_NVIDIA_RC="1", **env)
        assert res.returncode == 1 and f"this {value} has 1 {value} GPU(s)" in res.stderr
    node.assert_nothing_ran()


def test_sh_quote_keeps_the_home() -> None:
    assert scripts.sh_quote("~/spotwise-job/run") == '"$HOME"/spotwise-job/run'
    assert scripts.sh_quote("~") == '"$HOME"'
    assert scripts.sh_quote("~x$(y)") == "'~x$(y)'"
    assert scripts.sh_quote("a b") == "'a b'"


# ------------------------------------------------------------------------------------- links and inputs
def _plain(tmp_path: Path) -> Path:
    return _write(tmp_path, _spec_dict(), _catalog())


@pytest.mark.parametrize("kind, which", [("ray-cluster", 0), ("ray-cluster", 1), ("skypilot", 0), ("skypilot", 1),
                                         ("skypilot", 2)])
@pytest.mark.parametrize("dangling", [True, False])
def test_emit_refuses_a_link_at_the_file_and_at_each_sibling(cli: Any, tmp_path: Path, kind: str, which: int,
                                                             dangling: bool) -> None:
    spec = _plain(tmp_path)
    out = tmp_path / "out.yaml"
    target = tmp_path / "victim.txt"
    if not dangling:
        target.write_text("keep")
    link = emit.emit_paths(emit.EmitRequest(kind, out))[which]
    link.symlink_to(target)
    code, _, err = cli("plan", str(spec), "--emit", f"{kind}={out}", "--install", "git+https://x/y.git")
    assert code == 2 and "symbolic link" in err and link.name in err and "Traceback" not in err, err
    assert target.exists() != dangling and (dangling or target.read_text() == "keep")
    assert not any(p.exists() and not p.is_symlink() for p in emit.emit_paths(emit.EmitRequest(kind, out)))


@pytest.mark.parametrize("dangling", [True, False])
def test_write_spec_refuses_a_link(cli: Any, tmp_path: Path, dangling: bool) -> None:
    spec = _plain(tmp_path)
    target = tmp_path / "victim.yaml"
    if not dangling:
        target.write_text("keep")
    (tmp_path / "planned.yaml").symlink_to(target)
    code, _, err = cli("plan", str(spec), "--write-spec", str(tmp_path / "planned.yaml"))
    assert code == 2 and "symbolic link" in err and "--write-spec" in err, err
    assert target.exists() != dangling and (dangling or target.read_text() == "keep")


@pytest.mark.parametrize("flags", [
    lambda t: ["--write-spec", str(t / "job.yaml")],
    lambda t: ["--write-spec", str(t / "." / "job.yaml")],
    lambda t: ["--write-spec", str(t / "catalog.yaml")],
    lambda t: ["--write-spec", str(t / "hard.yaml")],
    lambda t: ["--emit", f"ray-cluster={t / 'job.yaml'}"],
    lambda t: ["--emit", f"skypilot={t / 'job.yaml'}"],
    lambda t: ["--emit", f"ray-cluster={t / 'catalog.yaml'}"],
])
def test_no_output_onto_an_input_file(cli: Any, tmp_path: Path, flags: Any) -> None:
    spec = _plain(tmp_path)
    os.link(spec, tmp_path / "hard.yaml")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    args = flags(tmp_path)
    code, _, err = cli("plan", str(spec), *args, "--install", "git+https://x/y.git") if "--emit" in args else \
        cli("plan", str(spec), *args)
    assert code == 2 and "is the input file" in err and "Traceback" not in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_an_emitted_sibling_onto_the_input_spec_is_refused(cli: Any, tmp_path: Path) -> None:
    spec = _write(tmp_path, _spec_dict(), _catalog(), spec_name="c.node-spec.yaml")
    before = spec.read_bytes()
    code, _, err = cli("plan", str(spec), "--emit", f"ray-cluster={tmp_path / 'c.yaml'}", "--install", "git+https://x/y.git")
    assert code == 2 and "input file" in err and "c.node-spec.yaml" in err, err
    assert spec.read_bytes() == before and not (tmp_path / "c.yaml").exists()
    code, _, err = cli("plan", str(spec), "--write-spec", str(spec))
    assert code == 2 and "input file" in err and spec.read_bytes() == before, err


def test_write_output_text_replaces_a_link_planted_after_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the check and the write a link may appear: the temp file is renamed over it, its target untouched."""
    from spotwise import outputfiles

    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out.yaml"
    real_check = outputfiles.check_output_file

    def check_then_plant(path: Any, flag: str) -> Path:
        p = real_check(path, flag)
        out.symlink_to(victim)
        return p

    monkeypatch.setattr(outputfiles, "check_output_file", check_then_plant)
    outputfiles.write_output_text(out, "a: 1\n", "--write-spec")
    assert victim.read_text() == "keep" and not out.is_symlink() and out.read_text() == "a: 1\n"


def test_yaml_comment_stays_a_comment() -> None:
    from spotwise.outputfiles import yaml_comment

    for value in CONTROL + HOSTILE:
        text = yaml_comment([f"n: {value}", "two"]) + "k: 1\n"
        assert yaml.safe_load(text) == {"k": 1}
        assert text.count("\n") == 3


# ------------------------------------------------------------------------------------- one plan, end to end
def test_plan_end_to_end_with_a_hostile_catalog(cli: Any, tmp_path: Path) -> None:
    value = "gpu'$(touch PWNED)`pwned`;x"
    spec = _write(tmp_path / "w", _spec_dict(name="job $(pwned)", inst=value), _catalog(inst=value, acc=value))
    ray_file, sky_file = tmp_path / "w" / "r.yaml", tmp_path / "w" / "t.yaml"
    code, _, err = cli("plan", str(spec), "--pilot-steps", "10", "--write-spec", str(tmp_path / "w" / "planned.yaml"),
                       "--emit", f"ray-cluster={ray_file}", "--emit", f"skypilot={sky_file}", "--install",
                       "git+https://x/y.git")
    assert code == 0, err
    assert load_spec(tmp_path / "w" / "planned.yaml").name == "job $(pwned)"
    _check_files(ray_file, sky_file, Node(tmp_path / "node"), name="job $(pwned)", inst=value, acc=value,
                 pip_arg="git+https://x/y.git")
