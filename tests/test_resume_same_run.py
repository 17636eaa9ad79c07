"""A resumed run is the uninterrupted run (issue 30 item 8).

The review's finding: a collective run resumed from a checkpoint written at the same virtual instant
as a revocation diverged (3,356 / 3,404 samples after kill -9 / SIGTERM + resume against 3,276
uninterrupted, same bill).  Three causes, each tested here:

* the market timeline resumed at "every event up to the checkpoint's time", so of two events of
  one instant (a notice and its revocation with no notice time, a revocation and a zero-delay
  replacement) a checkpoint between them lost the second on resume -- now the checkpoint holds
  the timeline's origin and the number of its events applied (unit tests below, every position);
* the collective plane drew round times ahead of the committed step and the checkpoint held the
  duration generator past them -- now the draws are checkpointed;
* a member revoked inside a step raced its kill against the step's all-reduce, so even two
  uninterrupted runs differed -- now it contributes nothing to that step.

The end-to-end test runs each plane once uninterrupted with a checkpoint after every step, copies
the run directory right after a chosen checkpoint (what kill -9 at that moment leaves; on the collective
plane one written at a revocation's instant), resumes the copy, stops that session with a real SIGTERM
right after a later notice's checkpoint, resumes it again, and asserts the same steps, samples, bill and
membership timeline (and, at the SIGTERM, the same steps and timeline so far).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _same_run import summary_differences
from _specs import spec_with

from spotwise.capacity.provider import EmulatedProvider
from spotwise.market.revocation.stochastic import ExponentialLifetime
from spotwise.market.revocation.trace import BidRevocation
from spotwise.market.series import SeriesMeta, StepSeries
from _load import bound


def _key(ev: Any) -> tuple[float, int, str]:
    return (ev.t, ev.worker, ev.kind)


def _drain(p: EmulatedProvider) -> list[tuple[float, int, str]]:
    out = []
    while p.peek_time() is not None:
        out.append(_key(p.pop_event()))
    return out


def _lifetime_provider() -> EmulatedProvider:
    # no notice time and immediate replacements: many events share an instant
    return EmulatedProvider(ExponentialLifetime(mttf_s=20.0, mttr_s=0.0, notice_s=0.0), slots=4, horizon=400.0, seed=3)


def _assert_resumes_at_every_position(make: Any, prepare: Any = None) -> int:
    """From every position of the timeline, a fresh provider resumed from the market state continues
    with exactly the remaining events and the same capacity; returns how many positions split an instant."""
    ref = make()
    if prepare is not None:
        prepare(ref)
    full = _drain(ref)
    assert len(full) > 10
    split = 0
    for k in range(len(full) + 1):
        p = make()
        if prepare is not None:
            prepare(p)
        for _ in range(k):
            p.pop_event()
        state, avail = p.market_state(), p.available_at_start()
        t = full[k - 1][0] if k else 0.0
        if 0 < k < len(full) and full[k][0] == t:
            split += 1
        q = make()
        q.resume_market(t, state)
        assert q.available_at_start() == avail, k
        assert _drain(q) == full[k:], f"resumed after {k} events: a different market"
    return split


def test_the_timeline_resumes_at_exactly_the_checkpoints_event_also_inside_one_instant():
    split = _assert_resumes_at_every_position(_lifetime_provider)
    assert split >= 5, "the timeline should have checkpoints between two events of one instant"


def test_the_timeline_resumes_exactly_after_a_market_switch():
    def prepare(p: EmulatedProvider) -> None:
        for _ in range(6):
            p.pop_event()
        t = p.peek_time() or 0.0
        p.switch_market("on-demand", t)
        p.switch_market("spot", t + 5.0)

    ref = _lifetime_provider()
    prepare(ref)
    full = _drain(ref)

    for k in (0, 3, len(full) // 2, len(full)):
        p = _lifetime_provider()
        prepare(p)
        for _ in range(k):
            p.pop_event()
        state = p.market_state()
        t = full[k - 1][0] if k else state["timeline"]["t"]
        q = _lifetime_provider()
        q.resume_market(t + 1e-6, state)  # the checkpoint's time does not matter: its position does
        assert q.available_at_start() == p.available_at_start()
        assert _drain(q) == full[k:], k


def test_the_timeline_resumes_exactly_after_a_rebid():
    prices = StepSeries.from_points(np.arange(0, 400, 10.0), 1.0 + np.sin(np.arange(40) / 3.0),
                                    SeriesMeta(id="p", kind="price"), end=400.0)

    def make() -> EmulatedProvider:
        return EmulatedProvider(BidRevocation(prices, (1.5, 1.2, 0.8), persistent=True, notice_s=0.0), slots=3,
                                horizon=400.0, seed=1)

    def prepare(p: EmulatedProvider) -> None:
        for _ in range(4):
            p.pop_event()
        p.rebid((1.9, 1.0, 1.4), p.peek_time() or 0.0)

    assert _assert_resumes_at_every_position(make, prepare) >= 1


@pytest.mark.parametrize("bad", [{"origin": "elsewhere", "t": 0.0, "popped": 0},
                                 {"origin": "initial", "t": 0.0, "popped": -1},
                                 {"origin": "initial", "t": float("nan"), "popped": 0},
                                 {"origin": "initial", "t": 0.0, "popped": 10**9},
                                 {"origin": "rebid", "t": 0.0, "popped": 0, "bids": "high"}])
def test_a_malformed_timeline_record_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="timeline"):
        _lifetime_provider().resume_market(0.0, {"timeline": bad, "available": []})


def test_round_draws_from_a_checkpoint_are_checked():
    from spotwise.planes.collective.round_time import restored_draws

    assert restored_draws([[3, 0.25], [2, 1]]) == [(3, 0.25), (2, 1.0)]
    for bad in ("x", [[0, 1.0]], [[2, -1.0]], [[2, float("inf")]], [[True, 1.0]], [[2]]):
        with pytest.raises(ValueError, match="round_draws"):
            restored_draws(bad)


def test_the_summary_totals_a_checkpoint_carries_come_back_and_malformed_ones_are_refused():
    """What the summary adds up over sessions (issue 54 item 5) round-trips through a checkpoint's plain
    data; a checkpoint is untrusted: anything else is refused with exit 2's error, naming the field."""
    from spotwise.control.carried import count, durations, number_map, optional_number
    from spotwise.control.phases import PhaseTotals
    from spotwise.errors import InputError

    t = PhaseTotals()
    t.add({"compute": 2.5, "reduce": 1.0, "gpu_busy_share": 0.5}, 32)
    t.add({"compute": 1.5}, 16)
    assert PhaseTotals.from_state(t.state()) == t
    assert number_map({"val_loss": 0.5, "": 1}, "m") == {"val_loss": 0.5, "": 1.0}
    assert optional_number(None, "x") is None and durations([1, 2.5], "d") == [1.0, 2.5] and count(3, "c") == 3
    for call in (lambda: PhaseTotals.from_state("x"), lambda: PhaseTotals.from_state(None),
                 lambda: PhaseTotals.from_state({**t.state(), "extra": 1}), lambda: PhaseTotals.from_state({**t.state(), "ms": {"bogus": 1.0}}),
                 lambda: PhaseTotals.from_state({**t.state(), "ms": {"compute": -1.0}}),
                 lambda: PhaseTotals.from_state({**t.state(), "steps": 1, "busy_steps": 2, "busy": 1.0}),
                 lambda: number_map({"loss": float("nan")}, "m"), lambda: number_map([1], "m"),
                 lambda: optional_number(float("inf"), "x"), lambda: optional_number(True, "x"),
                 lambda: durations([-1.0], "d"), lambda: durations("1", "d"), lambda: count(-1, "c"),
                 lambda: count(1.5, "c")):
        with pytest.raises(InputError, match="the checkpoint's"):
            call()


