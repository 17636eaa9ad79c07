"""Issue 38: hostile file-system objects where spotwise reads a run directory or a user file.

Every command that reads a run directory (``status``, ``runs``, ``report``, ``run --resume``, ``run/simulate
--out DIR`` onto an existing one with or without ``--overwrite``, ``--pilot DIR``) or a user file (a spec, a
catalog, a trace file or folder, a dataset) is given, in place of each file or folder it reads:

* a FIFO (opening one for reading blocks until a writer comes: a hang),
* a symbolic link -- to ``/etc/passwd``, to a valid copy of the file elsewhere, dangling, a loop, to
  ``/dev/zero`` or ``/dev/urandom`` (an endless read), and ``checkpoints/ -> /``,
* a 10 GB sparse file (costs no disk), a folder where a file belongs and a file where a folder belongs,
* and, for listings, many entries (``runs`` over 20 000 entries must stay linear).

Each case exits 2 naming the file and saying what it is (a FIFO, a symbolic link, larger than the cap, a
directory) -- never a hang, never exit 1, never a read or a deletion outside the run directory; a listing
(``runs``, a trace folder) skips the entry with a note.  Partial-capacity SkyPilot traces (``k-node``
folders) with negative, fractional, non-finite or above-``k`` counts, an empty file, ``0-node`` or a huge
``k`` exit 2 naming the file.

Everything runs in-process (``typer.testing.CliRunner``) and nothing starts Ray: ``import ray`` fails and
``ensure_ray`` raises, so a case that wrongly gets past validation fails at once (exit 1) instead of
starting a cluster.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

import spotwise
from spotwise.errors import InputError
from _rundirs import tiny_spec

# a hang (a FIFO opened, /dev/zero read) fails here; generous: the slowest case takes ~10 s on a busy machine
pytestmark = pytest.mark.timeout(120)

SPEC: dict[str, Any] = tiny_spec("hostile-fs")  # a 10-step modelled job, checkpoints at 5 and 10
#: what each hostile object must be called in the message
SAYS = {"fifo": "FIFO", "passwd": "symbolic link", "outside": "symbolic link", "dangling": "symbolic link",
        "loop": "symbolic link", "devzero": "symbolic link", "urandom": "symbolic link", "huge": "larger than",
        "dir": "directory"}
KINDS = list(SAYS)
HUGE = 10 * 1024 ** 3  # sparse: no disk used


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One modelled run (no Ray) with checkpoints at steps 5 and 10; tests use copies."""
    out = tmp_path_factory.mktemp("finished") / "run"
    spotwise.simulate(copy.deepcopy(SPEC), out, plots=False)
    (out / ".spotwise.lock").unlink(missing_ok=True)
    return out


@pytest.fixture()
def no_cluster(monkeypatch: pytest.MonkeyPatch, ray_unimportable: None) -> None:
    """Ray cannot start: a case that gets past validation exits 1 at once (and fails its test)."""
    import spotwise.capacity.raystart as raystart
    import spotwise.control.runner as runner

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("validation let a hostile input through to Ray")

    monkeypatch.setattr(runner, "ensure_ray", refuse)
    monkeypatch.setattr(raystart, "ensure_ray", refuse)


@pytest.fixture()
def outside(tmp_path: Path, finished: Path) -> Path:
    """Files the user owns elsewhere: a copy of the run (valid files to link to) and a precious file."""
    o = tmp_path / "outside"
    shutil.copytree(finished, o / "copy", symlinks=True)
    (o / "precious.txt").write_text("precious")
    return o


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(root.rglob("*")):
        h.update(str(f.relative_to(root)).encode())
        if f.is_file() and not f.is_symlink():
            h.update(f.read_bytes())
    return h.hexdigest()


def _copy_run(finished: Path, dest: Path) -> Path:
    shutil.copytree(finished, dest, symlinks=True)
    return dest


