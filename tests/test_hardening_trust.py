"""Issue 54 item 1: a resume imports, runs, installs or reads nothing a foreign ``spec.json`` names without
the user's say-so -- whichever field names it.

The trust check (:mod:`spotwise.spec.trust`) used to read ``workload.optimizer`` only as a string or a
``{name:}`` mapping: the list form's ``module:Class`` entries went uncounted and ``run --resume DIR``
imported them.  Now one walk over the recorded spec's plain form finds every ``module:Name`` string at
any depth (and the path-like fields: script, arguments, packages, requirements, dataset), so each
field below is refused (exit 2, naming it, nothing imported) and a field added later is too
(:func:`test_a_field_added_later_is_walked_too`).  Values with a colon that are no reference
(``V100:1``, ``s3://``, times, a job called ``team:run``) need nothing: ordinary specs resume as before.
"""

from __future__ import annotations

import copy
import glob
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _rundirs import copy_run, marking_module, simulated_run, spec_file, tiny_spec

import spotwise
from spotwise.errors import InputError

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parent.parent
SPEC: dict[str, Any] = tiny_spec("foreign-rundir")
#: a user module whose import leaves a mark: proof that a resume imported (ran) it
MODULE = """import os, pathlib
pathlib.Path(os.environ["FOREIGN_MARK"]).write_text("imported")
import torch
class Opt(torch.optim.SGD):
    pass
def make(**kw):
    raise RuntimeError("the foreign workload ran")
def helper(*a):
    raise RuntimeError("the foreign helper ran")
"""
SCRIPT = "import os, pathlib\npathlib.Path(os.environ['FOREIGN_MARK']).write_text('ran')\n"

#: each field that names code or data, planted in spec.json: (changes to the spec, the field named in the refusal)
PLANTED: dict[str, tuple[dict[str, Any], str]] = {
    "optimizer-list-last": ({"workload": {"optimizer": [{"name": "AdamW", "params": "matrices"},
                                                        {"name": "foreign_mod:Opt", "params": "rest"}]}},
                            "workload.optimizer[1].name"),
    "optimizer-list-first": ({"workload": {"optimizer": [{"name": "foreign_mod:Opt", "params": "matrices"},
                                                         {"name": "SGD", "params": "rest"}]}}, "workload.optimizer[0].name"),
    "optimizer-string": ({"workload": {"optimizer": "foreign_mod:Opt"}}, "workload.optimizer.name"),
    "optimizer-mapping": ({"workload": {"optimizer": {"name": "foreign_mod:Opt", "lr": 0.1}}}, "workload.optimizer.name"),
    "workload": ({"workload": {"name": "foreign_mod:make"}}, "workload.name"),
    "workload-params": ({"workload": {"name": "foreign_mod:make", "params": {"collate": "foreign_mod:helper"}}},
                        "workload.params.collate"),
    "policy-after-a-builtin": ({"policies": [{"name": "lr-scaling"}, {"name": "foreign_mod:Opt"}]}, "policies[1].name"),
    "policy-params": ({"policies": [{"name": "foreign_mod:Opt", "params": {"hook": "foreign_mod:helper"}}]},
                      "policies[0].params.hook"),
    "script": ({"workload": {"name": "script", "script": "{code}/evil.py", "lr": None},
                "cluster": {"data_plane": "collective", "coordinator_instance": None}}, "workload.script"),
    "script-args": ({"workload": {"name": "script", "script": "{code}/evil.py", "args": ["--x", "1"], "lr": None},
                     "cluster": {"data_plane": "collective", "coordinator_instance": None}}, "workload.args"),
    "packages": ({"workload": {"packages": ["foreign-pkg==1.0"]}}, "workload.packages"),
    "requirements": ({"workload": {"requirements": "{code}/requirements.txt"}}, "workload.requirements"),
    "dataset": ({"workload": {"name": "resnet18-cifar", "dataset": "{code}/data"}}, "the dataset"),
}


