"""Clocks (spotwise.control.clock): virtual time moves only when told, wall time is measured."""

from __future__ import annotations

import pytest

from spotwise.control.clock import VirtualClock, WallClock


def test_virtual_clock_is_monotone_and_jumps() -> None:
    c = VirtualClock()
    assert c.now() == 0.0 and not c.measured
    c.advance_to(5.0)
    c.advance_to(3.0)  # never backwards
    assert c.now() == 5.0
    c.advance(1.5)
    assert c.now() == 6.5
    c.restore(2.0)
    assert c.now() == 2.0
    assert c.duration(lambda: 0.7) == 0.7


def test_virtual_clock_next_done_is_the_earliest_drawn() -> None:
    c = VirtualClock()
    never = lambda slots, k, timeout: pytest.fail("a virtual clock never waits on the data plane")  # noqa: E731
    done, t = c.next_done({0: 3.0, 1: 1.0, 2: 2.0, 3: 1.0}, 2, never)
    assert done == [1, 3] and t == 1.0  # ties by slot
    done, t = c.next_done({0: 3.0, 1: 1.0, 2: 2.0}, 3, never)
    assert done == [1, 2, 0] and t == 3.0
    assert c.next_done({}, 1, never) == ([], None)


def test_virtual_clock_validates() -> None:
    with pytest.raises(ValueError):
        VirtualClock(t=-1.0)
    with pytest.raises(ValueError):
        VirtualClock(t=float("nan"))


def test_wall_clock_measures_from_its_offset() -> None:
    now = [100.0]
    c = WallClock(offset_s=10.0, monotonic=lambda: now[0])
    assert c.measured and c.now() == 10.0
    now[0] += 2.5
    assert c.now() == 12.5
    c.advance_to(1000.0)  # time is not moved by the coordinator
    c.advance(5.0)
    assert c.now() == 12.5
    c.restore(50.0)  # a resumed run continues its checkpoint's time
    now[0] += 1.0
    assert c.now() == 51.0
    assert c.duration(lambda: pytest.fail("a wall clock draws no duration")) is None


def test_wall_clock_next_done_asks_the_data_plane() -> None:
    asked: list[tuple[list[int], int, float | None]] = []

    def ready(slots: list[int], k: int, timeout: float | None) -> list[int]:
        asked.append((slots, k, timeout))
        return [2]

    c = WallClock(poll_s=0.01)
    assert c.next_done({0: None, 2: None}, 2, ready) == ([2], None)
    assert asked == [([0, 2], 1, 0.01)]


def test_wall_clock_validates() -> None:
    with pytest.raises(ValueError):
        WallClock(offset_s=-1.0)
    with pytest.raises(ValueError):
        WallClock(poll_s=0.0)