# ------------------------------------------------------------------------------ end to end, both planes
BASE: dict[str, Any] = {
    "name": "same-run", "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
    # 18 steps: the market's events to t = 28 s -- five revocations (one before step 1, a total loss and its
    # rollback at step 17) -- and not the join after it (t = 28.8 s), a member process fewer in every session
    "target": {"iterations": 18},
    # no standby spare: a joiner starts its actor when it joins (the membership timeline is the market's, in
    # virtual time), and no session starts a spare it never promotes
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0,
                "replica_every": 5, "group_timeout_s": bound(4),
                "replica_budget": None},  # replicas at fixed steps (not at their measured cost): the same run every time
    # a notice time: notices are market events of their own that change nobody (issue 54 item 5: after
    # one the collective plane counted its next lease from the last step's end, so a step ran past the
    # revocation, which then applied one step late -- and a resume from the notice's checkpoint did not)
    "market": {"synthetic": {"kind": "constant", "price": 0.07},
               "revocation": {"model": "lifetime", "mttf_s": 6, "mttr_s": 2, "notice_s": 1.5}},
    # checkpoints only at notices (a periodic one is deferred to the next lease: where it lands depends on the
    # machine's speed, and whether a notice's own is written with it), the SIGTERM one and the final one
    "outputs": {"checkpoint_every": 1000, "plots": False},
}
#: SIGTERM right after the first notice checkpoint from this step on (where the review's SIGTERM landed)
SIGTERM_AT = 12
#: summary fields a resume may change: wall-clock measurements, a resume's own regroup (its first step is
#: not timed: ``step_phases.steps``) and its SIGTERM checkpoint; everything else (samples, steps, bill,
#: losses, metrics, which phases were timed, revocations, joins, recoveries) is the uninterrupted run's
MAY_DIFFER = ("wall_s", "extra.checkpoints", "extra.regroups", "extra.step_phases.steps", "extra.regroup_ms_median", "extra.recovery_ms.median",
              "extra.recovery_ms.p99", "extra.join_ms.median", "extra.join_ms.p99", "extra.join_ms.max",
              "extra.step_phases.ms_per_step.", "extra.step_phases.share.", "extra.step_phases.samples_per_s")


