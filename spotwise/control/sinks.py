"""Metrics sinks: the run's events where users look besides ``events.jsonl`` (issue 41 item 6).

``outputs.sinks`` names them; each is handed every event as it is written
(:meth:`~spotwise.events.EventLog.add_sink`) on the coordinator, never on a member.  What each gets
(:class:`Scalars`): per committed step the loss, learning rate, active workers, samples per step,
the run's cost so far and its virtual time; the held-out evaluation; every value a training script
logged with ``job.log`` (under ``script/``); revocations and joins as running counts.  The x axis is
the committed step.

* ``tensorboard``: event files in ``OUT/tensorboard/`` (PyTorch's own ``SummaryWriter``).
* ``wandb``: a Weights & Biases run (``WANDB_PROJECT``, default ``spotwise``; ``WANDB_ENTITY``; the
  run named as the spec, its config the spec).  Online where an API key is set up (``wandb login`` or
  ``WANDB_API_KEY``), else -- or with ``WANDB_MODE=offline`` -- offline files in ``OUT/wandb/`` for
  ``wandb sync``.  Steps are logged against a ``step`` metric, so a resumed run's steps after its
  checkpoint are not dropped as going backwards.
* ``mlflow``: an MLflow run (``MLFLOW_TRACKING_URI``, default the SQLite file ``OUT/mlflow.db``;
  ``MLFLOW_EXPERIMENT_NAME``, default the spec's name), metrics sent in batches at most every 2 s
  and at the end, its status FINISHED, FAILED or KILLED as the run ended.

A resumed run continues the same W&B / MLflow run: its id is recorded in the event log (a ``sink``
event) and read back, checked, on resume.  A sink that fails -- no network, a full disk, a refused
batch -- is dropped with one warning on stderr and its external run ended (MLflow: ``FAILED``, W&B:
exit code 1) at once; the run goes on (the event log is the record).  A run that ends by an error
ends its sinks' runs the same way (:meth:`spotwise.events.EventLog.abort_sinks`), so no MLflow run
is left ``RUNNING``.

Where they write (issue 54 item 2): only the registered names of :mod:`spotwise.rundir_names`
(``tensorboard/``, ``wandb/``, ``mlflow.db`` and SQLite's files beside it), each checked before any
sink starts -- a real folder created by spotwise with no link, FIFO or device anywhere in its tree,
a regular file or nothing -- else the run stops with exit 2 naming the path.  Metric names are
given to each sink as it accepts them (:mod:`spotwise.control.sink_keys`).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable

from spotwise.control.sink_keys import RULES, MetricKeys
from spotwise.errors import InputError
from spotwise.rundir_names import MLFLOW_DB, TENSORBOARD_DIR, WANDB_DIR, check_sink_target

#: what a W&B / MLflow run id recorded in the event log may look like (it is read back on resume)
_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: the run statuses that are a success (others end the W&B run with exit code 1, the MLflow run FAILED)
_KILLED = ("interrupted", "terminated")


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


class Scalars:
    """The events as ``(step, {tag: value})``: the mapping every sink shares (module docstring), each tag
    as the sink accepts it (``keys``: :class:`~spotwise.control.sink_keys.MetricKeys`)."""

    def __init__(self, keys: Callable[[str], str] | None = None) -> None:
        self.keys: Callable[[str], str] = keys or (lambda name: name)
        self.step = 0
        self.revocations = 0
        self.joins = 0
        self.status: str | None = None

    def of(self, e: dict[str, Any]) -> tuple[int, dict[str, float]] | None:
        got = self._of(e)
        return None if got is None else (got[0], {self.keys(tag): v for tag, v in got[1].items()})

    def _of(self, e: dict[str, Any]) -> tuple[int, dict[str, float]] | None:
        kind, out = e.get("kind"), {}
        if kind == "step" and _num(e.get("step")):
            self.step = int(e["step"])
            for key, tag in (("loss", "train/loss"), ("lr", "train/lr"), ("active", "workers/active"),
                             ("samples", "train/samples_per_step"), ("cost", "cost/usd"), ("t", "time/virtual_s")):
                if _num(e.get(key)):
                    out[tag] = float(e[key])
        elif kind == "metrics" and isinstance(e.get("values"), dict) and _num(e.get("step")):
            out = {f"script/{k}": float(v) for k, v in e["values"].items() if isinstance(k, str) and _num(v)}
            return int(e["step"]), out
        elif kind == "eval" and _num(e.get("step")):
            if _num(e.get("loss")):
                out["eval/loss"] = float(e["loss"])
            if _num(e.get("metric")):
                out[f"eval/{e.get('metric_name') or 'metric'}"] = float(e["metric"])
            return int(e["step"]), out
        elif kind == "revoke":
            self.revocations += 1
            out["workers/revocations"] = float(self.revocations)
        elif kind == "join":
            self.joins += 1
            out["workers/joins"] = float(self.joins)
        elif kind == "end":
            self.status = str(e.get("status"))
        return (self.step, out) if out else None


class TensorBoardSink:
    """Events as TensorBoard scalars in ``OUT/tensorboard/``."""

    name = "tensorboard"

    def __init__(self, out_dir: str | Path, *, note: Callable[[str], None], **_: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = check_sink_target(out_dir, TENSORBOARD_DIR)  # a real folder, no link in it (issue 54 item 2)
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self.scalars = Scalars(MetricKeys(RULES[self.name], note))

    def write(self, e: dict[str, Any]) -> None:
        got = self.scalars.of(e)
        if got is not None:
            for tag, v in got[1].items():
                self.writer.add_scalar(tag, v, got[0])

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()

    def abort(self) -> None:
        self.writer.close()


def _wandb_has_key() -> bool:
    """An API key is set up for wandb.ai (``WANDB_API_KEY``, or ``wandb login``'s ~/.netrc entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc

    try:
        auth = netrc.netrc().authenticators(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("//")[-1])
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(auth and auth[2])


class WandbSink:
    """Events as a Weights & Biases run (module docstring)."""

    name = "wandb"

    def __init__(self, out_dir: str | Path, *, run_name: str, config: dict[str, Any], run_id: str | None,
                 note: Callable[[str], None]) -> None:
        import wandb

        self.dir = check_sink_target(out_dir, WANDB_DIR).absolute()  # wandb writes OUT/wandb/: a real folder, no link
        mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_has_key() else "offline")
        if mode == "offline" and not os.environ.get("WANDB_MODE"):
            note(f"W&B: no API key (wandb login), so the run is written offline to {self.dir}; "
                 "upload it with `wandb sync` on that folder")
        self.id = run_id or wandb.util.generate_id()
        kw: dict[str, Any] = {"resume": "allow"} if mode == "online" else {}
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "spotwise", name=run_name, id=self.id,
                              dir=str(out_dir), mode=mode, config=config, reinit="create_new",
                              settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, symlink=False),
                              **kw)  # symlink=False: no latest-run / debug.log links in the run directory
        if mode == "online":
            note(f"W&B: {self.run.url}")
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        self.scalars = Scalars(MetricKeys(RULES[self.name], note))

    def write(self, e: dict[str, Any]) -> None:
        got = self.scalars.of(e)
        if got is not None:
            self.run.log({**got[1], "step": got[0]})

    def close(self) -> None:
        self._end(0 if self.scalars.status == "completed" else 1)

    def abort(self) -> None:
        self._end(1)

    def _end(self, code: int) -> None:
        try:
            self.run.finish(exit_code=code)
        finally:
            self._unlink_core_log()

    def _unlink_core_log(self) -> None:
        """Remove the link ``wandb-core`` made from this run's ``logs/debug-core.log`` to its own log in the
        user's cache: a finished run directory holds no link (a killed one's is accepted by the registry)."""
        link = Path(getattr(self.run, "dir", "") or "").parent / "logs" / "debug-core.log"
        try:
            if str(link).startswith(str(self.dir) + os.sep) and link.is_symlink():
                link.unlink()
        except OSError:
            pass


