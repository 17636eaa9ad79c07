"""``spotwise run`` and ``spotwise demo``: start Ray, run the coordinator with a progress bar, report."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from rich.progress import Progress

from spotwise.config import JobSpec, data_plane_why, resolve_epochs
from spotwise.errors import InputError
from spotwise.reports.terminal_text import terminal_console
from spotwise.events import RunSummary
from spotwise.market.world import build_market
from spotwise.control.checkpoint import load_latest_checkpoint, no_valid_checkpoint_error
from spotwise.control.controller import JobController
from spotwise.assemble import build_controller
from spotwise.control.progress import NoProgressError, check_progress_possible
from spotwise.control.rundir_io import load_resume_spec, load_run_spec
from spotwise.capacity.placement import placement_for
from spotwise.capacity.raystart import check_local_workers, ensure_ray
from spotwise.remote.location import open_run_location
from spotwise.remote.mirror import RunMirror


class RunProgress:
    """A rich progress bar on stderr: steps, loss, active workers, virtual time, cost so far."""

    def __init__(self, total: int | None, enabled: bool, *, estimated: bool = False, label: str = "training") -> None:
        from spotwise.reports.progress_view import progress_columns

        self.enabled, self.estimated, self.total = enabled, estimated, total
        self.console = terminal_console(stderr=True)
        self.progress = Progress(  # columns sized to the terminal (80 columns: nothing cut)
            *progress_columns(self.console.width, label=label, estimated=estimated),
            console=self.console, transient=False, disable=not enabled, refresh_per_second=8,
        )
        self.task = self.progress.add_task("run", total=total, loss="-", active="-", vt="0 s", cost="0.0000")

    def __enter__(self) -> "RunProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, snap: dict[str, Any]) -> None:
        from spotwise.reports.progress_view import grown_total
        from spotwise.reports.units import human_duration

        loss = "-" if snap["loss"] is None else f"{snap['loss']:.4f}"
        self.total = grown_total(self.total, int(snap["step"]), self.estimated)  # type: ignore[assignment]
        self.progress.update(self.task, completed=snap["step"], total=self.total, loss=loss,
                             active=f"{snap['active']}/{snap['provisioned']}", vt=human_duration(snap["t"]),
                             cost=f"{snap['cost']:.4f}")


def run_job(
    spec: JobSpec | None,
    out_dir: str | Path,
    *,
    resume: bool = False,
    ray_address: str | None = None,
    progress: bool = True,
    plots: bool | None = None,
    overwrite: bool = False,
    notice_source: str = "none",
    metadata_url: str | None = None,
    after: Callable[[RunSummary], RunSummary] | None = None,
    autoscale: bool = False,
    uri: str | None = None,
    fetch: bool = False,
    resume_spec: JobSpec | None = None,
    trust_code: bool = False,
    allow_changes: bool = False,
) -> RunSummary:
    """Run ``spec`` into ``out_dir`` (or resume the run there); returns the summary.

    ``after`` (e.g. the on-demand comparison) runs on the summary while the directory is still
    locked; its result is returned.

    The run directory is prepared and locked before Ray starts (:func:`spotwise.rundir.open_run_dir`)
    and stays locked until the run (and its report) is done.  InputError (exit 2) for a bad flag,
    an ``--out`` that is a file or unwritable, a directory that holds a run (without
    ``overwrite``) or is not a spotwise run directory (with it), a directory another spotwise
    process holds, and -- on resume -- a missing/corrupt ``spec.json`` or manifest or no usable
    checkpoint; :class:`~spotwise.rundir.DiskFullError` (exit 2) when the disk fills up.
    ``overwrite`` removes only the files an earlier run wrote; the user's own files stay.
    ``autoscale`` (with ``ray_address``): the cluster's autoscaler provides the spot nodes; the
    run asks it for its worker slots instead of refusing a cluster that has none yet.
    ``uri`` (default: the spec's ``outputs.uri``): mirror the run directory there as the run goes;
    ``fetch`` (with ``resume``): first download the run from ``uri`` into ``out_dir``, a local
    staging folder (:func:`spotwise.remote.location.open_run_location`).
    ``resume_spec`` / ``trust_code``: a resumed run's recorded user code is imported only when it
    matches the user's spec or is trusted (:func:`spotwise.control.rundir_io.load_resume_spec`);
    ``allow_changes``: that spec may change a training script's arguments.
    """
    out = Path(out_dir)
    if notice_source not in ("none", "aws", "gcp"):
        raise InputError(f"unknown notice source {notice_source!r}", "use --notice-source none, aws or gcp", "--notice-source")
    if notice_source != "none" and not ray_address:
        raise InputError("--notice-source needs --ray-address", "the emulated provider takes notices from the market model",
                         "--notice-source")
    if not resume and spec is None:
        raise InputError("no spec given", "pass a spec, or resume a run directory", "spotwise run")
    if autoscale and not ray_address:
        raise InputError("--autoscale needs --ray-address", "start a Ray cluster with an autoscaler (ray up) and pass "
                         "--ray-address auto", "--autoscale")
    if fetch and not (resume and uri):
        raise InputError("fetching a run needs --resume and its URI", "spotwise run --resume s3://bucket/prefix", "--resume")
    if uri is None and not fetch:
        uri = _spec_uri(spec, out, resume)
    with open_run_location(out, "resume" if resume else ("overwrite" if overwrite else "new"), uri, fetch=fetch) as mirror:
        summary = _run_locked(spec, out, resume=resume, ray_address=ray_address, progress=progress, plots=plots,
                              notice_source=notice_source, metadata_url=metadata_url, autoscale=autoscale, mirror=mirror,
                              trust=(resume_spec, trust_code, allow_changes))
        return after(summary) if after is not None else summary


def _spec_uri(spec: JobSpec | None, out: Path, resume: bool) -> str | None:
    """The ``outputs.uri`` of ``spec`` (a local resume: of the run's ``spec.json``; a missing or bad
    one is reported by the resume itself)."""
    if spec is not None:
        return spec.outputs.uri
    if resume:
        try:
            return load_run_spec(out).outputs.uri
        except InputError:
            return None
    return None


def _run_locked(spec: JobSpec | None, out: Path, *, resume: bool, ray_address: str | None, progress: bool,
                plots: bool | None, notice_source: str, metadata_url: str | None, autoscale: bool = False,
                mirror: RunMirror | None = None,
                trust: tuple[JobSpec | None, bool, bool] = (None, False, False)) -> RunSummary:
    """:func:`run_job` once the run directory is prepared and locked."""
    if resume:
        spec = load_resume_spec(out, *trust)  # a fetched run too: its user code only when the user vouches for it
        rejected: list[str] = []
        if load_latest_checkpoint(out, rejected=rejected) is None:  # how many were found and why each was refused
            raise no_valid_checkpoint_error(out, rejected)
        if spec.workload.dataset and ":" not in spec.workload.name:
            from spotwise.workloads.registry import make_workload

            # the recorded dataset (allowed by load_resume_spec) read here, by the safe readers, before Ray starts:
            # a bad or hostile one exits 2 now, as `spotwise run SPEC` does in check_spec (issue 38 item 4)
            make_workload(spec.workload, spec.seed)
    assert spec is not None
    if ray_address and spec.workload.restart is not None:
        raise InputError("restart mode runs on this machine's emulated market for now: on a Ray cluster its script's "
                         "checkpoints would need storage every node reads", "drop --ray-address, or run the script "
                         "in place (without --restart; docs/own-loop.md)", "--ray-address")
    if not ray_address:
        check_local_workers(spec.cluster)  # a resumed run too: this machine may be smaller than the last
    market = build_market(spec)
    if not ray_address:  # the emulated market decides capacity: refuse a hopeless one before Ray starts
        check_progress_possible(spec, market)
        placement_for(spec)  # the workers' device and GPUs (issue 20 item 4): device: cuda without a GPU exits 2
    if progress:  # which plane trains the job, and why (issue 40 item 4)
        terminal_console(stderr=True).print(f"data plane: {spec.cluster.data_plane} ({data_plane_why(spec)})", highlight=False,
                                   soft_wrap=True)
    resolve_epochs(spec)  # target.epochs in samples, before Ray starts (a bad dataset exits 2 here)
    ensure_ray(ray_address)
    with RunProgress(spec.expected_iterations(), progress, estimated=spec.target_samples() is not None) as bar:
        callback = bar.update if progress else None
        if ray_address:
            from spotwise.capacity.cluster import cluster_controller, cluster_provider

            notices = None
            if notice_source != "none":
                notices = {"cloud": notice_source, **({"base_url": metadata_url} if metadata_url else {})}
            provider = cluster_provider(spec, notices, autoscale=autoscale)
            coord: JobController = cluster_controller(spec, out, market=market, provider=provider, resume=resume,
                                                      progress=callback)
        else:  # the data plane is the spec's (cluster.data_plane)
            coord = build_controller(spec, out, market=market, resume=resume, progress=callback)
        if mirror is not None:  # uploads each checkpoint once committed, the log as it grows
            mirror.attach(coord.checkpointer)
        try:
            summary = coord.run()
        except NoProgressError:
            # the run wrote its summary and log before giving up: the report shows what happened
            _write_plots(out, spec, plots)
            raise
    _write_plots(out, spec, plots)
    return summary


def _write_plots(out: Path, spec: JobSpec, plots: bool | None) -> None:
    if plots if plots is not None else spec.outputs.plots:
        from spotwise.reports.run import write_report

        write_report(out)
