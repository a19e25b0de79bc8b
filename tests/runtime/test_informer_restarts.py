"""When a failed informer starts again (`Restarts`, pure)."""

from __future__ import annotations

from runtime.informer import Restarts


def test_the_delay_doubles_with_each_failure_in_a_row_up_to_the_cap() -> None:
    restarts = Restarts(base=1.0, cap=10.0)
    delays = []
    for _ in range(6):
        restarts = restarts.failed(progressed=False)
        delays.append(restarts.delay)
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert restarts.failures == 6


def test_a_follow_that_got_through_its_list_counts_from_the_first_failure_again() -> None:
    restarts = Restarts(base=0.5, cap=30.0)
    for _ in range(4):
        restarts = restarts.failed(progressed=False)
    assert restarts.delay == 4.0
    restarts = restarts.failed(progressed=True)
    assert (restarts.failures, restarts.delay) == (1, 0.5)


def test_the_first_failure_waits_the_base() -> None:
    assert Restarts(base=0.05, cap=60.0).failed(progressed=False).delay == 0.05