class MlflowSink:
    """Events as an MLflow run, sent in batches (module docstring)."""

    name = "mlflow"
    every_s = 2.0

    def __init__(self, out_dir: str | Path, *, run_name: str, config: dict[str, Any], run_id: str | None,
                 note: Callable[[str], None]) -> None:
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)  # "Creating initial MLflow tables"
        if not os.environ.get("MLFLOW_TRACKING_URI"):  # OUT/mlflow.db (and SQLite's files beside it): no link, no FIFO
            check_sink_target(out_dir, MLFLOW_DB)
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(out_dir).resolve() / MLFLOW_DB}"
        self.client = MlflowClient(tracking_uri=uri)
        self.keys = MetricKeys(RULES[self.name], note)
        self.id: str | None = None
        if run_id is not None:
            self.id = run_id
            self.client.update_run(run_id, status="RUNNING")
        else:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or run_name
            exp = self.client.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
            run = self.client.create_run(exp_id, run_name=run_name, tags={"spotwise.run_dir": str(Path(out_dir).resolve())})
            self.id = run.info.run_id
            from mlflow.entities import Param

            flat = _flatten(config)
            params = {_param_key(k): str(v)[:500] for k, v in sorted(flat.items())}
            if params:
                try:
                    self.client.log_batch(self.id, params=[Param(k, v) for k, v in list(params.items())[:100]])
                except Exception:
                    self.abort()  # the run was created: never left RUNNING
                    raise
        if not os.environ.get("MLFLOW_TRACKING_URI"):
            note(f"MLflow: run {self.id} in {uri} (see it with `mlflow ui --backend-store-uri {shlex.quote(uri)}`)")
        self.pending: list[Any] = []
        self.last = time.monotonic()
        self.scalars = Scalars(self.keys)

    def write(self, e: dict[str, Any]) -> None:
        got = self.scalars.of(e)
        if got is None:
            return
        from mlflow.entities import Metric

        ms = int(float(e.get("wall") or time.time()) * 1000)
        self.pending += [Metric(tag, v, ms, got[0]) for tag, v in got[1].items()]
        if len(self.pending) >= 500 or time.monotonic() - self.last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        self.last = time.monotonic()
        for i in range(0, len(pending), 1000):  # MLflow takes at most 1,000 metrics a batch
            self.client.log_batch(self.id, metrics=pending[i:i + 1000])

    def close(self) -> None:
        status = self.scalars.status
        ended = "FINISHED" if status == "completed" else "KILLED" if status in _KILLED else "FAILED"
        try:
            self.flush()
        except BaseException:
            ended = "FAILED"  # the run's last metrics did not reach MLflow: say so, and never leave it RUNNING
            raise
        finally:
            self._terminate(ended)

    def abort(self) -> None:
        """End the MLflow run FAILED without sending what is pending (a write failed, or the run did)."""
        self.pending = []
        self._terminate("FAILED")

    def _terminate(self, status: str) -> None:
        if self.id is not None:
            self.client.set_terminated(self.id, status)


