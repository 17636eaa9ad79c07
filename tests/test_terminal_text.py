"""Untrusted text never drives the terminal (issue 54 item 3), and ``status``/``runs`` of a URI read like a
folder's (item 9): the age of the last event, and one unreadable run among others.

Every value read from a run directory, bucket, trace or spec -- a run folder's name, the recorded spec
name, a metric key, a decision's policy and reason, a URI lease's host and pid, a trace's zone and
instance type, a report's run name, an error message quoting a path -- goes through the CLI with a forced
terminal (``FORCE_COLOR``): no ESC sequence, CSI, BEL, backspace, DEL, bidi override or OSC 8 hyperlink
from the data reaches the output, and the value is still visible (escaped).  ``--json`` keeps the data exact.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import spotwise
from spotwise.cli import app
from spotwise.reports.terminal_text import clean, display_copy, terminal_console

#: payloads without "/" (a folder name holds them too); each key names what it attacks
PAYLOADS = {
    "osc-title": "t\x1b]0;pwned\x07t",
    "clear-screen": "c\x1b[2Jc",
    "csi-8bit": "c\x9b2Jc",
    "link-markup": "[link=https:evil.example]click",  # no closing tag: the link runs to the end
    "bidi": "b\u202ecod.exe",
    "overwrite": "o\r\x08\x7fo",
}
#: what a payload must never put on the terminal (rich's own colour codes are ESC [ ... m: allowed)
FORBIDDEN = ("\x1b]", "\x1b[2J", "\x9b", "\x07", "\x08", "\x7f", "\r", "\u202e", "\x1b]8;")
ENV = {"FORCE_COLOR": "1", "COLUMNS": "250", "TERM": "xterm-256color"}


def _flat(text: str) -> str:
    """Text as read on the terminal, whatever the table folded: no colour codes, spaces, line breaks or box lines."""
    return re.sub(r"[\s\u2500-\u257f]", "", re.sub(r"\x1b\[[0-9;]*m", "", text))


def _assert_safe(output: str, payload: str) -> None:
    for bad in FORBIDDEN:
        assert bad not in output, (bad, output)
    assert _flat(clean(payload)) in _flat(output), (payload, output)  # still shown: escaped, its markup as text


def _invoke(*args: str) -> Any:
    res = CliRunner().invoke(app, list(args), env=ENV)
    assert "Traceback" not in res.output
    return res


# ---------------------------------------------------------------------------------------- the sanitiser
@pytest.mark.parametrize("ch", ["\x1b", "\x9b", "\x07", "\r", "\n", "\x08", "\x7f", "\x00", "\x85", "\u202a", "\u202e",
                                "\u2066", "\u2069", "\u200b", "\u200f", "\u2028", "\ufeff"])
def test_clean_writes_every_control_and_format_character_as_a_visible_escape(ch: str) -> None:
    got = clean(f"a{ch}b")
    assert ch not in got and got.startswith("a\\") and got.endswith("b") and got.isprintable()
    assert clean(got) == got  # idempotent
    assert clean("plain [text] é 日本") == "plain [text] é 日本"


def test_display_copy_cleans_a_record_at_every_depth_and_leaves_it_as_it_was() -> None:
    from spotwise.reports.runs_view import RunState

    st = RunState(dir="d", name="n\x1b[2J", status="running", metrics={"k\x07": 1.0}, notes=["on h\x9b pid 1"])
    shown = display_copy(st)
    assert shown.name == "n\\x1b[2J" and list(shown.metrics) == ["k\\x07"] and shown.notes == ["on h\\x9b pid 1"]
    assert st.name == "n\x1b[2J" and list(st.metrics) == ["k\x07"]  # the record (the --json form) is exact


def test_the_terminal_console_cleans_what_a_caller_forgot_and_drops_hyperlinks() -> None:
    import io

    buf = io.StringIO()
    console = terminal_console(file=buf, force_terminal=True, width=120)
    console.print("[link=https://evil.example]x[/link] \x1b]0;t\x07 \x9b2J \u202e [bold]ok[/bold]")
    out = buf.getvalue()
    assert "\x1b]" not in out and "\x9b" not in out and "\u202e" not in out and "\x07" not in out
    assert "\x1b[1mok" in out  # spotwise's own styles still work


# ------------------------------------------------------------------------------ hostile run directories
def _run_dir(d: Path, *, spec_name: str = "job", metric: str = "acc", policy: str = "spot-guard",
             reason: str = "price rose", wall: float = 5.0) -> Path:
    """A run directory as a run in progress leaves it (spec, header, a step, logged metrics, a decision)."""
    d.mkdir(parents=True)
    (d / "spec.json").write_text(json.dumps({"name": spec_name, "target": {"iterations": 40}, "deadline": 7200.0}))
    events = [{"t": 0.0, "wall": 0.01, "kind": "header", "schema": 1, "job": spec_name, "workers": 2},
              {"t": 3.0, "wall": wall - 1, "kind": "step", "step": 3, "loss": 2.0, "active": 2, "lr": 0.1, "sync": "full",
               "samples": 48, "cost": 0.001},
              {"t": 3.0, "wall": wall - 1, "kind": "metrics", "step": 3, "values": {metric: 0.5}},
              {"t": 4.0, "wall": wall, "kind": "decision", "policy": policy, "decision": "hold", "reason": reason}]
    (d / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return d


FIELDS = ("folder", "spec-name", "metric-key", "decision-policy", "decision-reason")


def _hostile_run(root: Path, field: str, payload: str) -> Path:
    name = payload if field == "folder" else "run"
    kw = {"spec-name": {"spec_name": payload}, "metric-key": {"metric": payload},
          "decision-policy": {"policy": payload}, "decision-reason": {"reason": payload}}.get(field, {})
    return _run_dir(root / name, **kw)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("where,field", [("folder", f) for f in FIELDS] + [("uri", f) for f in FIELDS if f != "folder"])
def test_status_shows_hostile_run_values_as_text(tmp_path: Path, field: str, payload: str, where: str) -> None:
    """(A URI with a control character is refused as the user's argument; a bucket's own names: the runs test.)"""
    d = _hostile_run(tmp_path / "runs", field, payload)
    res = _invoke("status", str(d) if where == "folder" else f"file://{d}")
    assert res.exit_code == 0, res.output
    _assert_safe(res.stdout, payload)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("where", ["folder", "uri"])
def test_runs_lists_a_hostile_folder_name_as_text_and_json_keeps_it_exact(tmp_path: Path, payload: str, where: str) -> None:
    root = tmp_path / "runs"
    _hostile_run(root, "folder", payload)
    arg = str(root) if where == "folder" else f"file://{root}"
    res = _invoke("runs", arg)
    assert res.exit_code == 0, res.output
    _assert_safe(res.stdout, payload)
    res = _invoke("runs", arg, "--json")
    assert res.exit_code == 0 and [r["name"] for r in json.loads(res.stdout)["runs"]] == [payload]


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", ["host", "pid"])
def test_status_uri_shows_a_hostile_lease_holder_as_text(tmp_path: Path, field: str, payload: str) -> None:
    d = _run_dir(tmp_path / "bucket" / "run")
    doc = {"owner": "o", "heartbeat": time.time(), "ttl_s": 90.0, "host": "node-1", "pid": 41}
    doc[field] = payload
    (d / "lease.json").write_text(json.dumps(doc))
    res = _invoke("status", f"file://{d}")
    assert res.exit_code == 0, res.output
    assert "the URI's lease" in res.stdout
    _assert_safe(res.stdout, payload)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", ["AvailabilityZone", "InstanceType"])
def test_traces_show_prints_hostile_zone_and_type_names_as_text(tmp_path: Path, field: str, payload: str) -> None:
    recs = [{"AvailabilityZone": "us-east-1a", "InstanceType": "c5.xlarge", "ProductDescription": "Linux/UNIX",
             "SpotPrice": "0.1", "Timestamp": f"2024-01-0{i}T00:00:00Z"} for i in (1, 2, 3)]
    for r in recs:
        r[field] = payload
    (tmp_path / "t.json").write_text(json.dumps({"SpotPriceHistory": recs}))
    res = _invoke("traces", "show", str(tmp_path / "t.json"))
    assert res.exit_code == 0, res.output
    _assert_safe(res.stdout, payload)


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_an_error_message_quoting_a_hostile_path_is_text(tmp_path: Path, payload: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's error printer (InputError -> exit 2): a plain forced-terminal console, so the printer's own cleaning is tested."""
    from rich.console import Console

    import spotwise.cli as cli

    monkeypatch.setattr(cli, "err_console", Console(stderr=True, force_terminal=True, width=250))
    (tmp_path / payload).mkdir()
    res = CliRunner().invoke(app, ["status", str(tmp_path / payload)], env=ENV)
    assert res.exit_code == 2
    assert "not a spotwise run directory" in res.stderr
    _assert_safe(res.stderr, payload)


