"""The ``spotwise`` command line: ``demo | plan | run | launch | simulate | report | runs | status | traces``.

Contracts (DESIGN.md): ``--json`` prints exactly one JSON object on stdout (logs go to stderr);
bad input exits 2 with one message saying what is wrong and how to fix it, never a traceback;
internal failures exit 1 (set ``SPOTWISE_DEBUG=1`` to see the traceback).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import typer

from spotwise import __version__
from spotwise.cli_eject import eject_command
from spotwise.cli_help import command_kw
from spotwise.cli_json import json_stdout, print_json  # noqa: F401 (print_json: the commands' and tests' one writer)
from spotwise.cli_tables import _serverless_table, _summary_table
from spotwise.errors import InputError
from spotwise.outputfiles import check_output_file
from spotwise.reports.terminal_text import clean, terminal_console

F = TypeVar("F", bound=Callable[..., Any])

app = typer.Typer(
    name="spotwise",
    help="Train ML models cheaply on volatile cloud capacity: plan, run through revocations, evaluate on real price histories.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # a docstring's paragraph is reflowed to the terminal, not broken where it was typed
    **command_kw(""))
traces_app = typer.Typer(help="Inspect price and availability traces.", no_args_is_help=True, **command_kw("traces"))
app.add_typer(traces_app, name="traces")

err_console = terminal_console(stderr=True)


def guarded(fn: F) -> F:
    """Map spotwise errors to the exit-code contract: InputError -> 2, anything else -> 1.

    Ctrl-C exits 130; SIGTERM (``timeout``, systemd, Kubernetes) is turned into the same
    interrupt, so the same cleanup runs, and exits 143 (:mod:`spotwise.signals`).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from spotwise.signals import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, sigterm_as_interrupt, sigterm_received

        try:
            with sigterm_as_interrupt(), json_stdout(bool(kwargs.get("as_json"))):
                return fn(*args, **kwargs)
        except Terminated:
            err_console.print("terminated (SIGTERM)")
            raise typer.Exit(EXIT_TERMINATED) from None
        except typer.Exit:
            raise
        except InputError as e:
            details = getattr(e, "details", None)
            if details:  # e.g. the traceback of a user workload that raised: theirs to read, on stderr
                sys.stderr.write(details.rstrip("\n") + "\n")
                sys.stderr.flush()
            _print_error("error:", e.message)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            if sigterm_received():  # SIGTERM's, turned into a plain KeyboardInterrupt by Ray's ray.get (issue 30 item 6)
                err_console.print("terminated (SIGTERM)")
                raise typer.Exit(EXIT_TERMINATED) from None
            err_console.print("interrupted")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as e:  # internal failure: exit 1
            if os.environ.get("SPOTWISE_DEBUG"):
                traceback.print_exc()
            _print_error("internal error:", f"{e.__class__.__name__}: {e} "
                         "(this is a bug in spotwise; rerun with SPOTWISE_DEBUG=1 for the traceback)")
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _print_error(label: str, message: str) -> None:
    """One error line on stderr: the message (which may quote a path, a name or a value read from a run
    directory, trace or spec) as text -- its brackets are not markup (pip install 'spotwise[cloud]'), its
    control characters are shown escaped (:mod:`spotwise.reports.terminal_text`)."""
    from rich.text import Text

    err_console.print(Text.assemble((label, "bold red"), " ", clean(message)), highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"spotwise {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """spotwise: plan, run and evaluate ML training on spot/preemptible capacity."""


# ------------------------------------------------------------------------------------- traces
@traces_app.command("show", **command_kw("traces show"))
@guarded
def traces_show(
    paths: list[Path] = typer.Argument(..., help="Trace files or folders: AWS DescribeSpotPriceHistory JSON, Azure price CSV, SkyPilot JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object {series: [...]} on stdout."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Draw the series over time into this PNG file."),
) -> None:
    """Statistics of every series in the given traces (one per zone x instance type for AWS)."""
    from spotwise.market.traces import load_traces
    from spotwise.reports.traces_view import plot_series, render_table, series_row

    if plot is not None and plot.suffix.lower() != ".png":
        raise InputError(f"--plot needs a .png file name, got {str(plot)!r}", "write e.g. --plot prices.png", "--plot")
    if plot is not None:
        check_output_file(plot, "--plot")
    series = load_traces([str(p) for p in paths])
    if not series:
        raise InputError(
            "no price or availability records in the given files (empty traces)",
            "pass files that contain records; empty AWS dumps hold no prices", ", ".join(map(str, paths)),
        )
    rows = [series_row(s) for s in series]
    if plot is not None:
        out = plot_series(series, plot)
        err_console.print(f"plot written to {out}")
    if as_json:
        print_json({"series": rows})
    else:
        # wide enough for ISO timestamps when piped; a terminal folds cells instead of cutting them
        terminal_console(width=None if sys.stdout.isatty() else 220).print(render_table(rows))


# ------------------------------------------------------------------- commands of later issues
def _check_spec(spec: Path, *, import_user_code: bool = False, local_workers: bool = False) -> Any:
    """:func:`spotwise.api.check_spec` (the spec loaded, its market built; InputError exits 2)."""
    from spotwise.api import check_spec

    return check_spec(spec, import_user_code=import_user_code, local_workers=local_workers)


def _demo_spec_path() -> Path:
    """examples/demo.yaml in a source checkout, else the copy packaged with spotwise."""
    from importlib import resources

    return Path(str(resources.files("spotwise") / "data" / "demo.yaml"))


def _preflight() -> None:
    """Before a run loads anything: the SPOTWISE_* numbers in range and ``ulimit -v`` large enough to import
    PyTorch (issue 38 items 1 and 3); exit 2 naming the variable or limit.  Ray's own need is checked before it starts."""
    from spotwise.capacity.raystart import check_driver_memory
    from spotwise.envvars import check_numeric_env

    check_numeric_env()
    check_driver_memory()


def _run_and_report(job: Any, out: Path, *, as_json: bool, **kw: Any) -> None:
    """:func:`spotwise.api.run`, then its summary: one JSON object, or the tables."""
    import time

    from spotwise.api import run as api_run
    from spotwise.control.progress import NoProgressError

    t0 = time.monotonic()
    try:
        summary = api_run(job, out, progress=not as_json, **kw)
        out = Path(kw.get("staging") or out)  # a resume from a URI: the local staging folder
    except NoProgressError as e:
        if as_json:  # the run's summary is still the one JSON object; the message goes to stderr, exit 2
            print_json(e.summary.to_dict())
        raise
    if as_json:
        print_json(summary.to_dict())
        return
    console = terminal_console()
    if summary.mode == "serverless":
        console.print(_serverless_table(summary))
        console.print(f"events: {out / 'events.jsonl'}; summary: {out / 'summary.json'}; report: {out / 'report' / 'index.html'}")
        return
    console.print(_summary_table(summary, out, elapsed_s=time.monotonic() - t0))
    console.print(f"report: {out / 'report' / 'index.html'} (plots: loss_vs_time.png, loss_vs_cost.png, workers_price.png, "
                  f"training.png beside it); events: {out / 'events.jsonl'}; summary: {out / 'summary.json'}")


@app.command(**command_kw("demo"))
@guarded
def demo(
    out: Path = typer.Option(Path("spotwise-demo"), "--out", help="Run directory to write (an earlier spotwise run there is replaced; other files are kept; a non-spotwise directory is refused)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
) -> None:
    """Run the demo: an MLP on digits with 8 spot workers on a synthetic market with revocations."""
    from spotwise.config import load_spec

    _preflight()
    job = load_spec(_demo_spec_path())
    _run_and_report(job, out, as_json=as_json, overwrite=True, compare_on_demand=True)


@app.command(**command_kw("plan"))
@guarded
def plan(
    spec: Path = typer.Argument(..., help="Job spec (YAML)."),
    trace: list[Path] = typer.Option([], "--trace", help="Price trace(s) to plan against (instead of the spec's market)."),
    objective: str = typer.Option("cost", "--objective", help="cost (cheapest within the deadline) or time (fastest within the budget)."),
    pilot: Optional[Path] = typer.Option(None, "--pilot", help="A run directory whose losses calibrate the error model."),
    pilot_steps: int = typer.Option(200, "--pilot-steps", help="Steps of the in-process pilot when no --pilot is given."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Plot expected cost against the deadline into this PNG."),
    write_spec: Optional[Path] = typer.Option(None, "--write-spec", help="Write the spec with the plan applied (YAML), ready for spotwise run."),
    types: Optional[str] = typer.Option(None, "--types", help="With --trace: instance types the job may use, comma-separated "
                                        "(default: cluster.instance_type)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout."),
    explain: bool = typer.Option(False, "--explain", help="Also print every assumption the plan rests on (always in --json)."),
    emit: list[str] = typer.Option([], "--emit", help="KIND=FILE: write ray-cluster=cluster.yaml or skypilot=task.yaml for the recommended place."),
    install: Optional[str] = typer.Option(None, "--install", help="With --emit: how the nodes get spotwise (git URL, wheel or source folder)."),
) -> None:
    """Recommend what to provision (spot or on-demand, bids, workers, where) to finish by the deadline for least.

    With price traces: also the place (zone, type) cheapest at the start, and how often the job met
    its deadline on the traces' past windows (a measured probability, with its 95% interval).
    """
    from spotwise.api import plan as api_plan

    notes: list[str] = []
    with err_console.status("planning: the spec, the loss model, each strategy priced on the market ..."):
        result = api_plan(spec, traces=trace, objective=objective, pilot=pilot, pilot_steps=pilot_steps,
                          types=[t.strip() for t in types.split(",") if t.strip()] if types else None, plot=plot,
                          write_spec=write_spec, emit=emit, install=install, notes=notes)
    for line in notes:
        err_console.print(line, markup=False, highlight=False, soft_wrap=True)
    if as_json:
        d = result.to_dict()
        d["expected_time_s"] = result.expected_time_s
        print_json(d)
        return
    from spotwise.reports.plan_view import print_plan

    print_plan(result, terminal_console(), explain=explain)


@app.command(**command_kw("run"))
@guarded
def run(
    spec: Optional[Path] = typer.Argument(None, help="Job spec (YAML); with --resume: the spec the run was started "
                                          "with, checked against its spec.json."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory to write."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Resume the run in this directory, or at this s3://, gs:// "
                                         "or file:// URI (staged in --out or a cache folder), from its last checkpoint."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run on an existing Ray cluster.", rich_help_panel="On a Ray cluster"),
    autoscale: bool = typer.Option(False, "--autoscale", help="With --ray-address: the cluster's autoscaler provides the "
                                   "spot nodes (ray up); ask it for the job's worker slots and replace lost nodes.", rich_help_panel="On a Ray cluster"),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing spotwise run in --out (only the files spotwise wrote are removed)."),
    notice_source: str = typer.Option("none", "--notice-source", help="With --ray-address: watch each spot node's "
                                      "metadata service for preemption notices (none, aws or gcp).", rich_help_panel="On a Ray cluster"),
    metadata_url: Optional[str] = typer.Option(None, "--metadata-url", help="Metadata service URL (default: the cloud's "
                                               "link-local address).", rich_help_panel="On a Ray cluster"),
    compare_on_demand: bool = typer.Option(False, "--compare-on-demand", help="Afterwards, train the same samples on "
                                           "on-demand workers (emulated, never revoked) and report both: accuracy, time, cost."),
    redis_url: Optional[str] = typer.Option(None, "--redis-url", help="cluster.kind serverless: use this Redis "
                                            "(redis://\\[:password@]host:port\\[/db]) instead of starting a private redis-server.", rich_help_panel="Serverless (cluster.kind: serverless)"),
    lithops_config: Optional[Path] = typer.Option(None, "--lithops-config", help="cluster.kind serverless: a Lithops config "
                                                  "file selecting a cloud function backend (default: Lithops localhost).", rich_help_panel="Serverless (cluster.kind: serverless)"),
    emulate_network_mbps: float = typer.Option(0.0, "--emulate-network-mbps", help="cluster.kind serverless, experiments: "
                                               "delay each function's transfers as over a link of this many Mbit/s to Redis, "
                                               "shared by the workers (e.g. 1000 for a 1 Gbit/s NIC); 0 = off.", rich_help_panel="Serverless (cluster.kind: serverless)"),
    trust_code: bool = typer.Option(False, "--trust-code", help="With --resume: import the user code, and read the "
                                    "dataset, the run's spec.json names without checking them against your spec (only for "
                                    "run directories you trust)."),
    allow_changes: bool = typer.Option(False, "--allow-changes", help="With --resume and a spec: let it change the "
                                       "training script's own arguments (workload.args), applied from the resumed step."),
) -> None:
    """Train for real: PyTorch workers on Ray on the emulated spot market, or (cluster.kind: serverless) Lithops functions
    exchanging updates through Redis; writes OUT/summary.json, events.jsonl, plots."""
    from spotwise.remote.uri import default_staging_dir, is_uri

    _preflight()
    uri = resume if resume is not None and is_uri(resume) else None  # --resume s3://...: staged in --out or a cache folder
    target: Any = uri or (Path(resume) if resume is not None else out)
    if target is None:
        if spec is None:
            raise InputError("no spec given", "pass a spec (spotwise run SPEC --out DIR) or --resume DIR", "spotwise run")
        job = _check_spec(spec)  # the spec's own errors first, then the missing flag
        if job.outputs.uri is None:
            raise InputError("no output directory", "pass --out DIR (it receives summary.json, events.jsonl and plots), or "
                             "set outputs.uri", "--out")
        target = default_staging_dir(job.outputs.uri)
    _run_and_report(spec, target, as_json=as_json, resume=resume is not None, overwrite=overwrite, ray_address=ray_address,
                    staging=(out or default_staging_dir(uri)) if uri else None,
                    autoscale=autoscale, notice_source=notice_source, metadata_url=metadata_url,
                    compare_on_demand=compare_on_demand, redis_url=redis_url, lithops_config=lithops_config,
                    emulate_network_mbps=emulate_network_mbps, trust_code=trust_code,
                    allow_changes=allow_changes)


@app.command(**command_kw("launch"))
@guarded
def launch(
    spec: Path = typer.Argument(..., help="Job spec (YAML): cluster, market, target, workload.batch_size."),
    script: Path = typer.Argument(..., help="Your training script (spotwise.elastic), relative to this folder."),
    args: Optional[list[str]] = typer.Argument(None, help="After --: the script's own arguments."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory to write (default: from outputs.uri)."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Resume the launched run in this directory or URI."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Run on an existing Ray cluster."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing spotwise run in --out."),
    allow_changes: bool = typer.Option(False, "--allow-changes", help="With --resume: run the script with the "
                                       "arguments given here when they differ from the run's (from the resumed step)."),
    restart: bool = typer.Option(False, "--restart", help="Restart mode: run an unmodified torchrun script, "
                                 "stopped and started again (from its own checkpoint) at every membership change."),
    resume_args: Optional[str] = typer.Option(None, "--resume-args", help="Restart mode: arguments added when the "
                                              "script restarts after it saved a checkpoint, e.g. '--init_from=resume'."),
) -> None:
    """Train your own script through revocations: the spec says where and how long, the script how (its
    workload.script and args; `spotwise run SPEC` does the same for a spec naming the script).  With
    --restart the script is an unmodified torchrun script ({checkpoint_dir} in its arguments, or
    $SPOTWISE_CHECKPOINT_DIR, is the folder it checkpoints into)."""
    from spotwise.remote.uri import default_staging_dir, is_uri
    from spotwise.spec.launch import launch_spec

    _preflight()
    if resume_args is not None and not restart:
        raise InputError("--resume-args applies to restart mode", "add --restart (or drop --resume-args)", "--resume-args")
    settings = None
    if restart:
        import shlex

        settings = {} if resume_args is None else {"resume_args": shlex.split(resume_args)}
    job = launch_spec(spec, script, list(args) if args else None, restart=settings)
    uri = resume if resume is not None and is_uri(resume) else None
    target: Any = uri or (Path(resume) if resume is not None else out)
    if target is None:
        if job.outputs.uri is None:
            raise InputError("no output directory", "pass --out DIR, or set outputs.uri", "--out")
        target = default_staging_dir(job.outputs.uri)
    _run_and_report(job, target, as_json=as_json, resume=resume is not None, overwrite=overwrite,
                    ray_address=ray_address, staging=(out or default_staging_dir(uri)) if uri else None,
                    allow_changes=allow_changes)


@app.command(**command_kw("simulate"))
@guarded
def simulate(
    spec: Path = typer.Argument(..., help="Job spec (YAML)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory to write (summary.json, events.jsonl, report/)."),
    pilot: Optional[Path] = typer.Option(None, "--pilot", help="A run directory of this job whose losses calibrate "
                                         "the loss model (default: an in-process pilot of a built-in workload)."),
    pilot_steps: int = typer.Option(200, "--pilot-steps", help="Steps of the in-process pilot when no --pilot is given."),
    train_size: Optional[int] = typer.Option(None, "--train-size", help="Training samples of a module:function "
                                             "workload (simulate never imports it)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier run in --out (its files only)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON object on stdout."),
    trace: Optional[list[Path]] = typer.Option(None, "--trace", help="Sweep mode: replay these price/availability "
                                               "traces (files or folders; repeatable) from many start times.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    strategies: Optional[str] = typer.Option(None, "--strategies", help="Sweep: comma-separated strategies "
                                             "(on-demand, no-interruptions, thm3-bid, thm3-bid+guard, spot+guard, spotwise, spotwise-avail; "
                                             "or package.module:ClassName user policies).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    starts: str = typer.Option("6h", "--starts", help="Sweep: a start every this long (e.g. 6h), from --history after "
                               "the traces begin to a deadline before they end.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    all_zones: bool = typer.Option(False, "--all-zones", help="Sweep: every zone of the traces is a home (else cluster.region).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    types: Optional[str] = typer.Option(None, "--types", help="Sweep: instance types the job may use, comma-separated "
                                        "(default: cluster.instance_type).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    work_hours: Optional[float] = typer.Option(None, "--work-hours", help="Sweep: the job's compute hours on its cluster "
                                               "(default: target.iterations x the expected step time).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    deadline_hours: Optional[float] = typer.Option(None, "--deadline-hours", help="Sweep: the deadline (default: the spec's).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    restart: str = typer.Option("300s", "--restart", help="Sweep: time lost by each (re)start or move (cold start + restore).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    history: str = typer.Option("7d", "--history", help="Sweep: price history a strategy may use before each start.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    plot: bool = typer.Option(True, "--plot/--no-plot", help="Sweep: CDF plots of cost vs oracle and finish time into --out.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    spot_price: Optional[float] = typer.Option(None, "--spot-price", help="Sweep: $/h of spot capacity that has an "
                                               "availability trace but no price trace (SkyPilot).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    spec_market: bool = typer.Option(False, "--spec-market", help="Sweep over the spec's own market (synthetic prices, "
                                     "its revocation model's capacity, e.g. GCP lifetimes) instead of --trace.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    horizon: str = typer.Option("30d", "--horizon", help="With --spec-market: how long a market to generate.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    max_runs: Optional[int] = typer.Option(None, "--max-runs", help="Sweep: the most window runs (starts x homes x "
                                           "strategies, 1-3 ms each) before the sweep is refused (default 60000).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    breakdown: bool = typer.Option(False, "--breakdown", help="Sweep: also show where the hours went per strategy (spot, "
                                   "on-demand, restarts/moves billed without progress, idle).", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
    hindsight: bool = typer.Option(False, "--hindsight", help="Sweep: also build each window's hindsight schedule (the "
                                   "best schedule knowing the future that pays its restarts) and compare with it.", rich_help_panel="Sweep over traces (--trace / --spec-market)"),
) -> None:
    """Simulate a job in virtual time (no Ray): one run on its market, or with --trace a sweep over real traces.

    One run: the run's control logic with modelled compute and loss, into --out (a run directory).
    Sweep: every strategy from every start time over the traces; a table of cost, deadline met
    (probability, 95% CI), cost vs the hindsight oracle and vs on-demand; --out gets sweep.json,
    windows.csv and CDF plots.
    """
    from spotwise.api import simulate as api_simulate

    if trace or spec_market:
        _simulate_sweep(spec, out, overwrite, as_json, trace or [], strategies, starts, all_zones, types, work_hours,
                        deadline_hours, restart, history, plot, spot_price, spec_market, horizon, pilot, max_runs, breakdown,
                        hindsight)
        return
    if out is None:  # the spec's own errors first, then the missing flag
        from spotwise.api import check_spec
        from spotwise.sim.simulate import check_simulable

        check_simulable(check_spec(spec), str(pilot) if pilot else None)
        raise InputError("no output directory", "pass --out DIR (it receives summary.json, events.jsonl and plots)", "--out")
    summary = api_simulate(spec, out, pilot=pilot, pilot_steps=pilot_steps, train_size=train_size, overwrite=overwrite,
                           progress=not as_json)
    if as_json:
        print_json(summary.to_dict())
        return
    console = terminal_console()
    console.print(_summary_table(summary, out))
    notes = summary.extra.get("loss_model") or {}
    for m in notes.get("measured", []):
        console.print(f"loss model, measured: {m}", markup=False)
    for a in notes.get("assumed", []):
        console.print(f"loss model, assumed: {a}", markup=False)
    plots = (out / "report" / "index.html").is_file()
    console.print(f"events: {out / 'events.jsonl'}; summary: {out / 'summary.json'}"
                  + (f"; report: {out / 'report' / 'index.html'}" if plots else ""))


def _simulate_sweep(spec: Path, out: Optional[Path], overwrite: bool, as_json: bool, trace: list[Path],
                    strategies: Optional[str], starts: str, all_zones: bool, types: Optional[str],
                    work_hours: Optional[float], deadline_hours: Optional[float], restart: str, history: str, plot: bool,
                    spot_price: Optional[float] = None, spec_market: bool = False, horizon: str = "30d",
                    pilot: Optional[Path] = None, max_runs: Optional[int] = None, breakdown: bool = False,
                    hindsight: bool = False) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from spotwise.api import sweep as api_sweep
    from spotwise.reports.sweep_view import sweep_table
    from spotwise.reports.units import human_duration
    from spotwise.sim.sweep.from_spec import TextProgress

    def go(progress: Any) -> Any:
        return api_sweep(spec, trace, strategies=strategies, starts=starts, all_zones=all_zones,
                         types=[t.strip() for t in types.split(",") if t.strip()] if types else None, work_hours=work_hours,
                         deadline_hours=deadline_hours, restart=restart, history=history, spot_price=spot_price,
                         spec_market=spec_market, horizon=horizon, pilot=pilot, max_runs=max_runs, out=out,
                         overwrite=overwrite, plots=plot, progress=progress, hindsight=hindsight)

    if as_json or not err_console.is_terminal:  # no live bar: a line on stderr every 10 s of a long sweep
        result = go(TextProgress(sys.stderr))
    else:
        with Progress(TextColumn("sweep"), BarColumn(), TextColumn("{task.completed}/{task.total} starts"),
                      TimeRemainingColumn(), console=err_console, transient=True) as bar:
            task = bar.add_task("sweep", total=None)
            result = go(lambda d, n: bar.update(task, completed=d, total=n))
    if as_json:
        d = result.to_dict()
        d["homes"], d["skipped_series"], d["written"] = result.homes, result.skipped, result.written
        print_json(d)
        return
    console = terminal_console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200)
    console.print(sweep_table(result, breakdown=breakdown, width=console.width))
    console.print(f"{len(result.homes)} home place(s), {result.places} place(s) in all; {result.worker_iterations / 1e6:.1f} M "
                  f"simulated worker-iterations in {human_duration(result.wall_s)}")
    if result.written:
        console.print("written: " + ", ".join(result.written))


@app.command(**command_kw("report"))
@guarded
def report(
    run_dirs: list[Path] = typer.Argument(..., help="A run directory, or several run or sweep directories to compare."),
    out: Optional[Path] = typer.Option(None, "--out", help="With several directories: the comparison page to write "
                                       "(default spotwise-compare.html)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object on stdout."),
) -> None:
    """Tables and plots of a finished run (RUN_DIR/report/index.html and PNGs); with several run or sweep
    directories, one HTML page comparing them side by side (loss vs time and cost, cost and deadline table)."""
    from spotwise.api import report as api_report

    rep = api_report(run_dirs if len(run_dirs) > 1 else run_dirs[0], out)
    if as_json:
        print_json(rep.entries[0] if rep.kind == "run" else rep.to_dict())
        return
    if rep.kind == "run":
        from spotwise.reports.run import load_run, summary_table

        terminal_console().print(summary_table(load_run(run_dirs[0])))
    else:
        from spotwise.cli_tables import comparison_table

        terminal_console().print(comparison_table(rep))
        for f in rep.flags:
            err_console.print(f"not like for like: {clean(f)}", markup=False)
    terminal_console().print("written: " + ", ".join(clean(p) for p in rep.files), markup=False)


@app.command(**command_kw("runs"))
@guarded
def runs(
    root: str = typer.Argument(".", help="Folder (or s3://, gs://, file:// prefix) holding run directories "
                               "(default: the current folder)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object {dir, runs: [...]} on stdout."),
) -> None:
    """List the run directories below DIR: status, steps done of the target, cost so far, deadline and time left."""
    from spotwise.remote.view import list_states
    from spotwise.reports.runs_view import runs_table

    notes: list[str] = []
    states = list_states(root, notes)
    for line in notes:
        err_console.print(f"note: {clean(line)}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        print_json({"dir": str(root), "runs": [s.to_dict() for s in states]})
    else:
        terminal_console().print(runs_table(states) if states else f"no run directories below {clean(root)}", markup=False)


@app.command(**command_kw("status"))
@guarded
def status(
    run_dir: str = typer.Argument(..., help="A run directory (the --out of spotwise run or simulate) or its "
                                  "outputs.uri (s3://, gs://, file://), running or finished."),
    as_json: bool = typer.Option(False, "--json", help="Print the run's state as one JSON object on stdout."),
    watch: bool = typer.Option(False, "--watch", help="Keep the view up to date until the run ends (Ctrl-C stops)."),
    interval: float = typer.Option(2.0, "--interval", help="With --watch: seconds between updates."),
) -> None:
    """One run's state, read from its event log while it runs: status, steps, loss, workers, cost so far, time left
    (a cloud run's from its outputs.uri)."""
    from spotwise.reports.runs_view import status_table, watch_status

    if watch and as_json:
        raise InputError("--watch and --json together", "use --json for one snapshot, --watch to follow the run", "--watch")
    from spotwise.remote.view import state_reader

    read = state_reader(run_dir)
    if watch:
        watch_status(run_dir, terminal_console(), interval, read=read)
    elif as_json:
        print_json(read().to_dict())
    else:
        terminal_console().print(status_table(read()))


app.command("eject", **command_kw("eject"))(guarded(eject_command))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    app(args=argv, prog_name="spotwise")


if __name__ == "__main__":  # pragma: no cover
    main()
