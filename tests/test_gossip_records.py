"""AD-PSGD's records on the collective plane (spotwise/planes/collective/records.py): a step is logged once
every member's record is in -- and a record from an ended generation can never hold the later steps back.

Found by the slow cluster test (ssgd+switch): AD-PSGD -> S-SGD -> (node lost, joins) -> AD-PSGD hung for
300 s: a member record of generation 1 that arrived after that generation was settled stayed in the
partial steps, incomplete for ever, and every whole step of generation 6 queued behind it.
"""

from __future__ import annotations

from spotwise.planes.collective.records import GossipRecords


def rec(step: int, member: int, gen: int, k: int = 3) -> dict:
    return {"step": step, "member": member, "gen": gen, "k": k, "loss": 1.0, "n": 4, "samples": 4, "epoch": 0,
            "pos": step * 12, "wall": 100.0 + step, "strategy": "adpsgd"}


def test_a_step_is_whole_once_every_member_sent_its_record() -> None:
    g = GossipRecords()
    assert g.whole([rec(1, 0, 1), rec(1, 1, 1)], logged=0, gen=1) == []
    out = g.whole([rec(1, 2, 1), rec(2, 0, 1)], logged=0, gen=1)
    assert [r["step"] for r in out] == [1] and "member" not in out[0]


def test_a_late_record_of_an_ended_generation_holds_nothing_back() -> None:
    g = GossipRecords()
    # generation 1 (AD-PSGD) is settled at step 712; one of its members' records of step 716 arrives later,
    # while generation 2 (S-SGD, leader records) runs; generation 6 is AD-PSGD again from step 1437
    assert g.settle(712) == []
    assert g.whole([rec(716, 0, gen=1)], logged=900, gen=2) == []
    out = g.whole([rec(1438, m, gen=6) for m in range(3)], logged=1437, gen=6)
    assert [r["step"] for r in out] == [1438]


def test_steps_already_logged_are_dropped_from_the_partial_ones() -> None:
    g = GossipRecords()
    g.whole([rec(5, 0, gen=3)], logged=0, gen=3)  # incomplete: 2 of 3 never come (their members were lost)
    # the leader-less generation 3 ended; say a regroup that was not AD-PSGD's did not settle it: once the
    # job has logged past step 5, the stale entry must not block generation 3's own later steps either
    out = g.whole([rec(9, m, gen=3) for m in range(3)], logged=8, gen=3)
    assert [r["step"] for r in out] == [9]


def test_the_stall_watch_bounds_the_controllers_wait() -> None:
    from spotwise.planes.collective.records import StallWatch

    now = [0.0]
    w = StallWatch(min_s=60.0, clock=lambda: now[0])
    w.start()
    for _ in range(5):  # records every 2 s
        now[0] += 2.0
        w.progressed()
    now[0] += 59.0
    assert w.stalled(timeout_s=5.0) is None        # under the 60 s floor (10 timeouts = 50 s; 20 gaps = 40 s)
    now[0] += 2.0
    assert w.stalled(timeout_s=5.0) == 61.0
    assert w.stalled(timeout_s=10.0) is None       # 10 group timeouts = 100 s
    w.start()                                      # a new lease: the clock restarts
    assert w.stalled(timeout_s=5.0) is None


def test_the_controller_adopts_a_replica_and_drops_the_older_ones() -> None:
    """Replicas.adopt: the replica of the step becomes the copy; older ones that arrived late are dropped
    (a path the end-to-end runs reach only when the leader's offers overtake each other)."""
    import numpy as np

    from spotwise.planes.collective.records import Replicas

    r = Replicas()
    r.reset(0, (0, 0), 0)
    r.samples.update({5: 40, 10: 80})
    r.receive([({"step": s, "epoch": 0, "pos": 8 * s}, np.full(3, float(s), dtype=np.float32), b"x%d" % s)
               for s in (5, 10, 15)])
    vec, extra = r.adopt(10)
    assert float(vec[0]) == 10.0 and extra == b"x10" and (r.step, r.pos) == (10, (0, 80))
    assert sorted(r.pending) == [15] and sorted(r.samples) == [10]
    assert r.adopt(5) is None and r.step == 10, "an older replica never replaces a newer copy"


def test_records_a_new_leader_sends_again_are_logged_once() -> None:
    """The controller logs each step once: a new leader re-sends the records it holds, and those at or
    below the logged step are skipped (CollectivePlane._log_records; a timing-dependent path end to end)."""
    from types import SimpleNamespace

    from spotwise.planes.collective.data_plane import CollectivePlane

    logged: list[int] = []
    job = SimpleNamespace(step=2, sync="ssgd")

    def log_step(r: dict) -> None:
        logged.append(int(r["step"]))
        job.step = int(r["step"])

    plane = SimpleNamespace(job=job, _log_step=log_step, _cursor=SimpleNamespace(n=100, epoch=0, pos=24))
    recs = [dict(rec(s, 0, 1), pos=12 * s, strategy="ssgd") for s in (1, 2, 3, 4)]
    assert CollectivePlane._log_records(plane, recs) is True  # type: ignore[arg-type]
    assert logged == [3, 4]
    assert CollectivePlane._log_records(plane, recs) is False and logged == [3, 4]  # type: ignore[arg-type]
