"""Spotnik's strategy switch (paper 001 Sec. 4, Fig. 6) as a pure policy."""

from __future__ import annotations

import pytest

from spotwise.errors import InputError
from spotwise.policies import Observation, SwitchSync
from spotwise.policies.registry import make_policy
from spotwise.policies.strategy_switch import StrategySwitch, window_throughputs


def obs(t, sync="full", rows=(), last=None):
    return Observation(step=len(rows), t=t, active=4, provisioned=4, max_workers=8, reference_workers=4, base_lr=0.1, lr=0.1,
                       sync=sync, extra={"loss_history": list(rows), "last_switch_t": last})


def history(phases, dt_per_step):
    """Rows (step, t, loss, workers): phases of (steps, workers, seconds per step)."""
    rows, t, step = [(0, 0.0, 1.0, 1)], 0.0, 0
    for steps, workers, dt in phases:
        for _ in range(steps):
            step += 1
            t += dt
            rows.append((step, t, 1.0 / step, workers))
    return rows


def test_window_throughput_is_per_worker():
    rows = history([(100, 4, 0.5)], 0)  # 4 mini-batches every 0.5 s = 8/s, 2/s per worker
    w = window_throughputs(rows, 10.0)
    assert w and all(v == pytest.approx(2.0) for _, v in w)


def test_switches_when_per_worker_throughput_falls_below_40_percent():
    # 1 worker at 10 steps/s, then 8 workers whose all-reduce makes a step take 0.4 s: 2.5/s per worker = 25%
    rows = history([(600, 1, 0.1), (300, 8, 0.4)], 0)
    d = StrategySwitch(window_s=10, min_interval_s=30).decide(obs(rows[-1][1], rows=rows))
    assert len(d) == 1 and isinstance(d[0], SwitchSync) and d[0].sync == "async"
    assert "25%" in d[0].reason


def test_stays_while_throughput_holds_and_waits_after_a_switch():
    p = StrategySwitch(window_s=10, min_interval_s=30)
    steady = history([(600, 1, 0.1), (300, 8, 0.15)], 0)  # 67% of the best: keep S-SGD
    assert p.decide(obs(steady[-1][1], rows=steady)) == []
    slow = history([(600, 1, 0.1), (300, 8, 0.4)], 0)
    t = slow[-1][1]
    assert p.decide(obs(t, rows=slow, last=t - 5)) == []  # switched 5 s ago: hold off
    # after the hold-off only the new strategy's own windows count: the old slow windows do not trigger
    more = slow + [(len(slow) + i, t + 0.1 * (i + 1), 0.01, 8) for i in range(400)]
    assert p.decide(obs(more[-1][1], sync="async", rows=more, last=t)) == []


def test_goes_back_to_the_first_strategy_after_the_last_and_ignores_other_modes():
    rows = history([(600, 1, 0.1), (300, 8, 0.4)], 0)
    d = StrategySwitch(strategies=("full", "n-batch", "async"), window_s=10, min_interval_s=30).decide(
        obs(rows[-1][1], sync="async", rows=rows))
    assert d[0].sync == "full"
    assert StrategySwitch().decide(obs(rows[-1][1], sync="n-sync", rows=rows)) == []
    assert StrategySwitch().decide(obs(1.0, rows=rows[:3])) == []  # too little measured


@pytest.mark.parametrize("params", [{"threshold": 1.5}, {"strategies": ["full"]}, {"window_s": 0}, {"min_interval_s": 1}])
def test_bad_parameters_are_input_errors(params):
    with pytest.raises(InputError):
        make_policy("strategy-switch", params)


def test_window_throughput_counts_the_local_steps_of_model_averaging():
    """An S-MA step holds H mini-batches per worker (5th column): same steps/s, H times the throughput."""
    sgd = [(0, 0.0, 1.0, 4)] + [(i, 0.5 * i, 1.0, 4) for i in range(1, 100)]
    sma = [(0, 0.0, 1.0, 4, 3)] + [(i, 0.5 * i, 1.0, 4, 3) for i in range(1, 100)]
    a, b = window_throughputs(sgd, 10.0), window_throughputs(sma, 10.0)
    assert a and all(y == pytest.approx(3 * x) for (_, x), (_, y) in zip(a, b))


def test_switches_between_collective_strategies():
    rows = history([(600, 1, 0.1), (300, 8, 0.4)], 0)
    d = StrategySwitch(strategies=("ssgd", "sma"), window_s=10, min_interval_s=30).decide(obs(rows[-1][1], sync="ssgd", rows=rows))
    assert len(d) == 1 and d[0].sync == "sma"


def test_the_reference_after_a_switch_is_the_new_strategy_s_own_best():
    """No oscillation: after S-SGD -> S-MA at 25 %, S-MA holding its own throughput stays, even far
    below S-SGD's single-worker best; it leaves only when it degrades against itself."""
    p = StrategySwitch(strategies=("ssgd", "sma"), window_s=10, min_interval_s=30)
    rows = history([(600, 1, 0.1), (300, 8, 0.4)], 0)
    t = rows[-1][1]
    steady = rows + [(len(rows) + i, t + 0.4 * (i + 1), 0.01, 8) for i in range(300)]
    assert p.decide(obs(steady[-1][1], sync="sma", rows=steady, last=t)) == []
    t2 = steady[-1][1]
    worse = steady + [(len(steady) + i, t2 + 1.5 * (i + 1), 0.01, 8) for i in range(60)]
    d = p.decide(obs(worse[-1][1], sync="sma", rows=worse, last=t))
    assert len(d) == 1 and d[0].sync == "ssgd"