def _param_key(key: str) -> str:
    """A spec field's dotted name as MLflow takes a parameter's (a workload's kwargs may name anything)."""
    from spotwise.control.sink_keys import normalise

    return normalise(key, RULES["mlflow"])


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """A nested spec as ``a.b.c: value`` pairs (MLflow's params), empty values left out."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    elif d not in (None, [], {}, ""):
        out[prefix[:-1]] = d
    return out


def _said(exc: BaseException) -> str:
    """An exception as one short line (a library's message may be long, or hold the refused name raw)."""
    text = ascii(str(exc))[1:-1]
    return f"{type(exc).__name__}: {text if len(text) <= 300 else text[:297] + '...'}"


class Guarded:
    """A sink whose failure drops it with one warning instead of ending the run; its external run is ended
    (``abort``) at once, and at the latest when the run ends (:meth:`close` / :meth:`abort`)."""

    def __init__(self, sink: Any, note: Callable[[str], None]) -> None:
        self.sink, self.note, self.dead, self.ended = sink, note, False, False

    def write(self, e: dict[str, Any]) -> None:
        if not self.dead:
            try:
                self.sink.write(e)
            except Exception as exc:  # noqa: BLE001 - a sink must not end the run
                self.dead = True
                self.note(f"the {self.sink.name} sink failed ({_said(exc)}); the run goes on "
                          "without it (events.jsonl has every event)")
                self.abort()

    def close(self) -> None:
        """The run ended: the sink's last data sent, its run ended with the run's status (dead: nothing more)."""
        if self.ended:
            return
        if self.dead:
            self.abort()
            return
        self.ended = True
        try:
            self.sink.close()
        except Exception as exc:  # noqa: BLE001
            self.note(f"the {self.sink.name} sink failed closing ({_said(exc)})")

    def abort(self) -> None:
        """End the sink's run as failed, sending nothing more (a write failed, or the run ended by an error)."""
        if self.ended:
            return
        self.ended = self.dead = True
        try:
            self.sink.abort()
        except Exception as exc:  # noqa: BLE001
            self.note(f"the {self.sink.name} sink could not end its run ({_said(exc)})")


def _warn(line: str) -> None:
    print(f"spotwise: {line}", file=sys.stderr, flush=True)


def recorded_ids(out_dir: str | Path) -> dict[str, str]:
    """The W&B / MLflow run ids an earlier part of this run recorded (``sink`` events), checked."""
    from spotwise.events import EVENTS_FILE, read_events

    path = Path(out_dir) / EVENTS_FILE
    if not path.is_file():
        return {}
    ids: dict[str, str] = {}
    for e in read_events(path, kinds=["sink"]):
        name, rid = e.get("sink"), e.get("id")
        if name in ("wandb", "mlflow") and isinstance(rid, str) and _ID_RE.match(rid):
            ids[name] = rid
    return ids


def make_sinks(names: list[str], out_dir: str | Path, *, spec: Any = None, log: Any = None, resume: bool = False,
               note: Callable[[str], None] = _warn) -> list[Any]:
    """The sinks ``names`` (``outputs.sinks``), each :class:`Guarded`.  A W&B / MLflow run's id goes to
    ``log`` as a ``sink`` event; on ``resume`` the recorded one is continued.  A sink that cannot start
    (its service unreachable, say) is left out with a warning."""
    for name in names:  # every sink's folder / file checked before any sink starts: an InputError (exit 2) here
        target = {"tensorboard": TENSORBOARD_DIR, "wandb": WANDB_DIR, "mlflow": MLFLOW_DB}.get(name)
        if target is not None and not (name == "mlflow" and os.environ.get("MLFLOW_TRACKING_URI")):
            check_sink_target(out_dir, target)
    ids = recorded_ids(out_dir) if resume else {}
    run_name = str(getattr(spec, "name", "") or Path(out_dir).name)
    config = spec.to_dict() if spec is not None else {}
    sinks: list[Any] = []
    for name in names:
        try:
            if name == "tensorboard":
                sink: Any = TensorBoardSink(out_dir, note=note)
            elif name in ("wandb", "mlflow"):
                cls = WandbSink if name == "wandb" else MlflowSink
                sink = cls(out_dir, run_name=run_name, config=config, run_id=ids.get(name), note=note)
                if log is not None and ids.get(name) != sink.id:
                    log.emit("sink", sink=name, id=sink.id)
            else:
                continue
        except InputError:  # the run directory's (a link planted meanwhile): exit 2, the sinks started ended
            for started in sinks:
                started.abort()
            raise
        except Exception as exc:  # noqa: BLE001 - checked at load; what is left is the service's
            note(f"the {name} sink could not start ({_said(exc)}); the run goes on without it")
            continue
        sinks.append(Guarded(sink, note))
    return sinks


__all__ = ["Guarded", "MlflowSink", "Scalars", "TensorBoardSink", "WandbSink", "make_sinks", "recorded_ids"]
