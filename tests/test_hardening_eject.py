"""Issue 54 item 4: what ``spotwise eject`` writes holds no value from the user as code or as YAML, and it
never opens what is not a regular file at its output names.

* The spec file's name (and every other value eject writes itself) goes into ``train.py``'s and
  ``job.yaml``'s headers through :func:`spotwise.outputfiles.yaml_comment` / ``python_comment``: a
  newline, CR, U+0085, U+2028, a quote, a backslash, ``#``, ``${}``, an escape sequence or a ``coding=``
  line in the name leaves ``train.py`` the same program (compiled from its bytes, as ``python`` reads
  it) and ``job.yaml`` the same mapping as for a plain name.  The paths eject rewrites in ``job.yaml``
  are double-quoted and read back as written.
* A FIFO, a socket, a folder or a link (live or dangling) at ``DIR/train.py`` or ``DIR/job.yaml`` is
  refused (exit 2) from ``lstat``, never opened: a FIFO used to block ``eject`` forever.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from spotwise.errors import InputError
from spotwise.spec.eject import MARK, eject

SPEC = """\
name: ej-hostile
seed: 3
workload:
  name: mlp-digits
  batch_size: 16
  optimizer: {name: AdamW, lr: 0.003}
  eval_every: 5
target: {samples: 640}
cluster: {instance_type: c5.xlarge, workers: 2, data_plane: collective, standby: 0, group_timeout_s: 5}
market: {synthetic: {kind: constant, price: 0.07}}
outputs: {checkpoint_every: 0, plots: false}
"""

#: file names (a file name holds anything but NUL and '/') that reached train.py / job.yaml as code or keys
HOSTILE_NAMES = {
    "newline-yaml-key": "a\npolicies: [{name: 'evil_mod:Evil'}]\n#.yaml",
    "newline-python": "b\nimport os; os.system('touch PWNED')\n#.yaml",
    "carriage-return": "c\rpolicies: []\r.yaml",
    "quotes": "q'\"''\"\"\".yaml",
    "backslash": "back\\slash\\.yaml",
    "hash": "h#ash # x.yaml",
    "u2028": "u\u2028policies: [{name: 'evil_mod:Evil'}]\u2028.yaml",
    "u2029-u0085": "v\u2029w\x85policies: x.yaml",
    "dollar-brace": "${HOME}$(touch PWNED).yaml",
    "coding-line": "coding=nonesuch.yaml",
    "escape-bidi-tab": "e\x1b]0;title\x07\u202e\t.yaml",
}


def _eject_named(tmp_path: Path, name: str, text: str = SPEC, out: str = "out") -> tuple[Path, Path]:
    folder = tmp_path / "spec"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    train_py, job_yaml = map(Path, eject(folder / name, tmp_path / out))
    return train_py, job_yaml


def _program(train_py: Path) -> str:
    """``train.py`` as Python reads the file: its bytes (a coding line honoured), compiled, then its statements."""
    data = train_py.read_bytes()
    compile(data, str(train_py), "exec", dont_inherit=True)
    return ast.dump(ast.parse(data))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    """The program and the job mapping eject writes for a plainly named spec."""
    from spotwise.safeparse import load_yaml

    train_py, job_yaml = _eject_named(tmp_path_factory.mktemp("plain"), "job.yaml")
    return _program(train_py), load_yaml(job_yaml.read_text(), "job.yaml")


@pytest.mark.parametrize("name", list(HOSTILE_NAMES.values()), ids=list(HOSTILE_NAMES))
def test_a_spec_file_name_is_never_code_or_yaml_in_what_eject_writes(tmp_path: Path, name: str,
                                                                     reference: tuple[str, Any]) -> None:
    from spotwise.config import load_spec
    from spotwise.safeparse import load_yaml

    train_py, job_yaml = _eject_named(tmp_path, name)
    program, job = reference
    assert _program(train_py) == program, "the name changed train.py's program"
    text = train_py.read_text(encoding="utf-8")
    assert text.startswith(MARK) and text.split("\n", 2)[1] == "# -*- coding: utf-8 -*-"
    assert all(line.startswith("# ") for line in text.split("\n")[:3])
    assert job_yaml.read_text(encoding="utf-8").startswith(MARK)
    assert load_yaml(job_yaml.read_text(encoding="utf-8"), "job.yaml") == job, "the name changed job.yaml's mapping"
    spec = load_spec(job_yaml)
    assert spec.policies == [] and spec.workload.script == str(train_py.resolve())
    assert not (tmp_path / "PWNED").exists() and not Path("PWNED").exists()


CATALOG = {"instances": [{"name": "my.box", "cloud": "aws", "region": "", "vcpus": 4, "memory_gb": 8,
                           "on_demand_per_hour": 0.2, "throughput": {"mlp": 1.0}, "source": "test"}]}


@pytest.mark.parametrize("folder", ["r\x85q", "s\u2028policies: [x]", "t\npolicies: [x]", "yes", "#h ${x} 'q\"\\"])
def test_the_paths_eject_rewrites_read_back_as_written(tmp_path: Path, folder: str) -> None:
    """``market.catalog`` and ``workload.requirements`` rewritten relative to DIR: job.yaml names those files."""
    from spotwise.config import load_spec

    cat = tmp_path / "spec" / folder / "catalog.yaml"
    cat.parent.mkdir(parents=True)
    cat.write_text(json.dumps(CATALOG))
    req = "" if any(ord(c) < 32 or c in "\x85\u2028" for c in folder) else folder + "/requirements.txt"
    if req:  # (a requirements path is one line of text: the spec refuses the others)
        (tmp_path / "spec" / req).write_text("numpy\n")
    # JSON's escapes are YAML's too: the spec names the folder exactly
    text = SPEC.replace("instance_type: c5.xlarge", "instance_type: my.box").replace(
        "market: {", f"market: {{catalog: [{json.dumps(folder + '/catalog.yaml')}], ").replace(
        "  eval_every: 5\n", f"  eval_every: 5\n  requirements: {json.dumps(req)}\n" if req else "  eval_every: 5\n")
    _, job_yaml = _eject_named(tmp_path, "job.yaml", text)
    job = load_spec(job_yaml)
    assert job.market.catalog == [str(cat.resolve())] and job.cluster.instance_type == "my.box"
    assert job.workload.requirements == (str((tmp_path / "spec" / req).resolve()) if req else None)


def _fifo(p: Path) -> Callable[[], None]:
    os.mkfifo(p)

    def unblock() -> None:  # a regression blocks in open(): open the other end so the test fails, not hangs
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass

    timer = threading.Timer(20.0, unblock)
    timer.daemon = True
    timer.start()
    return timer.cancel


def _socket(p: Path) -> Callable[[], None]:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    return s.close


def _folder(p: Path) -> Callable[[], None]:
    p.mkdir()
    (p / "inside").write_text("mine\n")
    return lambda: None


def _link(p: Path) -> Callable[[], None]:
    target = p.parent.parent / "elsewhere.txt"
    target.write_text(MARK + "\n")  # even a link to a file eject wrote is never written through
    p.symlink_to(target)
    return lambda: None


def _dangling(p: Path) -> Callable[[], None]:
    p.symlink_to(p.parent / "nowhere")
    return lambda: None


PLANTED = {"fifo": (_fifo, "FIFO"), "socket": (_socket, "socket"), "folder": (_folder, "a folder"),
           "link": (_link, "symbolic link"), "dangling-link": (_dangling, "symbolic link")}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("name", ["train.py", "job.yaml"])
@pytest.mark.parametrize("kind", list(PLANTED))
def test_a_non_file_at_an_output_name_is_refused_without_being_opened(tmp_path: Path, kind: str, name: str,
                                                                      force: bool) -> None:
    plant, words = PLANTED[kind]
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    out.mkdir()
    done = plant(out / name)
    try:
        with pytest.raises(InputError, match=words) as e:
            eject(spec, out, force=force)
    finally:
        done()
    assert e.value.where == "--out" and str(out / name) in e.value.message
    assert os.path.lexists(out / name) and not (out / ("job.yaml" if name == "train.py" else "train.py")).exists()
    if kind == "link":
        assert (tmp_path / "elsewhere.txt").read_text() == MARK + "\n"


@pytest.mark.timeout(60)
def test_the_cli_exits_2_on_a_fifo_at_train_py(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spotwise.cli import main

    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    (tmp_path / "out").mkdir()
    done = _fifo(tmp_path / "out" / "train.py")
    try:
        with pytest.raises(SystemExit) as bad:
            main(["eject", str(spec), "--out", str(tmp_path / "out")])
    finally:
        done()
    assert bad.value.code == 2 and "FIFO" in capsys.readouterr().err


def test_what_eject_wrote_is_still_replaced_with_force_and_a_foreign_file_is_not(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    eject(spec, tmp_path / "out")
    eject(spec, tmp_path / "out", force=True)
    (tmp_path / "out" / "job.yaml").write_text("# written by someone else\n")
    with pytest.raises(InputError, match="exists"):
        eject(spec, tmp_path / "out", force=True)


def test_the_written_files_are_checked_before_they_are_written() -> None:
    from spotwise.spec.eject import _check_job_yaml, _check_train_py

    with pytest.raises(InputError, match="would not compile"):
        _check_train_py(b"# a\nx = (\n", "# a\n", {})
    with pytest.raises(InputError, match="would not compile"):
        _check_train_py(b"# a\nimport os\nX = 1\n", "# a\nimport os\n", {"X": 1})
    with pytest.raises(InputError, match="would not compile"):
        _check_train_py(b"# coding=nonesuch\nX = 1\n", "# coding=nonesuch\n", {"X": 1})
    with pytest.raises(InputError, match="would not hold the job's X"):
        _check_train_py(b"# a\nX = 2\n", "# a\n", {"X": 1})
    _check_train_py(b"# a\nX: int = 1\n", "# a\n", {"X": 1})
    with pytest.raises(InputError, match="policies differs"):
        _check_job_yaml("# a\npolicies: [x]\nname: j\n", {"name": "j"})
    with pytest.raises(InputError, match=r"workload\.requirements differs"):
        _check_job_yaml("workload: {requirements: 'a\x85b'}\n", {"workload": {"requirements": "a\x85b"}})
    _check_job_yaml('workload: {requirements: "a\\Nb"}\n', {"workload": {"requirements": "a\x85b"}})
