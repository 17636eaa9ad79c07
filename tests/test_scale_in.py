"""Scale-in auto-tuner (papers/004_9dc2adb66dc8d26e.txt Sec. 4.2, eq. (1)-(3))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spotwise.errors import InputError
from spotwise.policies import Observation, Resize, make_policy
from spotwise.policies.registry import POLICIES
from spotwise.policies.scale_in import (FittedCurve, ScaleIn, detect_knee, ewma, fit_reference_curve,
                                        fit_slow_model, s_delta)

D = 0.1  # seconds per step in the synthetic runs


def ref_loss(t: np.ndarray | float) -> np.ndarray | float:
    """A curve of eq. (2) with known coefficients (0.01, 1.2, 0.5, 0.1)."""
    return 1.0 / (0.01 * np.asarray(t, dtype=float) ** 1.2 + 0.5) + 0.1


def history(n: int, removal_step: int | None = None, worse: float = 1.0, workers: int = 8) -> list[tuple[int, float, float, int]]:
    """Rows (step, t, loss, workers); after ``removal_step`` one worker fewer and the loss times ``worse``."""
    rows = []
    for s in range(n + 1):
        after = removal_step is not None and s >= removal_step
        loss = float(ref_loss(s)) * (worse if after else 1.0)
        rows.append((s, s * D, loss, workers - 1 if after else workers))
    return rows


def obs(rows: list, active: int = 8, **extra: object) -> Observation:
    step, t = rows[-1][0], rows[-1][1]
    return Observation(step=step, t=t, active=active, provisioned=active, max_workers=16, reference_workers=8,
                       base_lr=0.1, lr=0.1, sync="full", extra={"loss_history": rows, **extra})


def knee_of_ref() -> int:
    k = detect_knee(list(range(2001)), list(ref_loss(np.arange(2001))), 0.1, window=5)
    assert k is not None
    return k


# --- knee ------------------------------------------------------------------------------------


def test_knee_of_geometric_decay_near_analytic_step() -> None:
    r, a = 0.97, 2.0
    steps = list(range(300))
    losses = [0.2 + a * r ** s for s in steps]
    # secant slope over one step ~ a (1-r) r^(s-1), steepest at s = 1: knee when r^(s-1) < 0.1
    expected = 1 + math.log(0.1) / math.log(r)
    k = detect_knee(steps, losses, 0.1)
    assert k is not None and abs(k - expected) <= 1.5, (k, expected)
    # absolute threshold: a (1-r) r^(s-1) < 0.005
    expected_abs = 1 + math.log(0.005 / (a * (1 - r))) / math.log(r)
    k = detect_knee(steps, losses, 0.005, relative=False)
    assert k is not None and abs(k - expected_abs) <= 1.5, (k, expected_abs)
    assert detect_knee(steps[:50], losses[:50], 0.1) is None, "not reached yet"


def test_knee_is_prefix_stable() -> None:
    steps = list(range(400))
    losses = [0.2 + 2 * 0.97 ** s for s in steps]
    k = detect_knee(steps, losses, 0.1, window=5)
    assert k is not None
    assert detect_knee(steps[:k + 1], losses[:k + 1], 0.1, window=5) == k


# --- fits ------------------------------------------------------------------------------------


def test_reference_fit_recovers_known_curve() -> None:
    t = np.arange(0, 150)
    fit = fit_reference_curve(t, ref_loss(t))
    assert isinstance(fit, FittedCurve) and all(c >= 0 for c in fit.theta)
    far = np.arange(0, 600)  # also beyond the fitted range
    rel = np.max(np.abs(fit(far) - ref_loss(far)) / ref_loss(far))
    assert rel < 0.01, (fit.theta, rel)
    assert fit.theta[1] == pytest.approx(1.2, abs=0.1)
    assert fit.theta[3] == pytest.approx(0.1, abs=0.02)


def test_slow_fit_recovers_known_curve() -> None:
    t = np.arange(200, 400, dtype=float)
    true = 1.0 / (2e-5 * t ** 2 + 3e-3 * t + 0.4) + 0.15
    fit = fit_slow_model(t, true)
    assert all(c >= 0 for c in fit.theta)
    ahead = np.arange(200, 600, dtype=float)
    want = 1.0 / (2e-5 * ahead ** 2 + 3e-3 * ahead + 0.4) + 0.15
    assert np.max(np.abs(fit(ahead) - want) / want) < 0.01, fit.theta


def test_fits_keep_coefficients_non_negative_on_noisy_data() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(1, 120)
    noisy = ref_loss(t) * (1 + 0.03 * rng.standard_normal(t.size))
    for fit in (fit_reference_curve(t, noisy), fit_slow_model(t, noisy)):
        assert all(c >= 0 for c in fit.theta)
        assert np.all(np.isfinite(fit(t)))


def test_fits_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="at least"):
        fit_reference_curve([1, 2], [1.0, 0.5])
    with pytest.raises(ValueError, match="> 0"):
        fit_slow_model([1, 2, 3, 4], [1.0, 0.5, 0.0, 0.2])
    with pytest.raises(ValueError, match="same length"):
        fit_reference_curve([1, 2, 3, 4, 5], [1.0, 0.5])


def test_ewma() -> None:
    assert list(ewma([1.0, 3.0, 3.0], 0.5)) == [1.0, 2.0, 2.5]
    with pytest.raises(ValueError):
        ewma([1.0], 0.0)


# --- eq. (1) ---------------------------------------------------------------------------------


def test_s_delta_hand_computed() -> None:
    ref = lambda t: 100.0 / (t + 1)  # noqa: E731
    slow = lambda t: 200.0 / (t + 1)  # noqa: E731
    # t = 9, Delta = 10 s, d_P = 1 s -> 10 steps -> L_P(19) = 5; d_p = 2 s -> 5 steps -> l_p(14) = 200/15
    assert s_delta(ref, slow, 9, 10.0, 1.0, 2.0) == pytest.approx((200 / 15 - 5) / 5)
    # floor: Delta/d_p = 10/3 -> 3 steps; same curve, faster steps -> negative (removal helped)
    assert s_delta(ref, ref, 9, 10.0, 1.0, 3.0) == pytest.approx((100 / 13 - 5) / 5)
    assert s_delta(ref, ref, 9, 10.0, 1.0, 1.0) == 0.0
    with pytest.raises(ValueError):
        s_delta(ref, slow, 9, 0.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        s_delta(ref, slow, 9, 10.0, 1.0, -1.0)


# --- the policy ------------------------------------------------------------------------------


def test_no_removal_before_the_knee() -> None:
    k = knee_of_ref()
    p = ScaleIn()
    rows = history(k - 10)
    assert p.decide(obs(rows)) == []


def test_first_removal_right_after_the_knee() -> None:
    k = knee_of_ref()
    rows = history(k + 20)
    (d,) = ScaleIn().decide(obs(rows))
    assert isinstance(d, Resize) and d.workers == 7 and "knee" in d.reason


def test_removes_when_s_delta_below_threshold_and_not_otherwise() -> None:
    k = knee_of_ref()
    removal = k + 40
    n = removal + int(25 / D)  # 25 s after the removal: past one 20 s interval
    same = history(n, removal_step=removal, workers=8)
    (d,) = ScaleIn().decide(obs(same, active=7))
    assert isinstance(d, Resize) and d.workers == 6 and "s_Delta" in d.reason
    worse = history(n, removal_step=removal, worse=1.3, workers=8)
    assert ScaleIn().decide(obs(worse, active=7)) == [], "loss 30% above the reference: keep the workers"
    assert ScaleIn(threshold=0.5).decide(obs(worse, active=7)) != [], "a looser S removes"


def test_not_twice_within_one_interval() -> None:
    k = knee_of_ref()
    removal = k + 40
    rows = history(removal + int(15 / D), removal_step=removal)  # 15 s < 20 s since the removal
    assert ScaleIn().decide(obs(rows, active=7)) == []
    # the same via the reported time instead of the workers column
    plain = [r[:3] for r in rows]
    assert ScaleIn().decide(obs(plain, active=7, last_resize_t=removal * D)) == []
    later = history(removal + int(25 / D), removal_step=removal)
    assert ScaleIn().decide(obs([r[:3] for r in later], active=7, last_resize_t=removal * D)) != []
    # a resize at the last step blocks the next interval
    assert ScaleIn().decide(obs([r[:3] for r in later], active=7, last_resize_t=later[-1][1] - 1.0)) == []


def test_never_below_min_workers() -> None:
    k = knee_of_ref()
    rows = history(k + 20, workers=2)
    assert ScaleIn().decide(obs(rows, active=1)) == []
    assert ScaleIn(min_workers=2).decide(obs(rows, active=2)) == []
    (d,) = ScaleIn(min_workers=2).decide(obs(rows, active=3))
    assert d.workers == 2


def test_without_history_nothing_happens_and_policy_is_pure() -> None:
    p = ScaleIn()
    o = Observation(step=10, t=1.0, active=8, provisioned=8, max_workers=16, reference_workers=8,
                    base_lr=0.1, lr=0.1, sync="full")
    assert p.decide(o) == []
    rows = history(knee_of_ref() + 20)
    assert p.decide(obs(rows)) == p.decide(obs(rows))


def test_malformed_history_rows_raise() -> None:
    rows = history(knee_of_ref() + 20)
    with pytest.raises(ValueError, match="loss_history"):
        ScaleIn().decide(obs([(r[0], r[1]) for r in rows]))


def test_step_durations_key_is_used() -> None:
    k = knee_of_ref()
    removal = k + 40
    rows = history(removal + int(25 / D), removal_step=removal)
    # with p workers each step is reported 4x slower: fewer steps in Delta -> higher projected loss
    durs = [(r[0], D if r[0] < removal else 4 * D) for r in rows]
    base = ScaleIn(threshold=0.0).decide(obs(rows, active=7))
    slow = ScaleIn(threshold=0.0).decide(obs(rows, active=7, step_durations=durs))
    assert base != [], "same curve, same speed: s_Delta ~ 0 <= S = 0"
    assert slow == [], "4x slower steps with p workers: fewer steps in Delta, higher projected loss"


@pytest.mark.parametrize("params", [
    {"threshold": 1.5}, {"threshold": -0.1}, {"delta_s": 0}, {"delta_s": 30.0}, {"interval_s": 0},
    {"min_workers": 0}, {"min_workers": 1.5}, {"knee_slope": 0}, {"knee_slope": 1.0}, {"knee_window": 0},
    {"ewma_alpha": 0}, {"ewma_alpha": 1.5}, {"min_fit_points": 3},
])
def test_bad_params_raise(params: dict) -> None:
    with pytest.raises(ValueError):
        ScaleIn(**params)
    with pytest.raises(InputError):
        make_policy("scale-in", params)


def test_registered() -> None:
    assert POLICIES["scale-in"] is ScaleIn
    p = make_policy("scale-in", {"threshold": 0.1, "min_workers": 2})
    assert isinstance(p, ScaleIn) and p.threshold == 0.1 and p.min_workers == 2 and p.name == "scale-in"
