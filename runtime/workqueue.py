"""The work queue: which key is reconciled when, as controller-runtime's rate-limited workqueue decides it.

- **One reconcile of a key at a time.** Asked for while it runs, the key is marked dirty and
  reconciled once more afterwards. Every request made before that run starts joins it, so a burst
  of events, a resync and a retry cost one reconcile, not one each. Different keys run at the
  same time, up to `concurrency`.
- **The key's next reconcile is what its last one answered** (runtime/reconcile.py). Done: the
  key's failures are forgotten and nothing is scheduled. `Again(after)`: the key is reconciled
  again after that. `Temporary(delay)`: after the delay. Another exception: after the key's
  backoff, which doubles with each failure in a row, from `backoff` up to `cap`. `Permanent`:
  nothing is scheduled, and `on_permanent` hears the reason. A scheduled reconcile that comes due
  joins the queue as any request does; an earlier request does not cancel it, since reconciling is
  level-triggered and a spare pass is harmless.
- `stop()` cancels what is scheduled; runs in progress end with the runner's tasks.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from contracts.subjects import Key
from runtime.reconcile import Again, NotHeld, Permanent, Temporary

C = TypeVar("C")  # what a request carries to the reconcile (the runner's: the event that caused it)


class _Run(Generic[C]):
    """A key's next reconcile: every request made before it starts joins it."""

    def __init__(self, cause: C | None) -> None:
        self.cause = cause
        self.context = contextvars.copy_context()  # the requester's, so the reconcile's span is its child
        self.done = asyncio.Event()
        self.error: Exception | None = None

    def join(self, cause: C | None) -> None:
        # The latest event is the cause, except that a level-triggered request (no cause) wins: the run
        # must re-assert everything, as the pass that asked for it would have.
        if self.cause is not None:
            self.cause = cause
            self.context = contextvars.copy_context()


def backoff_delay(failures: int, backoff: tuple[float, ...], cap: float) -> float:
    """The wait before a key's next try after `failures` failures in a row: `backoff` in order, then doubling, capped."""
    if failures <= len(backoff):
        return min(backoff[failures - 1], cap)
    return min(backoff[-1] * 2.0 ** (failures - len(backoff)), cap)


class WorkQueue(Generic[C]):
    def __init__(
        self,
        work: Callable[[Key, C | None], Coroutine[Any, Any, Again | None]],
        *,
        name: str,
        backoff: tuple[float, ...] = (0.2,),
        cap: float = 60.0,
        on_retry: Callable[[Key], None] | None = None,
        on_permanent: Callable[[Key, str], None] | None = None,
    ) -> None:
        self._work = work
        self.name = name
        self.backoff = backoff or (0.2,)
        self.cap = cap
        self._on_retry = on_retry
        self._on_permanent = on_permanent
        self._queued: dict[Key, _Run[C]] = {}  # key → its next reconcile, not started yet
        self._workers: dict[Key, asyncio.Task[None]] = {}  # key → the task reconciling it, while it has work
        self._later: dict[Key, asyncio.TimerHandle] = {}  # key → its scheduled reconcile
        self.failures: dict[Key, int] = {}  # key → failures in a row
        self.failed: dict[Key, str] = {}  # key → the reason of its last reconcile, when that was Permanent
        self._stopped = False

    @property
    def busy(self) -> bool:
        """Whether a reconcile is running or waiting for its turn (not: scheduled for later)."""
        return bool(self._workers or self._queued)

    @property
    def scheduled(self) -> dict[Key, float]:
        """Key → when (the loop's clock) its scheduled reconcile comes due."""
        return {key: handle.when() for key, handle in self._later.items()}

    async def reconcile(self, key: Key, cause: C | None = None) -> None:
        """Reconcile `key`, after the reconcile of it in progress if there is one; returns once done, raises its error."""
        run = self._request(key, cause)
        await run.done.wait()
        if run.error is not None:
            raise run.error

    def _request(self, key: Key, cause: C | None) -> _Run[C]:
        run = self._queued.get(key)
        if run is None:
            run = self._queued[key] = _Run(cause)
        else:
            run.join(cause)
        if key not in self._workers:
            # the worker runs in the run's context, so that run needs no task of its own (one task a reconcile)
            self._workers[key] = asyncio.create_task(self._drain(key, run.context), name=f"{self.name}-reconcile", context=run.context)
        return run

    def later(self, key: Key, delay: float, cause: C | None = None) -> None:
        """Reconcile `key` after `delay` seconds (replacing what was scheduled for it)."""
        if self._stopped:
            return
        self.cancel(key)
        self._later[key] = asyncio.get_running_loop().call_later(delay, self._due, key, cause)

    def cancel(self, key: Key) -> None:
        handle = self._later.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _due(self, key: Key, cause: C | None) -> None:
        self._later.pop(key, None)
        if self._stopped:
            return
        if self._on_retry is not None:
            self._on_retry(key)
        self._request(key, cause)  # no one waits for it: its outcome schedules what comes next

    async def _drain(self, key: Key, context: contextvars.Context) -> None:
        """Run the key's queued reconciles one after the other until none is left."""
        try:
            while (run := self._queued.pop(key, None)) is not None:
                try:
                    if run.context is context:
                        answer = await self._work(key, run.cause)
                    else:  # in its requester's context, so the reconcile's span is a child of the request's
                        answer = await asyncio.create_task(self._work(key, run.cause), context=run.context)
                except Exception as exc:
                    run.error = exc
                    self._failed(key, exc, run.cause)
                except BaseException:
                    run.error = RuntimeError(f"{key}: the runner stopped while reconciling it")
                    raise
                else:
                    self._succeeded(key, answer, run.cause)
                finally:
                    run.done.set()
        finally:
            del self._workers[key]
            left = self._queued.pop(key, None)
            if left is not None:  # stopped with a request still waiting for its turn
                left.error = RuntimeError(f"{key}: the runner stopped before reconciling it")
                left.done.set()

    def _succeeded(self, key: Key, answer: Again | None, cause: C | None) -> None:
        self.failures.pop(key, None)
        self.failed.pop(key, None)
        if isinstance(answer, Again):
            self.later(key, max(answer.after, 0.0), cause)
        else:
            self.cancel(key)

    def _failed(self, key: Key, exc: Exception, cause: C | None) -> None:
        if isinstance(exc, NotHeld):
            self.cancel(key)  # the partition went to another replica: its next holder reconciles the key
            return
        if isinstance(exc, Permanent):
            self.cancel(key)
            self.failures.pop(key, None)
            self.failed[key] = exc.reason
            if self._on_permanent is not None:
                self._on_permanent(key, exc.reason)
            return
        self.failed.pop(key, None)
        failures = self.failures[key] = self.failures.get(key, 0) + 1
        delay = exc.delay if isinstance(exc, Temporary) and exc.delay is not None else backoff_delay(failures, self.backoff, self.cap)
        self.later(key, max(delay, 0.0), cause)

    def stop(self) -> None:
        """Nothing scheduled runs any more."""
        self._stopped = True
        for handle in self._later.values():
            handle.cancel()
        self._later.clear()

    def workers(self) -> list[asyncio.Task[None]]:
        return list(self._workers.values())


__all__ = ["WorkQueue", "backoff_delay"]
