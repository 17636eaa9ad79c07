"""The Python API (issue 22): what the ``spotwise`` command does, as functions that return results.

Every command of the CLI is a thin layer over one function here (``spotwise plan`` over
:func:`plan`, ``run`` over :func:`run`, ``simulate`` over :func:`simulate` and :func:`sweep`,
``report`` over :func:`report`); nothing is reachable only from the CLI.  The functions take a spec
as a :class:`~spotwise.config.JobSpec`, a YAML path or a plain ``dict``; results are dataclasses
with ``to_dict()``.  Errors a user can cause raise :class:`~spotwise.errors.InputError` (the CLI
maps it to exit 2); nothing here calls ``sys.exit`` or prints (progress bars only when asked).

    import spotwise
    spec = spotwise.load_spec("examples/demo.yaml")
    p = spotwise.plan(spec)                      # Plan: strategy, bids, expected cost and time
    s = spotwise.simulate(spec)                  # RunSummary of a modelled run (no Ray)
    r = spotwise.run(spec, "runs/demo")          # RunSummary of real training on the emulated market
    spotwise.report(["runs/demo", "runs/other"]) # one HTML page comparing runs
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, Union

from spotwise.api_args import (bool_arg, callable_arg, duration_arg, int_arg, name_list, number_arg, path_arg, path_list,
                                str_arg)
from spotwise.errors import InputError

if TYPE_CHECKING:  # types only: each function imports what it runs
    from spotwise.config import JobSpec
    from spotwise.events import RunSummary
    from spotwise.planner.plan.records import Plan
    from spotwise.reports.compare import Report
    from spotwise.sim.sweep import SweepResult

SpecLike = Union["JobSpec", str, "os.PathLike[str]", Mapping[str, Any]]


def load_spec(source: SpecLike) -> "JobSpec":
    """A validated job spec from a YAML file, a ``dict`` (parsed YAML/JSON) or a JobSpec (returned as is).
    Never imports a user workload or policy module."""
    from spotwise.config import JobSpec, spec_from_dict
    from spotwise.config import load_spec as _load

    if isinstance(source, JobSpec):
        return source
    if isinstance(source, Mapping):
        from spotwise.spec.input_paths import check_spec_files

        job = spec_from_dict(dict(source), "spec")
        check_spec_files(job)  # its paths are the current folder's, checked as a file's are
        return job
    if isinstance(source, (str, os.PathLike)):
        return _load(source)
    raise InputError(f"cannot make a job spec of {type(source).__name__}", "pass a YAML path, a dict or a JobSpec", "spec")


def check_spec(spec: SpecLike, *, import_user_code: bool = False, local_workers: bool = False,
               build_workload: bool = True) -> "JobSpec":
    """Load the spec and build its market: bad fields, unknown instance types, bad traces and missing
    datasets raise InputError.  A ``module:function`` workload is imported and called only with
    ``import_user_code`` (commands about to run it anyway); ``local_workers``: the job will run on the
    local emulated provider, so its worker actors must fit this machine's memory, and train on its
    device (``device: cuda`` or ``precision: fp16`` without CUDA exit 2 here, before Ray starts); with
    ``import_user_code`` the recipe's optimizer is stepped once on a throwaway parameter
    (:func:`_check_optimizer`).  ``build_workload=False``: no workload is built at all (its dataset is
    not read; ``simulate`` builds one only for what it needs of it)."""
    from spotwise.market.world import build_market

    job = load_spec(spec)
    if job.cluster.kind == "serverless":
        from spotwise.planes.serverless.runner import check_serverless_spec

        check_serverless_spec(job)  # no spot market: function pricing, Redis node, policies
    else:
        if local_workers:
            from spotwise.capacity.raystart import check_local_workers

            check_local_workers(job.cluster)
        build_market(job)
    worker_device = _check_device_here(job) if local_workers and job.cluster.kind == "vm" else None
    if job.workload.restart is not None:  # restart mode: the script is never run here, only read (it must save)
        from spotwise.spec.restart_mode import check_script_checkpoints

        check_script_checkpoints(str(job.workload.script), list(job.workload.args))
    elif build_workload and (import_user_code or ":" not in job.workload.name):
        from spotwise.elastic.describe import workload_for

        # import errors, missing datasets, a script that fails before its first batch: before anything starts
        workload_for(job.workload, job.seed)
    if import_user_code and job.cluster.kind == "vm":  # `run`: the optimizer steps once where it will step
        _check_optimizer(job, worker_device)
    return job


def _check_device_here(job: "JobSpec") -> str:
    """The device the workers of a run on this machine train on (``cpu`` or ``cuda``), decided before
    Ray starts: InputError for ``device: cuda`` without CUDA
    (:func:`~spotwise.capacity.placement.placement_for`) and for ``precision: fp16`` without CUDA
    whatever ``device`` says (``auto`` falls back to the CPU, and fp16 needs CUDA)."""
    from spotwise.capacity.placement import placement_for

    where = placement_for(job)  # device: cuda on a machine without CUDA: exit 2 here
    device = "cpu" if where.device == "cpu" else "cuda"
    if job.workload.precision == "fp16" and device != "cuda":
        why = (f"instance type {job.cluster.instance_type!r} has no GPU in the catalog" if where.instance_gpus < 1
               else "this machine has no CUDA device")
        raise InputError(f"precision fp16 needs CUDA, but this run's workers would train on CPUs (cluster.device "
                         f"{job.cluster.device}: {why})",
                         "use precision: bf16 (or fp32) on CPUs, or run a GPU instance type on a machine with a CUDA GPU "
                         "(or on a Ray cluster with GPU nodes: --ray-address)", "workload.precision")
    return device


def _check_optimizer(job: "JobSpec", worker_device: str | None) -> None:
    """The recipe's optimizer before anything starts: a ``module:Class`` is imported (it must subclass
    ``torch.optim.Optimizer``), and the optimizer is built and stepped once on a throwaway parameter
    where it will step -- the CPU for the parameter-server plane and ``device: cpu`` (torch.optim
    classes were stepped there when the spec loaded), else the workers' device ``worker_device``
    (None: a Ray cluster's, unknown here; a user class is then only imported, and its first real step
    is checked where it runs).  InputError (exit 2, ``workload.optimizer``) for whatever fails."""
    opt = job.workload.optimizer_spec
    if opt is None:
        return
    device = "cpu" if job.optimizer_steps_on_cpu() else worker_device
    user = ":" in opt.name
    if device is not None and (user or not job.optimizer_steps_on_cpu()):
        opt.first_step(device)
    elif user:
        from spotwise.training.recipe import optimizer_class

        optimizer_class(opt.name)  # importable, and an Optimizer subclass


def _check_pilot_steps(pilot_steps: int) -> None:
    int_arg(pilot_steps, "pilot_steps", example="200")  # pilot_steps="10": an InputError naming it, not a TypeError
    if pilot_steps < 10:
        raise InputError("--pilot-steps must be at least 10", "a pilot needs enough losses to fit the error model", "--pilot-steps")


def plan(spec: SpecLike, *, traces: Sequence[str | os.PathLike[str]] = (), objective: str = "cost",
         pilot: str | os.PathLike[str] | None = None, pilot_steps: int = 200, types: Sequence[str] | None = None,
         plot: str | os.PathLike[str] | None = None, write_spec: str | os.PathLike[str] | None = None,
         emit: Sequence[str] = (), install: str | None = None, notes: list[str] | None = None) -> "Plan":
    """Recommend a plan for ``spec`` (``spotwise plan``): strategy, workers, bids, iterations, expected cost
    and time, P(deadline), the alternatives compared.  ``plot`` writes expected cost against the deadline
    (PNG), ``write_spec`` the spec with the plan applied, ``emit`` ``KIND=FILE`` cluster files
    (``ray-cluster=...``, ``skypilot=...``); a line per file written is appended to ``notes``."""
    from spotwise.config import data_plane_why
    from spotwise.outputfiles import check_output_file
    from spotwise.planner.emit import prepare_emits, write_emits
    from spotwise.planner.plan import gather_inputs, make_plan, plot_cost_vs_deadline, write_planned_spec

    str_arg(objective, "objective", ("cost", "time"))
    str_arg(install, "install", allow_none=True, example="spotwise==0.1")
    if notes is not None and not isinstance(notes, list):
        raise InputError(f"expected a list (the lines of files written are appended to it), got {type(notes).__name__}",
                         "pass notes=[] or leave it out", "notes")
    # argument types first: traces="file.json" is one path, never its characters (issue 30 item 13)
    trace_list = path_list(traces, "traces")
    type_list = name_list(types, "types", "types=['p3.2xlarge']") or None
    emit = name_list(emit, "emit", "emit=['ray-cluster=cluster.yaml']")
    pilot, plot, write_spec = path_arg(pilot, "pilot"), path_arg(plot, "plot"), path_arg(write_spec, "write_spec")
    if plot is not None and Path(plot).suffix.lower() != ".png":
        raise InputError(f"--plot needs a .png file name, got {str(plot)!r}", "write e.g. --plot cost.png", "--plot")
    _check_pilot_steps(pilot_steps)
    if plot is not None:
        check_output_file(Path(plot), "--plot")
    if write_spec is not None:
        check_output_file(Path(write_spec), "--write-spec")
    spec_file = spec if isinstance(spec, (str, os.PathLike)) else None
    job = check_spec(spec)
    # no output onto a file this command reads (the spec, a trace, a catalog, ...): exit 2 before any work
    from spotwise.outputfiles import refuse_inputs
    from spotwise.planner.emit import emit_outputs, spec_inputs

    refuse_inputs([*([(plot, "--plot")] if plot is not None else []),
                   *([(write_spec, "--write-spec")] if write_spec is not None else []), *emit_outputs(list(emit))],
                  [*([spec_file] if spec_file is not None else []), *trace_list, *spec_inputs(job),
                   *([Path(install.strip()).expanduser()] if install and install.strip() else [])])
    emits = prepare_emits(list(emit), job, install=install, spec_file=spec_file or "spec.yaml",
                          planned_spec=write_spec, traces=trace_list, types=type_list)
    pilot_dir = str(pilot) if pilot else None
    result = make_plan(job, traces=trace_list, objective=objective, pilot_dir=pilot_dir,  # type: ignore[arg-type]
                       pilot_steps=pilot_steps, types=type_list)
    result.extra["data_plane"] = {"plane": job.cluster.data_plane, "why": data_plane_why(job)}
    written: list[str] = []
    if plot is not None:
        plot_cost_vs_deadline(job, result, gather_inputs(job, trace_list, pilot_dir, pilot_steps), str(plot))
        written.append(f"plot written to {plot}")
    if write_spec is not None:
        written.append(write_planned_spec(job, result, write_spec, source=spec_file))
    written += write_emits(emits, job, result)
    written.sort(key=lambda line: not line.startswith("note: on SkyPilot"))  # what the launch changes, first
    if notes is not None:
        notes.extend(written)
    return result


def run(spec: SpecLike | None, out: str | os.PathLike[str] | None = None, *, resume: bool = False, overwrite: bool = False,
        ray_address: str | None = None, autoscale: bool = False, notice_source: str = "none", metadata_url: str | None = None,
        compare_on_demand: bool = False, redis_url: str | None = None, lithops_config: str | os.PathLike[str] | None = None,
        emulate_network_mbps: float = 0.0, progress: bool = False, staging: str | os.PathLike[str] | None = None,
        trust_code: bool = False, allow_changes: bool = False) -> "RunSummary":
    """Train ``spec`` for real into the run directory ``out`` (``spotwise run``): PyTorch workers on Ray on
    the emulated spot market (a private local Ray unless ``ray_address``), or Lithops functions for
    ``cluster.kind: serverless``.  ``resume=True`` continues the run in ``out`` from its last checkpoint;
    a run directory is untrusted input, so when its ``spec.json`` names user code (a ``module:function``
    workload, ``module:Class`` optimizer or policies) pass the spec you started it with as ``spec``
    (its code references must match the recorded ones) or ``trust_code=True``; else InputError.
    ``allow_changes=True`` lets such a spec also change a training script's own arguments (``workload.args``).  ``compare_on_demand`` then trains the same samples on on-demand workers and puts
    both in the summary.  A run that makes no progress raises
    :class:`~spotwise.control.progress.NoProgressError` (an InputError) holding its summary.

    With ``outputs.uri`` in the spec the run directory is mirrored there as the run goes (``out`` None:
    a local staging folder derived from the URI).  ``resume=True`` with ``out`` a URI string
    (``"s3://bucket/prefix"``) continues that run on this machine: it is downloaded into ``staging``
    (default: derived from the URI) and goes on mirroring to the URI."""
    from spotwise.control.runner import run_job
    from spotwise.remote.uri import check_uri, default_staging_dir, is_uri

    out, staging = path_arg(out, "out"), path_arg(staging, "staging")
    lithops_config = path_arg(lithops_config, "lithops_config")
    for name, flag in (("resume", resume), ("overwrite", overwrite), ("autoscale", autoscale),
                       ("compare_on_demand", compare_on_demand), ("progress", progress), ("trust_code", trust_code),
                       ("allow_changes", allow_changes)):
        bool_arg(flag, name)
    for name, text in (("ray_address", ray_address), ("metadata_url", metadata_url), ("redis_url", redis_url)):
        str_arg(text, name, allow_none=True, example="auto" if name == "ray_address" else "http://host:port")
    str_arg(notice_source, "notice_source", example="aws")  # its values are checked by run_job
    number_arg(emulate_network_mbps, "emulate_network_mbps", 0.0, example="100")
    if allow_changes and not resume:
        raise InputError("--allow-changes applies to a resume", "pass it with --resume DIR and the changed spec (or "
                         "script arguments)", "--allow-changes")
    fetch_uri = check_uri(out, "--resume") if resume and isinstance(out, str) and is_uri(out) else None
    if staging is not None and fetch_uri is None:
        raise InputError("a staging folder applies to a resume from a URI", "pass the run directory as out instead",
                         "--out")
    given = load_spec(spec) if resume and spec is not None else None  # only compared with the run's spec.json
    if fetch_uri is not None:
        out = Path(staging) if staging is not None else default_staging_dir(fetch_uri)
    if out is None and (resume or spec is None):
        raise InputError("no run directory given", "pass a spec (spotwise run SPEC --out DIR) or --resume DIR", "spotwise run")
    if fetch_uri is not None:
        job = None
    elif resume:
        assert out is not None
        out = Path(out)
        from spotwise.control.rundir_io import load_resume_spec

        # before anything runs: the recorded spec's user code needs the user's spec or trust_code (issue 30 item 1)
        if load_resume_spec(out, given, trust_code, allow_changes).cluster.kind == "serverless":
            from spotwise.planes.serverless.runner import run_serverless

            return run_serverless(None, out, resume=True, redis_url=redis_url, resume_spec=given, trust_code=trust_code,
                                  allow_changes=allow_changes, lithops_config=Path(lithops_config) if lithops_config else None, progress=progress)
        job = None
    else:
        if spec is None:
            raise InputError("no spec given", "pass a spec (spotwise run SPEC --out DIR) or --resume DIR", "spotwise run")
        job = check_spec(spec, import_user_code=True, local_workers=not ray_address)
        if out is None:  # with outputs.uri, the run is staged in a folder derived from it
            if job.outputs.uri is None:
                raise InputError("no output directory", "pass --out DIR (it receives summary.json, events.jsonl and plots), "
                                 "or set outputs.uri", "--out")
            out = default_staging_dir(job.outputs.uri)
        out = Path(out)
        if job.cluster.kind == "serverless" and job.outputs.uri is not None:
            raise InputError("outputs.uri is supported for VM jobs only (for now)", "remove outputs.uri and copy the "
                             "--out folder to storage yourself, or use cluster.kind: vm", "outputs.uri")
        if job.cluster.kind == "serverless":
            if ray_address or compare_on_demand:
                raise InputError("--ray-address and --compare-on-demand apply to VM jobs",
                                 "drop them for a serverless job (compare with `spotwise plan`, or run the VM spec separately)",
                                 "--ray-address" if ray_address else "--compare-on-demand")
            from spotwise.planes.serverless.runner import run_serverless

            return run_serverless(job, out, redis_url=redis_url, lithops_config=Path(lithops_config) if lithops_config else None,
                                  progress=progress, overwrite=overwrite, network_mbps=emulate_network_mbps)
        if redis_url or lithops_config or emulate_network_mbps:
            raise InputError("--redis-url, --lithops-config and --emulate-network-mbps apply to serverless jobs",
                             "set cluster.kind: serverless in the spec, or drop the flags",
                             "--redis-url" if redis_url else "--lithops-config")
    if compare_on_demand and ray_address:
        raise InputError("--compare-on-demand needs the emulated provider", "drop --ray-address (a baseline on a real "
                         "cluster would spend real money), or drop --compare-on-demand", "--compare-on-demand")
    after: Callable[[Any], Any] | None = None  # runs while run_job still holds the run directory's lock
    if compare_on_demand:
        import functools

        from spotwise.control.baseline import compare_on_demand as baseline

        after = functools.partial(baseline, out_dir=out, progress=progress)
    return run_job(job, out, resume=resume, ray_address=ray_address, progress=progress, overwrite=overwrite,
                   notice_source=notice_source, metadata_url=metadata_url, after=after, autoscale=autoscale,
                   uri=fetch_uri, fetch=fetch_uri is not None, resume_spec=given, trust_code=trust_code,
                   allow_changes=allow_changes)


def launch(spec: str | os.PathLike[str] | Mapping[str, Any], script: str | os.PathLike[str],
           args: Sequence[str] | None = None, out: str | os.PathLike[str] | None = None,
           restart: Mapping[str, Any] | bool | None = None, **run_kw: Any) -> "RunSummary":
    """Train the user's own ``script`` (with its command-line ``args``) as the job ``spec`` describes
    (``spotwise launch SPEC train.py -- ARGS``): the spec's cluster, market, target and outputs, the
    script as its ``workload.script`` (:mod:`spotwise.spec.launch`).  ``restart`` (``--restart``): restart
    mode for an unmodified torchrun script -- ``True`` or ``{"resume_args": [...], "grace_s": 30}``
    (:mod:`spotwise.spec.restart_mode`).  ``run_kw`` are :func:`run`'s (``resume=True`` continues a
    launched run: pass the same spec and script)."""
    from spotwise.spec.launch import launch_spec

    if restart is not None and not isinstance(restart, (bool, Mapping)):
        raise InputError(f"restart must be True or a mapping of restart mode's settings, got {restart!r}",
                         "e.g. restart={'resume_args': ['--init_from=resume']}", "restart")
    settings = None if restart is None or restart is False else ({} if restart is True else dict(restart))
    return run(launch_spec(spec, script, args, restart=settings), out, **run_kw)


def simulate(spec: SpecLike, out: str | os.PathLike[str] | None = None, *, pilot: str | os.PathLike[str] | None = None,
             pilot_steps: int = 200, train_size: int | None = None, overwrite: bool = False, progress: bool = False,
             plots: bool | None = None) -> "RunSummary":
    """One modelled run of ``spec`` in virtual time, no Ray (``spotwise simulate SPEC --out DIR``): the run's
    control logic with modelled compute and the Thm 1 loss recursion.  ``out`` None: into a temporary
    directory, removed afterwards (only the summary is kept).  The loss model's notes are in
    ``summary.extra["loss_model"]``.

    The workload is built (its dataset read, by spotwise's safe readers) only for what the simulation
    needs of it: the training-set size unless ``train_size`` is given, the in-process pilot unless
    ``pilot`` is given.  With both, no workload module is used and no dataset file is opened."""
    from spotwise.control.runner import RunProgress
    from spotwise.rundir import open_run_dir
    from spotwise.config import resolve_epochs
    from spotwise.sim.simulate import check_simulable, simulate_job, train_size_of

    _check_pilot_steps(pilot_steps)
    int_arg(train_size, "train_size", allow_none=True, example="50000")  # its range: train_size_of
    bool_arg(overwrite, "overwrite")
    bool_arg(progress, "progress")
    bool_arg(plots, "plots", allow_none=True)
    out, pilot = path_arg(out, "out"), path_arg(pilot, "pilot")
    job = check_spec(spec, build_workload=False)  # the spec's own errors first; the workload only if needed (below)
    pilot_dir = str(pilot) if pilot else None
    check_simulable(job, pilot_dir)
    # the training-set size (the one build of a built-in workload's data, before the run directory is made);
    # a module:function workload is never imported (check_simulable, train_size_of)
    train_size = train_size_of(job, train_size)
    resolve_epochs(job, train_size)  # target.epochs in samples
    if out is None:
        with tempfile.TemporaryDirectory(prefix="spotwise-simulate-") as tmp:
            return simulate(job, Path(tmp) / "run", pilot=pilot, pilot_steps=pilot_steps, train_size=train_size,
                            progress=progress, plots=False)
    out = Path(out)
    with open_run_dir(out, "overwrite" if overwrite else "new"):
        with RunProgress(job.expected_iterations(), progress, estimated=job.target_samples() is not None) as bar:
            summary, _, _ = simulate_job(job, out, pilot_dir=pilot_dir, pilot_steps=pilot_steps, train_size=train_size,
                                         progress=bar.update if progress else None)
        if job.outputs.plots if plots is None else plots:
            from spotwise.reports.run import write_report

            write_report(out)
    return summary


def sweep(spec: SpecLike, traces: Sequence[str | os.PathLike[str]] = (), *, strategies: str | Sequence[Any] | None = None,
          starts: str | float = "6h", all_zones: bool = False, types: Sequence[str] | None = None,
          work_hours: float | None = None, deadline_hours: float | None = None, restart: str | float = "300s",
          history: str | float = "7d", spot_price: float | None = None, spec_market: bool = False,
          horizon: str | float = "30d", pilot: str | os.PathLike[str] | None = None, max_runs: int | None = None,
          out: str | os.PathLike[str] | None = None, overwrite: bool = False, plots: bool = True,
          progress: Callable[[int, int], None] | None = None, hindsight: bool = False) -> "SweepResult":
    """Replay ``spec``'s job from many start times over real traces (``spotwise simulate SPEC --trace ...``)
    or over its own market (``spec_market``), for each strategy: cost, time, P(deadline) with its 95%
    interval, against the hindsight oracle and on-demand.  ``strategies``: built-in names, user policies
    as ``package.module:ClassName``, :class:`~spotwise.policies.base.Policy` objects or sweep
    :class:`~spotwise.sim.sweep.records.Strategy` objects.  ``out``: sweep.json, windows.csv and plots.
    ``hindsight``: also build each window's hindsight schedule (the best schedule knowing the future
    that pays its restarts, :mod:`spotwise.sim.bounds.hindsight`) and compare every strategy with it."""
    from spotwise.rundir import open_run_dir
    from spotwise.sim.sweep import DEFAULT_STRATEGIES, strategy_names
    from spotwise.sim.sweep.engine import MAX_RUNS
    from spotwise.sim.sweep.from_spec import SweepRequest, run_trace_sweep
    from spotwise.spec.load import parse_duration

    for name, flag in (("all_zones", all_zones), ("spec_market", spec_market), ("overwrite", overwrite), ("plots", plots),
                       ("hindsight", hindsight)):
        bool_arg(flag, name)
    for name, hours in (("work_hours", work_hours), ("deadline_hours", deadline_hours), ("spot_price", spot_price)):
        number_arg(hours, name, 0.0, strict=True, allow_none=True, example="0.9" if name == "spot_price" else "24")
    int_arg(max_runs, "max_runs", allow_none=True, example="200000")  # its range: SweepRequest
    starts, restart = duration_arg(starts, "starts", "6h"), duration_arg(restart, "restart", "300s")
    history, horizon = duration_arg(history, "history", "7d"), duration_arg(horizon, "horizon", "30d")
    callable_arg(progress, "progress")
    if strategies is not None and not isinstance(strategies, (str, list, tuple)):
        raise InputError(f"expected a comma-separated string or a list of strategies, got {type(strategies).__name__}",
                         "pass e.g. strategies='spot-fixed,on-demand' or a list of names / Policy objects", "strategies")
    strategy_names(strategies, DEFAULT_STRATEGIES)  # --strategies '' is refused before any trace is read

    trace_list, type_list = path_list(traces, "traces"), name_list(types, "types", "types=['p3.2xlarge']")
    pilot, out = path_arg(pilot, "pilot"), path_arg(out, "out")
    job = load_spec(spec)  # never imports a module:function workload
    strat: Any = strategies
    if strategies is not None and not isinstance(strategies, str):
        strat = list(strategies)
    req = SweepRequest(
        traces=trace_list, strategies=strat, every_s=parse_duration(starts, "--starts"),
        types=type_list, all_zones=all_zones, work_hours=work_hours, deadline_h=deadline_hours,
        restart_s=parse_duration(restart, "--restart"), history_s=parse_duration(history, "--history"),
        spot_price=spot_price, spec_market=spec_market, horizon_s=parse_duration(horizon, "--horizon"), seed=job.seed,
        pilot_dir=str(pilot) if pilot else None, max_runs=MAX_RUNS if max_runs is None else max_runs, hindsight=hindsight)

    def go() -> "SweepResult":
        result, _, homes, skipped = run_trace_sweep(job, req, progress)
        result.homes = [f"{z}/{i}" for z, i in homes]
        result.skipped = list(skipped)
        return result

    if out is None:
        return go()
    from spotwise.reports.sweep_view import write_sweep

    with open_run_dir(Path(out), "overwrite" if overwrite else "new"):
        result = go()
        result.written = [str(p) for p in write_sweep(result, Path(out), plots=plots)]
    return result


def report(runs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str] | None = None,
           *, plots: bool = True) -> "Report":
    """Report runs (``spotwise report DIR ...``): one run directory gets its own report (``DIR/report/``);
    several -- runs or sweeps -- one HTML page comparing them side by side (``out``, default
    ``spotwise-compare.html``), flagging runs that did different work."""
    from spotwise.reports.compare import compare_runs, single_report

    dirs = [Path(r) for r in path_list(runs, "runs", "'runs/demo'")]
    out = path_arg(out, "out")
    bool_arg(plots, "plots")
    if not dirs:
        raise InputError("no run directory given", "pass one run directory, or several to compare", "spotwise report")
    if len(dirs) == 1 and out is None:
        return single_report(dirs[0], plots=plots)
    return compare_runs(dirs, Path(out) if out is not None else Path("spotwise-compare.html"))
