"""runtime/waiting.py: a condition awaited on a projection is answered by the fold that makes it hold."""

from __future__ import annotations

import asyncio

from runtime.waiting import FoldWaits


async def test_a_wait_is_answered_by_the_fold_that_makes_it_hold_and_not_before() -> None:
    waits, state = FoldWaits(), {"seq": 0}
    waiting = asyncio.create_task(waits.until(lambda: state["seq"] >= 3, timeout=30))
    for seq in (1, 2):
        state["seq"] = seq
        waits.folded()
        await asyncio.sleep(0)  # let the waiter run if it were (wrongly) answered: not a synchronisation
        assert not waiting.done()
    state["seq"] = 3
    waits.folded()
    assert await asyncio.wait_for(waiting, 5) is True


async def test_a_condition_that_holds_already_answers_at_once_and_one_that_never_does_times_out() -> None:
    waits = FoldWaits()
    assert await waits.until(lambda: True, timeout=0.001) is True
    assert await waits.until(lambda: False, timeout=0.05) is False
    waits.folded()  # nothing left waiting: the timed-out wait took itself off
    assert waits._waiting == []