def _merge(base: dict[str, Any], change: dict[str, Any], code: Path) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in change.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v, code)
        elif v is None:
            out.pop(k, None)
        else:
            out[k] = json.loads(json.dumps(v).replace("{code}", str(code)))
    return out


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One modelled run (no Ray): spec.json, events, checkpoints; tests plant their spec.json in copies."""
    return simulated_run(tmp_path_factory, SPEC)


@pytest.fixture()
def foreign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """``foreign_mod`` importable and a script beside it, both marking their import / run; (the folder, the mark)."""
    code = tmp_path / "code"
    mark = marking_module(code, monkeypatch, "foreign_mod", MODULE, "FOREIGN_MARK")
    (code / "evil.py").write_text(SCRIPT)
    (code / "requirements.txt").write_text("foreign-pkg\n")
    (code / "data").mkdir()
    return code, mark


def _planted(finished: Path, tmp_path: Path, data: dict[str, Any]) -> Path:
    run = copy_run(finished, tmp_path / "run")
    (run / "spec.json").write_text(json.dumps(data))
    return run


@pytest.mark.parametrize("case", list(PLANTED))
def test_every_field_naming_code_needs_the_users_say_so(case: str, finished: Path, tmp_path: Path,
                                                        foreign: tuple[Path, Path], cli: Any) -> None:
    from spotwise.control.rundir_io import load_resume_spec

    code, mark = foreign
    change, field = PLANTED[case]
    data = _merge(SPEC, change, code)
    run = _planted(finished, tmp_path, data)
    exit_code, _, err = cli("run", "--resume", str(run), "--json")
    assert exit_code == 2 and field in err and "--trust-code" in err and "Traceback" not in err, err
    with pytest.raises(InputError, match="--trust-code"):
        spotwise.run(None, run, resume=True)
    assert not mark.exists() and "foreign_mod" not in sys.modules, "the resume imported or ran the recorded code"
    # the planted spec is a valid one: vouched for, the check lets it through (and still imports nothing itself)
    assert load_resume_spec(run, None, trust_code=True).to_dict()["workload"] == spotwise.load_spec(
        spec_file(tmp_path, data)).to_dict()["workload"]
    assert not mark.exists()


def test_a_spec_naming_other_code_in_a_list_entry_does_not_vouch_for_it(finished: Path, tmp_path: Path,
                                                                        foreign: tuple[Path, Path], cli: Any) -> None:
    from spotwise.control.rundir_io import load_resume_spec

    code, mark = foreign
    data = _merge(SPEC, PLANTED["optimizer-list-last"][0], code)
    run = _planted(finished, tmp_path, data)
    mine = copy.deepcopy(data)
    mine["workload"]["optimizer"][1]["name"] = "AdamW"
    exit_code, _, err = cli("run", str(spec_file(tmp_path, mine)), "--resume", str(run))
    assert exit_code == 2 and "does not match" in err and "workload.optimizer[1].name" in err, err
    assert "'foreign_mod:Opt' in the run directory but absent in your spec" in " ".join(err.split())
    assert not mark.exists()
    same = spotwise.load_spec(spec_file(tmp_path, data, "same.yaml"))
    assert load_resume_spec(run, same).workload.optimizer == data["workload"]["optimizer"]
    # what a resume may change is the user's spec's from then on: new packages need no match
    more = copy.deepcopy(data)
    more["workload"]["packages"] = ["another-pkg"]
    got = load_resume_spec(run, spotwise.load_spec(spec_file(tmp_path, more, "more.yaml")))
    assert got.workload.packages == ["another-pkg"]
    assert not mark.exists()


def test_a_field_added_later_is_walked_too() -> None:
    """The walk reads the spec's plain form, not a list of fields: a reference anywhere is found, by its path."""
    from spotwise.spec.trust import code_references

    plain = copy.deepcopy(SPEC)
    plain["workload"]["loader"] = {"collate_fn": "pkg.collate:fn", "sampler": {"kind": ["x", " pkg:Sampler.make "]}}
    plain["outputs"]["hooks"] = {"pkg.hooks:Hook": {"every": 5}}
    plain["policies"] = [{"name": "lr-scaling"}, {"name": "mine:P", "params": {"inner": [{"cls": "a.b:C"}]}}]
    assert code_references(plain) == {
        "workload.loader.collate_fn": "pkg.collate:fn", "workload.loader.sampler.kind[1]": "pkg:Sampler.make",
        "outputs.hooks.pkg.hooks:Hook (a key)": "pkg.hooks:Hook", "policies[1].name": "mine:P",
        "policies[1].params.inner[0].cls": "a.b:C"}


@pytest.mark.parametrize("text", ["pkg:Name", "a.b.c:D", " pkg:Name ", "pkg:Cls.method", "ünï:cödé", "os:system"])
def test_what_reads_as_a_reference(text: str) -> None:
    from spotwise.usercode import is_code_reference

    assert is_code_reference(text)


@pytest.mark.parametrize("text", ["V100:1", "A100:8", "s3://bucket/run", "gs://b", "file:///tmp/x", "10:30:00",
                                  "2020-02-25T00:00:00Z", "localhost:8080", "C:\\data", "a:", ":b", "a b:c", "a:b:c",
                                  "mlp-digits", "../x:y/z.csv", "lm_head.*"])
def test_what_does_not(text: str) -> None:
    from spotwise.usercode import is_code_reference

    assert not is_code_reference(text)


def _ordinary_specs() -> list[Path]:
    """The repository's example specs that name no code of their own."""
    return [Path(p) for p in sorted(glob.glob(str(ROOT / "examples" / "*.yaml"))) if not p.endswith("user-policy.yaml")]


@pytest.mark.parametrize("path", _ordinary_specs(), ids=lambda p: p.name)
def test_an_example_spec_resumes_with_no_trust_code(path: Path, tmp_path: Path) -> None:
    from spotwise.control.rundir_io import load_resume_spec
    from spotwise.spec.trust import code_references

    spec = spotwise.load_spec(path)
    assert code_references(spec) == {}
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text(json.dumps(spec.to_dict()))
    assert load_resume_spec(run).to_dict() == spec.to_dict()


@pytest.mark.parametrize("change", [
    {"name": "team:run1"},
    {"cluster": {"instance_type": None, "accelerators": "V100:1", "coordinator_instance": None}},
    {"outputs": {"uri": "s3://bucket/runs/job1"}},
    {"market": {"start": "2020-02-25T10:30:00Z"}},
    {"cluster": {"region": "us-east-1b"}, "workload": {"family": "mlp"}},
    {"workload": {"optimizer": [{"name": "AdamW", "params": "*.weight"}, {"name": "SGD", "params": "rest"}]}},
    {"policies": [{"name": "strategy-switch", "params": {"strategies": ["full", "async"]}}]},
], ids=["job-name", "accelerators", "uri", "start-time", "region", "builtin-optimizers", "builtin-policy"])
def test_values_with_a_colon_that_name_no_code_need_nothing(change: dict[str, Any], tmp_path: Path) -> None:
    from spotwise.config import spec_from_dict
    from spotwise.control.rundir_io import load_resume_spec
    from spotwise.spec.trust import code_references

    spec = spec_from_dict(_merge(SPEC, change, tmp_path))
    assert code_references(spec) == {}
    run = tmp_path / "run"
    run.mkdir()
    (run / "spec.json").write_text(json.dumps(spec.to_dict()))
    load_resume_spec(run)
