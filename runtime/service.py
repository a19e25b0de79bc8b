"""The service loop, in one import: what a service writes against, and what runs it.

Every service has the same shape: it names the subjects it consumes, folds events into its
projection, says which resources an event affects, and reconciles one resource at a time,
level-triggered. A runner does the rest. Four modules hold it, each with one duty:

| module | holds |
| --- | --- |
| runtime/reconcile.py | `Service`, `Effects`, and what a reconcile may answer: `Again`, `Temporary`, `Permanent` |
| runtime/workqueue.py | the work queue: one reconcile of a key at a time, retries per key with backoff |
| runtime/feed.py | the feeds: what a runner follows on the stream, read in order and in batches (runtime/reader.py) |
| runtime/runner.py | the runner: rebuild, fold, reconcile, dead letters, snapshots; `run_until_stopped` |

Services and the CLI import from here; the modules above import each other downwards only.
"""

from __future__ import annotations

from runtime.eventstore import Undecodable
from runtime.feed import Delivery, Feed
from runtime.reconcile import Again, Effects, NotHeld, Permanent, Requeue, Service, Temporary
from runtime.runner import Runnable, Runner, RunnerSettings, run_until_stopped
from runtime.workqueue import WorkQueue

__all__ = [
    "Again",
    "Delivery",
    "Effects",
    "Feed",
    "NotHeld",
    "Permanent",
    "Requeue",
    "Runnable",
    "Runner",
    "RunnerSettings",
    "Service",
    "Temporary",
    "Undecodable",
    "WorkQueue",
    "run_until_stopped",
]