def _hostile(p: Path, kind: str, outside: Path | None = None, rel: str = "") -> None:
    """Put the hostile object ``kind`` at ``p`` (whatever was there is removed first)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)
    p.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "passwd":
        p.symlink_to("/etc/passwd")
    elif kind == "outside":
        assert outside is not None
        p.symlink_to(outside / "copy" / rel)
    elif kind == "dangling":
        p.symlink_to(p.parent / "nothing-here")
    elif kind == "loop":
        p.symlink_to(p)
    elif kind == "devzero":
        p.symlink_to("/dev/zero")
    elif kind == "urandom":
        p.symlink_to("/dev/urandom")
    elif kind == "huge":
        with open(p, "wb") as fh:
            fh.truncate(HUGE)
    elif kind == "dir":
        p.mkdir()
        (p / "user-file.txt").write_text("the user's")
    elif kind == "root":
        p.symlink_to("/", target_is_directory=True)
    elif kind == "file":
        p.write_text("not a folder")
    else:  # pragma: no cover
        raise AssertionError(kind)


def _io_bytes() -> int | None:
    """Bytes this process has read and written so far (Linux ``/proc/self/io`` rchar + wchar: every
    read, write, sendfile or copy, of any thread); None where that file is missing."""
    try:
        with open("/proc/self/io", "rb") as fh:
            fields = dict(line.split(b":", 1) for line in fh)
        return int(fields[b"rchar"]) + int(fields[b"wchar"])
    except (OSError, KeyError, ValueError):
        return None


@contextmanager
def _not_read_whole():
    """The body must refuse a hostile file, not read or copy it: counted in bytes, not timed (load makes a
    read slower, never smaller).  A hang (FIFO, /dev/zero) is the module's pytest timeout.  The budget
    is a tenth of HUGE: above the 256 MiB a reader may take (a file's tail), far below reading HUGE."""
    before = _io_bytes()
    yield
    after = _io_bytes()
    if before is not None and after is not None:
        assert after - before < HUGE // 10, f"{after - before:,} bytes read/written: a hostile file was read"


def _clean(code: int, err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    assert code != 1, err


# ================================================================= run directories: one file at a time
def _cases() -> list[Any]:
    reads = {"status": ["spec.json", "summary.json", "events.jsonl"],
             "report": ["summary.json", "events.jsonl"],
             "resume": ["spec.json", "summary.json", "events.jsonl", "checkpoints/manifest.json", ".spotwise.lock"],
             "pilot": ["events.jsonl"]}
    out = []
    for cmd, files in reads.items():
        for rel in files:
            for kind in KINDS:
                if cmd == "resume" and kind == "huge" and rel in ("summary.json", ".spotwise.lock"):
                    continue  # a regular file the resume replaces (summary) or truncates (its own lock): not read
                out.append(pytest.param(cmd, rel, kind, id=f"{cmd}-{rel}-{kind}"))
    return out


def _argv(cmd: str, run: Path) -> list[str]:
    return {"status": ["status", str(run), "--json"],
            "report": ["report", str(run), "--json"],
            "resume": ["run", "--resume", str(run), "--json"],
            "pilot": ["simulate", str(run.parent / "spec.yaml"), "--pilot", str(run), "--train-size", "1000",
                      "--out", str(run.parent / "pilot-out"), "--json"]}[cmd]


@pytest.mark.parametrize("cmd, rel, kind", _cases())
def test_a_hostile_run_file_exits_2_naming_it(cli, no_cluster: None, finished: Path, outside: Path, tmp_path: Path,
                                              cmd: str, rel: str, kind: str) -> None:
    run = _copy_run(finished, tmp_path / "run")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    _hostile(run / rel, kind, outside, rel)
    before = _digest(outside)
    with _not_read_whole():
        code, out, err = cli(*_argv(cmd, run))
    _clean(code, err)
    assert code == 2, (code, out, err)
    assert Path(rel).name in err and SAYS[kind] in err, err
    assert out.strip() == "", out  # --json: no half object on stdout
    assert _digest(outside) == before  # nothing outside read into a write, nothing deleted


@pytest.mark.parametrize("kind", ["fifo", "passwd", "dangling", "loop", "huge", "devzero", "dir"])
def test_runs_lists_hostile_run_directories_as_unreadable_naming_the_file(cli, finished: Path, tmp_path: Path,
                                                                          kind: str) -> None:
    root = tmp_path / "runs"
    for rel in ("spec.json", "summary.json", "events.jsonl"):
        run = _copy_run(finished, root / rel.split(".")[0])
        _hostile(run / rel, kind)
    _copy_run(finished, root / "good")
    os.mkfifo(root / "a-fifo")  # entries of the listed folder itself: skipped, never opened
    (root / "a-loop").symlink_to(root / "a-loop")
    (root / "to-root").symlink_to("/", target_is_directory=True)
    code, out, err = cli("runs", str(root), "--json")
    _clean(code, err)
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["runs"]}
    assert set(rows) == {"spec", "summary", "events", "good"}
    assert rows["good"]["status"] == "completed"
    for name in ("spec", "summary", "events"):
        assert rows[name]["status"] == "unreadable", rows[name]
        assert SAYS[kind] in rows[name]["detail"] and name in rows[name]["detail"], rows[name]


# ================================================================= run directories: folders
@pytest.mark.parametrize("folder", ["checkpoints", "report"])
@pytest.mark.parametrize("kind, says", [("root", "symbolic link"), ("outside", "symbolic link"), ("loop", "symbolic link"),
                                        ("dangling", "symbolic link"), ("file", "a file"), ("fifo", "FIFO")])
def test_resume_refuses_a_folder_that_is_a_link_or_not_a_folder(cli, no_cluster: None, finished: Path, outside: Path,
                                                                tmp_path: Path, folder: str, kind: str, says: str) -> None:
    run = _copy_run(finished, tmp_path / "run")
    if kind == "outside" and folder == "report":
        (outside / "copy" / "report").mkdir(exist_ok=True)
    _hostile(run / folder, kind, outside, folder)
    before = _digest(outside)
    code, out, err = cli("run", "--resume", str(run), "--json")
    _clean(code, err)
    assert code == 2 and folder in err and says in err, err
    assert _digest(outside) == before


def test_checkpoints_linked_to_another_runs_folder_are_never_read(finished: Path, outside: Path, tmp_path: Path) -> None:
    """``checkpoints -> /elsewhere/checkpoints`` (a valid manifest and checkpoints): refused, not loaded."""
    from spotwise.control.checkpoint import load_latest_checkpoint

    run = _copy_run(finished, tmp_path / "run")
    _hostile(run / "checkpoints", "outside", outside, "checkpoints")
    with pytest.raises(InputError, match="symbolic link"):
        load_latest_checkpoint(run)


@pytest.mark.parametrize("kind", ["passwd", "outside", "dangling", "loop", "devzero"])
def test_a_checkpoint_that_is_a_link_is_refused_by_the_manifest_check(cli, no_cluster: None, finished: Path,
                                                                      outside: Path, tmp_path: Path, kind: str) -> None:
    """A link under a checkpoint's name (a loop was exit 1: ``Path.resolve`` raised RuntimeError)."""
    run = _copy_run(finished, tmp_path / "run")
    _hostile(run / "checkpoints" / "step-00000010.pt", kind, outside, "checkpoints/step-00000010.pt")
    code, out, err = cli("run", "--resume", str(run), "--json")
    _clean(code, err)
    assert code == 2 and "step-00000010.pt" in err and "symbolic link" in err, err


@pytest.mark.parametrize("kind", ["fifo", "huge", "dir"])
def test_a_checkpoint_that_is_not_a_regular_file_falls_back_at_once(finished: Path, tmp_path: Path, kind: str) -> None:
    """A FIFO, a 10 GB sparse file (was hashed for minutes: a hang) or a folder under the newest checkpoint's
    name: rejected by the safe reader without blocking or reading it, the resume falls back to step 5."""
    from spotwise.control.checkpoint import load_latest_checkpoint

    run = _copy_run(finished, tmp_path / "run")
    _hostile(run / "checkpoints" / "step-00000010.pt", kind)
    rejected: list[str] = []
    with _not_read_whole():  # the 10 GB file is not hashed
        found = load_latest_checkpoint(run, rejected=rejected)
    assert found is not None and found[1].name == "step-00000005.pt"
    assert len(rejected) == 1 and rejected[0].startswith("step-00000010.pt") and SAYS[kind] in rejected[0], rejected


# ================================================================= --overwrite and --out onto an existing directory
@pytest.mark.parametrize("rel", ["spec.json", "summary.json", "events.jsonl", "checkpoints/manifest.json",
                                 "checkpoints/step-00000005.pt", "report", "checkpoints"])
@pytest.mark.parametrize("kind", ["fifo", "passwd", "outside", "dangling", "loop", "devzero", "dir"])
def test_overwrite_never_deletes_or_follows_what_spotwise_did_not_write(cli, no_cluster: None, finished: Path,
                                                                        outside: Path, tmp_path: Path, rel: str,
                                                                        kind: str) -> None:
    run = _copy_run(finished, tmp_path / "run")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    if kind == "outside" and rel == "report":
        (outside / "copy" / "report").mkdir(exist_ok=True)
        (outside / "copy" / "report" / "keep.html").write_text("mine")
    if kind == "dir" and rel in ("report", "checkpoints"):
        pytest.skip("a real folder is what spotwise writes there (its contents are checked below)")
    _hostile(run / rel, kind, outside, rel)
    before, here = _digest(outside), _digest(run)
    for extra in ([], ["--overwrite"]):
        code, out, err = cli("simulate", str(tmp_path / "spec.yaml"), "--out", str(run), "--json", *extra)
        _clean(code, err)
        assert code == 2, (extra, out, err)
        assert _digest(outside) == before and _digest(run) == here  # nothing deleted, inside or out
        assert (outside / "precious.txt").read_text() == "precious"
    assert Path(rel).name in err or Path(rel).parts[0] in err


def test_overwrite_with_links_inside_spotwise_folders_deletes_nothing_outside(finished: Path, outside: Path,
                                                                             tmp_path: Path) -> None:
    """``checkpoints/`` holding a link to a folder of the user's, ``on-demand`` linked to another run: refused
    before anything is removed (rmtree never runs on a folder with a link in it)."""
    from spotwise.rundir import remove_run_files

    run = _copy_run(finished, tmp_path / "run")
    (run / "checkpoints" / "step-00000099.pt").symlink_to(outside, target_is_directory=True)
    before = _digest(outside)
    with pytest.raises(InputError, match="checkpoints/step-00000099.pt"):
        remove_run_files(run)
    (run / "checkpoints" / "step-00000099.pt").unlink()
    (run / "on-demand").symlink_to(outside / "copy", target_is_directory=True)
    with pytest.raises(InputError, match="on-demand is a symbolic link"):
        remove_run_files(run)
    assert _digest(outside) == before and (run / "summary.json").is_file()


def test_overwrite_removes_a_huge_file_of_its_own_name_without_reading_it(cli, no_cluster: None, finished: Path,
                                                                         tmp_path: Path) -> None:
    run = _copy_run(finished, tmp_path / "run")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    _hostile(run / "summary.json", "huge")
    (run / "notes.txt").write_text("the user's")
    code, out, err = cli("simulate", str(tmp_path / "spec.yaml"), "--out", str(run), "--overwrite", "--json")
    _clean(code, err)
    assert code == 0, err
    assert (run / "summary.json").stat().st_size < 1 << 20 and (run / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize("kind", ["fifo", "passwd", "dangling", "loop", "dir"])
def test_a_hostile_lock_file_is_named(cli, no_cluster: None, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _hostile(out / ".spotwise.lock", kind)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    code, _, err = cli("simulate", str(tmp_path / "spec.yaml"), "--out", str(out), "--json")
    _clean(code, err)
    assert code == 2 and ".spotwise.lock" in err, err


# ================================================================= report of a sweep directory
@pytest.mark.parametrize("kind", ["fifo", "passwd", "dangling", "loop", "huge", "devzero", "dir"])
def test_report_of_a_hostile_sweep_json_exits_2(cli, tmp_path: Path, kind: str) -> None:
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    _hostile(sweep / "sweep.json", kind)
    with _not_read_whole():
        code, out, err = cli("report", str(sweep), "--json")
    _clean(code, err)
    assert code == 2 and "sweep.json" in err and SAYS[kind] in err, err


# ================================================================= user files: spec, catalog, traces, pilot, dataset
USER_KINDS = {"fifo": "FIFO", "devzero": "character device", "urandom": "character device", "huge": "larger than",
              "dir": "directory", "dangling": "not found", "loop": "symbolic links"}


@pytest.mark.parametrize("kind", list(USER_KINDS))
def test_a_hostile_spec_or_catalog_exits_2(cli, no_cluster: None, tmp_path: Path, kind: str) -> None:
    spec = tmp_path / "spec.yaml"
    _hostile(spec, kind)
    code, _, err = cli("plan", str(spec), "--json")
    _clean(code, err)
    assert code == 2 and "spec.yaml" in err, err
    s = copy.deepcopy(SPEC)
    s["market"]["catalog"] = [str(tmp_path / "catalog.yaml")]
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(s))
    _hostile(tmp_path / "catalog.yaml", kind)
    code, _, err = cli("plan", str(good), "--json")
    _clean(code, err)
    assert code == 2 and "catalog.yaml" in err, err


def _sky_folder(root: Path, nodes: str = "1-node") -> Path:
    folder = root / nodes / "aws-04-22-2023"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize("kind", list(USER_KINDS))
def test_a_hostile_trace_file_exits_2_in_every_command(cli, no_cluster: None, tmp_path: Path, kind: str) -> None:
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    f = _sky_folder(tmp_path) / "us-east-1a_v100_1.json"
    _hostile(f, kind)
    for argv in (["traces", "show", str(f), "--json"],
                 ["plan", str(tmp_path / "spec.yaml"), "--trace", str(f), "--json"],
                 ["simulate", str(tmp_path / "spec.yaml"), "--trace", str(f), "--spot-price", "0.9", "--no-plot", "--json"]):
        code, out, err = cli(*argv)
        _clean(code, err)
        assert code == 2 and (f.name in err or "--trace" in err), (argv, err)
        assert out.strip() == ""


def test_a_trace_folder_skips_hostile_entries_with_a_note(cli, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The note is a warning (on stderr from the CLI; captured here by pytest's log capture)."""
    folder = _sky_folder(tmp_path)
    (folder / "us-east-1a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 1, 1] * 50}))
    for i, kind in enumerate(["fifo", "devzero", "urandom", "huge", "dangling", "loop"]):
        _hostile(folder / f"us-east-1{'bcdefg'[i]}_v100_1.json", kind)
    (folder / "to-root").symlink_to("/", target_is_directory=True)  # not walked into
    (folder / "up").symlink_to("..", target_is_directory=True)
    code, out, err = cli("traces", "show", str(tmp_path), "--json")
    _clean(code, err)
    assert code == 0, err
    assert [s["id"] for s in json.loads(out)["series"]] == ["skypilot/aws-04-22-2023:us-east-1a:v100_1"]
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipped ")]
    for zone, says in zip("bcdefg", ["FIFO", "character device", "character device", "larger than", "not found",
                                     "symbolic links"]):
        assert any(f"us-east-1{zone}_v100_1.json: " in n and says in n for n in notes), notes
    assert len(notes) == 6, notes


@pytest.mark.parametrize("kind", ["fifo", "devzero", "huge", "dangling", "loop", "root"])
def test_a_hostile_pilot_exits_2(cli, no_cluster: None, tmp_path: Path, kind: str) -> None:
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    _hostile(tmp_path / "pilot", kind)
    code, out, err = cli("simulate", str(tmp_path / "spec.yaml"), "--pilot", str(tmp_path / "pilot"), "--train-size", "1000",
                         "--out", str(tmp_path / "o"), "--json")
    _clean(code, err)
    assert code == 2 and "pilot" in err, err


@pytest.mark.parametrize("workload, name", [("pmf", "ratings.csv"), ("pmf", "u.data"), ("sparse-logreg", "train.txt")])
@pytest.mark.parametrize("kind, says", [("fifo", "FIFO"), ("devzero", "device"), ("huge", "longer than 64 KiB")])
def test_a_hostile_dataset_exits_2_without_reading_it(cli, no_cluster: None, tmp_path: Path, workload: str, name: str,
                                                      kind: str, says: str) -> None:
    """A FIFO or /dev/zero as ``workload.dataset`` hung ``plan`` (an open that blocks, a read that never
    ends); a 10 GB file of NUL bytes was read whole as its first line."""
    s = copy.deepcopy(SPEC)
    s["workload"] = {"name": workload, "dataset": str(tmp_path / name)}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(s))
    _hostile(tmp_path / name, kind)
    with _not_read_whole():
        code, _, err = cli("plan", str(tmp_path / "spec.yaml"), "--json")
    _clean(code, err)
    assert code == 2 and name in err and says in err, err


# ================================================================= partial-capacity traces
COUNT_CASES = [
    ("negative", "4-node", "[4, -1, 2]", "negative"),
    ("above-k", "4-node", "[4, 5, 2]", "above the 4 nodes"),
    ("fraction", "4-node", "[4, 2.5, 2]", "not a whole number"),
    ("fraction-without-k", None, "[1, 0.5, 1]", "not a whole number"),
    ("nan", "4-node", "[4, NaN, 2]", "not a finite number"),
    ("infinity", "4-node", "[4, Infinity, 2]", "not a finite number"),
    ("bool", "4-node", "[true, false, 4]", "not a finite number"),
    ("string", "4-node", '["3", 2, 4]', "not a finite number"),
    ("empty-file", "4-node", "", "unrecognised trace format"),
    ("empty-data", "4-node", "[]", "empty"),
    ("zero-node", "0-node", "[0, 0, 0]", "names 0 nodes"),
    ("huge-k", "2000000-node", "[3, 0, 2]", "names 2000000 nodes"),
    ("endless-k", "9" * 5000 + "-node", "[3, 0, 2]", "more than 1e12"),
    ("one-node-counts", "1-node", "[0, 1, 2]", "above the 1 nodes"),
]


@pytest.mark.parametrize("case, nodes, data, says", COUNT_CASES, ids=[c[0] for c in COUNT_CASES])
def test_a_bad_count_trace_exits_2_naming_the_file(cli, tmp_path: Path, case: str, nodes: str | None, data: str,
                                                   says: str) -> None:
    if nodes is not None and len(nodes) > 200:  # a 5000-digit folder name is over NAME_MAX: a short one stands in
        nodes = "9" * 200 + "-node"
    folder = (tmp_path / nodes / "aws-08-27-2023") if nodes else (tmp_path / "aws-08-27-2023")
    folder.mkdir(parents=True)
    f = folder / "us-east-1a_v100_1.json"
    f.write_text(data and '{"metadata": {"gap_seconds": 600}, "data": ' + data + "}")
    code, out, err = cli("traces", "show", str(f), "--json")
    _clean(code, err)
    assert code == 2 and str(f) in err.replace("\n", "") and says in err, err


def test_mixed_zero_one_and_counts_in_a_k_node_folder_load(cli, tmp_path: Path) -> None:
    folder = _sky_folder(tmp_path, "16-node")
    (folder / "us-east-1a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 600},
                                                                "data": [0, 1, 16, 3, 1, 0] * 20}))
    code, out, err = cli("traces", "show", str(tmp_path), "--json")
    _clean(code, err)
    assert code == 0, err


# ================================================================= many entries
def test_runs_is_linear_in_a_folder_of_many_entries(cli, finished: Path, tmp_path: Path) -> None:
    """10x the entries costs at most ~10x the time (a quadratic walk: ~100x), against a same-run baseline:
    the two sizes run in turn, each one's best of 5 (load only lengthens a run), a factor 30 allowed."""
    roots = {}
    for n in (2000, 20000):
        roots[n] = root = tmp_path / f"many-{n}"
        root.mkdir()
        for i in range(n):
            (root / f"f{i:05d}").touch()
        for i in range(3):
            _copy_run(finished, root / f"run{i}")
    took: dict[int, list[float]] = {n: [] for n in roots}
    for _ in range(5):
        for n, root in roots.items():
            t0 = time.monotonic()
            code, out, err = cli("runs", str(root), "--json")
            took[n].append(time.monotonic() - t0)
            assert code == 0, err
            assert [r["name"] for r in json.loads(out)["runs"]] == ["run0", "run1", "run2"]
    assert min(took[20000]) < 30 * min(took[2000]), took


def test_runs_says_when_it_stopped_early(cli, finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import spotwise.reports.runs_view as runs_view

    monkeypatch.setattr(runs_view, "MAX_DIRS", 10)
    for i in range(30):
        (tmp_path / "deep" / f"d{i:02d}").mkdir(parents=True)
    code, out, err = cli("runs", str(tmp_path / "deep"), "--json")
    assert code == 0 and "stopped after 10 folders" in err, err
    json.loads(out)


# ================================================================= unreadable files
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="runs as root: chmod 000 does not stop root")
def test_an_unreadable_run_file_is_named(cli, finished: Path, tmp_path: Path) -> None:  # pragma: no cover - non-root
    run = _copy_run(finished, tmp_path / "run")
    (run / "summary.json").chmod(0)
    try:
        code, _, err = cli("status", str(run), "--json")
        _clean(code, err)
        assert code == 2 and "summary.json" in err, err
    finally:
        (run / "summary.json").chmod(0o644)


# ================================================================= a run at a URI, spotwise's own cache
@pytest.mark.parametrize("kind, says", [("huge", "over the cap"), ("fifo", "not a plain file")])
def test_resume_from_a_uri_refuses_a_hostile_event_log_before_downloading_it(cli, no_cluster: None, finished: Path,
                                                                               tmp_path: Path, kind: str, says: str) -> None:
    """A 10 GB sparse ``events.jsonl`` at the URI was downloaded (10 GB written locally) before anything
    refused it: now its size is checked against what the resume reads back."""
    remote = _copy_run(finished, tmp_path / "remote")
    _hostile(remote / "events.jsonl", kind)
    with _not_read_whole():  # not downloaded: a copy would read and write 10 GB
        code, _, err = cli("run", "--resume", f"file://{remote}", "--out", str(tmp_path / "staging"), "--json")
    _clean(code, err)
    assert code == 2 and "events.jsonl" in err and says in err, err
    assert not (tmp_path / "staging" / "events.jsonl").exists()


def test_a_fifo_in_place_of_the_digits_cache_is_not_opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.workloads.vision import _load_digits

    monkeypatch.setenv("SPOTWISE_CACHE", str(tmp_path))
    os.mkfifo(tmp_path / "sklearn-digits-v1.npz")
    x, y = _load_digits()
    assert x.shape[0] == y.shape[0] > 0 and (tmp_path / "sklearn-digits-v1.npz").is_file()
