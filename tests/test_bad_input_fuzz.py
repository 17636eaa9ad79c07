"""Issue 18: the outside review's bad inputs, re-run on every command from a table.

``tests/bad_inputs.yaml`` holds one row per bad input: the command line, the files it needs, and
the exit code the contract promises (DESIGN.md, "Errors": bad input exits 2 with one message that
says what is wrong and how to fix it, never a traceback; internal failures exit 1).  Each row is
run in-process (``typer.testing.CliRunner``, no subprocess: the whole table takes seconds) and
checked for

* the exit code of the row;
* a message on stderr, and no Python traceback there;
* with ``--json``: stdout empty or exactly one JSON object (nothing else).

Every row fails at validation: nothing trains and Ray is made unimportable while the table runs,
so a row that wrongly got past validation fails fast (exit 1) instead of starting a cluster.
A row marked ``xfail: <reason>`` is a known bug (strict: it must still fail, so a fix shows up).

Row fields (see the table's header comment): ``id``, ``argv`` (``{tmp}``, ``{spec}`` and
``{repo}`` are substituted), ``exit``; optional ``base`` (a spec under ``examples/`` the row's
``{spec}`` starts from: ``demo``, ``chaos``, ``p3``, ``serverless``, ``pools``), ``set`` (dotted paths to
values), ``unset`` (dotted paths), ``spec_text`` (the spec file's raw text), ``files`` (name ->
``text`` | ``hex`` | ``json`` | ``aws`` rows | ``size_mb`` | ``dir``), ``says`` (a substring the
message must contain), ``env``, ``xfail`` and ``user_traceback`` (true: the row runs user code that fails, whose
own traceback -- its frames only, none of spotwise's -- is shown above the message, as docs/policies.md says).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TABLE = Path(__file__).with_name("bad_inputs.yaml")
BASES = {"demo": "demo.yaml", "chaos": "chaos.yaml", "p3": "p3-24h-traces.yaml", "serverless": "serverless-pmf.yaml",
         "pools": "pools-k80-v100.yaml"}
ROW_KEYS = {"id", "argv", "exit", "base", "set", "unset", "spec_text", "files", "says", "env", "xfail", "user_traceback"}


def _rows() -> list[dict[str, Any]]:
    doc = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    rows = doc["rows"]
    ids = [r["id"] for r in rows]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate row ids in {TABLE.name}: {sorted(dup)}"
    for r in rows:
        extra = set(r) - ROW_KEYS
        assert not extra, f"row {r['id']}: unknown fields {sorted(extra)}"
        assert isinstance(r["argv"], list) and isinstance(r["exit"], int), r["id"]
    return rows


ROWS = _rows()


def _params() -> list[Any]:
    out = []
    for r in ROWS:
        marks = [pytest.mark.xfail(strict=True, reason=str(r["xfail"]))] if r.get("xfail") else []
        out.append(pytest.param(r, id=r["id"], marks=marks))
    return out


def _set_path(d: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[keys[-1]] = value


def _unset_path(d: dict[str, Any], dotted: str) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        d = d[k]
    d.pop(keys[-1], None)


def _aws_doc(points: list[list[Any]]) -> dict[str, Any]:
    """``[[price, timestamp], ...]`` or ``[[price, timestamp, zone, type], ...]`` -> an AWS dump."""
    recs = []
    for p in points:
        zone, itype = (p[2], p[3]) if len(p) > 2 else ("us-east-1b", "p3.2xlarge")
        recs.append({"AvailabilityZone": zone, "InstanceType": itype, "ProductDescription": "Linux/UNIX",
                     "SpotPrice": p[0], "Timestamp": p[1]})
    return {"SpotPriceHistory": recs}


def _make(path: Path, spec: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(spec, str):
        path.write_text(spec, encoding="utf-8")
        return
    kind, value = next(iter(spec.items()))
    if kind == "text":
        path.write_text(value, encoding="utf-8")
    elif kind == "hex":
        path.write_bytes(bytes.fromhex(value))
    elif kind == "json":
        path.write_text(json.dumps(value), encoding="utf-8")
    elif kind == "aws":
        path.write_text(json.dumps(_aws_doc(value)), encoding="utf-8")
    elif kind == "size_mb":
        with path.open("wb") as f:
            f.truncate(int(value * 1024 * 1024))  # sparse: cheap to make, over the reader's cap
    elif kind == "dir":
        path.mkdir(exist_ok=True)
        for name, sub in (value or {}).items():
            _make(path / name, sub)
    else:
        raise AssertionError(f"unknown file kind {kind!r}")


def _subst(arg: str, tmp: Path, spec: Path) -> str:
    return arg.replace("{tmp}", str(tmp)).replace("{spec}", str(spec)).replace("{repo}", str(REPO))


def _subst_tree(value: Any, tmp: Path, spec: Path) -> Any:
    if isinstance(value, str):
        return _subst(value, tmp, spec)
    if isinstance(value, list):
        return [_subst_tree(v, tmp, spec) for v in value]
    if isinstance(value, dict):
        return {k: _subst_tree(v, tmp, spec) for k, v in value.items()}
    return value


def _prepare(row: dict[str, Any], tmp: Path) -> list[str]:
    spec = tmp / "spec.yaml"
    if "spec_text" in row:
        _make(spec, {"text": row["spec_text"]})
    elif "base" in row:
        d = yaml.safe_load((REPO / "examples" / BASES[row["base"]]).read_text())
        d = copy.deepcopy(d)
        for path in row.get("unset", []):
            _unset_path(d, path)
        for path, value in (row.get("set") or {}).items():
            _set_path(d, path, _subst_tree(value, tmp, spec))
        spec.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    for name, fspec in (row.get("files") or {}).items():
        _make(tmp / name, fspec)
    return [_subst(str(a), tmp, spec) for a in row["argv"]]


@pytest.fixture(scope="module")
def runner() -> Any:
    from typer.testing import CliRunner

    return CliRunner()


def test_table_is_broad() -> None:
    """The table covers every command with many rows (the review tried 154 bad inputs)."""
    commands = {r["argv"][0] if r["argv"][0] != "traces" else "traces " + r["argv"][1] for r in ROWS if r["argv"]}
    assert {"plan", "simulate", "run", "report", "traces show", "demo"} <= commands
    assert len(ROWS) >= 120


@pytest.mark.parametrize("row", _params())
def test_bad_input(row: dict[str, Any], runner: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.cli import app

    if "../shared/" in json.dumps(row) and not (REPO.parent / "shared" / "data" / "traces").is_dir():
        pytest.skip("the row reads the real traces in ../shared, absent from this checkout")
    # nothing may start Ray: a row that got past validation fails fast instead of training
    for name in [m for m in sys.modules if m == "ray" or m.startswith("ray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.delenv("SPOTWISE_DEBUG", raising=False)
    monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "1")
    for k, v in (row.get("env") or {}).items():
        monkeypatch.setenv(k, str(v))
    work = tmp_path / "w"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = _prepare(row, work)
    res = runner.invoke(app, argv, catch_exceptions=True)
    if res.exc_info is not None and not isinstance(res.exc_info[1], SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(*res.exc_info))
        pytest.fail(f"uncaught exception (a raw traceback for the user):\n{tb}")
    err = res.stderr
    assert res.exit_code == row["exit"], f"exit {res.exit_code}, expected {row['exit']}\nstderr: {err}\nstdout: {res.stdout[:2000]}"
    if row.get("user_traceback"):  # the user's code failed: its traceback is shown, with none of spotwise's frames
        assert f'File "{REPO / "spotwise"}' not in err and "Traceback" not in res.stdout, err
    else:
        assert "Traceback (most recent call last)" not in err + res.stdout, err
    if row["exit"] != 0:  # a message on stderr; a command line with no command at all gets the usage on stdout
        assert err.strip() or (not argv and "Usage" in res.stdout), "no message on stderr"
    if row.get("says"):
        assert str(row["says"]).lower() in err.lower(), err
    if "--json" in argv:
        out = res.stdout.strip()
        if out:
            doc = json.loads(out)  # exactly one JSON value, nothing around it
            assert isinstance(doc, dict)


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["plan", "--help"], ["run", "--help"], ["simulate", "--help"],
                                  ["report", "--help"], ["traces", "--help"], ["traces", "show", "--help"]],
                         ids=lambda a: " ".join(a))
def test_help_of_every_command(argv: list[str], runner: Any) -> None:
    """Every command's --help renders (rich markup in a help text crashed `run --help` with a MarkupError)."""
    from spotwise.cli import app

    res = runner.invoke(app, argv, catch_exceptions=True)
    assert res.exit_code == 0, (res.exc_info, res.stderr)
    assert "Usage" in res.stdout and "--help" in res.stdout