def _membership(out: Path) -> list[tuple[str, Any, float]]:
    from spotwise.events import read_events

    return [(e["kind"], e.get("worker"), round(float(e["t"]), 9)) for e in read_events(out / "events.jsonl")
            if e["kind"] in ("join", "notice", "revoke", "leave") and not e.get("resumed")]


def _steps(out: Path) -> list[tuple[Any, ...]]:
    """Every committed step as the log has it: members, samples, time, learning rate, loss."""
    from spotwise.events import read_events

    return [(e["step"], e["active"], e.get("contributions"), e.get("samples"), round(float(e["t"]), 9),
             round(float(e["lr"]), 12), e["loss"]) for e in read_events(out / "events.jsonl") if e["kind"] == "step"]


def _summary_differences(out: Path, full: Path, may_differ: tuple[str, ...] = MAY_DIFFER) -> dict[str, tuple[Any, Any]]:
    """The fields of the two summaries that differ (a field only one of them has always counts)."""
    return summary_differences(out, full, may_differ)


def _same_run(out: Path, full: Path, key: Any) -> None:
    assert _steps(out) == _steps(full), key
    assert _membership(out) == _membership(full), key
    assert _summary_differences(out, full) == {}, key


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("plane", [pytest.param("ps", marks=pytest.mark.extended), "collective"])  # ps: its
# resume is also test_hardening_signals[ps]
def test_a_resumed_run_is_the_uninterrupted_run(ray_session: Any, tmp_path: Path, plane: str) -> None:
    """Kill -9 right after a chosen checkpoint (the collective plane's: one at a revocation's instant), a real
    SIGTERM right after a notice's checkpoint in the session resumed from it, and a resume with nothing left
    to train: each resumed run is the uninterrupted one -- every step (members, samples, time, lr, loss), the
    membership timeline and every summary field but the wall-clock ones (:data:`MAY_DIFFER`)."""
    import os
    import signal

    from spotwise.assemble import build_controller
    from spotwise.events import read_events
    from spotwise.signals import Terminated, sigterm_as_interrupt

    spec = spec_with(BASE, cluster__data_plane=plane)
    full = tmp_path / "full"
    job = build_controller(spec, full)
    copies: dict[int, Path] = {}
    revoke_times: set[float] = set()

    def kill9_after(path: Path) -> None:  # what kill -9 right after this checkpoint leaves on disk
        rows = read_events(full / "events.jsonl")
        revoke_times.update(float(e["t"]) for e in rows if e["kind"] in ("notice", "revoke"))
        # written at the instant of a notice and its revocation (before or after it was applied)
        at_revocation = job.T in revoke_times or job.provider.peek_time() == job.T
        if plane == "ps" and job.step >= 8 and not copies:
            copies[job.step] = tmp_path / f"kill9-{job.step}"
            shutil.copytree(full, copies[job.step], ignore=shutil.ignore_patterns(".spotwise.lock"), dirs_exist_ok=True)
        elif plane == "collective" and at_revocation and job.step > 0 and not copies:
            key = -job.step
            copies[key] = tmp_path / f"kill9-{job.step}"
            shutil.copytree(full, copies[key], ignore=shutil.ignore_patterns(".spotwise.lock"), dirs_exist_ok=True)

    job.checkpointer.listeners.append(kill9_after)
    base = job.run()
    assert base.status == "completed" and base.extra["samples"] > 0
    assert any(e["kind"] == "revoke" for e in read_events(full / "events.jsonl")), "the market should revoke"
    # the PS plane checkpoints only at commits (a notice's checkpoint waits for the next one); the
    # collective plane's at a notice is at the notice's instant, between it and its revocation
    assert plane == "ps" or any(k < 0 for k in copies), "no checkpoint was written at a notice's instant"
    ((key, out),) = copies.items()
    killed_at = abs(key)

    # the kill -9 copy resumed, and SIGTERM as the review sent it landing in that session while a notice's
    # checkpoint is written (one session: the resume's steps up to the stop are checked on their own below):
    # the run stops after it (the final checkpoint is that one), exit 143's path; then --resume
    term = build_controller(spec, out, resume=True)

    def sigterm_after(path: Path) -> None:
        last = [e for e in read_events(out / "events.jsonl") if e["kind"] == "checkpoint"][-1]
        # (the PS plane takes a notice's checkpoint at its next commit: any one from SIGTERM_AT on)
        if ((last["why"] == "notice" or plane == "ps") and term.step >= max(SIGTERM_AT, killed_at + 1)
                and not signal_sent):
            signal_sent.append(term.step)
            os.kill(os.getpid(), signal.SIGTERM)

    signal_sent: list[int] = []
    term.checkpointer.listeners.append(sigterm_after)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        term.run()
    assert signal_sent and not (out / "summary.json").exists(), signal_sent
    # up to the stop, the session resumed from the kill -9 copy is the uninterrupted run
    cut, ref = _steps(out), _steps(full)
    assert len(cut) >= signal_sent[0] > killed_at and cut == ref[:len(cut)], (key, signal_sent)
    moved = _membership(out)
    assert moved == _membership(full)[:len(moved)], (key, signal_sent)

    again = build_controller(spec, out, resume=True).run()
    assert again.status == "completed", (key, signal_sent)
    _same_run(out, full, (key, signal_sent))

    # nothing left to train: the summary is the finished run's (final loss, metrics, phases, bill, counts)
    finished = tmp_path / "finished"
    finished.mkdir()
    shutil.copy(full / "summary.json", finished / "summary.json")
    before = _steps(full)
    assert build_controller(spec, full, resume=True).run().steps == spec.target.iterations
    assert _steps(full) == before
    assert _summary_differences(full, finished, ("wall_s",)) == {}