# ---------------------------------------------------------------------------------------------- report
SPEC: dict[str, Any] = {"name": "reported", "seed": 1,
                        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 20},
                        "target": {"iterations": 10}, "deadline": "2h",
                        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
                        "outputs": {"checkpoint_every": 0, "plots": False}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "done"
    spotwise.simulate(SPEC, out)
    return out


def _with_job_name(src: Path, dest: Path, job: str) -> Path:
    """A copy of the run ``src`` whose recorded job name (the events' header, the summary's spec) is ``job``."""
    shutil.copytree(src, dest)
    lines = (dest / "events.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    head["job"] = job
    (dest / "events.jsonl").write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    summary = json.loads((dest / "summary.json").read_text())
    summary["spec"]["name"] = job
    (dest / "summary.json").write_text(json.dumps(summary))
    return dest


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
@pytest.mark.parametrize("field", ["one-run", "compared"])
def test_report_prints_hostile_run_names_as_text(finished: Path, tmp_path: Path, field: str, payload: str) -> None:
    if field == "one-run":
        d = _with_job_name(finished, tmp_path / "run", payload)
        res = _invoke("report", str(d))
    else:
        a = _with_job_name(finished, tmp_path / "one", payload)
        b = _with_job_name(finished, tmp_path / "other", "reported")
        res = _invoke("report", str(a), str(b), "--out", str(tmp_path / "compare.html"))
    assert res.exit_code == 0, res.output
    _assert_safe(res.stdout, payload)


# --------------------------------------------------------------------------------- the printing paths
def test_every_console_spotwise_prints_through_is_a_terminal_console() -> None:
    """Source scan: no module but terminal_text builds a rich Console (its consoles clean every segment), and
    no CLI print passes an f-string of a value into markup without terminal_text's helpers."""
    pkg = Path(spotwise.__file__).parent
    offenders = []
    for path in pkg.rglob("*.py"):
        if path.name == "terminal_text.py":
            continue
        src = path.read_text()
        if re.search(r"(?<![\w.])Console\(", src) or re.search(r"from rich import print|rich\.print\(", src):
            offenders.append(str(path.relative_to(pkg)))
    assert not offenders, f"build consoles with spotwise.reports.terminal_text.terminal_console: {offenders}"


# ----------------------------------------------------------------------- item 9: URI status and listing
def test_the_age_of_the_last_event_comes_from_when_the_log_was_written_locally_and_at_a_uri(tmp_path: Path) -> None:
    """An event's wall counts from the run's start: the age is the log's modification time's, the bucket object's at a URI."""
    d = _run_dir(tmp_path / "bucket" / "run", wall=5.0)
    past = time.time() - 40
    os.utime(d / "events.jsonl", (past, past))
    for arg in (str(d), f"file://{d}"):
        res = _invoke("status", arg, "--json")
        assert res.exit_code == 0, res.output
        age = json.loads(res.stdout)["updated_age_s"]
        assert 35 <= age <= 3600, (arg, age)


def test_modified_time_reads_each_store_s_form() -> None:
    import datetime

    from spotwise.remote.view import modified_time

    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    assert modified_time({"mtime": when.timestamp()}) == when.timestamp()  # file://
    assert modified_time({"LastModified": when}) == when.timestamp()  # S3 (s3fs)
    assert modified_time({"updated": "2026-01-02T03:04:05.000Z"}) == when.timestamp()  # GCS (gcsfs)
    assert modified_time({"size": 3}) is None and modified_time(None) is None


@pytest.mark.parametrize("bad", ["over-the-cap", "a-folder"])
def test_one_unreadable_run_below_a_prefix_is_one_row_locally_and_at_a_uri(tmp_path: Path, bad: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "bucket"
    _run_dir(root / "a")
    broken = _run_dir(root / "b")
    _run_dir(root / "c")
    if bad == "over-the-cap":
        monkeypatch.setenv("SPOTWISE_MAX_FILE_MB", "0.01")  # 10 KiB: every file of a view is within it but b's
        (broken / "spec.json").write_text(json.dumps({"name": "job", "target": {"iterations": 40}, "pad": "x" * 20000}))
    else:
        (broken / "events.jsonl").unlink()
        (broken / "events.jsonl").mkdir()
    wheres = [f"file://{root}"] + ([str(root)] if bad == "a-folder" else [])  # the local cap of spec.json is fixed (8 MiB)
    for arg in wheres:
        res = CliRunner().invoke(app, ["runs", arg, "--json"])
        assert res.exit_code == 0, (arg, res.output)
        rows = {r["name"]: r for r in json.loads(res.stdout)["runs"]}
        assert sorted(rows) == ["a", "b", "c"], rows
        assert rows["b"]["status"] == "unreadable" and rows["b"]["detail"], rows["b"]
        assert rows["a"]["status"] == rows["c"]["status"] == "interrupted"
        res = CliRunner().invoke(app, ["runs", arg])
        assert res.exit_code == 0 and "unreadable" in res.stdout
    res = CliRunner().invoke(app, ["status", f"file://{broken}"])  # the one run alone: exit 2 saying why, as a folder's
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert ("over the cap" if bad == "over-the-cap" else "not a plain file") in res.stderr, res.stderr


def test_a_warning_line_quoting_a_run_directory_name_is_cleaned(capsys: pytest.CaptureFixture[str]) -> None:
    """checkpoint and mirror warnings (a checkpoint's file name, a bucket's key) go through the same sanitiser."""
    from spotwise.control.checkpoint import warn_on_stderr as checkpoint_warn
    from spotwise.remote.mirror import _warn as mirror_warn

    for warn in (checkpoint_warn, mirror_warn):
        warn("checkpoint step-1\x1b]0;pwned\x07.pt is damaged\u202e")
        err = capsys.readouterr().err
        assert err.startswith("warning: ") and "\x1b" not in err and "\x07" not in err and "\u202e" not in err
        assert "step-1\\x1b]0;pwned\\x07.pt" in err
