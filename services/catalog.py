"""Every service as it declares itself (`SERVICE` in services/<name>/main.py), and the one way to start them.

A process of one service (`python -m services.<name>`, runtime/entry.py) and whoever runs several in one process
(`jetway up`, the tests, the benchmarks, testbed/controller.py) call the same `Declared.start`: the latter through
`start` here, with a `Context` that is not replicated (runtime/entry.py), so each service is one runner over every
partition, no leases. The watcher, the front door (services/console) and the router `jetway up` composes itself
(cli/up.py): in one process the front door records through the watcher's service and shows the router's counters
from memory, and the router serves on up's own ports with up's client keys, parts their processes do not have.

This is the one module that imports every service package (tests/test_imports.py lets it).
"""

from __future__ import annotations

from collections.abc import Iterable

from runtime.entry import Context, Declared
from runtime.service import Runnable, Runner
from services.binding import main as binding
from services.console import main as console
from services.gateway import main as gateway
from services.router import main as router
from services.scaler import main as scaler
from services.selector import main as selector
from services.selector.handlers import SelectorService
from services.storage import main as storage
from services.watcher import main as watcher
from services.workload import main as workload
from services.workload.providers import BUILTIN

SERVICES: dict[str, Declared] = {
    s.name: s
    for s in (
        watcher.SERVICE,
        selector.SERVICE,
        storage.SERVICE,
        workload.SERVICE,
        gateway.SERVICE,
        binding.SERVICE,
        router.SERVICE,
        console.SERVICE,
        scaler.SERVICE,
    )
}
PIPELINE = ("selector", "storage", "workload")  # the ModelDeployment pipeline, in the order a deployment goes through it
STANDALONE = (*PIPELINE, "binding", "scaler")  # what `jetway up` starts here, beside the watcher, front door and router it composes


async def start(context: Context, names: Iterable[str]) -> list[Runnable]:
    """The runners of the services `names`, in order, each from its own `start` with `context`; the servers they add
    go into `context.after_ready`, for the caller to start once every runner is ready."""
    started: list[Runnable] = []
    for name in names:
        service = SERVICES[name]
        if service.cluster_only and context.kube is None:
            raise ValueError(f"{name} runs in a cluster only; standalone, `jetway up` composes it itself")
        started += await service.start(context)
    return started


def runners(started: Iterable[Runnable]) -> list[Runner]:
    """Started with `replicated=False`, each is a plain runner: its service within reach (tests, benchmarks)."""
    found = list(started)
    plain = [r for r in found if isinstance(r, Runner)]
    if len(plain) != len(found):
        raise TypeError("replicated services run shards of their own: start them with replicated=False")
    return plain


async def providers_known(started: Iterable[Runnable], *, timeout: float = 10.0) -> bool:
    """Standalone start-up: whether the selector has folded every built-in provider within `timeout` seconds.

    The workload asks for their registration and the watcher records it, a round trip after every runner is
    ready; a deployment applied before it ends would be chosen among the providers known so far (found: a test
    applying at once got `vllm` where `dynamo` ranks first). `jetway up` and the test stack wait for this before
    taking applies; the selector's fold says when (`SelectorService.knows`). False (go on anyway) when a user's
    own configs stand in the built-ins' place."""
    selector = next(r.service for r in started if isinstance(r, Runner) and isinstance(r.service, SelectorService))
    return await selector.knows(BUILTIN, timeout)
